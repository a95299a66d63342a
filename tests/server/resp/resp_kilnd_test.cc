// The RESP front end to end: a real kilnd with --resp-listen, spoken to over a socket.

#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "cache/db.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/base/digest.h"
#include "tests/testing/kilnd_process.h"
#include "tests/testing/loopback.h"
#include "tests/testing/scrape.h"
#include "tests/testing/test_env.h"

namespace kiln::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

// A reply as read off the wire: its type byte and its text (the bulk string's bytes, the
// simple string or error, the integer's digits); nil for $-1; "closed" when the connection
// ended instead.
struct Reply {
  char type = 0;
  std::string text;
  bool nil = false;
  bool closed = false;
};

// A RESP2 client connection, by hand.
class RespConnection {
 public:
  explicit RespConnection(int port) : fd_(ConnectLoopback(port)) {
    timeval timeout{30, 0};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  }
  ~RespConnection() {
    if (fd_ >= 0) close(fd_);
  }
  bool connected() const { return fd_ >= 0; }

  void SendRaw(const std::string& bytes) {
    size_t at = 0;
    while (at < bytes.size()) {
      const ssize_t n = send(fd_, bytes.data() + at, bytes.size() - at, MSG_NOSIGNAL);
      ASSERT_GT(n, 0) << "send failed";
      at += static_cast<size_t>(n);
    }
  }
  static std::string Encode(const std::vector<std::string>& args) {
    std::string out = absl::StrCat("*", args.size(), "\r\n");
    for (const std::string& a : args) absl::StrAppend(&out, "$", a.size(), "\r\n", a, "\r\n");
    return out;
  }
  void Send(const std::vector<std::string>& args) { SendRaw(Encode(args)); }
  Reply Call(const std::vector<std::string>& args) {
    Send(args);
    return Read();
  }

  Reply Read() {
    Reply reply;
    std::string line;
    if (!ReadLine(&line)) {
      reply.closed = true;
      return reply;
    }
    reply.type = line[0];
    reply.text = line.substr(1);
    if (reply.type == '$') {
      int64_t length = 0;
      EXPECT_TRUE(absl::SimpleAtoi(reply.text, &length)) << line;
      if (length < 0) {
        reply.nil = true;
        reply.text.clear();
        return reply;
      }
      if (!Fill(static_cast<size_t>(length) + 2)) {
        reply.closed = true;
        return reply;
      }
      reply.text = buffer_.substr(0, static_cast<size_t>(length));
      EXPECT_EQ(buffer_.substr(static_cast<size_t>(length), 2), "\r\n");
      buffer_.erase(0, static_cast<size_t>(length) + 2);
    }
    return reply;
  }

 private:
  bool Fill(size_t n) {
    char chunk[1 << 16];
    while (buffer_.size() < n) {
      const ssize_t got = recv(fd_, chunk, sizeof(chunk), 0);
      if (got <= 0) return false;
      buffer_.append(chunk, static_cast<size_t>(got));
    }
    return true;
  }
  bool ReadLine(std::string* line) {
    size_t end;
    while ((end = buffer_.find("\r\n")) == std::string::npos) {
      if (!Fill(buffer_.size() + 1)) return false;
    }
    *line = buffer_.substr(0, end);
    buffer_.erase(0, end + 2);
    return !line->empty();
  }

  int fd_;
  std::string buffer_;
};

constexpr char kReadToken[] = "read-token-0123456789";
constexpr char kCompileToken[] = "compile-token-0123456789";

class RespKilndTest : public ::testing::Test {
 protected:
  void StartKilnd(std::vector<std::string> flags = {}) {
    flags.insert(flags.end(), {"--resp-listen", "127.0.0.1:0", "--compile-isolation", "none"});
    absl::StatusOr<KilndProcess> k = KilndProcess::Start(dir_.path() + "/data", flags);
    ASSERT_TRUE(k.ok()) << k.status();
    kilnd_.emplace(*std::move(k));
    ASSERT_GT(kilnd_->resp_port(), 0);
  }
  double Metric(const std::string& series) {
    absl::StatusOr<double> v = ScrapeMetric(kilnd_->http_port(), series);
    EXPECT_TRUE(v.ok()) << v.status();
    return v.ok() ? *v : -1;
  }

