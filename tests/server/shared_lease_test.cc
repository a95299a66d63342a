// CompileLeases against a real loopback Redis Cluster: two "servers" (two lease sets, each
// with its own cluster client) contend for one lease. The waiter serves the holder's result,
// takes over a lease released without one or left to expire, gives up at its deadline or on
// cancellation; renewal keeps a lease alive past its ttl; a cluster nobody answers means
// compiling without a lease, counted.

#include "server/shared_lease.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "tests/testing/loopback.h"
#include "tests/testing/redis_cluster.h"

namespace kiln::server {
namespace {

using Turn = CompileLeases::Turn;

class CompileLeasesTest : public testing::RedisClusterTest {
 protected:
  std::unique_ptr<CompileLeases> Leases(absl::Duration ttl, std::vector<std::string> seeds = {}) {
    cache::RedisClusterOptions o;
    o.seeds = seeds.empty() ? cluster_->addresses() : std::move(seeds);
    o.command_timeout = absl::Milliseconds(500);
    absl::StatusOr<std::unique_ptr<cache::RedisCluster>> redis = cache::RedisCluster::Create(o);
    EXPECT_TRUE(redis.ok()) << redis.status();
    clients_.push_back(*std::move(redis));
    CompileLeases::Options options;
    options.ttl = ttl;
    absl::StatusOr<std::unique_ptr<CompileLeases>> leases =
        CompileLeases::Create(clients_.back().get(), &metrics_, options);
    EXPECT_TRUE(leases.ok()) << leases.status();
    return *std::move(leases);
  }

  // The value under `key`, on whichever node serves it; empty when there is none.
  std::string Get(const std::string& key) {
    absl::StatusOr<std::optional<std::string>> v = clients_.front()->Get(key);
    EXPECT_TRUE(v.ok()) << v.status();
    return v.ok() && v->has_value() ? **v : "";
  }
  int64_t Pttl(const std::string& key) {
    absl::StatusOr<cache::RedisReply> r = clients_.front()->Command(key, {"PTTL", key});
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? r->integer : -100;
  }

  static absl::StatusOr<CompileLeases::Outcome> Take(CompileLeases& leases,
                                                     const std::string& name) {
    return leases.AcquireOrWait(
        name, [] { return false; }, absl::Now() + absl::Seconds(10), nullptr);
  }

