// MergeActionEntries: how kilnd combines its action record with the one the shared tier
// already holds for the same compile key before writing it through.

#include "server/shared_cache.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace kiln::server