  TempDir dir_;
  std::optional<KilndProcess> kilnd_;
};

TEST_F(RespKilndTest, SetThenGetReturnsAMultiMegabyteValue) {
  StartKilnd();
  RespConnection c(kilnd_->resp_port());
  ASSERT_TRUE(c.connected());
  const std::string key = "pt2:fx-graph-v1::fkeyabc:c1";
  const std::string value = PseudoRandomBytes(8 << 20, 7);
  Reply set = c.Call({"SET", key, value});
  EXPECT_EQ(set.type, '+') << set.text;
  EXPECT_EQ(set.text, "OK");
  Reply got = c.Call({"GET", key});
  ASSERT_EQ(got.type, '$') << got.text;
  EXPECT_TRUE(got.text == value) << "the value read back differs";
  EXPECT_EQ(Metric("kiln_resp_commands_total{command=\"get\",outcome=\"hit\"}"), 1);
  EXPECT_EQ(Metric("kiln_resp_commands_total{command=\"set\",outcome=\"ok\"}"), 1);
  EXPECT_GE(Metric("kiln_cache_hits_total"), 1);

  // SET replaces; the value survives a restart of kilnd (the same store).
  EXPECT_EQ(c.Call({"SET", key, "v2"}).text, "OK");
  EXPECT_EQ(c.Call({"GET", key}).text, "v2");
  kilnd_.reset();
  StartKilnd();
  RespConnection again(kilnd_->resp_port());
  EXPECT_EQ(again.Call({"GET", key}).text, "v2");
}

TEST_F(RespKilndTest, AMissingKeyIsNil) {
  StartKilnd();
  RespConnection c(kilnd_->resp_port());
  Reply got = c.Call({"GET", "pt2:aot-autograd::nothing:c1"});
  EXPECT_EQ(got.type, '$');
  EXPECT_TRUE(got.nil);
  EXPECT_EQ(c.Call({"EXISTS", "pt2:aot-autograd::nothing:c1"}).text, "0");
  EXPECT_EQ(Metric("kiln_resp_commands_total{command=\"get\",outcome=\"miss\"}"), 1);
  EXPECT_GE(Metric("kiln_cache_misses_total"), 1);
}

TEST_F(RespKilndTest, UnsupportedCommandsAreErrorsAndTheConnectionGoesOn) {
  StartKilnd();
  RespConnection c(kilnd_->resp_port());
  Reply r = c.Call({"FLUSHALL"});
  EXPECT_EQ(r.type, '-');
  EXPECT_THAT(r.text, StartsWith("ERR unknown command 'FLUSHALL'"));
  EXPECT_THAT(c.Call({"SET", "k", "v", "EX", "10"}).text, HasSubstr("takes no options"));
  EXPECT_THAT(c.Call({"DEL", "k"}).text, HasSubstr("does not delete"));
  EXPECT_THAT(c.Call({"GET"}).text, HasSubstr("wrong number of arguments for 'get'"));
  EXPECT_THAT(c.Call({"SELECT", "1"}).text, HasSubstr("out of range"));
  EXPECT_THAT(c.Call({"HELLO", "3"}).text, StartsWith("NOPROTO"));
  // What Redis clients send on connecting.
  EXPECT_EQ(c.Call({"SELECT", "0"}).text, "OK");
  EXPECT_EQ(c.Call({"CLIENT", "SETINFO", "LIB-NAME", "redis-py"}).text, "OK");
  EXPECT_EQ(c.Call({"CLIENT", "SETNAME", "trainer"}).text, "OK");
  EXPECT_EQ(c.Call({"PING"}).text, "PONG");
  EXPECT_EQ(c.Call({"ECHO", "hi"}).text, "hi");
  Reply info = c.Call({"INFO"});
  EXPECT_THAT(info.text, HasSubstr("kiln_version:"));
  EXPECT_THAT(info.text, HasSubstr("db0:keys="));
  EXPECT_EQ(Metric("kiln_resp_commands_total{command=\"other\",outcome=\"error\"}"), 1);
}

