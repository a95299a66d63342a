// The action cache: variants and their guards, completeness, hit/miss bookkeeping and
// reference counts.

#include "cache/action_cache.h"

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "cache/cache.h"
#include "cache/db.h"
#include "proto/base/digest.h"
#include "tests/testing/test_env.h"

namespace kiln::cache {
namespace {

using ::kiln::testing::TempDir;

class ActionCacheTest : public ::testing::Test {
 protected:
  void SetUp() override { Reopen(); }

  void Reopen() {
    cache_.reset();
    CacheOptions o;
    o.path = dir_.path() + "/store";
    o.background_maintenance = false;
    o.now_ms = [this] { return now_ms_; };
    absl::StatusOr<std::unique_ptr<Cache>> c = Cache::Open(o);
    ASSERT_TRUE(c.ok()) << c.status();
    cache_ = *std::move(c);
  }

  v1::Digest PutBlob(const std::string& bytes) {
    v1::Digest d = DigestOf(bytes);
    EXPECT_TRUE(cache_->store().Put(d, bytes).ok());
    return d;
  }

  static v1::ActionVariant Variant(const std::string& guard, std::vector<v1::Digest> artifacts) {
    v1::ActionVariant v;
    if (!guard.empty()) v.mutable_guards()->add_shape_env(guard);
    for (v1::Digest& d : artifacts) *v.add_artifacts() = std::move(d);
    v.set_compile_micros(1234);
    return v;
  }

  ActionCache& actions() { return cache_->actions(); }

