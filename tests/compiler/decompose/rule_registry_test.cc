// Decompose's rule table: every rule is reachable, and each op has its rule in one family.

#include "compiler/decompose/rule_registry.h"

#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "proto/ops/registry.h"

namespace kiln::decompose {
namespace {

// Decompose falls back on a node whose op has no schema before it looks for a rule, so a rule
// for such an op never runs: the op needs a schema in compiler/graph/op_schema.cc.
TEST(RuleRegistryTest, EveryRuleIsForAnOpWithASchema) {
  std::vector<std::string> missing;
  for (const std::string& target : DefaultRuleRegistry().Targets()) {
    if (ops::FindOp(target) == nullptr) missing.push_back(target);
  }
  EXPECT_TRUE(missing.empty()) << "rules for ops without a schema: "
                               << absl::StrJoin(missing, ", ");
}

// An op registered by two families would silently take the rule registered last; a family
// left out of DefaultRuleRegistry would leave its ops without rules.
TEST(RuleRegistryTest, EachOpHasItsRuleInOneFamily) {
  const std::map<std::string, void (*)(RuleRegistry&)> families = {
      {"factory", RegisterFactoryRules}, {"indexing", RegisterIndexingRules},
      {"linalg", RegisterLinalgRules},   {"nn", RegisterNnRules},
      {"norm", RegisterNormRules},       {"pointwise", RegisterPointwiseRules},
      {"pooling", RegisterPoolingRules}, {"reductions", RegisterReductionRules},
      {"views", RegisterViewRules},
  };
  std::map<std::string, std::string> family_of;
  std::vector<std::string> twice;
  for (const auto& [family, register_rules] : families) {
    RuleRegistry registry;
    register_rules(registry);
    EXPECT_FALSE(registry.Targets().empty()) << family;
    for (const std::string& target : registry.Targets()) {
      auto [it, fresh] = family_of.emplace(target, family);
      if (!fresh) twice.push_back(absl::StrCat(target, " (", it->second, ", ", family, ")"));
    }
  }
  EXPECT_TRUE(twice.empty()) << "ops registered by two families: " << absl::StrJoin(twice, "; ");
  std::vector<std::string> all;
  for (const auto& [target, family] : family_of) all.push_back(target);
  EXPECT_EQ(all, DefaultRuleRegistry().Targets());
}

}  // namespace
}  // namespace kiln::decompose