TEST_F(RespKilndTest, PipelinedCommandsAreAnsweredInOrder) {
  StartKilnd();
  RespConnection c(kilnd_->resp_port());
  std::string batch;
  constexpr int kKeys = 300;
  for (int i = 0; i < kKeys; ++i) {
    absl::StrAppend(&batch, RespConnection::Encode({"SET", absl::StrCat("k", i), absl::StrCat(i)}),
                    "PING\r\n", RespConnection::Encode({"GET", absl::StrCat("k", i)}));
  }
  c.SendRaw(batch);
  for (int i = 0; i < kKeys; ++i) {
    ASSERT_EQ(c.Read().text, "OK") << i;
    ASSERT_EQ(c.Read().text, "PONG") << i;
    ASSERT_EQ(c.Read().text, absl::StrCat(i)) << i;
  }
}

TEST_F(RespKilndTest, GarbageIsAProtocolErrorAndKilndServesOn) {
  StartKilnd();
  {
    RespConnection c(kilnd_->resp_port());
    c.SendRaw("*1\r\n$x\r\n");
    Reply r = c.Read();
    EXPECT_EQ(r.type, '-');
    EXPECT_EQ(r.text, "ERR Protocol error: invalid bulk length \"x\"");
    EXPECT_TRUE(c.Read().closed);
  }
  {
    RespConnection c(kilnd_->resp_port());
    // Binary junk reads as inline commands (unknown ones, answered with errors) until a
    // line runs past the inline limit: a protocol error, and the connection closes.
    c.SendRaw(std::string("\x00\xff\x01*\r\n$$$\n", 10) + std::string(100000, 'z'));
    std::vector<Reply> replies;
    for (Reply r = c.Read(); !r.closed; r = c.Read()) replies.push_back(r);
    ASSERT_EQ(replies.size(), 3u);
    EXPECT_THAT(replies[0].text, StartsWith("ERR unknown command"));
    EXPECT_THAT(replies[1].text, StartsWith("ERR unknown command '$$$'"));
    EXPECT_THAT(replies[2].text, StartsWith("ERR Protocol error: an inline command longer than"));
  }
  RespConnection fresh(kilnd_->resp_port());
  EXPECT_EQ(fresh.Call({"PING"}).text, "PONG");
  EXPECT_EQ(Metric("kiln_resp_commands_total{command=\"protocol\",outcome=\"error\"}"), 2);
}

TEST_F(RespKilndTest, QuitClosesTheConnection) {
  StartKilnd();
  RespConnection c(kilnd_->resp_port());
  EXPECT_EQ(c.Call({"QUIT"}).text, "OK");
  EXPECT_TRUE(c.Read().closed);
}

