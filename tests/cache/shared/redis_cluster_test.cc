#include "cache/shared/redis_cluster.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <set>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/testing/loopback.h"
#include "tests/testing/redis_cluster.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/test_env.h"

namespace kiln::cache {
namespace {

using ::kiln::testing::LocalRedisCluster;

RedisClusterOptions FastOptions(std::vector<std::string> seeds) {
  RedisClusterOptions o;
  o.seeds = std::move(seeds);
  o.connect_timeout = absl::Milliseconds(300);
  o.command_timeout = absl::Seconds(1);
  o.min_backoff = absl::Milliseconds(20);
  o.max_backoff = absl::Milliseconds(200);
  return o;
}

std::unique_ptr<RedisCluster> Client(const std::vector<std::string>& seeds) {
  absl::StatusOr<std::unique_ptr<RedisCluster>> c = RedisCluster::Create(FastOptions(seeds));
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? std::move(*c) : nullptr;
}

// A key whose slot is served by `node` of `cluster`, as `client` sees the map.
std::string KeyOn(RedisCluster& client, LocalRedisCluster& cluster, int node,
                  absl::string_view prefix) {
  for (int i = 0;; ++i) {
    std::string key = absl::StrCat(prefix, i);
    if (cluster.IndexOf(client.MasterForSlot(RedisKeySlot(key))) == node) return key;
  }
}

TEST(RedisKeySlotTest, MatchesRedisClusterSpec) {
  // Values from the Redis Cluster specification and CLUSTER KEYSLOT.
  EXPECT_EQ(RedisKeySlot("foo"), 12182);
  EXPECT_EQ(RedisKeySlot("bar"), 5061);
  EXPECT_EQ(RedisKeySlot("123456789"), 0x31C3 & 16383);
  EXPECT_EQ(RedisKeySlot("{user1000}.following"), RedisKeySlot("user1000"));
  EXPECT_EQ(RedisKeySlot("{user1000}.followers"), RedisKeySlot("user1000"));
  // An empty tag does not count: the whole key is hashed.
  EXPECT_EQ(RedisKeySlot("foo{}{bar}"), RedisKeySlot("foo{}{bar}"));
  EXPECT_NE(RedisKeySlot("foo{}{bar}"), RedisKeySlot("bar"));
  EXPECT_EQ(RedisKeySlot("foo{{bar}}zap"), RedisKeySlot("{bar"));
  EXPECT_EQ(RedisKeySlot("foo{bar}{zap}"), RedisKeySlot("bar"));
  EXPECT_EQ(RedisKeySlot("no{close"), RedisKeySlot("no{close"));
}

TEST(ParseRedisClusterUrlTest, SeedsOrAClearError) {
  absl::StatusOr<std::vector<std::string>> seeds =
      ParseRedisClusterUrl("redis://10.0.0.1:7000,redis-b:7001,[::1]:7002");
  ASSERT_TRUE(seeds.ok()) << seeds.status();
  EXPECT_EQ(*seeds, (std::vector<std::string>{"10.0.0.1:7000", "redis-b:7001", "[::1]:7002"}));

  for (const char* bad : {"http://h:1", "h:1", "redis://", "redis://h", "redis://h:0",
                          "redis://h:70000", "redis://h:x", "redis://h:1,,h:2", "redis://:1"}) {
    absl::StatusOr<std::vector<std::string>> r = ParseRedisClusterUrl(bad);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_TRUE(absl::StrContains(r.status().message(), bad)) << r.status();
  }
}

TEST(RedisClusterTest, BadSeedsGiveClearErrors) {
  for (std::vector<std::string> seeds : std::vector<std::vector<std::string>>{
           {}, {"nohost"}, {"h:0"}, {"h:99999"}, {"h:abc"}, {"127.0.0.1:7000", ":7001"}}) {
    absl::StatusOr<std::unique_ptr<RedisCluster>> c = RedisCluster::Create(FastOptions(seeds));
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
    if (!seeds.empty()) EXPECT_TRUE(absl::StrContains(c.status().message(), seeds.back()));
  }

  // Nobody listens there: UNAVAILABLE at once, naming the seed.
  const int closed_port = testing::FreeLoopbackPort();
  const std::string closed = absl::StrCat("127.0.0.1:", closed_port);
  std::unique_ptr<RedisCluster> client = Client({closed, "no-such-host.invalid:7000"});
  const absl::Time start = absl::Now();
  absl::StatusOr<std::optional<std::string>> got = client->Get("k");
  EXPECT_EQ(got.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(absl::StrContains(got.status().message(), closed)) << got.status();
  EXPECT_TRUE(absl::StrContains(got.status().message(), "no-such-host.invalid:7000"))
      << got.status();
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));

