// kilnd with its data directory on a small tmpfs that fills up: Puts over gRPC fail with
// RESOURCE_EXHAUSTED and over HTTP with 507, both saying the disk is full; reads of what is
// stored go on; once space returns (the tmpfs grows) Puts succeed again without a restart;
// and after a restart everything acknowledged is there. Where mounting is not permitted the
// test skips.

#include <signal.h>

#include <gtest/gtest.h>

#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/cache_client.h"
#include "httplib.h"
#include "proto/base/digest.h"
#include "tests/testing/kilnd_process.h"
#include "tests/testing/test_env.h"
#include "tests/testing/tmpfs.h"

namespace kiln {
namespace {

using ::kiln::testing::KilndProcess;
using ::kiln::testing::PseudoRandomBytes;
using ::kiln::testing::Tmpfs;

constexpr int64_t kMiB = 1 << 20;

// Blob `i` of the test; the first ones are large, those that fill the last bytes small.
struct BlobId {
  int i;
  size_t size = 200 << 10;
};
std::string Blob(BlobId id) { return PseudoRandomBytes(id.size, 7000 + id.i); }
std::string Blob(int i) { return Blob(BlobId{i}); }

std::unique_ptr<client::CacheClient> Connect(const KilndProcess& k) {
  client::ChannelOptions o;
  o.address = k.address();
  absl::StatusOr<std::unique_ptr<client::CacheClient>> c = client::CacheClient::Create(o);
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *std::move(c) : nullptr;
}

// PUT /cas/HASH of `bytes` on the blob endpoint; the HTTP status and its one-line reason.
std::pair<int, std::string> HttpPut(const KilndProcess& k, const std::string& bytes) {
  httplib::Client http("127.0.0.1", k.blob_port());
  http.set_read_timeout(60, 0);
  auto r = http.Put(absl::StrCat("/cas/", Sha256Hex(bytes)), bytes, "application/octet-stream");
  if (!r) return {-1, httplib::to_string(r.error())};
  return {r->status, r->body};
}

void ExpectAllReadable(client::CacheClient& c, const KilndProcess& k,
                       const std::vector<BlobId>& acked) {
  httplib::Client http("127.0.0.1", k.blob_port());
  for (BlobId id : acked) {
    const int i = id.i;
    const std::string bytes = Blob(id);
    absl::StatusOr<std::string> got = c.Get(DigestOf(bytes));
    ASSERT_TRUE(got.ok()) << "blob " << i << ": " << got.status();
    ASSERT_TRUE(*got == bytes) << "blob " << i << " came back with other bytes";
    auto r = http.Get(absl::StrCat("/cas/", Sha256Hex(bytes)));
    ASSERT_TRUE(r) << httplib::to_string(r.error());
    ASSERT_EQ(r->status, 200) << r->body;
    ASSERT_TRUE(r->body == bytes) << "blob " << i << " came back over HTTP with other bytes";
  }
}

TEST(KilndDiskFullTest, PutsFailClearlyReadsGoOnAndWritesResumeWhenSpaceReturns) {
  absl::StatusOr<Tmpfs> fs = Tmpfs::Mount(12 * kMiB);
  if (!fs.ok()) GTEST_SKIP() << fs.status();
  const std::string data = fs->path() + "/data";
  const std::vector<std::string> flags = {"--blob-listen", "127.0.0.1:0", "--cache-memory-bytes",
                                          "0"};
  std::optional<KilndProcess> kilnd;
  {
    absl::StatusOr<KilndProcess> k = KilndProcess::Start(data, flags);
    ASSERT_TRUE(k.ok()) << k.status();
    kilnd.emplace(*std::move(k));
  }
  std::unique_ptr<client::CacheClient> cache = Connect(*kilnd);
  ASSERT_NE(cache, nullptr);

  // Fill over gRPC until a Put is refused, with large blobs and then smaller ones: kilnd
  // refuses a write that would leave less than a small reserve, so small writes fit for a
  // while after large ones no longer do.
  std::vector<BlobId> acked;
  int next = 0;
  for (size_t size : {size_t{200} << 10, size_t{4096}, size_t{16}}) {
    absl::Status refused;
    for (int n = 0; n < 1000 && refused.ok(); ++n) {
      const BlobId id{next++, size};
      absl::StatusOr<client::CacheClient::PutResult> put = cache->Put(Blob(id));
      if (put.ok()) {
        acked.push_back(id);
      } else {
        refused = put.status();
      }
    }
    ASSERT_FALSE(refused.ok()) << "the tmpfs never filled up with blobs of " << size << " bytes";
    EXPECT_TRUE(absl::IsResourceExhausted(refused)) << refused;
    EXPECT_NE(refused.message().find("disk is full"), std::string::npos) << refused;
  }
  ASSERT_GT(acked.size(), 3u);

  // Refused over HTTP too, with 507 and the same reason; action records likewise.
  const auto [status, reason] = HttpPut(*kilnd, Blob(next++));
  EXPECT_EQ(status, 507) << reason;
  EXPECT_NE(reason.find("disk is full"), std::string::npos) << reason;
  v1::ActionVariant variant;
  *variant.add_artifacts() = DigestOf(Blob(acked.front()));
  variant.mutable_guards()->add_shape_env("Eq(s0, 1)");
  absl::Status action = cache->PutAction("key-while-full", variant);
  EXPECT_TRUE(absl::IsResourceExhausted(action)) << action;

  // Reads go on, over both protocols, and kilnd stays healthy.
  ExpectAllReadable(*cache, *kilnd, acked);
  EXPECT_TRUE(cache->Stat().ok());

  ASSERT_TRUE(fs->Resize(96 * kMiB).ok());
  // kilnd resumes writes by itself (its maintenance, or the next write, retries): poll.
  const std::string after = Blob(next++);
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  absl::StatusOr<client::CacheClient::PutResult> put = cache->Put(after);
  while (!put.ok() && absl::Now() < deadline) {
    ASSERT_TRUE(absl::IsResourceExhausted(put.status())) << put.status();
    absl::SleepFor(absl::Milliseconds(50));
    put = cache->Put(after);
  }
  ASSERT_TRUE(put.ok()) << "writes did not resume: " << put.status();
  acked.push_back(BlobId{next - 1});
  const int over_http = next++;
  const auto [status_after, reason_after] = HttpPut(*kilnd, Blob(over_http));
  EXPECT_EQ(status_after, 201) << reason_after;
  acked.push_back(BlobId{over_http});
  ASSERT_TRUE(cache->PutAction("key-after", variant).ok());
  ExpectAllReadable(*cache, *kilnd, acked);
  const std::string log = kilnd->process().Stderr();
  EXPECT_NE(log.find("store_disk_full"), std::string::npos) << log;
  EXPECT_NE(log.find("store_writes_resumed"), std::string::npos) << log;

  // A restart finds everything acknowledged.
  kilnd->process().Signal(SIGTERM);
  std::optional<int> code = kilnd->process().Wait(absl::Seconds(30));
  ASSERT_TRUE(code.has_value());
  EXPECT_EQ(*code, 0) << kilnd->process().Stderr();
  kilnd.reset();
  {
    absl::StatusOr<KilndProcess> k = KilndProcess::Start(data, flags);
    ASSERT_TRUE(k.ok()) << k.status();
    kilnd.emplace(*std::move(k));
  }
  cache = Connect(*kilnd);
  ASSERT_NE(cache, nullptr);
  ExpectAllReadable(*cache, *kilnd, acked);
  absl::StatusOr<v1::ActionEntry> entry = cache->GetAction("key-after");
  ASSERT_TRUE(entry.ok()) << entry.status();
  EXPECT_TRUE(absl::IsNotFound(cache->GetAction("key-while-full").status()));
}

}  // namespace
}  // namespace kiln
