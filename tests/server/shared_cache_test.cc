// SharedCache: how kilnd combines its action record with the one the shared tier already
// holds (MergeActionEntries), and the write-through queue against a real loopback cluster
// and a real store: a hung cluster never blocks the caller, a full queue drops and counts.

#include "server/shared_cache.h"

#include <gtest/gtest.h>
#include <signal.h>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "proto/base/digest.h"
#include "tests/testing/redis_cluster.h"
#include "tests/testing/scrape.h"
#include "tests/testing/test_env.h"

namespace kiln::server {
namespace {

v1::ActionVariant Variant(const std::string& guard, const std::string& artifact_hash,
                          int64_t last_used = 0) {
  v1::ActionVariant v;
  if (!guard.empty()) v.mutable_guards()->set_python_expr(guard);
  v.add_artifacts()->set_hash(artifact_hash);
  v.set_last_used_unix_ms(last_used);
  return v;
}

TEST(MergeActionEntriesTest, NothingSharedYetTakesTheLocalEntry) {
  v1::ActionEntry local;
  local.set_compile_key("k");
  *local.add_variants() = Variant("L['t0'] == 16", "a", 123);
  const v1::ActionEntry merged = MergeActionEntries(v1::ActionEntry(), local);
  EXPECT_EQ(merged.compile_key(), "k");
  ASSERT_EQ(merged.variants_size(), 1);
  EXPECT_EQ(merged.variants(0).artifacts(0).hash(), "a");
  EXPECT_EQ(merged.variants(0).last_used_unix_ms(), 0);  // usage of one server stays there
}

TEST(MergeActionEntriesTest, OtherServersVariantsStayAndSameGuardsAreReplaced) {
  v1::ActionEntry shared;
  shared.set_compile_key("k");
  *shared.add_variants() = Variant("L['t0'] == 16", "old16");
  *shared.add_variants() = Variant("L['t0'] == 64", "only-shared");
  v1::ActionEntry local;
  local.set_compile_key("k");
  *local.add_variants() = Variant("L['t0'] == 16", "new16");
  *local.add_variants() = Variant("L['t0'] == 32", "only-local");
  const v1::ActionEntry merged = MergeActionEntries(shared, local);
  ASSERT_EQ(merged.variants_size(), 3);
  EXPECT_EQ(merged.variants(0).artifacts(0).hash(), "new16");  // last writer wins, in place
  EXPECT_EQ(merged.variants(1).artifacts(0).hash(), "only-shared");
  EXPECT_EQ(merged.variants(2).artifacts(0).hash(), "only-local");
}

TEST(MergeActionEntriesTest, UnguardedVariantsAreOneIdentity) {
  v1::ActionEntry shared;
  *shared.add_variants() = Variant("", "x");
  v1::ActionEntry local;
  local.set_compile_key("k");
  *local.add_variants() = Variant("", "y");
  const v1::ActionEntry merged = MergeActionEntries(shared, local);
  ASSERT_EQ(merged.variants_size(), 1);
  EXPECT_EQ(merged.variants(0).artifacts(0).hash(), "y");
  EXPECT_EQ(merged.compile_key(), "k");
}

class SharedCacheTest : public testing::RedisClusterTest {
 protected:
  void SetUp() override {
    testing::RedisClusterTest::SetUp();
    if (HasFatalFailure()) return;
    cache::CacheOptions options;
    options.path = dir_.path() + "/store";
    absl::StatusOr<std::unique_ptr<cache::Cache>> c = cache::Cache::Open(options);
    ASSERT_TRUE(c.ok()) << c.status();
    cache_ = *std::move(c);
  }
  void TearDown() override {
    shared_.reset();
    if (cache_) ASSERT_TRUE(cache_->Close().ok());
  }
  void StartShared(int queue_capacity) {
    cache::RedisClusterOptions redis;
    redis.seeds = cluster_->addresses();
    redis.command_timeout = absl::Seconds(1);
    absl::StatusOr<std::unique_ptr<cache::RedisCluster>> cluster =
        cache::RedisCluster::Create(redis);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    SharedCache::Options options;
    options.queue_capacity = queue_capacity;
    shared_ = std::make_unique<SharedCache>(
        std::make_unique<cache::SharedTier>(*std::move(cluster)), cache_.get(), &metrics_, options);
  }
  v1::Digest PutLocal(const std::string& bytes) {
    const v1::Digest d = DigestOf(bytes);
    EXPECT_TRUE(cache_->store().Put(d, bytes).ok());
    return d;
  }