  // A Redis that is not in cluster mode: FAILED_PRECONDITION, saying so.
  const int port = testing::FreeLoopbackPort();
  absl::StatusOr<testing::Subprocess> standalone =
      testing::Subprocess::Start({"/usr/bin/redis-server", "--bind", "127.0.0.1", "--port",
                                  absl::StrCat(port), "--save", "", "--appendonly", "no"});
  ASSERT_TRUE(standalone.ok()) << standalone.status();
  for (int i = 0; i < 1000; ++i) {
    const int fd = testing::ConnectLoopback(port);
    if (fd >= 0) {
      close(fd);
      break;
    }
    absl::SleepFor(absl::Milliseconds(5));
  }
  std::unique_ptr<RedisCluster> plain = Client({absl::StrCat("127.0.0.1:", port)});
  absl::StatusOr<bool> set = plain->Set("k", "v");
  EXPECT_EQ(set.status().code(), absl::StatusCode::kFailedPrecondition) << set.status();
  EXPECT_TRUE(absl::StrContains(set.status().message(), "not a cluster node")) << set.status();
}

TEST(RedisClusterTest, KeysSpreadOverAllMasters) {
  absl::StatusOr<std::unique_ptr<LocalRedisCluster>> cluster = LocalRedisCluster::Start();
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  // One seed is enough to find the others.
  std::unique_ptr<RedisCluster> client = Client({(*cluster)->address(1)});

  constexpr int kKeys = 300;
  std::set<std::string> masters;
  for (int i = 0; i < kKeys; ++i) {
    const std::string key = absl::StrCat("key:", i);
    absl::StatusOr<bool> set = client->Set(key, absl::StrCat("value ", i));
    ASSERT_TRUE(set.ok()) << set.status();
    EXPECT_TRUE(*set);
    masters.insert(client->MasterForSlot(RedisKeySlot(key)));
  }
  EXPECT_EQ(masters.size(), 3u);
  std::vector<std::string> all = (*cluster)->addresses();
  std::sort(all.begin(), all.end());
  EXPECT_EQ(client->Masters(), all);
  EXPECT_EQ(std::vector<std::string>(masters.begin(), masters.end()), all);
  for (int i = 0; i < kKeys; ++i) {
    absl::StatusOr<std::optional<std::string>> got = client->Get(absl::StrCat("key:", i));
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(*got, absl::StrCat("value ", i));
  }
  EXPECT_EQ(*client->Get("absent"), std::nullopt);

  // Every node holds a share, and the shares add up: each key went to its slot's owner.
  int total = 0;
  for (int n = 0; n < 3; ++n) {
    absl::StatusOr<std::string> size = (*cluster)->Cli(n, {"DBSIZE"});
    ASSERT_TRUE(size.ok()) << size.status();
    int keys = 0;
    ASSERT_TRUE(absl::SimpleAtoi(*size, &keys)) << *size;
    EXPECT_GT(keys, 0) << "node " << n;
    total += keys;
  }
  EXPECT_EQ(total, kKeys);
  // The slot function agrees with the server's.
  absl::StatusOr<std::string> slot = (*cluster)->Cli(0, {"CLUSTER", "KEYSLOT", "key:17"});
  ASSERT_TRUE(slot.ok());
  EXPECT_EQ(*slot, absl::StrCat(RedisKeySlot("key:17")));

  // SET NX and PX, DEL, and an arbitrary command on the key's node.
  RedisCluster::SetOptions nx;
  nx.only_if_absent = true;
  nx.expire = absl::Milliseconds(200);
  EXPECT_FALSE(*client->Set("key:1", "other", nx));
  EXPECT_EQ(*client->Get("key:1"), "value 1");
  EXPECT_TRUE(*client->Set("lease", "holder", nx));
  absl::StatusOr<RedisReply> ttl = client->Command("lease", {"PTTL", "lease"});
  ASSERT_TRUE(ttl.ok()) << ttl.status();
  EXPECT_EQ(ttl->type, RedisReply::Type::kInteger);
  EXPECT_GT(ttl->integer, 0);
  EXPECT_LE(ttl->integer, 200);
  EXPECT_TRUE(*client->Del("key:1"));
  EXPECT_FALSE(*client->Del("key:1"));
  EXPECT_EQ(*client->Get("key:1"), std::nullopt);
  absl::StatusOr<RedisReply> wrong = client->Command("key:2", {"LPUSH", "key:2", "x"});
  EXPECT_EQ(wrong.status().code(), absl::StatusCode::kInternal);
  EXPECT_TRUE(absl::StrContains(wrong.status().message(), "WRONGTYPE")) << wrong.status();
  EXPECT_TRUE(absl::StrContains(wrong.status().message(), "LPUSH")) << wrong.status();
  EXPECT_EQ(client->counters().moved, 0);
}

TEST(RedisClusterTest, SlotMigrationFollowsAskThenMoved) {
  absl::StatusOr<std::unique_ptr<LocalRedisCluster>> cluster = LocalRedisCluster::Start();
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  LocalRedisCluster& c = **cluster;
  std::unique_ptr<RedisCluster> client = Client(c.addresses());

  // Three keys in one slot (one hash tag), on node `from`.
  ASSERT_TRUE(client->Refresh().ok());
  const std::string tag = KeyOn(*client, c, 0, "tag");
  const int slot = RedisKeySlot(tag);
  const int from = 0, to = 2;
  const std::string moved_early = absl::StrCat("{", tag, "}:a");
  const std::string moved_late = absl::StrCat("{", tag, "}:b");
  const std::string created = absl::StrCat("{", tag, "}:c");
  ASSERT_TRUE(*client->Set(moved_early, "A"));
  ASSERT_TRUE(*client->Set(moved_late, "B"));

  ASSERT_TRUE(c.BeginSlotMigration(slot, from, to).ok());
  ASSERT_TRUE(c.MigrateKey(moved_early, from, to).ok());
  // Mid-migration: the old owner answers ASK for a key it no longer has.
  EXPECT_EQ(*client->Get(moved_early), "A");
  EXPECT_GE(client->counters().asked, 1);
  EXPECT_EQ(*client->Get(moved_late), "B");
  // A new key in a migrating slot goes to the importing node.
  ASSERT_TRUE(*client->Set(created, "C"));
  EXPECT_EQ(*c.Cli(to, {"CLUSTER", "COUNTKEYSINSLOT", absl::StrCat(slot)}), "2");
  EXPECT_EQ(*c.Cli(from, {"CLUSTER", "COUNTKEYSINSLOT", absl::StrCat(slot)}), "1");
  // ASK does not change the map.
  EXPECT_EQ(client->MasterForSlot(slot), c.address(from));
  EXPECT_EQ(client->counters().moved, 0);

  ASSERT_TRUE(c.MigrateKey(moved_late, from, to).ok());
  ASSERT_TRUE(c.FinishSlotMigration(slot, to).ok());
  // The old owner now answers MOVED; the client follows and learns the new map.
  EXPECT_EQ(*client->Get(moved_late), "B");
  EXPECT_GE(client->counters().moved, 1);
  EXPECT_EQ(client->MasterForSlot(slot), c.address(to));
  const int64_t moved = client->counters().moved;
  EXPECT_EQ(*client->Get(moved_early), "A");
  EXPECT_EQ(*client->Get(created), "C");
  EXPECT_EQ(client->counters().moved, moved);
}

TEST(RedisClusterTest, KilledNodeIsUnavailableThenRecovers) {
  LocalRedisCluster::Options options;
  options.node_timeout_ms = 500;
  absl::StatusOr<std::unique_ptr<LocalRedisCluster>> cluster = LocalRedisCluster::Start(options);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  LocalRedisCluster& c = **cluster;
  std::unique_ptr<RedisCluster> client = Client(c.addresses());
  ASSERT_TRUE(client->Refresh().ok());
  const std::string on_victim = KeyOn(*client, c, 1, "victim");
  const std::string on_other = KeyOn(*client, c, 0, "other");
  ASSERT_TRUE(*client->Set(on_victim, "v1"));
  ASSERT_TRUE(*client->Set(on_other, "o1"));

  ASSERT_TRUE(c.Kill(1).ok());
  // The dead node's keys fail at once (its port refuses), naming it; the others answer
  // until the cluster declares itself down, then fail too: never a wrong value.
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  bool other_down = false;
  while (absl::Now() < deadline && !other_down) {
    const absl::Time start = absl::Now();
    absl::StatusOr<std::optional<std::string>> got = client->Get(on_victim);
    EXPECT_EQ(got.status().code(), absl::StatusCode::kUnavailable);
    EXPECT_LT(absl::Now() - start, absl::Milliseconds(1500));
    absl::StatusOr<std::optional<std::string>> other = client->Get(on_other);
    if (other.ok()) {
      EXPECT_EQ(*other, "o1");
    } else {
      EXPECT_EQ(other.status().code(), absl::StatusCode::kUnavailable) << other.status();
      EXPECT_TRUE(absl::StrContains(other.status().message(), "CLUSTERDOWN")) << other.status();
      other_down = true;
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_TRUE(other_down) << "the cluster never declared itself down";
  absl::StatusOr<std::optional<std::string>> got = client->Get(on_victim);
  EXPECT_TRUE(absl::StrContains(got.status().message(), c.address(1))) << got.status();
  EXPECT_GT(client->counters().connect_failures, 0);

  ASSERT_TRUE(c.Restart(1).ok());
  ASSERT_TRUE(c.WaitHealthy(absl::Seconds(20)).ok());
  // The client finds the node again on its own, after its backoff.
  absl::Status last;
  const absl::Time recover_by = absl::Now() + absl::Seconds(10);
  while (absl::Now() < recover_by) {
    absl::StatusOr<bool> set = client->Set(on_victim, "v2");
    last = set.status();
    if (set.ok()) break;
    absl::SleepFor(absl::Milliseconds(20));
  }
  ASSERT_TRUE(last.ok()) << last;
  EXPECT_EQ(*client->Get(on_victim), "v2");
  EXPECT_EQ(*client->Get(on_other), "o1");
}

TEST(RedisClusterTest, HangingNodeTimesOut) {
  absl::StatusOr<std::unique_ptr<LocalRedisCluster>> cluster = LocalRedisCluster::Start();
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  LocalRedisCluster& c = **cluster;
  RedisClusterOptions o = FastOptions(c.addresses());
  o.command_timeout = absl::Milliseconds(300);
  std::unique_ptr<RedisCluster> client = std::move(*RedisCluster::Create(o));
  ASSERT_TRUE(client->Refresh().ok());
  const std::string key = KeyOn(*client, c, 2, "hang");
  ASSERT_TRUE(*client->Set(key, "x"));

  ASSERT_TRUE(c.Signal(2, SIGSTOP).ok());
  const absl::Time start = absl::Now();
  absl::StatusOr<std::optional<std::string>> got = client->Get(key);
  const absl::Duration took = absl::Now() - start;
  EXPECT_EQ(got.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(absl::StrContains(got.status().message(), "no answer within")) << got.status();
  EXPECT_TRUE(absl::StrContains(got.status().message(), c.address(2))) << got.status();
  EXPECT_LT(took, absl::Seconds(3));
  ASSERT_TRUE(c.Signal(2, SIGCONT).ok());

  absl::Status last;
  for (int i = 0; i < 200; ++i) {
    absl::StatusOr<std::optional<std::string>> again = client->Get(key);
    last = again.status();
    if (again.ok()) {
      EXPECT_EQ(*again, "x");
      break;
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_TRUE(last.ok()) << last;
}

TEST(RedisClusterTest, BigAndBinaryValues) {
  absl::StatusOr<std::unique_ptr<LocalRedisCluster>> cluster = LocalRedisCluster::Start();
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  std::unique_ptr<RedisCluster> client = Client((*cluster)->addresses());
  const std::string big = testing::PseudoRandomBytes(32 << 20, 7);
  ASSERT_TRUE(*client->Set("big", big));
  absl::StatusOr<std::optional<std::string>> got = client->Get("big");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(*got == big);
  const std::string binary("a\0b\r\n$3\r\n\0", 10);
  ASSERT_TRUE(*client->Set(binary, binary));
  EXPECT_EQ(*client->Get(binary), binary);
  ASSERT_TRUE(*client->Set("empty", ""));
  EXPECT_EQ(*client->Get("empty"), std::string());
}

TEST(RedisClusterTest, ConcurrentUse) {
  absl::StatusOr<std::unique_ptr<LocalRedisCluster>> cluster = LocalRedisCluster::Start();
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  std::unique_ptr<RedisCluster> client = Client((*cluster)->addresses());
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) {
        const std::string key = absl::StrCat("t", t, ":", i);
        const std::string value = absl::StrCat(i * 31 + t);
        if (!client->Set(key, value).ok()) ++wrong;
        absl::StatusOr<std::optional<std::string>> got = client->Get(key);
        if (!got.ok() || *got != value) ++wrong;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(wrong.load(), 0);
}

}  // namespace
}  // namespace kiln::cache
