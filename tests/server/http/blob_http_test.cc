// The HTTP/1.1 blob endpoint over loopback, against a real store on disk: round trips from
// memory and from disk, large blobs, bad requests (a clear status and message, nothing
// written), tokens, pipelining, keep-alive and close, corruption, concurrency and shutdown;
// and BlobHttpClient's mapping of what it receives.

#include "server/http/blob_http.h"

#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "cache/cache.h"
#include "cache/db.h"
#include "client/blob_http_client.h"
#include "proto/base/digest.h"
#include "tests/server/rpc/test_authorizer.h"
#include "tests/testing/loopback.h"
#include "tests/testing/test_env.h"

namespace kiln::server {
namespace {

using ::kiln::client::BlobHttpClient;
using ::kiln::client::BlobHttpClientOptions;
using ::kiln::testing::PseudoRandomBytes;
using ::kiln::testing::TempDir;

constexpr char kReadToken[] = "read-token-0123456789";
constexpr char kCompileToken[] = "compile-token-0123456789";

// A response as it arrived: status, headers (names lower-cased) and body.
struct HttpResponse {
  int status = 0;
  std::map<std::string, std::string> headers;
  std::string body;
};

// One raw connection: writes exactly what a test says, reads responses one by one.
class RawConnection {
 public:
  explicit RawConnection(int port) : fd_(testing::ConnectLoopback(port)) { EXPECT_GE(fd_, 0); }
  ~RawConnection() { close(fd_); }

  void Send(absl::string_view bytes) {
    while (!bytes.empty()) {
      const ssize_t n = send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
      if (n <= 0) return;  // the server may close early; reading tells
      bytes.remove_prefix(static_cast<size_t>(n));
    }
  }

  // The next response; status 0 when the connection closed first. `head_only`: a HEAD's.
  HttpResponse Read(bool head_only = false) {
    HttpResponse r;
    size_t end;
    while ((end = in_.find("\r\n\r\n")) == std::string::npos) {
      if (!Fill()) return r;
    }
    std::vector<std::string> lines = absl::StrSplit(in_.substr(0, end), "\r\n");
    in_.erase(0, end + 4);
    std::vector<std::string> status = absl::StrSplit(lines[0], absl::MaxSplits(' ', 2));
    if (status.size() < 2 || !absl::SimpleAtoi(status[1], &r.status)) return r;
    for (size_t i = 1; i < lines.size(); ++i) {
      const size_t colon = lines[i].find(':');
      r.headers[absl::AsciiStrToLower(lines[i].substr(0, colon))] = lines[i].substr(colon + 2);
    }
    size_t length = 0;
    if (!head_only && absl::SimpleAtoi(r.headers["content-length"], &length)) {
      while (in_.size() < length) {
        if (!Fill()) return HttpResponse();
      }
      r.body = in_.substr(0, length);
      in_.erase(0, length);
    }
    return r;
  }

  // Whether the server closed the connection (after what was already read).
  bool Closed() {
    timeval tv{5, 0};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    char c;
    return in_.empty() && recv(fd_, &c, 1, 0) == 0;
  }

