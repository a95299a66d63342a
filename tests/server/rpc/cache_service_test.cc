// The Cache service through a real kilnd over loopback: blobs small and chunked, GetWhole
// beside the streaming Get, bad input, the action cache, restarts, corruption on disk and the
// CLI; and the client against a server older than GetWhole.

#include <signal.h>

#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "cache/db.h"
#include "client/blob_http_client.h"
#include "client/cache_client.h"
#include "compiler/canon/toolchain.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_builder.h"
#include "proto/base/digest.h"
#include "proto/error_detail.h"
#include "proto/rpc/grpc_status.h"
#include "server/rpc/cache_service.h"
#include "tests/testing/kilnd_process.h"
#include "tests/testing/test_env.h"

namespace kiln {
namespace {

using ::kiln::client::CacheClient;
using ::kiln::testing::KilndProcess;
using ::kiln::testing::TempDir;

using ::kiln::testing::PseudoRandomBytes;

class CacheServiceTest : public ::testing::Test {
 protected:
  void Start(const std::vector<std::string>& flags = {}) {
    absl::StatusOr<KilndProcess> k = KilndProcess::Start(data_dir(), flags);
    ASSERT_TRUE(k.ok()) << k.status();
    kilnd_.emplace(*std::move(k));
    client::ChannelOptions options;
    options.address = kilnd_->address();
    absl::StatusOr<std::unique_ptr<CacheClient>> c = CacheClient::Create(options);
    ASSERT_TRUE(c.ok()) << c.status();
    client_ = *std::move(c);
  }

  void Stop() {
    client_.reset();
    kilnd_->process().Signal(SIGTERM);
    std::optional<int> code = kilnd_->process().Wait(absl::Seconds(30));
    ASSERT_TRUE(code.has_value());
    EXPECT_EQ(*code, 0) << kilnd_->process().Stderr();
    kilnd_.reset();
  }

  std::string data_dir() const { return dir_.path() + "/data"; }
  // The service's own stub, for what CacheClient does not do (call a given method).
  std::unique_ptr<v1::Cache::Stub> Stub() {
    client::ChannelOptions options;
    options.address = kilnd_->address();
    return v1::Cache::NewStub(*client::CreateChannel(options));
  }
  v1::CacheStats Stats() {
    absl::StatusOr<v1::CacheStats> s = client_->Stat();
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? *s : v1::CacheStats();
  }

