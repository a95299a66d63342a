// kilnd's event-loop fronts on the shared tier, end to end: real kilnd processes with
// --blob-listen and --resp-listen sharing one loopback Redis Cluster
// (tests/testing/redis_cluster.h). A blob PUT over HTTP on one server is a GET on another, a
// value SET over RESP is a GET (and EXISTS) on another, both read through the tier and counted;
// a blob corrupted inside Redis is never served; a hung cluster leaves both fronts answering
// from the local tier, promptly.

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/blob_http_client.h"
#include "proto/base/digest.h"
#include "tests/server/shared_cluster_fixture.h"
#include "tests/testing/kilnd_process.h"
#include "tests/testing/loopback.h"
#include "tests/testing/redis_cluster.h"
#include "tests/testing/scrape.h"
#include "tests/testing/test_env.h"

namespace kiln {
namespace {

using ::kiln::testing::KilndProcess;
using ::kiln::testing::LocalRedisCluster;
using ::kiln::testing::TempDir;

// One RESP2 reply: nil, or its type byte and text (a bulk string's bytes, a simple string,
// an error, an integer's digits); `closed` when the connection ended first.
struct RespReply {
  char type = 0;
  std::string text;
  bool nil = false;
  bool closed = false;
};

// A RESP client connection, by hand, with a 30 s receive timeout.
class Resp {
 public:
  explicit Resp(int port) : fd_(testing::ConnectLoopback(port)) {
    EXPECT_GE(fd_, 0);
    timeval timeout{30, 0};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  }
  ~Resp() {
    if (fd_ >= 0) close(fd_);
  }
  Resp(const Resp&) = delete;
  Resp& operator=(const Resp&) = delete;

  RespReply Call(const std::vector<std::string>& args) {
    std::string out = absl::StrCat("*", args.size(), "\r\n");
    for (const std::string& a : args) absl::StrAppend(&out, "$", a.size(), "\r\n", a, "\r\n");
    for (absl::string_view rest = out; !rest.empty();) {
      const ssize_t n = send(fd_, rest.data(), rest.size(), MSG_NOSIGNAL);
      if (n <= 0) return RespReply{.closed = true};
      rest.remove_prefix(static_cast<size_t>(n));
    }
    RespReply reply;
    size_t end;
    while ((end = in_.find("\r\n")) == std::string::npos) {
      if (!Fill()) return RespReply{.closed = true};
    }
    reply.type = in_[0];
    reply.text = in_.substr(1, end - 1);
    in_.erase(0, end + 2);
    int64_t length = 0;
    if (reply.type == '$' && absl::SimpleAtoi(reply.text, &length)) {
      if (length < 0) return RespReply{.type = '$', .nil = true};
      while (in_.size() < static_cast<size_t>(length) + 2) {
        if (!Fill()) return RespReply{.closed = true};
      }
      reply.text = in_.substr(0, static_cast<size_t>(length));
      in_.erase(0, static_cast<size_t>(length) + 2);
    }
    return reply;
  }

 private:
  bool Fill() {
    char buf[65536];
    const ssize_t n = recv(fd_, buf, sizeof(buf), 0);
    if (n <= 0) return false;
    in_.append(buf, static_cast<size_t>(n));
    return true;
  }
  int fd_;
  std::string in_;
};

// One kilnd on the shared cluster with both fronts, its own data directory.
struct Server : testing::ClusterKilnd {
  std::unique_ptr<client::BlobHttpClient> Http() const {
    return std::make_unique<client::BlobHttpClient>(
        client::BlobHttpClientOptions{.address = absl::StrCat("127.0.0.1:", process->blob_port())});
  }
  std::unique_ptr<Resp> RespClient() const { return std::make_unique<Resp>(process->resp_port()); }
};

constexpr char kGetHit[] = "kiln_resp_commands_total{command=\"get\",outcome=\"hit\"}";
constexpr char kGetMiss[] = "kiln_resp_commands_total{command=\"get\",outcome=\"miss\"}";

class KilndSharedFrontsTest : public testing::SharedClusterTest {
 protected:
  Server StartServer(const std::string& name) {
    Server s;
    s.process = StartKilnd(name, {"--blob-listen", "127.0.0.1:0", "--resp-listen", "127.0.0.1:0",
                                  "--compile-isolation", "none", "--compile-workers", "1"});
    return s;
  }
};

TEST_F(KilndSharedFrontsTest, HttpPutOnOneServerIsAnHttpGetOnAnother) {
  Server a = StartServer("a");
  Server b = StartServer("b");
  Server c = StartServer("c");
  ASSERT_TRUE(a.process && b.process && c.process);

  const std::string blob = testing::PseudoRandomBytes(300000, 7);
  const v1::Digest digest = DigestOf(blob);
  absl::StatusOr<bool> put = a.Http()->Put(digest, blob);
  ASSERT_TRUE(put.ok()) << put.status();
  EXPECT_FALSE(*put);
  a.WaitForWrites(1);

  // B lacks it: read through from the tier, counted, then held locally.
  std::unique_ptr<client::BlobHttpClient> on_b = b.Http();
  absl::StatusOr<std::string> got = on_b->Get(digest);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, blob);
  EXPECT_EQ(b.Metric("kiln_shared_cache_hits_total"), 1);
  got = on_b->Get(digest);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, blob);
  EXPECT_EQ(b.Metric("kiln_shared_cache_hits_total"), 1);

