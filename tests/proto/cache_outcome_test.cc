#include "proto/cache_outcome.h"

#include <gtest/gtest.h>

#include <string>

namespace kiln {
namespace {

// kilnd labels kiln_compile_requests_total with these names; changing one breaks dashboards.
TEST(CacheOutcomeNameTest, NamesAreTheMetricLabels) {
  EXPECT_EQ(std::string(CacheOutcomeName(v1::CACHE_OUTCOME_HIT)), "hit");
  EXPECT_EQ(std::string(CacheOutcomeName(v1::CACHE_OUTCOME_GUARD_MISS)), "guard_miss");
  EXPECT_EQ(std::string(CacheOutcomeName(v1::CACHE_OUTCOME_MISS)), "miss");
}

TEST(CacheOutcomeNameTest, UnspecifiedAndUnknownValuesAreUnknown) {
  EXPECT_EQ(std::string(CacheOutcomeName(v1::CACHE_OUTCOME_UNSPECIFIED)), "unknown");
  EXPECT_EQ(std::string(CacheOutcomeName(static_cast<v1::CacheOutcome>(77))), "unknown");
}

}  // namespace
}  // namespace kiln