  TempDir dir_;
  std::optional<KilndProcess> kilnd_;
  std::unique_ptr<CacheClient> client_;
};

TEST_F(CacheServiceTest, BlobsRoundTripInOneMessageAndInChunks) {
  Start();
  for (size_t size : {size_t{0}, size_t{1024}, size_t{4} << 20, (size_t{9} << 20) + 12345}) {
    const std::string bytes = PseudoRandomBytes(size, static_cast<int>(size % 1000));
    absl::StatusOr<CacheClient::PutResult> put = client_->Put(bytes);
    ASSERT_TRUE(put.ok()) << size << ": " << put.status();
    EXPECT_FALSE(put->already_present);
    EXPECT_EQ(put->digest.size_bytes(), static_cast<int64_t>(size));
    absl::StatusOr<std::string> got = client_->Get(put->digest);
    ASSERT_TRUE(got.ok()) << size << ": " << got.status();
    EXPECT_TRUE(*got == bytes) << size;
    put = client_->Put(bytes);
    ASSERT_TRUE(put.ok());
    EXPECT_TRUE(put->already_present);
  }
  const v1::CacheStats s = Stats();
  EXPECT_EQ(s.blobs(), 4);
  EXPECT_EQ(s.blob_puts(), 4);
  EXPECT_EQ(s.blob_gets(), 4);
}

// Reads through the streaming Get, as clients older than GetWhole do.
absl::StatusOr<std::string> StreamGet(v1::Cache::Stub& stub, const v1::Digest& digest) {
  grpc::ClientContext context;
  v1::GetRequest request;
  *request.mutable_digest() = digest;
  std::unique_ptr<grpc::ClientReader<v1::GetResponse>> reader = stub.Get(&context, request);
  std::string bytes;
  v1::GetResponse response;
  while (reader->Read(&response)) {
    if (response.offset() != static_cast<int64_t>(bytes.size())) {
      return absl::DataLossError("chunks out of order");
    }
    bytes.append(response.data());
  }
  grpc::Status status = reader->Finish();
  if (!status.ok()) return FromGrpcStatus(status);
  return bytes;
}

absl::StatusOr<v1::GetResponse> GetWhole(v1::Cache::Stub& stub, const v1::Digest& digest) {
  grpc::ClientContext context;
  v1::GetRequest request;
  *request.mutable_digest() = digest;
  v1::GetResponse response;
  grpc::Status status = stub.GetWhole(&context, request, &response);
  if (!status.ok()) return FromGrpcStatus(status);
  return response;
}

TEST_F(CacheServiceTest, GetWholeAnswersOneMessageAndTheStreamStillServesEveryBlob) {
  Start();
  const std::string small = PseudoRandomBytes(70000, 8);
  const std::string large = PseudoRandomBytes((size_t{9} << 20) + 1, 9);
  ASSERT_TRUE(client_->Put(small).ok());
  ASSERT_TRUE(client_->Put(large).ok());
  std::unique_ptr<v1::Cache::Stub> stub = Stub();

  absl::StatusOr<v1::GetResponse> whole = GetWhole(*stub, DigestOf(small));
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_TRUE(whole->data() == small);
  EXPECT_EQ(whole->digest().hash(), DigestOf(small).hash());
  EXPECT_EQ(whole->digest().size_bytes(), 70000);
  EXPECT_EQ(whole->offset(), 0);

  // Larger than one message: OUT_OF_RANGE, whether the digest says so or leaves the size open.
  v1::Digest open_size = DigestOf(large);
  open_size.set_size_bytes(0);
  for (const v1::Digest& d : {DigestOf(large), open_size}) {
    absl::Status s = GetWhole(*stub, d).status();
    EXPECT_TRUE(absl::IsOutOfRange(s)) << s;
  }
  absl::Status absent = GetWhole(*stub, DigestOf("absent")).status();
  EXPECT_TRUE(absl::IsNotFound(absent)) << absent;
  v1::Digest malformed;
  malformed.set_hash("nope");
  absl::Status bad = GetWhole(*stub, malformed).status();
  EXPECT_TRUE(absl::IsInvalidArgument(bad)) << bad;
  ASSERT_TRUE(ErrorDetailOf(bad).has_value());
  EXPECT_EQ(ErrorDetailOf(bad)->violations(0).field(), "digest");

  // The stream serves small blobs (in one message) and large ones (in chunks).
  for (const std::string* bytes : {&small, &large}) {
    absl::StatusOr<std::string> streamed = StreamGet(*stub, DigestOf(*bytes));
    ASSERT_TRUE(streamed.ok()) << streamed.status();
    EXPECT_TRUE(*streamed == *bytes);
  }
  // The client finds a large blob of unknown size through the stream, after GetWhole refused.
  absl::StatusOr<std::string> got = client_->Get(open_size);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(*got == large);

  const v1::CacheStats stats = Stats();
  EXPECT_EQ(stats.blob_gets(), 4) << "reads refused as too large count as none";
  EXPECT_EQ(stats.blob_get_misses(), 1);
}

TEST_F(CacheServiceTest, PutWholeTakesOneMessageAndThePutStreamStillTakesEveryBlob) {
  Start();
  std::unique_ptr<v1::Cache::Stub> stub = Stub();
  auto put_whole = [&](const v1::Digest& digest, const std::string& bytes,
                       bool with_digest = true) -> absl::StatusOr<v1::PutResponse> {
    grpc::ClientContext context;
    v1::PutRequest request;
    if (with_digest) *request.mutable_digest() = digest;
    request.set_data(bytes);
    v1::PutResponse response;
    grpc::Status status = stub->PutWhole(&context, request, &response);
    if (!status.ok()) return FromGrpcStatus(status);
    return response;
  };
  const std::string small = PseudoRandomBytes(3000, 12);
  absl::StatusOr<v1::PutResponse> put = put_whole(DigestOf(small), small);
  ASSERT_TRUE(put.ok()) << put.status();
  EXPECT_FALSE(put->already_present());
  EXPECT_EQ(put->digest().hash(), DigestOf(small).hash());
  put = put_whole(DigestOf(small), small);
  ASSERT_TRUE(put.ok()) << put.status();
  EXPECT_TRUE(put->already_present());

  // More than one message: OUT_OF_RANGE, nothing stored.
  const std::string large = PseudoRandomBytes((size_t{4} << 20) + 1, 13);
  absl::Status s = put_whole(DigestOf(large), large).status();
  EXPECT_TRUE(absl::IsOutOfRange(s)) << s;
  s = put_whole(DigestOf(small), small, /*with_digest=*/false).status();
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  ASSERT_TRUE(ErrorDetailOf(s).has_value());
  EXPECT_EQ(ErrorDetailOf(s)->violations(0).field(), "digest");
  v1::Digest wrong_size = DigestOf(small);
  wrong_size.set_size_bytes(2999);
  s = put_whole(wrong_size, small).status();
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  ASSERT_TRUE(ErrorDetailOf(s).has_value());
  EXPECT_EQ(ErrorDetailOf(s)->violations(0).field(), "data");

  // Older clients send even small blobs as a stream.
  const std::string streamed = PseudoRandomBytes(2000, 14);
  {
    grpc::ClientContext context;
    v1::PutResponse response;
    std::unique_ptr<grpc::ClientWriter<v1::PutRequest>> writer = stub->Put(&context, &response);
    v1::PutRequest request;
    *request.mutable_digest() = DigestOf(streamed);
    request.set_data(streamed);
    ASSERT_TRUE(writer->Write(request, grpc::WriteOptions().set_last_message()));
    grpc::Status status = writer->Finish();
    ASSERT_TRUE(status.ok()) << status.error_message();
    EXPECT_FALSE(response.already_present());
  }
  ASSERT_TRUE(client_->Put(large).ok()) << "the client sends it in chunks";
  for (const std::string* bytes : {&small, &streamed, &large}) {
    absl::StatusOr<std::string> got = client_->Get(DigestOf(*bytes));
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_TRUE(*got == *bytes);
  }
  const v1::CacheStats stats = Stats();
  EXPECT_EQ(stats.blobs(), 3);
  EXPECT_EQ(stats.blob_puts(), 3);
}

// A Cache service as kilnd served it before GetWhole and PutWhole: only the streaming Get and
// Put.
class StreamOnlyCache final : public v1::Cache::Service {
 public:
  explicit StreamOnlyCache(std::string blob) : blob_(std::move(blob)) {}
  grpc::Status Put(grpc::ServerContext*, grpc::ServerReader<v1::PutRequest>* reader,
                   v1::PutResponse* response) override {
    ++puts_;
    v1::PutRequest request;
    std::string bytes;
    while (reader->Read(&request)) bytes.append(request.data());
    *response->mutable_digest() = DigestOf(bytes);
    response->set_already_present(bytes == blob_);
    return grpc::Status::OK;
  }
  grpc::Status Get(grpc::ServerContext*, const v1::GetRequest* request,
                   grpc::ServerWriter<v1::GetResponse>* writer) override {
    ++gets_;
    if (request->digest().hash() != DigestOf(blob_).hash()) {
      return grpc::Status(grpc::StatusCode::NOT_FOUND, "no blob");
    }
    v1::GetResponse response;
    *response.mutable_digest() = DigestOf(blob_);
    response.set_data(blob_);
    writer->WriteLast(response, grpc::WriteOptions());
    return grpc::Status::OK;
  }
  std::atomic<int> gets_{0};
  std::atomic<int> puts_{0};