  testing::TempDir dir_;
  std::unique_ptr<cache::Cache> cache_;
  MetricsRegistry metrics_;
  std::unique_ptr<SharedCache> shared_;
};

TEST_F(SharedCacheTest, HungClusterNeverBlocksWritersAndAFullQueueDropsAndCounts) {
  StartShared(/*queue_capacity=*/2);
  for (int node = 0; node < cluster_->size(); ++node) {
    ASSERT_TRUE(cluster_->Signal(node, SIGSTOP).ok());
  }
  std::vector<v1::Digest> digests;
  for (int i = 0; i < 10; ++i) digests.push_back(PutLocal(absl::StrCat("blob ", i)));
  const absl::Time t0 = absl::Now();
  for (const v1::Digest& d : digests) shared_->WriteBlob(d);
  EXPECT_LT(absl::Now() - t0, absl::Milliseconds(200));
  const SharedCache::Snapshot s = shared_->TakeSnapshot();
  // One job in the thread's hands (or about to be), two queued: the rest dropped.
  EXPECT_GE(s.dropped, 7);
  EXPECT_LE(s.dropped, 8);
  EXPECT_EQ(testing::MetricValue(metrics_.Render(), "kiln_shared_cache_write_dropped_total"),
            static_cast<double>(s.dropped));
  for (int node = 0; node < cluster_->size(); ++node) {
    ASSERT_TRUE(cluster_->Signal(node, SIGCONT).ok());
  }
  // What was kept goes through once the cluster answers again.
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (absl::Now() < deadline) {
    const SharedCache::Snapshot now = shared_->TakeSnapshot();
    if (now.queue_depth == 0 && now.written + now.write_errors + now.dropped == 10) break;
    absl::SleepFor(absl::Milliseconds(50));
  }
  const SharedCache::Snapshot end = shared_->TakeSnapshot();
  EXPECT_EQ(end.queue_depth, 0);
  EXPECT_EQ(end.written + end.write_errors + end.dropped, 10);
  EXPECT_GE(end.written, 1);
}

TEST_F(SharedCacheTest, BlobWrittenThroughIsReadBackAfterLocalLoss) {
  StartShared(/*queue_capacity=*/16);
  const v1::Digest d = PutLocal("shared bytes");
  shared_->WriteBlob(d);
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (absl::Now() < deadline && shared_->TakeSnapshot().written < 1) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  ASSERT_EQ(shared_->TakeSnapshot().written, 1);
  // Gone locally (as after eviction): read through from the cluster, verified, stored again.
  absl::StatusOr<int64_t> freed = cache_->store().Delete(absl::HexStringToBytes(d.hash()));
  ASSERT_TRUE(freed.ok()) << freed.status();
  EXPECT_GT(*freed, 0);
  ASSERT_FALSE(*cache_->store().Contains(d));
  EXPECT_TRUE(shared_->FetchBlob(d));
  absl::StatusOr<std::string> bytes = cache_->store().Get(d);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_EQ(*bytes, "shared bytes");
  // Unknown to the cluster: a miss, not an error.
  EXPECT_FALSE(shared_->FetchBlob(DigestOf("never stored")));
  EXPECT_EQ(testing::MetricValue(metrics_.Render(), "kiln_shared_cache_up"), 1);
}

}  // namespace
}  // namespace kiln::server