  TempDir dir_;
  int64_t now_ms_ = 1'000'000;
  std::unique_ptr<Cache> cache_;
};

TEST_F(ActionCacheTest, PutNeedsEveryBlobInTheStore) {
  const v1::Digest a = PutBlob("graph a");
  const v1::Digest absent = DigestOf("never stored");
  absl::Status s = actions().Put("key1", Variant("Eq(s0, 4)", {a, absent}));
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_NE(s.message().find("artifacts[1]"), absl::string_view::npos) << s;
  EXPECT_TRUE(absl::IsNotFound(actions().Get("key1").status()));
  EXPECT_EQ(cache_->Statistics().actions, 0);
}

TEST_F(ActionCacheTest, BadInputIsInvalidArgument) {
  const v1::Digest a = PutBlob("graph a");
  EXPECT_TRUE(absl::IsInvalidArgument(actions().Put("", Variant("", {a}))));
  EXPECT_TRUE(absl::IsInvalidArgument(actions().Put("k", Variant("", {}))));
  v1::Digest bad = a;
  bad.set_hash("xyz");
  EXPECT_TRUE(absl::IsInvalidArgument(actions().Put("k", Variant("", {bad}))));
  EXPECT_TRUE(absl::IsInvalidArgument(actions().Put(std::string(5000, 'k'), Variant("", {a}))));
}

TEST_F(ActionCacheTest, VariantsWithOtherGuardsAddAndSameGuardsReplace) {
  const v1::Digest a = PutBlob("compiled for s0 == 4");
  const v1::Digest b = PutBlob("compiled for s0 == 8");
  const v1::Digest c = PutBlob("recompiled for s0 == 4");
  ASSERT_TRUE(actions().Put("key", Variant("Eq(s0, 4)", {a})).ok());
  ASSERT_TRUE(actions().Put("key", Variant("Eq(s0, 8)", {b})).ok());
  absl::StatusOr<v1::ActionEntry> e = actions().Get("key");
  ASSERT_TRUE(e.ok()) << e.status();
  ASSERT_EQ(e->variants_size(), 2);
  EXPECT_EQ(e->compile_key(), "key");
  EXPECT_EQ(e->variants(0).artifacts(0).hash(), a.hash());
  EXPECT_EQ(e->variants(0).size_bytes(), a.size_bytes());
  EXPECT_EQ(e->variants(0).created_unix_ms(), now_ms_);
  EXPECT_EQ(e->variants(0).compile_micros(), 1234);

  now_ms_ += 5000;
  ASSERT_TRUE(actions().Put("key", Variant("Eq(s0, 4)", {c})).ok());
  e = actions().Get("key");
  ASSERT_TRUE(e.ok());
  ASSERT_EQ(e->variants_size(), 2);
  EXPECT_EQ(e->variants(0).artifacts(0).hash(), c.hash());
  EXPECT_EQ(e->variants(0).created_unix_ms(), now_ms_);
  const CacheStatistics s = cache_->Statistics();
  EXPECT_EQ(s.actions, 1);
  EXPECT_EQ(s.variants, 2);
  // The replaced variant's blob is no longer referenced; the others are.
  EXPECT_EQ(*actions().References(RawHash(a.hash())), 0);
  EXPECT_EQ(*actions().References(RawHash(b.hash())), 1);
  EXPECT_EQ(*actions().References(RawHash(c.hash())), 1);
}

TEST_F(ActionCacheTest, LookupCountsHitsGuardMissesAndMisses) {
  const v1::Digest a = PutBlob("a"), b = PutBlob("b");
  ASSERT_TRUE(actions().Put("key", Variant("Eq(s0, 4)", {a})).ok());
  ASSERT_TRUE(actions().Put("key", Variant("Eq(s0, 8)", {b})).ok());
  auto guard_is = [](const std::string& g) {
    return [g](const v1::ActionVariant& v) { return v.guards().shape_env(0) == g; };
  };
  absl::StatusOr<v1::ActionVariant> hit = actions().Lookup("key", guard_is("Eq(s0, 8)"));
  ASSERT_TRUE(hit.ok()) << hit.status();
  EXPECT_EQ(hit->artifacts(0).hash(), b.hash());
  EXPECT_TRUE(absl::IsNotFound(actions().Lookup("key", guard_is("Eq(s0, 16)")).status()));
  EXPECT_TRUE(absl::IsNotFound(actions().Lookup("other", guard_is("Eq(s0, 8)")).status()));
  actions().RecordMiss();
  const CacheStatistics s = cache_->Statistics();
  EXPECT_EQ(s.hits, 1);
  EXPECT_EQ(s.guard_misses, 1);
  EXPECT_EQ(s.misses, 2);
}

TEST_F(ActionCacheTest, HitsRefreshLastUseOnceFlushed) {
  const v1::Digest a = PutBlob("a"), b = PutBlob("b");
  ASSERT_TRUE(actions().Put("key", Variant("Eq(s0, 4)", {a})).ok());
  ASSERT_TRUE(actions().Put("key", Variant("Eq(s0, 8)", {b})).ok());
  const int64_t created = now_ms_;
  now_ms_ += 60'000;
  v1::Guards g;
  g.add_shape_env("Eq(s0, 8)");
  actions().RecordHit("key", g);
  ASSERT_TRUE(actions().FlushAccessTimes().ok());
  absl::StatusOr<v1::ActionEntry> e = actions().Get("key");
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->variants(0).last_used_unix_ms(), created);
  EXPECT_EQ(e->variants(1).last_used_unix_ms(), now_ms_);
  // Persisted, and the byte count still matches what is stored.
  const int64_t bytes = cache_->Statistics().action_bytes;
  Reopen();
  EXPECT_EQ(cache_->Statistics().action_bytes, bytes);
  EXPECT_EQ(actions().Get("key")->variants(1).last_used_unix_ms(), now_ms_);
}

TEST_F(ActionCacheTest, DanglingVariantsAreDroppedAndTheRestServed) {
  const std::string lost_bytes = "a blob that will rot";
  const v1::Digest shared = PutBlob("shared"), lost = PutBlob(lost_bytes), b = PutBlob("b");
  ASSERT_TRUE(actions().Put("key", Variant("Eq(s0, 4)", {shared, lost})).ok());
  ASSERT_TRUE(actions().Put("key", Variant("Eq(s0, 8)", {shared, b})).ok());
  ASSERT_TRUE(cache_->store().Delete(RawHash(lost.hash())).ok());

  absl::StatusOr<v1::ActionEntry> e = actions().Get("key");
  ASSERT_TRUE(e.ok()) << e.status();
  ASSERT_EQ(e->variants_size(), 1);
  EXPECT_EQ(e->variants(0).artifacts(1).hash(), b.hash());
  CacheStatistics s = cache_->Statistics();
  EXPECT_EQ(s.variants, 1);
  EXPECT_EQ(s.dangling_variants, 1);
  EXPECT_EQ(*actions().References(RawHash(shared.hash())), 1);

  ASSERT_TRUE(cache_->store().Delete(RawHash(b.hash())).ok());
  EXPECT_TRUE(absl::IsNotFound(actions().Get("key").status()));
  s = cache_->Statistics();
  EXPECT_EQ(s.actions, 0);
  EXPECT_EQ(s.variants, 0);
  EXPECT_EQ(s.action_bytes, 0);
  EXPECT_EQ(*actions().References(RawHash(shared.hash())), 0);
}

TEST_F(ActionCacheTest, EvictingAnActionFreesOnlyBlobsNothingElseReferences) {
  const v1::Digest shared = PutBlob("runtime"), only1 = PutBlob("k1"), only2 = PutBlob("k2");
  ASSERT_TRUE(actions().Put("k1", Variant("", {only1, shared})).ok());
  ASSERT_TRUE(actions().Put("k2", Variant("", {only2, shared})).ok());
  absl::StatusOr<int64_t> freed = actions().Evict("k1");
  ASSERT_TRUE(freed.ok()) << freed.status();
  EXPECT_FALSE(*cache_->store().Contains(only1));
  EXPECT_TRUE(*cache_->store().Contains(shared));
  EXPECT_TRUE(actions().Get("k2").ok());
  const CacheStatistics s = cache_->Statistics();
  EXPECT_EQ(s.evictions, 1);
  EXPECT_EQ(s.evicted_blobs, 1);
  EXPECT_EQ(s.blobs, 2);
  EXPECT_GT(*freed, only1.size_bytes());
  EXPECT_EQ(s.evicted_bytes, *freed);
  // A referenced blob is not evicted on its own.
  EXPECT_EQ(*actions().EvictBlobIfUnreferenced(RawHash(shared.hash())), 0);
  EXPECT_TRUE(*cache_->store().Contains(shared));
}

TEST_F(ActionCacheTest, EntriesAndCountsSurviveReopening) {
  const v1::Digest a = PutBlob("a");
  ASSERT_TRUE(actions().Put("key", Variant("Eq(s0, 4)", {a})).ok());
  const CacheStatistics before = cache_->Statistics();
  Reopen();
  const CacheStatistics after = cache_->Statistics();
  EXPECT_EQ(after.actions, 1);
  EXPECT_EQ(after.variants, 1);
  EXPECT_EQ(after.action_bytes, before.action_bytes);
  EXPECT_EQ(actions().Get("key")->variants(0).artifacts(0).hash(), a.hash());
}

// The keys of a page, in order.
std::vector<std::string> Keys(const absl::StatusOr<ActionPage>& page) {
  EXPECT_TRUE(page.ok()) << page.status();
  std::vector<std::string> keys;
  if (page.ok()) {
    for (const v1::ActionEntry& e : page->actions) keys.push_back(e.compile_key());
  }
  return keys;
}

using Strings = std::vector<std::string>;

TEST_F(ActionCacheTest, ListSelectsByJobAndTheJobsSurviveReopening) {
  for (const char* key : {"k1", "k2", "k3"}) {
    ASSERT_TRUE(actions().Put(key, Variant("", {PutBlob(absl::StrCat("blob of ", key))})).ok());
  }
  ASSERT_TRUE(actions().RecordJobUse("train-7", "k3").ok());
  ASSERT_TRUE(actions().RecordJobUse("train-7", "k1").ok());
  ASSERT_TRUE(actions().RecordJobUse("train-7", "k1").ok());
  ASSERT_TRUE(actions().RecordJobUse("train-70", "k2").ok());  // a job whose id extends another's
  Reopen();
  ActionQuery q;
  q.job_id = "train-7";
  EXPECT_EQ(Keys(actions().List(q)), (Strings{"k1", "k3"}));
  q.job_id = "train-70";
  EXPECT_EQ(Keys(actions().List(q)), (Strings{"k2"}));
  q.job_id = "never-ran";
  EXPECT_EQ(Keys(actions().List(q)), Strings{});
  EXPECT_EQ(Keys(actions().List(ActionQuery())), (Strings{"k1", "k2", "k3"}));
}

TEST_F(ActionCacheTest, ListSelectsByCreationTimeAndKeyAndCombinesFilters) {
  now_ms_ = 1'000;
  ASSERT_TRUE(actions().Put("old", Variant("", {PutBlob("old blob")})).ok());
  now_ms_ = 5'000;
  ASSERT_TRUE(actions().Put("new", Variant("", {PutBlob("new blob")})).ok());
  ASSERT_TRUE(actions().Put("newer", Variant("", {PutBlob("newer blob")})).ok());
  ASSERT_TRUE(actions().RecordJobUse("j", "old").ok());
  ASSERT_TRUE(actions().RecordJobUse("j", "newer").ok());
  ActionQuery q;
  q.since_unix_ms = 5'000;
  EXPECT_EQ(Keys(actions().List(q)), (Strings{"new", "newer"}));
  q.job_id = "j";
  EXPECT_EQ(Keys(actions().List(q)), (Strings{"newer"}));
  ActionQuery keys;
  keys.compile_keys = {"old", "newer", "old"};
  EXPECT_EQ(Keys(actions().List(keys)), (Strings{"newer", "old"}));
  keys.since_unix_ms = 5'000;
  EXPECT_EQ(Keys(actions().List(keys)), (Strings{"newer"}));
  keys.compile_keys.push_back("unknown-key");
  absl::StatusOr<ActionPage> missing = actions().List(keys);
  EXPECT_TRUE(absl::IsNotFound(missing.status())) << missing.status();
  EXPECT_NE(missing.status().message().find("unknown-key"), absl::string_view::npos);
}

TEST_F(ActionCacheTest, ListPagesCountNoHitsAndLeaveUsageOut) {
  for (int i = 0; i < 5; ++i) {
    const std::string key = absl::StrCat("key", i);
    ASSERT_TRUE(actions().Put(key, Variant("Eq(s0, 2)", {PutBlob(key)})).ok());
  }
  ActionQuery q;
  q.max_actions = 2;
  Strings seen;
  int pages = 0;
  do {
    absl::StatusOr<ActionPage> page = actions().List(q);
    ASSERT_TRUE(page.ok()) << page.status();
    ASSERT_LE(page->actions.size(), 2u);
    for (const v1::ActionEntry& e : page->actions) {
      seen.push_back(e.compile_key());
      EXPECT_EQ(e.variants(0).last_used_unix_ms(), 0);
      EXPECT_EQ(e.variants(0).created_unix_ms(), now_ms_);
      EXPECT_EQ(e.variants(0).guards().shape_env(0), "Eq(s0, 2)");
    }
    q.start_after = page->next_start_after;
    ++pages;
  } while (!q.start_after.empty());
  EXPECT_EQ(seen, (Strings{"key0", "key1", "key2", "key3", "key4"}));
  EXPECT_EQ(pages, 3);
  // A byte bound ends pages too, with one entry at least in each.
  ActionQuery small;
  small.max_bytes = 1;
  absl::StatusOr<ActionPage> one = actions().List(small);
  EXPECT_EQ(Keys(one), (Strings{"key0"}));
  EXPECT_EQ(one->next_start_after, "key0");
  EXPECT_EQ(cache_->Statistics().hits, 0);
  EXPECT_EQ(cache_->Statistics().misses, 0);
}

TEST_F(ActionCacheTest, ListSkipsEvictedAndDanglingKeysOfAJob) {
  const v1::Digest a = PutBlob("a");
  const v1::Digest b = PutBlob("b");
  ASSERT_TRUE(actions().Put("kept", Variant("", {a})).ok());
  ASSERT_TRUE(actions().Put("evicted", Variant("", {b})).ok());
  ASSERT_TRUE(actions().RecordJobUse("j", "kept").ok());
  ASSERT_TRUE(actions().RecordJobUse("j", "evicted").ok());
  ASSERT_TRUE(actions().Evict("evicted").ok());
  ActionQuery q;
  q.job_id = "j";
  EXPECT_EQ(Keys(actions().List(q)), (Strings{"kept"}));
  // The job row went with the listing; using the key again records it again.
  EXPECT_EQ(cache_->Statistics().actions, 1);
  ASSERT_TRUE(actions().Put("evicted", Variant("", {PutBlob("b")})).ok());
  EXPECT_EQ(Keys(actions().List(q)), (Strings{"kept"}));
  ASSERT_TRUE(actions().RecordJobUse("j", "evicted").ok());
  EXPECT_EQ(Keys(actions().List(q)), (Strings{"evicted", "kept"}));
}

TEST_F(ActionCacheTest, MalformedJobsAndQueriesAreInvalidArgument) {
  EXPECT_TRUE(absl::IsInvalidArgument(actions().RecordJobUse("", "k")));
  EXPECT_TRUE(absl::IsInvalidArgument(actions().RecordJobUse(std::string("a\0b", 3), "k")));
  EXPECT_TRUE(absl::IsInvalidArgument(actions().RecordJobUse(std::string(300, 'j'), "k")));
  EXPECT_TRUE(absl::IsInvalidArgument(actions().RecordJobUse("j", "")));
  ActionQuery q;
  q.max_actions = 0;
  EXPECT_TRUE(absl::IsInvalidArgument(actions().List(q).status()));
  q.max_actions = 10;
  q.since_unix_ms = -1;
  EXPECT_TRUE(absl::IsInvalidArgument(actions().List(q).status()));
}

}  // namespace
}  // namespace kiln::cache