 private:
  const std::string blob_;
};

TEST(CacheClientTest, FallsBackToStreamsOnAServerWithoutGetWholeAndPutWhole) {
  const std::string blob = PseudoRandomBytes(3000, 10);
  StreamOnlyCache service(blob);
  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  client::ChannelOptions options;
  options.address = absl::StrCat("127.0.0.1:", port);
  absl::StatusOr<std::unique_ptr<CacheClient>> client = CacheClient::Create(options);
  ASSERT_TRUE(client.ok()) << client.status();
  for (int i = 0; i < 2; ++i) {
    absl::StatusOr<std::string> got = (*client)->Get(DigestOf(blob));
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(*got, blob);
  }
  EXPECT_TRUE(absl::IsNotFound((*client)->Get(DigestOf("absent")).status()));
  EXPECT_EQ(service.gets_.load(), 3);
  for (int i = 0; i < 2; ++i) {
    absl::StatusOr<CacheClient::PutResult> put = (*client)->Put(blob);
    ASSERT_TRUE(put.ok()) << put.status();
    EXPECT_TRUE(put->already_present);
    EXPECT_EQ(put->digest.hash(), DigestOf(blob).hash());
  }
  EXPECT_EQ(service.puts_.load(), 2);
  server->Shutdown();
}

TEST_F(CacheServiceTest, FindMissingAndNotFound) {
  Start();
  const std::string held = "held";
  ASSERT_TRUE(client_->Put(held).ok());
  absl::StatusOr<std::vector<v1::Digest>> missing =
      client_->FindMissing({DigestOf("absent"), DigestOf(held)});
  ASSERT_TRUE(missing.ok()) << missing.status();
  ASSERT_EQ(missing->size(), 1u);
  EXPECT_EQ((*missing)[0].hash(), DigestOf("absent").hash());
  absl::Status s = client_->Get(DigestOf("absent")).status();
  EXPECT_TRUE(absl::IsNotFound(s)) << s;
  EXPECT_EQ(Stats().blob_get_misses(), 1);
}

TEST_F(CacheServiceTest, BadInputGetsTheRightCodeAndLosesNothing) {
  Start({"--max-blob-bytes", "1MiB"});
  const std::string kept = PseudoRandomBytes(5000, 1);
  ASSERT_TRUE(client_->Put(kept).ok());

  v1::Digest malformed;
  malformed.set_hash("not-a-hash");
  absl::Status s = client_->Get(malformed).status();
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  std::optional<v1::ErrorDetail> detail = ErrorDetailOf(s);
  ASSERT_TRUE(detail.has_value());
  ASSERT_EQ(detail->violations_size(), 1);
  EXPECT_EQ(detail->violations(0).field(), "digest");
  EXPECT_TRUE(absl::IsInvalidArgument(client_->Put(malformed, "x").status()));
  EXPECT_TRUE(absl::IsInvalidArgument(client_->FindMissing({DigestOf("a"), malformed}).status()));

  // Bytes that do not hash to the digest, and sizes that disagree.
  const std::string other = PseudoRandomBytes(5000, 2);
  s = client_->Put(DigestOf(other), PseudoRandomBytes(5000, 3)).status();
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  v1::Digest too_long = DigestOf(other);
  too_long.set_size_bytes(4000);
  EXPECT_TRUE(absl::IsInvalidArgument(client_->Put(too_long, other).status()));
  too_long.set_size_bytes(6000);
  EXPECT_TRUE(absl::IsInvalidArgument(client_->Put(too_long, other).status()));

  // Beyond --max-blob-bytes, declared or sent.
  const std::string big = PseudoRandomBytes((1 << 20) + 1, 4);
  s = client_->Put(big).status();
  EXPECT_TRUE(absl::IsResourceExhausted(s)) << s;
  EXPECT_NE(s.message().find("--max-blob-bytes"), absl::string_view::npos) << s;

  const v1::CacheStats stats = Stats();
  EXPECT_EQ(stats.blobs(), 1);
  EXPECT_EQ(stats.blob_bytes(), 5000);
  EXPECT_TRUE(absl::IsNotFound(client_->Get(DigestOf(other)).status()));
  absl::StatusOr<std::string> got = client_->Get(DigestOf(kept));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, kept);
}

TEST_F(CacheServiceTest, ActionsNeedTheirBlobsAndCountHitsAndMisses) {
  Start();
  const std::string artifact = "compiled graph";
  v1::ActionVariant variant;
  variant.mutable_guards()->add_shape_env("Eq(s0, 128)");
  *variant.add_artifacts() = DigestOf(artifact);
  absl::Status s = client_->PutAction("key", variant);
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_TRUE(absl::IsNotFound(client_->GetAction("key").status()));
  EXPECT_TRUE(absl::IsInvalidArgument(client_->GetAction("").status()));

  ASSERT_TRUE(client_->Put(artifact).ok());
  ASSERT_TRUE(client_->PutAction("key", variant).ok());
  absl::StatusOr<v1::ActionEntry> entry = client_->GetAction("key");
  ASSERT_TRUE(entry.ok()) << entry.status();
  ASSERT_EQ(entry->variants_size(), 1);
  EXPECT_EQ(entry->variants(0).guards().shape_env(0), "Eq(s0, 128)");
  EXPECT_EQ(entry->variants(0).size_bytes(), static_cast<int64_t>(artifact.size()));
  const v1::CacheStats stats = Stats();
  EXPECT_EQ(stats.actions(), 1);
  EXPECT_EQ(stats.variants(), 1);
  EXPECT_EQ(stats.hits(), 1);
  EXPECT_EQ(stats.misses(), 1);
}

// A client's own key (a trainer's compiled frame) scoped to the server's toolchain for a
// target: found again under that target only, and under another toolchain another key.
TEST_F(CacheServiceTest, ActionsScopedToAToolchainTargetAreKeyedByItsFingerprint) {
  Start();
  const std::string frame = "pickled frame";
  ASSERT_TRUE(client_->Put(frame).ok());
  std::unique_ptr<v1::Cache::Stub> stub = Stub();
  auto put = [&](const std::string& target) {
    grpc::ClientContext context;
    v1::PutActionRequest request;
    request.set_compile_key("frame-key");
    request.set_toolchain_target(target);
    *request.mutable_variant()->add_artifacts() = DigestOf(frame);
    v1::PutActionResponse response;
    return FromGrpcStatus(stub->PutAction(&context, request, &response));
  };
  auto get = [&](const std::string& target) -> absl::StatusOr<v1::ActionEntry> {
    grpc::ClientContext context;
    v1::GetActionRequest request;
    request.set_compile_key("frame-key");
    request.set_toolchain_target(target);
    v1::ActionEntry entry;
    grpc::Status status = stub->GetAction(&context, request, &entry);
    if (!status.ok()) return FromGrpcStatus(status);
    return entry;
  };
  ASSERT_TRUE(put("x86_64").ok());
  absl::StatusOr<v1::ActionEntry> entry = get("x86_64");
  ASSERT_TRUE(entry.ok()) << entry.status();
  ASSERT_EQ(entry->variants_size(), 1);
  EXPECT_EQ(entry->variants(0).artifacts(0).hash(), DigestOf(frame).hash());
  const std::string scoped = server::ToolchainScopedKey(
      canon::ToolchainFingerprint(canon::CurrentToolchain(), "x86_64"), "frame-key");
  EXPECT_EQ(entry->compile_key(), scoped);
  EXPECT_TRUE(absl::IsNotFound(client_->GetAction("frame-key").status()));
  if (canon::CurrentToolchain().backends.contains("cuda:sm_90")) {
    EXPECT_TRUE(absl::IsNotFound(get("cuda:sm_90").status()));
  }

  // A target the server has no backend for is named, and nothing is stored.
  for (const absl::Status& refused : {put("tpu:v5"), get("tpu:v5").status()}) {
    EXPECT_TRUE(absl::IsInvalidArgument(refused)) << refused;
    std::optional<v1::ErrorDetail> detail = ErrorDetailOf(refused);
    ASSERT_TRUE(detail.has_value());
    ASSERT_EQ(detail->violations_size(), 1);
    EXPECT_EQ(detail->violations(0).field(), "toolchain_target");
    EXPECT_NE(refused.message().find("'tpu:v5'"), absl::string_view::npos) << refused;
    EXPECT_NE(refused.message().find("x86_64"), absl::string_view::npos) << refused;
  }
  EXPECT_EQ(Stats().actions(), 1);

  // Another toolchain (another compiler, LLVM or CUDA) keys the same client key elsewhere.
  canon::Toolchain other = canon::CurrentToolchain();
  other.compiler_fingerprint = "another compiler";
  EXPECT_NE(server::ToolchainScopedKey(canon::ToolchainFingerprint(other, "x86_64"), "frame-key"),
            scoped);
  EXPECT_NE(server::ToolchainScopedKey(
                canon::ToolchainFingerprint(canon::CurrentToolchain(), "x86_64"), "other-key"),
            scoped);
}

TEST_F(CacheServiceTest, ListActionsPagesThroughKeysAndCountsNoHits) {
  Start();
  for (int i = 0; i < 25; ++i) {
    const std::string artifact = absl::StrCat("artifact ", i);
    ASSERT_TRUE(client_->Put(artifact).ok());
    v1::ActionVariant variant;
    *variant.add_artifacts() = DigestOf(artifact);
    ASSERT_TRUE(client_->PutAction(absl::StrCat("key", 100 + i), variant).ok());
  }
  v1::ListActionsRequest request;
  request.set_max_actions(7);  // four pages, followed by the client
  absl::StatusOr<std::vector<v1::ActionEntry>> all = client_->ListActions(request);
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_EQ(all->size(), 25u);
  for (int i = 0; i < 25; ++i) {
    EXPECT_EQ((*all)[i].compile_key(), absl::StrCat("key", 100 + i));
    EXPECT_EQ((*all)[i].variants(0).last_used_unix_ms(), 0);
    EXPECT_GT((*all)[i].variants(0).created_unix_ms(), 0);
  }
  request.add_compile_keys("key101");
  request.add_compile_keys("key999");
  absl::StatusOr<std::vector<v1::ActionEntry>> unknown = client_->ListActions(request);
  EXPECT_TRUE(absl::IsNotFound(unknown.status())) << unknown.status();
  EXPECT_NE(unknown.status().message().find("key999"), absl::string_view::npos);
  request.clear_compile_keys();
  request.set_max_actions(100000);
  EXPECT_TRUE(absl::IsInvalidArgument(client_->ListActions(request).status()));
  request.set_max_actions(0);
  request.set_job_id(std::string("a\0b", 3));
  EXPECT_TRUE(absl::IsInvalidArgument(client_->ListActions(request).status()));
  EXPECT_EQ(Stats().hits(), 0);
}

TEST_F(CacheServiceTest, BlobsMoveBetweenGrpcAndTheHttpEndpoint) {
  Start({"--blob-listen", "127.0.0.1:0"});
  ASSERT_NE(kilnd_->blob_port(), 0);
  client::BlobHttpClient http({.address = absl::StrCat("127.0.0.1:", kilnd_->blob_port())});
  const std::string over_grpc = PseudoRandomBytes(300000, 21);
  const std::string over_http = PseudoRandomBytes(5000, 22);
  ASSERT_TRUE(client_->Put(over_grpc).ok());
  ASSERT_TRUE(http.Put(DigestOf(over_http), over_http).ok());
  EXPECT_EQ(*http.Get(DigestOf(over_grpc)), over_grpc);
  EXPECT_EQ(*client_->Get(DigestOf(over_http)), over_http);
  EXPECT_EQ(Stats().memory_hits(), 2);
  // After a restart both come from disk, verified, then from memory.
  Stop();
  Start({"--blob-listen", "127.0.0.1:0"});
  client::BlobHttpClient again({.address = absl::StrCat("127.0.0.1:", kilnd_->blob_port())});
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(*again.Get(DigestOf(over_grpc)), over_grpc);
    EXPECT_EQ(*client_->Get(DigestOf(over_http)), over_http);
  }
  const v1::CacheStats stats = Stats();
  EXPECT_EQ(stats.blob_gets(), 4);
  EXPECT_EQ(stats.memory_hits(), 2);
  EXPECT_EQ(stats.memory_blobs(), 2);
  EXPECT_EQ(stats.memory_bytes(), 305000);
  // Without the flag there is no endpoint.
  Stop();
  Start();
  EXPECT_EQ(kilnd_->blob_port(), 0);
}