 private:
  bool Fill() {
    char buf[65536];
    const ssize_t n = recv(fd_, buf, sizeof(buf), 0);
    if (n <= 0) return false;
    in_.append(buf, static_cast<size_t>(n));
    return true;
  }
  int fd_ = -1;
  std::string in_;
};

std::string Get(const v1::Digest& d, absl::string_view extra = "") {
  return absl::StrCat("GET /cas/", d.hash(), " HTTP/1.1\r\nHost: x\r\n", extra, "\r\n");
}

std::string Put(const v1::Digest& d, absl::string_view body, absl::string_view extra = "") {
  return absl::StrCat("PUT /cas/", d.hash(),
                      " HTTP/1.1\r\nHost: x\r\nContent-Length: ", body.size(), "\r\n", extra,
                      "\r\n", body);
}

class BlobHttpTest : public ::testing::Test {
 protected:
  void Open(int64_t memory_bytes = int64_t{64} << 20, const std::string& tokens = "") {
    server_.reset();
    cache_.reset();
    cache::CacheOptions o;
    o.path = dir_.path() + "/store";
    o.background_maintenance = false;
    o.memory_bytes = memory_bytes;
    absl::StatusOr<std::unique_ptr<cache::Cache>> cache = cache::Cache::Open(o);
    ASSERT_TRUE(cache.ok()) << cache.status();
    cache_ = *std::move(cache);
    absl::StatusOr<std::unique_ptr<Authorizer>> authorizer = testing::TestAuthorizer(tokens);
    ASSERT_TRUE(authorizer.ok()) << authorizer.status();
    authorizer_ = *std::move(authorizer);
    BlobHttpOptions options;
    options.address = "127.0.0.1:0";
    options.max_blob_bytes = 8 << 20;
    options.max_connections = max_connections_;
    options.idle_timeout = idle_timeout_;
    options.metrics = &metrics_;
    absl::StatusOr<std::unique_ptr<BlobHttpServer>> server =
        BlobHttpServer::Start(&cache_->store(), authorizer_.get(), options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
  }

  void Close() {
    server_.reset();
    ASSERT_TRUE(cache_->Close().ok());
    cache_.reset();
  }

  BlobHttpClientOptions ClientOptions(const std::string& token = "") const {
    return {.address = absl::StrCat("127.0.0.1:", server_->port()), .token = token};
  }

  cache::CacheStatistics Stats() const { return cache_->Statistics(); }

  TempDir dir_;
  int max_connections_ = 4096;
  absl::Duration idle_timeout_ = absl::Seconds(60);
  MetricsRegistry metrics_;
  std::unique_ptr<cache::Cache> cache_;
  std::unique_ptr<Authorizer> authorizer_;
  std::unique_ptr<BlobHttpServer> server_;
};

TEST_F(BlobHttpTest, PutGetAndHeadRoundTripFromMemoryAndFromDisk) {
  for (int64_t memory : {int64_t{64} << 20, int64_t{0}}) {
    SCOPED_TRACE(absl::StrCat("memory tier of ", memory, " bytes"));
    Open(memory);
    BlobHttpClient client(ClientOptions());
    // Past the socket's buffer, so that replies and bodies go out in several writes.
    for (size_t size : {size_t{0}, size_t{1}, size_t{20000}, size_t{6} << 20}) {
      const std::string bytes = PseudoRandomBytes(size, static_cast<int>(size) + 1);
      const v1::Digest d = DigestOf(bytes);
      absl::StatusOr<bool> present = client.Put(d, bytes);
      ASSERT_TRUE(present.ok()) << present.status();
      EXPECT_FALSE(*present);
      EXPECT_TRUE(*client.Put(d, bytes));  // already present
      absl::StatusOr<std::string> got = client.Get(d);
      ASSERT_TRUE(got.ok()) << got.status();
      EXPECT_EQ(*got, bytes);
      EXPECT_EQ(*client.Head(d), static_cast<int64_t>(size));
    }
    const cache::CacheStatistics s = Stats();
    EXPECT_EQ(s.blob_puts, 4);
    EXPECT_EQ(s.blob_gets, 8);  // GET and HEAD read the blob
    // The 6 MiB blob is more than a memory shard's share (4 MiB) and is read from disk.
    EXPECT_EQ(s.memory_hits, memory > 0 ? 6 : 0);
    Close();
    std::filesystem::remove_all(dir_.path() + "/store");
  }
}

TEST_F(BlobHttpTest, BadRequestsGetAClearStatusAndWriteNothing) {
  Open();
  const std::string bytes = PseudoRandomBytes(1000, 3);
  const v1::Digest d = DigestOf(bytes);
  const v1::Digest other = DigestOf("something else");
  struct Case {
    std::string request;
    int status;
    std::string says;
  };
  const std::vector<Case> cases = {
      {"GET /cas/abc HTTP/1.1\r\n\r\n", 400, "64 lowercase hex"},
      {absl::StrCat("GET /blobs/", d.hash(), " HTTP/1.1\r\n\r\n"), 404, "/cas/<sha256 hex>"},
      {absl::StrCat("DELETE /cas/", d.hash(), " HTTP/1.1\r\n\r\n"), 405, "GET, HEAD, PUT"},
      {Put(other, bytes), 400, "the bytes hash to"},
      {absl::StrCat("PUT /cas/", d.hash(), " HTTP/1.1\r\n\r\n"), 411, "Content-Length"},
      {absl::StrCat("PUT /cas/", d.hash(), " HTTP/1.1\r\nContent-Length: 99999999\r\n\r\n"), 413,
       "maximum blob size"},
      {absl::StrCat("PUT /cas/", d.hash(), " HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"), 501,
       "Content-Length"},
      {absl::StrCat("PUT /cas/", d.hash(), " HTTP/1.1\r\nContent-Length: 12x\r\n\r\n"), 400,
       "Content-Length"},
      {absl::StrCat("GET /cas/", d.hash(), " HTTP/2.0\r\n\r\n"), 505, "HTTP/1.1"},
      {"BLOB\r\n\r\n", 400, "request line"},
      {absl::StrCat("GET /cas/", d.hash(), " HTTP/1.1\r\nno colon here\r\n\r\n"), 400,
       "name: value"},
      {absl::StrCat("GET /cas/", d.hash(), " HTTP/1.1\r\nX: ", std::string(20000, 'a'), "\r\n\r\n"),
       431, "request head exceeds"},
      {absl::StrCat("GET /cas/", d.hash(), " HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc"), 400,
       "carries no body"},
      {Get(d), 404, d.hash()},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.request.substr(0, 80));
    RawConnection conn(server_->port());
    conn.Send(c.request);
    HttpResponse r = conn.Read();
    EXPECT_EQ(r.status, c.status);
    EXPECT_NE(r.body.find(c.says), std::string::npos) << r.body;
    EXPECT_EQ(r.headers["content-type"], "text/plain");
    if (c.status == 405) EXPECT_EQ(r.headers["allow"], "GET, HEAD, PUT");
  }
  EXPECT_EQ(Stats().blobs, 0);
  EXPECT_EQ(Stats().blob_puts, 0);
  // The store still works.
  RawConnection conn(server_->port());
  conn.Send(Put(d, bytes));
  EXPECT_EQ(conn.Read().status, 201);
}

TEST_F(BlobHttpTest, TokensGateReadsAndWrites) {
  Open(int64_t{64} << 20,
       absl::StrCat("read ", kReadToken, " reader\ncompile ", kCompileToken, " writer\n"));
  const std::string bytes = "artifact bytes";
  const v1::Digest d = DigestOf(bytes);

  absl::StatusOr<bool> anonymous = BlobHttpClient(ClientOptions()).Put(d, bytes);
  EXPECT_TRUE(absl::IsUnauthenticated(anonymous.status())) << anonymous.status();
  absl::StatusOr<bool> reader = BlobHttpClient(ClientOptions(kReadToken)).Put(d, bytes);
  EXPECT_TRUE(absl::IsPermissionDenied(reader.status())) << reader.status();
  EXPECT_NE(reader.status().message().find("needs compile"), std::string::npos);
  absl::StatusOr<bool> wrong =
      BlobHttpClient(ClientOptions("not-a-token-0123456789")).Put(d, bytes);
  EXPECT_TRUE(absl::IsUnauthenticated(wrong.status())) << wrong.status();
  EXPECT_EQ(Stats().blobs, 0);

  ASSERT_TRUE(BlobHttpClient(ClientOptions(kCompileToken)).Put(d, bytes).ok());
  EXPECT_EQ(*BlobHttpClient(ClientOptions(kReadToken)).Get(d), bytes);
  EXPECT_TRUE(absl::IsUnauthenticated(BlobHttpClient(ClientOptions()).Get(d).status()));

  RawConnection conn(server_->port());
  conn.Send(Get(d));
  HttpResponse r = conn.Read();
  EXPECT_EQ(r.status, 401);
  EXPECT_EQ(r.headers["www-authenticate"], "Bearer");
}

TEST_F(BlobHttpTest, PipelinedRequestsAreAnsweredInOrder) {
  // A 1 MiB shard share: the 2 MiB blob is read from disk on a worker, the small ones from
  // memory on the loop, and still the answers keep the order of the requests.
  Open(int64_t{16} << 20);
  const std::string large = PseudoRandomBytes(2 << 20, 5), small = PseudoRandomBytes(100, 6);
  BlobHttpClient client(ClientOptions());
  ASSERT_TRUE(client.Put(DigestOf(large), large).ok());
  ASSERT_TRUE(client.Put(DigestOf(small), small).ok());
  const std::string another = PseudoRandomBytes(50, 7);
  RawConnection conn(server_->port());
  conn.Send(absl::StrCat(Get(DigestOf(large)), Get(DigestOf(small)),
                         Put(DigestOf(another), another), Get(DigestOf(another)), "HEAD /cas/",
                         DigestOf(large).hash(), " HTTP/1.1\r\n\r\n", Get(DigestOf("absent"))));
  EXPECT_EQ(conn.Read().body, large);
  EXPECT_EQ(conn.Read().body, small);
  EXPECT_EQ(conn.Read().status, 201);
  EXPECT_EQ(conn.Read().body, another);
  HttpResponse head = conn.Read(/*head_only=*/true);
  EXPECT_EQ(head.status, 200);
  EXPECT_EQ(head.headers["content-length"], std::to_string(large.size()));
  EXPECT_EQ(conn.Read().status, 404);
  EXPECT_EQ(Stats().memory_hits, 2);  // the small blob, and the one just written
}

TEST_F(BlobHttpTest, ConnectionCloseHttp10AndExpectContinue) {
  Open();
  const std::string bytes = PseudoRandomBytes(3000, 8);
  const v1::Digest d = DigestOf(bytes);
  {
    RawConnection conn(server_->port());
    conn.Send(Put(d, "", ""));  // headers only, a body of 0 bytes that does not match
    EXPECT_EQ(conn.Read().status, 400);
    // Expect: 100-continue: the interim answer comes before the body is sent.
    conn.Send(absl::StrCat("PUT /cas/", d.hash(), " HTTP/1.1\r\nContent-Length: ", bytes.size(),
                           "\r\nExpect: 100-continue\r\n\r\n"));
    EXPECT_EQ(conn.Read(/*head_only=*/true).status, 100);
    conn.Send(bytes);
    EXPECT_EQ(conn.Read().status, 201);
    conn.Send(Get(d, "Connection: close\r\n"));
    HttpResponse r = conn.Read();
    EXPECT_EQ(r.body, bytes);
    EXPECT_EQ(r.headers["connection"], "close");
    EXPECT_TRUE(conn.Closed());
  }
  {
    RawConnection conn(server_->port());
    conn.Send(absl::StrCat("GET /cas/", d.hash(), " HTTP/1.0\r\n\r\n"));
    EXPECT_EQ(conn.Read().body, bytes);
    EXPECT_TRUE(conn.Closed());
  }
  {
    // An error that leaves a body unread closes the connection; the client reconnects.
    BlobHttpClient client(ClientOptions());
    const std::string big(9 << 20, 'x');
    EXPECT_TRUE(absl::IsResourceExhausted(client.Put(DigestOf(big), big).status()));
    EXPECT_EQ(*client.Get(d), bytes);
  }
}

TEST_F(BlobHttpTest, RequestsAndConnectionsAreCounted) {
  Open();
  // A request is counted once its answer is written, which may be just after the client has
  // read it; a closed connection once its loop notices.
  auto shows = [&](const std::string& line) {
    for (int i = 0; i < 500; ++i) {
      if (metrics_.Render().find(line) != std::string::npos) return true;
      absl::SleepFor(absl::Milliseconds(10));
    }
    return false;
  };
  const std::string bytes = "counted";
  {
    BlobHttpClient client(ClientOptions());
    ASSERT_TRUE(client.Put(DigestOf(bytes), bytes).ok());
    ASSERT_TRUE(client.Get(DigestOf(bytes)).ok());
    ASSERT_TRUE(client.Get(DigestOf(bytes)).ok());
    EXPECT_TRUE(absl::IsNotFound(client.Get(DigestOf("absent")).status()));
    for (const char* line : {
             "kiln_blob_http_requests_total{method=\"PUT\",code=\"201\"} 1",
             "kiln_blob_http_requests_total{method=\"GET\",code=\"200\"} 2",
             "kiln_blob_http_requests_total{method=\"GET\",code=\"404\"} 1",
             "kiln_blob_http_request_seconds_count{method=\"GET\"} 3",
             "kiln_blob_http_connections 1",
         }) {
      EXPECT_TRUE(shows(line)) << line << "\n" << metrics_.Render();
    }
  }
  EXPECT_TRUE(shows("kiln_blob_http_connections 0")) << metrics_.Render();
}

TEST_F(BlobHttpTest, CorruptBlobsOnDiskAreNeverServed) {
  Open();
  const std::string bytes = PseudoRandomBytes(100000, 9);
  const v1::Digest d = DigestOf(bytes);
  ASSERT_TRUE(BlobHttpClient(ClientOptions()).Put(d, bytes).ok());
  Close();
  {
    cache::CacheOptions o;
    o.path = dir_.path() + "/store";
    absl::StatusOr<std::unique_ptr<cache::CacheDb>> db = cache::CacheDb::Open(o);
    ASSERT_TRUE(db.ok()) << db.status();
    std::string value;
    const std::string key = cache::RawHash(d.hash());
    ASSERT_TRUE((*db)->db()->Get(rocksdb::ReadOptions(), (*db)->blobs(), key, &value).ok());
    value[4321] ^= 0x10;
    ASSERT_TRUE((*db)->db()->Put(rocksdb::WriteOptions(), (*db)->blobs(), key, value).ok());
    ASSERT_TRUE((*db)->Close().ok());
  }
  Open();
  absl::StatusOr<std::string> got = BlobHttpClient(ClientOptions()).Get(d);
  EXPECT_TRUE(absl::IsNotFound(got.status())) << got.status();
  EXPECT_NE(got.status().message().find("dropped as corrupt"), std::string::npos);
  EXPECT_EQ(Stats().integrity_failures, 1);
  EXPECT_EQ(Stats().blobs, 0);
}

TEST_F(BlobHttpTest, ConcurrentClientsReadAndWriteCorrectly) {
  Open(int64_t{4} << 20);  // small enough that some reads go to disk
  constexpr int kThreads = 8;
  const int rounds = testing::kSanitized ? 20 : 100;
  std::vector<std::string> blobs;
  for (int i = 0; i < 32; ++i) blobs.push_back(PseudoRandomBytes(1000 * (i * i + 1), 100 + i));
  // Written first, one at a time: concurrent writers inside RocksDB hand their batches to one
  // another through atomics ThreadSanitizer cannot see in the uninstrumented library. The
  // threads then put again (a lookup on a worker) and read, from memory and from disk.
  {
    BlobHttpClient client(ClientOptions());
    for (const std::string& b : blobs) ASSERT_TRUE(client.Put(DigestOf(b), b).ok());
  }
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      BlobHttpClient client(ClientOptions());
      for (int i = 0; i < rounds; ++i) {
        const std::string& b = blobs[(i * 7 + t) % blobs.size()];
        absl::StatusOr<bool> present = client.Put(DigestOf(b), b);
        if (!present.ok() || !*present) ++failures;
        absl::StatusOr<std::string> got = client.Get(DigestOf(b));
        if (!got.ok() || *got != b) ++failures;
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(Stats().blobs, 32);
}

TEST_F(BlobHttpTest, ConnectionsBeyondTheLimitAreClosed) {
  max_connections_ = 2;  // one per loop
  Open();
  std::vector<std::unique_ptr<RawConnection>> conns;
  int served = 0;
  for (int i = 0; i < 6; ++i) {
    conns.push_back(std::make_unique<RawConnection>(server_->port()));
    conns.back()->Send(Get(DigestOf("x")));
  }
  for (auto& c : conns) served += c->Read().status == 404 ? 1 : 0;
  EXPECT_GE(served, 1);
  EXPECT_LE(served, 2);
}

TEST_F(BlobHttpTest, IdleAndStalledConnectionsAreClosed) {
  idle_timeout_ = absl::Milliseconds(300);
  Open();
  const std::string bytes = "kept busy";
  ASSERT_TRUE(BlobHttpClient(ClientOptions()).Put(DigestOf(bytes), bytes).ok());
  RawConnection idle(server_->port());
  RawConnection stalled(server_->port());
  stalled.Send("GET /cas/");  // half a request line, never finished
  RawConnection busy(server_->port());
  // Busy sends a request every 100 ms for twice the timeout and stays open.
  for (int i = 0; i < 6; ++i) {
    busy.Send(Get(DigestOf(bytes)));
    EXPECT_EQ(busy.Read().body, bytes) << i;
    absl::SleepFor(absl::Milliseconds(100));
  }
  EXPECT_TRUE(idle.Closed());
  EXPECT_TRUE(stalled.Closed());
  busy.Send(Get(DigestOf(bytes)));
  EXPECT_EQ(busy.Read().body, bytes);
}

TEST_F(BlobHttpTest, StopClosesConnectionsAndFinishesDiskWork) {
  Open(0);
  const std::string bytes = PseudoRandomBytes(1 << 20, 10);
  BlobHttpClient client(ClientOptions());
  ASSERT_TRUE(client.Put(DigestOf(bytes), bytes).ok());
  std::vector<std::unique_ptr<RawConnection>> conns;
  for (int i = 0; i < 4; ++i) {
    conns.push_back(std::make_unique<RawConnection>(server_->port()));
    conns.back()->Send(Get(DigestOf(bytes)));
  }
  server_->Stop();
  server_->Stop();  // idempotent
  for (auto& c : conns) {
    HttpResponse r = c->Read();
    EXPECT_TRUE(r.status == 0 || r.body == bytes);  // answered in full before, or closed
  }
  EXPECT_FALSE(client.Get(DigestOf(bytes)).ok());
}

TEST(BlobHttpServerTest, StartNamesAnAddressItCannotUse) {
  TempDir dir;
  cache::CacheOptions o;
  o.path = dir.path() + "/store";
  absl::StatusOr<std::unique_ptr<cache::Cache>> cache = cache::Cache::Open(o);
  ASSERT_TRUE(cache.ok());
  Authorizer everyone;
  for (const char* address : {"no-port", "256.0.0.1:1", "127.0.0.1:99999"}) {
    absl::StatusOr<std::unique_ptr<BlobHttpServer>> server =
        BlobHttpServer::Start(&(*cache)->store(), &everyone, {.address = address});
    EXPECT_FALSE(server.ok()) << address;
    EXPECT_NE(server.status().message().find(address), std::string::npos) << server.status();
  }
}

}  // namespace
}  // namespace kiln::server
