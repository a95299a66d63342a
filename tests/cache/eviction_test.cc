// Eviction: the budget holds under a write stream, recently used entries outlive unused
// ones, fresh entries are protected near the budget, and actions take their blobs along.

#include <gtest/gtest.h>

#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "cache/cache.h"
#include "proto/base/digest.h"
#include "tests/testing/test_env.h"

namespace kiln::cache {
namespace {

using ::kiln::testing::TempDir;

using ::kiln::testing::PseudoRandomBytes;

class EvictionTest : public ::testing::Test {
 protected:
  std::unique_ptr<Cache> Open(int64_t budget, absl::Duration min_age) {
    CacheOptions o;
    o.path = dir_.path() + "/store";
    o.budget_bytes = budget;
    o.min_age = min_age;
    o.background_maintenance = false;
    o.block_cache_bytes = 8 << 20;
    o.seed = 42;
    o.now_ms = [this] { return now_ms_; };
    absl::StatusOr<std::unique_ptr<Cache>> c = Cache::Open(o);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? *std::move(c) : nullptr;
  }

  v1::Digest Put(Cache& cache, const std::string& bytes) {
    v1::Digest d = DigestOf(bytes);
    absl::StatusOr<bool> s = cache.store().Put(d, bytes);
    EXPECT_TRUE(s.ok()) << s.status();
    return d;
  }

  TempDir dir_;
  int64_t now_ms_ = 1'000'000;
};

TEST_F(EvictionTest, WriteStreamStaysWithinFivePercentOfTheBudget) {
  const int64_t budget = 4 << 20;
  auto cache = Open(budget, absl::Seconds(10));
  bool reached = false;
  for (int i = 0; i < 3000; ++i) {
    now_ms_ += 100;
    Put(*cache, PseudoRandomBytes(1024 + (i * 7919) % 7168, i));
    const int64_t stored = cache->Statistics().stored_bytes();
    ASSERT_LE(stored, budget * 105 / 100) << "after write " << i;
    reached = reached || stored >= budget * 97 / 100;
    if (reached) ASSERT_GE(stored, budget * 95 / 100) << "after write " << i;
  }
  EXPECT_TRUE(reached);
  const CacheStatistics s = cache->Statistics();
  EXPECT_GT(s.evicted_blobs, 1000);
  EXPECT_EQ(s.evicted_bytes + s.blob_bytes, [] {
    int64_t total = 0;
    for (int i = 0; i < 3000; ++i) total += 1024 + (i * 7919) % 7168;
    return total;
  }());
}

TEST_F(EvictionTest, RecentlyReadEntriesOutliveNeverReadOnes) {
  const int64_t budget = 200 * 1024;
  auto cache = Open(budget, absl::Seconds(1));
  std::vector<v1::Digest> first;
  for (int i = 0; i < 195; ++i) {
    now_ms_ += 10;
    first.push_back(Put(*cache, PseudoRandomBytes(1024, i)));
  }
  // Read every fifth entry of the first generation.
  for (int i = 0; i < 195; i += 5) {
    now_ms_ += 10;
    ASSERT_TRUE(cache->store().Get(first[i]).ok());
  }
  for (int i = 0; i < 150; ++i) {
    now_ms_ += 10;
    Put(*cache, PseudoRandomBytes(1024, 1000 + i));
  }
  int read_alive = 0, read_total = 0, unread_alive = 0, unread_total = 0;
  for (int i = 0; i < 195; ++i) {
    const bool alive = *cache->store().Contains(first[i]);
    if (i % 5 == 0) {
      ++read_total;
      read_alive += alive;
    } else {
      ++unread_total;
      unread_alive += alive;
    }
  }
  EXPECT_GE(read_alive * 10, read_total * 8) << read_alive << " of " << read_total;
  EXPECT_LE(unread_alive * 10, unread_total * 2) << unread_alive << " of " << unread_total;
  EXPECT_LE(cache->Statistics().stored_bytes(), budget * 105 / 100);
}

TEST_F(EvictionTest, FreshEntriesAreSparedUntilTheHardLimit) {
  const int64_t budget = 100 * 1000;
  auto cache = Open(budget, absl::Minutes(1));
  for (int i = 0; i < 104; ++i) Put(*cache, PseudoRandomBytes(1000, i));
  EXPECT_EQ(cache->Statistics().blobs, 104) << "all are younger than the minimum age";
  EXPECT_EQ(cache->Statistics().evicted_blobs, 0);
  for (int i = 104; i < 110; ++i) Put(*cache, PseudoRandomBytes(1000, i));
  EXPECT_LE(cache->Statistics().stored_bytes(), budget * 105 / 100);
  EXPECT_GT(cache->Statistics().evicted_blobs, 0);
  // Once old enough, eviction goes back down to the low watermark.
  now_ms_ += 120'000;
  ASSERT_TRUE(cache->RunMaintenance().ok());
  Put(*cache, PseudoRandomBytes(1000, 999));
  EXPECT_LE(cache->Statistics().stored_bytes(), budget);
}

TEST_F(EvictionTest, ActionsLeaveWithTheirBlobsAndStayComplete) {
  const int64_t budget = 300 * 1024;
  auto cache = Open(budget, absl::Seconds(1));
  std::vector<std::string> keys;
  const v1::Digest runtime = Put(*cache, PseudoRandomBytes(2048, -1));
  for (int i = 0; i < 400; ++i) {
    now_ms_ += 10;
    const v1::Digest artifact = Put(*cache, PseudoRandomBytes(1024 + i % 512, i));
    v1::ActionVariant v;
    *v.add_artifacts() = artifact;
    *v.add_artifacts() = runtime;
    keys.push_back(absl::StrCat("key", i));
    ASSERT_TRUE(cache->actions().Put(keys.back(), v).ok());
    ASSERT_LE(cache->Statistics().stored_bytes(), budget * 105 / 100);
  }
  const CacheStatistics s = cache->Statistics();
  EXPECT_GT(s.evictions, 100);
  // Every remaining action is complete, and no unreferenced artifact piles up: each blob is
  // one action's artifact or the shared runtime.
  int alive = 0;
  for (const std::string& k : keys) {
    absl::StatusOr<v1::ActionEntry> e = cache->actions().Get(k);
    if (e.ok()) ++alive;
  }
  EXPECT_EQ(alive, s.actions);
  EXPECT_LE(s.blobs, s.actions + 1 + 8);
  EXPECT_EQ(cache->Statistics().dangling_variants, 0);
}

TEST(EvictionBackgroundTest, MaintenanceThreadBringsTheStoreBackUnderBudget) {
  TempDir dir;
  CacheOptions o;
  o.path = dir.path() + "/store";
  o.budget_bytes = 1 << 20;
  o.min_age = absl::ZeroDuration();
  o.maintenance_interval = absl::Milliseconds(20);
  o.block_cache_bytes = 8 << 20;
  absl::StatusOr<std::unique_ptr<Cache>> cache = Cache::Open(o);
  ASSERT_TRUE(cache.ok()) << cache.status();
  for (int i = 0; i < 1100; ++i) {
    const std::string b = PseudoRandomBytes(1000, i);
    ASSERT_TRUE((*cache)->store().Put(DigestOf(b), b).ok());
    // Writers only evict themselves past halfway to the hard limit.
    ASSERT_LE((*cache)->Statistics().stored_bytes(), o.budget_bytes * 105 / 100);
  }
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while ((*cache)->Statistics().stored_bytes() > o.budget_bytes && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_LE((*cache)->Statistics().stored_bytes(), o.budget_bytes);
}

}  // namespace
}  // namespace kiln::cache