TEST_F(CacheServiceTest, ContentsSurviveARestart) {
  Start();
  const std::string bytes = PseudoRandomBytes(200000, 5);
  ASSERT_TRUE(client_->Put(bytes).ok());
  Stop();
  Start();
  absl::StatusOr<std::string> got = client_->Get(DigestOf(bytes));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, bytes);
  EXPECT_EQ(Stats().blobs(), 1);
}

TEST_F(CacheServiceTest, CorruptBytesOnDiskAreNeverServed) {
  Start();
  // One is read with GetWhole (through the client), the other through the stream.
  const std::string whole = PseudoRandomBytes(100000, 6);
  const std::string streamed = PseudoRandomBytes(100000, 11);
  ASSERT_TRUE(client_->Put(whole).ok());
  ASSERT_TRUE(client_->Put(streamed).ok());
  Stop();
  {
    cache::CacheOptions o;
    o.path = data_dir() + "/store";
    absl::StatusOr<std::unique_ptr<cache::CacheDb>> db = cache::CacheDb::Open(o);
    ASSERT_TRUE(db.ok()) << db.status();
    for (const std::string* bytes : {&whole, &streamed}) {
      const std::string key = cache::RawHash(DigestOf(*bytes).hash());
      std::string value;
      ASSERT_TRUE((*db)->db()->Get(rocksdb::ReadOptions(), (*db)->blobs(), key, &value).ok());
      value[777] ^= 1;
      ASSERT_TRUE((*db)->db()->Put(rocksdb::WriteOptions(), (*db)->blobs(), key, value).ok());
    }
  }
  Start();
  absl::Status s = client_->Get(DigestOf(whole)).status();
  EXPECT_TRUE(absl::IsNotFound(s)) << s;
  s = StreamGet(*Stub(), DigestOf(streamed)).status();
  EXPECT_TRUE(absl::IsNotFound(s)) << s;
  const v1::CacheStats stats = Stats();
  EXPECT_EQ(stats.integrity_failures(), 2);
  EXPECT_EQ(stats.blobs(), 0);
  Stop();
}