TEST_F(RespKilndTest, ATokenFileRequiresAuthWithARoleThatPermits) {
  const std::string tokens = dir_.path() + "/tokens";
  std::ofstream(tokens) << "read " << kReadToken << " reader\ncompile " << kCompileToken
                        << " trainer\n";
  StartKilnd({"--token-file", tokens});
  RespConnection c(kilnd_->resp_port());
  EXPECT_EQ(c.Call({"PING"}).text, "PONG");
  EXPECT_THAT(c.Call({"GET", "k"}).text, StartsWith("NOAUTH"));
  EXPECT_THAT(c.Call({"SET", "k", "v"}).text, StartsWith("NOAUTH"));
  EXPECT_THAT(c.Call({"AUTH", "not-a-token-at-all"}).text, StartsWith("WRONGPASS"));
  EXPECT_THAT(c.Call({"GET", "k"}).text, StartsWith("NOAUTH"));
  EXPECT_EQ(c.Call({"AUTH", kReadToken}).text, "OK");
  EXPECT_TRUE(c.Call({"GET", "k"}).nil);
  Reply denied = c.Call({"SET", "k", "v"});
  EXPECT_EQ(denied.type, '-');
  EXPECT_THAT(denied.text, StartsWith("NOPERM the token of reader has role read"));
  // AUTH USER TOKEN, as redis-py sends for a URL with a user name.
  EXPECT_EQ(c.Call({"AUTH", "default", kCompileToken}).text, "OK");
  EXPECT_EQ(c.Call({"SET", "k", "v"}).text, "OK");
  EXPECT_EQ(c.Call({"GET", "k"}).text, "v");
  EXPECT_EQ(Metric("kiln_resp_commands_total{command=\"get\",outcome=\"unauthenticated\"}"), 2);
  EXPECT_EQ(Metric("kiln_resp_commands_total{command=\"set\",outcome=\"denied\"}"), 1);
}

TEST_F(RespKilndTest, TheCacheBudgetEvictsValues) {
  StartKilnd({"--cache-max-bytes", "2m", "--cache-memory-bytes", "0"});
  RespConnection c(kilnd_->resp_port());
  const std::string first = "pt2:fx-graph-v1::first:c1";
  ASSERT_EQ(c.Call({"SET", first, PseudoRandomBytes(256 << 10, 1)}).text, "OK");
  bool evicted = false;
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  for (int i = 0; !evicted && absl::Now() < deadline; ++i) {
    ASSERT_EQ(c.Call({"SET", absl::StrCat("pt2:fx-graph-v1::k", i, ":c1"),
                      PseudoRandomBytes(256 << 10, 100 + i)})
                  .text,
              "OK");
    if (i >= 12) {
      absl::SleepFor(absl::Milliseconds(50));
      evicted = c.Call({"GET", first}).nil;
    }
  }
  EXPECT_TRUE(evicted) << "the first value was never evicted";
  EXPECT_GE(Metric("kiln_cache_evictions_total"), 1);
  EXPECT_LE(Metric("kiln_cache_stored_bytes"), 3 << 20);
}

TEST_F(RespKilndTest, ACorruptValueIsAMissNeverServed) {
  StartKilnd();
  const std::string value = PseudoRandomBytes(100000, 9);
  {
    RespConnection c(kilnd_->resp_port());
    ASSERT_EQ(c.Call({"SET", "pt2:fx-graph-v1::k:c1", value}).text, "OK");
  }
  kilnd_.reset();
  {
    cache::CacheOptions o;
    o.path = dir_.path() + "/data/store";
    absl::StatusOr<std::unique_ptr<cache::CacheDb>> db = cache::CacheDb::Open(o);
    ASSERT_TRUE(db.ok()) << db.status();
    std::string stored;
    const std::string key = cache::RawHash(DigestOf(value).hash());
    ASSERT_TRUE((*db)->db()->Get(rocksdb::ReadOptions(), (*db)->blobs(), key, &stored).ok());
    stored[4321] ^= 0x10;
    ASSERT_TRUE((*db)->db()->Put(rocksdb::WriteOptions(), (*db)->blobs(), key, stored).ok());
    ASSERT_TRUE((*db)->Close().ok());
  }
  StartKilnd();
  RespConnection c(kilnd_->resp_port());
  EXPECT_TRUE(c.Call({"GET", "pt2:fx-graph-v1::k:c1"}).nil);
  EXPECT_EQ(Metric("kiln_cache_integrity_failures_total"), 1);
  EXPECT_EQ(Metric("kiln_resp_commands_total{command=\"get\",outcome=\"miss\"}"), 1);
}

}  // namespace
}  // namespace kiln::testing