  // HEAD reads through as well; the digest the URL names carries no size.
  absl::StatusOr<int64_t> size = c.Http()->Head(digest);
  ASSERT_TRUE(size.ok()) << size.status();
  EXPECT_EQ(*size, static_cast<int64_t>(blob.size()));
  EXPECT_EQ(c.Metric("kiln_shared_cache_hits_total"), 1);

  // A blob no server holds is a 404 and a shared-tier miss.
  absl::StatusOr<std::string> absent = on_b->Get(DigestOf("stored nowhere"));
  EXPECT_TRUE(absl::IsNotFound(absent.status())) << absent.status();
  EXPECT_EQ(b.Metric("kiln_shared_cache_misses_total"), 1);
  EXPECT_EQ(b.Metric("kiln_shared_cache_up"), 1);
  // A PUT of what the server already holds writes nothing through again.
  const double b_writes = b.Metric("kiln_shared_cache_writes_total");
  put = on_b->Put(digest, blob);
  ASSERT_TRUE(put.ok()) << put.status();
  EXPECT_TRUE(*put);
  EXPECT_EQ(b.Metric("kiln_shared_cache_writes_total"), b_writes);
}

TEST_F(KilndSharedFrontsTest, RespSetOnOneServerIsAGetOnAnother) {
  Server a = StartServer("a");
  Server b = StartServer("b");
  Server c = StartServer("c");
  ASSERT_TRUE(a.process && b.process && c.process);

  // What Inductor's FX graph cache stores: a key it derives, a pickled value.
  const std::string key = "pt2:fx-graph-v1::fabc0123456789";
  const std::string value = testing::PseudoRandomBytes(50000, 11);
  RespReply set = a.RespClient()->Call({"SET", key, value});
  ASSERT_EQ(set.type, '+') << set.text;
  a.WaitForWrites(1);

  std::unique_ptr<Resp> on_b = b.RespClient();
  RespReply got = on_b->Call({"GET", key});
  ASSERT_EQ(got.type, '$') << got.text;
  ASSERT_FALSE(got.nil);
  EXPECT_EQ(got.text, value);
  EXPECT_EQ(b.Metric(kGetHit), 1);
  // The record and the value's blob, each a shared-tier hit.
  EXPECT_EQ(b.Metric("kiln_shared_cache_hits_total"), 2);
  got = on_b->Call({"GET", key});
  EXPECT_EQ(got.text, value);
  EXPECT_EQ(b.Metric(kGetHit), 2);
  EXPECT_EQ(b.Metric("kiln_shared_cache_hits_total"), 2);

  // EXISTS reads through too.
  RespReply exists = c.RespClient()->Call({"EXISTS", key, "no such key"});
  EXPECT_EQ(exists.type, ':');
  EXPECT_EQ(exists.text, "1");

  RespReply missing = on_b->Call({"GET", "no such key"});
  EXPECT_TRUE(missing.nil);
  EXPECT_EQ(b.Metric(kGetMiss), 1);

  // And the other way round: a SET on B is a GET on C.
  const std::string newer = "a newer value";
  set = on_b->Call({"SET", "second key", newer});
  ASSERT_EQ(set.type, '+') << set.text;
  b.WaitForWrites(1);
  got = c.RespClient()->Call({"GET", "second key"});
  EXPECT_EQ(got.text, newer);
}

TEST_F(KilndSharedFrontsTest, ValuesCorruptedInRedisAreNotServed) {
  Server a = StartServer("a");
  Server b = StartServer("b");
  ASSERT_TRUE(a.process && b.process);
  const std::string blob = testing::PseudoRandomBytes(100000, 3);
  const v1::Digest digest = DigestOf(blob);
  ASSERT_TRUE(a.Http()->Put(digest, blob).ok());
  const std::string value = "an autotuning result";
  ASSERT_EQ(a.RespClient()->Call({"SET", "k", value}).type, '+');
  a.WaitForWrites(2);
  CorruptBlob(digest.hash());
  CorruptBlob(DigestOf(value).hash());

  absl::StatusOr<std::string> got = b.Http()->Get(digest);
  EXPECT_TRUE(absl::IsNotFound(got.status())) << got.status();
  EXPECT_EQ(b.Metric("kiln_shared_cache_corrupt_total"), 1);
  RespReply value_on_b = b.RespClient()->Call({"GET", "k"});
  EXPECT_TRUE(value_on_b.nil) << value_on_b.type << value_on_b.text;
  EXPECT_EQ(b.Metric("kiln_shared_cache_corrupt_total"), 2);
  EXPECT_EQ(b.Metric(kGetMiss), 1);
  // The key's record was found; neither blob was served.
  EXPECT_EQ(b.Metric("kiln_shared_cache_hits_total"), 1);

  // The corrupt copies were dropped: asked again, the tier has nothing.
  got = b.Http()->Get(digest);
  EXPECT_TRUE(absl::IsNotFound(got.status())) << got.status();
  EXPECT_EQ(b.Metric("kiln_shared_cache_corrupt_total"), 2);
  // A still serves its own good copies.
  got = a.Http()->Get(digest);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, blob);
}