TEST_F(CacheServiceTest, CorruptStoreIsMovedAsideOrRefused) {
  Start();
  ASSERT_TRUE(client_->Put("something").ok());
  Stop();
  {
    std::ofstream current(data_dir() + "/store/CURRENT", std::ios::trunc);
    current << "garbage";
  }
  absl::StatusOr<testing::RunResult> refused =
      testing::Run({testing::KilndPath(), "--listen", "127.0.0.1:0", "--metrics-listen", "",
                    "--data-dir", data_dir(), "--refuse-corrupt-store"},
                   absl::Seconds(30));
  ASSERT_TRUE(refused.ok()) << refused.status();
  EXPECT_EQ(refused->exit_code, 1) << refused->err;
  EXPECT_NE(refused->err.find("corrupt"), std::string::npos) << refused->err;

  Start();
  EXPECT_EQ(Stats().blobs(), 0);
  ASSERT_TRUE(client_->Put("something").ok());
  Stop();
  int aside = 0;
  for (const auto& entry : std::filesystem::directory_iterator(data_dir())) {
    aside += entry.path().filename().string().rfind("store.corrupt-", 0) == 0;
  }
  EXPECT_EQ(aside, 1);
}

TEST_F(CacheServiceTest, CacheFlagsAndTheirEnvironmentVariables) {
  for (const std::vector<std::string>& flags :
       {std::vector<std::string>{"--max-blob-bytes", "0"},
        std::vector<std::string>{"--cache-max-bytes", "lots"}}) {
    std::vector<std::string> argv = {testing::KilndPath(), "--data-dir", data_dir()};
    argv.insert(argv.end(), flags.begin(), flags.end());
    absl::StatusOr<testing::RunResult> r = testing::Run(argv);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->exit_code, 2) << flags[0] << ": " << r->err;
  }
  setenv("KILN_CACHE_MAX_BYTES", "64MiB", 1);
  setenv("KILN_MAX_BLOB_BYTES", "1KiB", 1);
  Start();
  unsetenv("KILN_CACHE_MAX_BYTES");
  unsetenv("KILN_MAX_BLOB_BYTES");
  EXPECT_EQ(Stats().budget_bytes(), 64 << 20);
  EXPECT_TRUE(absl::IsResourceExhausted(client_->Put(PseudoRandomBytes(1025, 1)).status()));
  EXPECT_TRUE(client_->Put(PseudoRandomBytes(1024, 1)).ok());
}