  MetricsRegistry metrics_;
  std::vector<std::unique_ptr<cache::RedisCluster>> clients_;
};

TEST_F(CompileLeasesTest, WaiterServesTheHoldersResult) {
  std::unique_ptr<CompileLeases> a = Leases(absl::Seconds(10));
  std::unique_ptr<CompileLeases> b = Leases(absl::Seconds(10));
  ASSERT_NE(a->instance_id(), b->instance_id());
  absl::StatusOr<CompileLeases::Outcome> held = Take(*a, "key1/guards");
  ASSERT_TRUE(held.ok()) << held.status();
  ASSERT_EQ(held->turn, Turn::kLeased);
  EXPECT_TRUE(held->lease.held());
  // The cluster names the holder, with the ttl asked for.
  EXPECT_TRUE(absl::StartsWith(Get(a->KeyOf("key1/guards")), a->instance_id()));
  EXPECT_GT(Pttl(a->KeyOf("key1/guards")), 9000);

  std::atomic<bool> result_in{false};
  std::atomic<int> polls{0};
  absl::StatusOr<CompileLeases::Outcome> waited = absl::UnknownError("not run");
  std::thread waiter([&] {
    waited = b->AcquireOrWait(
        "key1/guards",
        [&] {
          ++polls;
          return result_in.load();
        },
        absl::Now() + absl::Seconds(10), nullptr);
  });
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  while (b->TakeSnapshot().waiting == 0 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_EQ(b->TakeSnapshot().waiting, 1);
  absl::SleepFor(absl::Milliseconds(300));
  // Publish, then let go, as a holder does.
  result_in = true;
  held->lease.Release();
  EXPECT_FALSE(held->lease.held());
  waiter.join();
  ASSERT_TRUE(waited.ok()) << waited.status();
  EXPECT_EQ(waited->turn, Turn::kPublished);
  EXPECT_FALSE(waited->lease.held());
  EXPECT_GE(polls.load(), 2);  // it polled while waiting, with backoff, not in a tight loop
  EXPECT_LT(polls.load(), 40);
  EXPECT_EQ(Get(a->KeyOf("key1/guards")), "");

  const CompileLeases::Snapshot sa = a->TakeSnapshot();
  const CompileLeases::Snapshot sb = b->TakeSnapshot();
  EXPECT_EQ(sa.acquired, 1);
  EXPECT_EQ(sa.held, 0);
  EXPECT_EQ(sb.acquired, 0);
  EXPECT_EQ(sb.waited, 1);
  EXPECT_EQ(sb.waiting, 0);
  EXPECT_EQ(sb.taken_over, 0);
  EXPECT_EQ(sa.errors + sb.errors, 0);
}

TEST_F(CompileLeasesTest, LeaseReleasedWithoutAResultIsTakenOver) {
  std::unique_ptr<CompileLeases> a = Leases(absl::Seconds(10));
  std::unique_ptr<CompileLeases> b = Leases(absl::Seconds(10));
  absl::StatusOr<CompileLeases::Outcome> held = Take(*a, "failing");
  ASSERT_TRUE(held.ok() && held->turn == Turn::kLeased);
  absl::StatusOr<CompileLeases::Outcome> taken = absl::UnknownError("not run");
  std::thread waiter([&] { taken = Take(*b, "failing"); });
  absl::SleepFor(absl::Milliseconds(200));
  held->lease.Release();  // its compile failed: no result
  waiter.join();
  ASSERT_TRUE(taken.ok()) << taken.status();
  EXPECT_EQ(taken->turn, Turn::kLeased);
  EXPECT_TRUE(absl::StartsWith(Get(b->KeyOf("failing")), b->instance_id()));
  EXPECT_EQ(b->TakeSnapshot().taken_over, 1);
  EXPECT_EQ(b->TakeSnapshot().acquired, 1);
  EXPECT_EQ(b->TakeSnapshot().held, 1);
}

TEST_F(CompileLeasesTest, LeaseOfADeadHolderExpiresAndIsTakenOver) {
  std::unique_ptr<CompileLeases> b = Leases(absl::Seconds(10));
  // A holder that died: its lease is never renewed nor released.
  ASSERT_TRUE(clients_.front()
                  ->Set(b->KeyOf("orphan"), "dead-host/1/0#0",
                        cache::RedisCluster::SetOptions{absl::Milliseconds(400), true})
                  .ok());
  const absl::Time t0 = absl::Now();
  absl::StatusOr<CompileLeases::Outcome> taken = Take(*b, "orphan");
  ASSERT_TRUE(taken.ok()) << taken.status();
  EXPECT_EQ(taken->turn, Turn::kLeased);
  EXPECT_GE(absl::Now() - t0, absl::Milliseconds(300));
  EXPECT_LT(absl::Now() - t0, absl::Seconds(3));
  EXPECT_EQ(b->TakeSnapshot().taken_over, 1);
}

TEST_F(CompileLeasesTest, RenewalKeepsALeasePastItsTtlAndWaitersGiveUpAtTheirDeadline) {
  std::unique_ptr<CompileLeases> a = Leases(absl::Milliseconds(300));
  std::unique_ptr<CompileLeases> b = Leases(absl::Milliseconds(300));
  absl::StatusOr<CompileLeases::Outcome> held = Take(*a, "long");
  ASSERT_TRUE(held.ok() && held->turn == Turn::kLeased);
  const absl::Time t0 = absl::Now();
  absl::StatusOr<CompileLeases::Outcome> waited = b->AcquireOrWait(
      "long", [] { return false; }, absl::Now() + absl::Milliseconds(1500), nullptr);
  EXPECT_GE(absl::Now() - t0, absl::Milliseconds(1400));
  ASSERT_FALSE(waited.ok());
  EXPECT_EQ(waited.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(waited.status().message().find(a->instance_id()), std::string::npos) << waited.status();
  // Five times its ttl later, still the holder's.
  EXPECT_TRUE(absl::StartsWith(Get(a->KeyOf("long")), a->instance_id()));
  EXPECT_GT(Pttl(a->KeyOf("long")), 0);
  EXPECT_EQ(a->TakeSnapshot().lost, 0);
}

TEST_F(CompileLeasesTest, WaiterLeavesWhenCancelled) {
  std::unique_ptr<CompileLeases> a = Leases(absl::Seconds(10));
  std::unique_ptr<CompileLeases> b = Leases(absl::Seconds(10));
  absl::StatusOr<CompileLeases::Outcome> held = Take(*a, "k");
  ASSERT_TRUE(held.ok() && held->turn == Turn::kLeased);
  std::atomic<bool> cancel{false};
  absl::Time returned;
  absl::StatusOr<CompileLeases::Outcome> waited = absl::UnknownError("not run");
  std::thread waiter([&] {
    waited = b->AcquireOrWait(
        "k", [] { return false; }, absl::InfiniteFuture(), [&] { return cancel.load(); });
    returned = absl::Now();
  });
  absl::SleepFor(absl::Milliseconds(300));
  const absl::Time cancelled = absl::Now();
  cancel = true;
  waiter.join();
  ASSERT_FALSE(waited.ok());
  EXPECT_EQ(waited.status().code(), absl::StatusCode::kCancelled);
  EXPECT_LT(returned - cancelled, absl::Milliseconds(200));
  EXPECT_EQ(b->TakeSnapshot().waiting, 0);
}

TEST_F(CompileLeasesTest, LeaseDeletedUnderItsHolderIsCountedLost) {
  std::unique_ptr<CompileLeases> a = Leases(absl::Milliseconds(300));
  absl::StatusOr<CompileLeases::Outcome> held = Take(*a, "k");
  ASSERT_TRUE(held.ok() && held->turn == Turn::kLeased);
  ASSERT_TRUE(clients_.front()->Del(a->KeyOf("k")).ok());
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  while (a->TakeSnapshot().lost == 0 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_EQ(a->TakeSnapshot().lost, 1);
  EXPECT_EQ(a->TakeSnapshot().held, 0);
  // Releasing what is no longer ours deletes nothing of another's.
  ASSERT_TRUE(clients_.front()->Set(a->KeyOf("k"), "someone-else").ok());
  held->lease.Release();
  EXPECT_EQ(Get(a->KeyOf("k")), "someone-else");
}

TEST_F(CompileLeasesTest, ClusterNobodyAnswersMeansCompilingWithoutALease) {
  const int closed = testing::FreeLoopbackPort();
  std::unique_ptr<CompileLeases> a =
      Leases(absl::Seconds(10), {absl::StrCat("127.0.0.1:", closed)});
  for (int i = 0; i < 3; ++i) {
    const absl::Time t0 = absl::Now();
    absl::StatusOr<CompileLeases::Outcome> outcome = Take(*a, "k");
    ASSERT_TRUE(outcome.ok()) << outcome.status();
    EXPECT_EQ(outcome->turn, Turn::kUnleased);
    EXPECT_FALSE(outcome->lease.held());
    EXPECT_LT(absl::Now() - t0, absl::Seconds(1));
  }
  EXPECT_EQ(a->TakeSnapshot().errors, 3);
  EXPECT_EQ(a->TakeSnapshot().acquired, 0);
}

TEST(CompileLeasesOptionsTest, BadTtlOrPollsAreRefused) {
  MetricsRegistry metrics;
  cache::RedisClusterOptions o;
  o.seeds = {"127.0.0.1:1"};
  std::unique_ptr<cache::RedisCluster> redis = *cache::RedisCluster::Create(o);
  CompileLeases::Options options;
  options.ttl = absl::Milliseconds(2);
  absl::StatusOr<std::unique_ptr<CompileLeases>> leases =
      CompileLeases::Create(redis.get(), &metrics, options);
  ASSERT_FALSE(leases.ok());
  EXPECT_EQ(leases.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(leases.status().message().find("ttl"), std::string::npos);
  options.ttl = absl::Seconds(1);
  options.min_poll = absl::Milliseconds(100);
  options.max_poll = absl::Milliseconds(10);
  leases = CompileLeases::Create(redis.get(), &metrics, options);
  ASSERT_FALSE(leases.ok());
  EXPECT_NE(leases.status().message().find("min_poll"), std::string::npos);
}

}  // namespace
}  // namespace kiln::server