TEST_F(KilndSharedFrontsTest, HungClusterLeavesBothFrontsAnsweringPromptly) {
  Server a = StartServer("a");
  Server b = StartServer("b");
  ASSERT_TRUE(a.process && b.process);
  const std::string blob = "held by a";
  const v1::Digest digest = DigestOf(blob);
  ASSERT_TRUE(a.Http()->Put(digest, blob).ok());
  ASSERT_EQ(a.RespClient()->Call({"SET", "k", "value of k"}).type, '+');
  a.WaitForWrites(2);
  // B has learnt the cluster's slot map.
  EXPECT_TRUE(absl::IsNotFound(b.Http()->Get(DigestOf("absent before the outage")).status()));

  // Every master stops answering, without closing a connection: the worst case for a client.
  for (int node = 0; node < cluster_->size(); ++node) {
    ASSERT_TRUE(cluster_->Signal(node, SIGSTOP).ok());
  }
  std::unique_ptr<client::BlobHttpClient> http_a = a.Http();
  std::unique_ptr<client::BlobHttpClient> http_b = b.Http();
  std::unique_ptr<Resp> resp_a = a.RespClient();
  std::unique_ptr<Resp> resp_b = b.RespClient();
  // A local hit never waits for the tier.
  absl::Time t0 = absl::Now();
  absl::StatusOr<std::string> got = http_a->Get(digest);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, blob);
  EXPECT_EQ(resp_a->Call({"GET", "k"}).text, "value of k");
  EXPECT_LT(absl::Now() - t0, absl::Seconds(1));

  // The first miss on each server finds the outage, bounded by the cluster client's timeouts:
  // the command's (2 s), then a slot-map refresh that asks each other hung master (2 s each;
  // 6 to 8 s in all here, where every master hangs) ...
  t0 = absl::Now();
  got = http_b->Get(digest);
  EXPECT_TRUE(absl::IsNotFound(got.status())) << got.status();
  EXPECT_LT(absl::Now() - t0, absl::Seconds(15));
  EXPECT_EQ(b.Metric("kiln_shared_cache_up"), 0);
  EXPECT_GE(b.Metric("kiln_shared_cache_errors_total"), 1);
  // ... and later ones, over either front, do not ask the tier while it is down.
  const double errors = b.Metric("kiln_shared_cache_errors_total");
  t0 = absl::Now();
  for (int i = 0; i < 5; ++i) {
    got = http_b->Get(digest);
    EXPECT_TRUE(absl::IsNotFound(got.status())) << got.status();
    EXPECT_TRUE(resp_b->Call({"GET", "k"}).nil);
    EXPECT_EQ(resp_b->Call({"EXISTS", "k"}).text, "0");
  }
  EXPECT_LT(absl::Now() - t0, absl::Seconds(2));
  // The probes of the idle write-through thread may have added errors; the 15 requests did not.
  EXPECT_LE(b.Metric("kiln_shared_cache_errors_total") - errors, 3);
  // Writes still succeed locally; their write-through waits in the queue.
  t0 = absl::Now();
  EXPECT_EQ(resp_b->Call({"SET", "written during the outage", "v"}).type, '+');
  ASSERT_TRUE(http_b->Put(DigestOf("put during the outage"), "put during the outage").ok());
  EXPECT_EQ(resp_b->Call({"GET", "written during the outage"}).text, "v");
  EXPECT_LT(absl::Now() - t0, absl::Seconds(2));

  for (int node = 0; node < cluster_->size(); ++node) {
    ASSERT_TRUE(cluster_->Signal(node, SIGCONT).ok());
  }
  // The tier comes back: read-through resumes once the probe sees it. The gauge follows the
  // last operation, so a node still in its backoff may turn it back to 0: seeing 1 is what
  // counts.
  ASSERT_TRUE(b.AwaitMetric("kiln_shared_cache_up", 1)) << "the shared tier did not come back";
  // The cluster client may still leave a node alone for its backoff (at most 5 s): a read of
  // a key on that node is a miss until then.
  const absl::Time hit_by = absl::Now() + absl::Seconds(20);
  bool blob_back = false, value_back = false;
  while (absl::Now() < hit_by && !(blob_back && value_back)) {
    if (!blob_back) {
      got = http_b->Get(digest);
      blob_back = got.ok() && *got == blob;
    }
    if (!value_back) value_back = resp_b->Call({"GET", "k"}).text == "value of k";
    if (!(blob_back && value_back)) absl::SleepFor(absl::Milliseconds(250));
  }
  EXPECT_TRUE(blob_back);
  EXPECT_TRUE(value_back);
}

}  // namespace
}  // namespace kiln