TEST_F(CacheServiceTest, CliPutGetAndStat) {
  Start();
  const std::string input = dir_.path() + "/in.bin", output = dir_.path() + "/out.bin";
  const std::string bytes = PseudoRandomBytes(6 << 20, 7);
  {
    std::ofstream f(input, std::ios::binary);
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  absl::StatusOr<testing::RunResult> put =
      testing::Run({testing::KilnCliPath(), "cache", "put", input, "--server", kilnd_->address()});
  ASSERT_TRUE(put.ok()) << put.status();
  ASSERT_EQ(put->exit_code, 0) << put->err;
  EXPECT_EQ(put->out, client::FormatDigest(DigestOf(bytes)) + "\n");
  const std::string digest = put->out.substr(0, put->out.size() - 1);

  absl::StatusOr<testing::RunResult> get =
      testing::Run({testing::KilnCliPath(), "cache", "get", digest, "-o", output, "--server",
                    kilnd_->address()});
  ASSERT_TRUE(get.ok()) << get.status();
  ASSERT_EQ(get->exit_code, 0) << get->err;
  absl::StatusOr<std::string> written = testing::ReadFile(output);
  ASSERT_TRUE(written.ok());
  EXPECT_TRUE(*written == bytes);

  absl::StatusOr<testing::RunResult> missing =
      testing::Run({testing::KilnCliPath(), "cache", "get", DigestOf("nope").hash(), "-o", output,
                    "--server", kilnd_->address()});
  ASSERT_TRUE(missing.ok());
  EXPECT_EQ(missing->exit_code, 1);
  EXPECT_NE(missing->err.find("NOT_FOUND"), std::string::npos) << missing->err;

  absl::StatusOr<testing::RunResult> stat =
      testing::Run({testing::KilnCliPath(), "cache", "stat", "--server", kilnd_->address()});
  ASSERT_TRUE(stat.ok());
  ASSERT_EQ(stat->exit_code, 0) << stat->err;
  EXPECT_NE(stat->out.find("blobs                1\n"), std::string::npos) << stat->out;
  EXPECT_NE(stat->out.find(absl::StrCat("blob_bytes           ", 6 << 20)), std::string::npos)
      << stat->out;
}

}  // namespace
}  // namespace kiln
