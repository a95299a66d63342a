#pragma once

// Decompose's rules (internal to compiler/decompose): for each op target it lowers, the
// function that adds the node's primitives through a Builder. Each op family registers its
// rules from its own file (rules_*.cc) into one registry, built once.
//
// A rule returns UNIMPLEMENTED for arguments it has no lowering for (the node then falls
// back, with the message as the reason) and INTERNAL for inconsistent metadata.

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "compiler/decompose/builder.h"
#include "compiler/loop/ir.h"

namespace kiln::decompose {

using Rule = std::function<absl::Status(Builder&, uint32_t node)>;

class RuleRegistry {
 public:
  // Registers the rule for `target`; a later registration of the same target replaces it.
  void Add(const std::string& target, Rule rule);
  // The rule for `target`, or null.
  const Rule* Find(absl::string_view target) const;
  // Every target with a rule, sorted.
  std::vector<std::string> Targets() const;

 private:
  std::map<std::string, Rule, std::less<>> rules_;
};

// Every rule, built once.
const RuleRegistry& DefaultRuleRegistry();

// Each family file registers its rules.
void RegisterPointwiseRules(RuleRegistry& registry);
void RegisterNnRules(RuleRegistry& registry);
void RegisterReductionRules(RuleRegistry& registry);
void RegisterNormRules(RuleRegistry& registry);
void RegisterIndexingRules(RuleRegistry& registry);
void RegisterViewRules(RuleRegistry& registry);
void RegisterFactoryRules(RuleRegistry& registry);
void RegisterPoolingRules(RuleRegistry& registry);
void RegisterLinalgRules(RuleRegistry& registry);

// A pointwise op written as a formula over its first argument `x`, loaded and cast to the
// output's compute type `ct`: the formula returns the SSA value of the result.
using Formula =
    std::function<int32_t(Builder& d, uint32_t node, Body& b, int32_t x, loop::ScalarType ct)>;
Rule FormulaRule(Formula f);

}  // namespace kiln::decompose
