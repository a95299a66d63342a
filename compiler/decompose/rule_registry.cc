#include "compiler/decompose/rule_registry.h"

#include <utility>

namespace kiln::decompose {

void RuleRegistry::Add(const std::string& target, Rule rule) { rules_[target] = std::move(rule); }

const Rule* RuleRegistry::Find(absl::string_view target) const {
  auto it = rules_.find(target);
  return it == rules_.end() ? nullptr : &it->second;
}

std::vector<std::string> RuleRegistry::Targets() const {
  std::vector<std::string> out;
  for (const auto& [target, rule] : rules_) out.push_back(target);
  return out;
}

const RuleRegistry& DefaultRuleRegistry() {
  static const RuleRegistry* registry = [] {
    auto* r = new RuleRegistry();
    RegisterPointwiseRules(*r);
    RegisterNnRules(*r);
    RegisterReductionRules(*r);
    RegisterNormRules(*r);
    RegisterIndexingRules(*r);
    RegisterViewRules(*r);
    RegisterFactoryRules(*r);
    RegisterPoolingRules(*r);
    RegisterLinalgRules(*r);
    return r;
  }();
  return *registry;
}

Rule FormulaRule(Formula f) {
  return [f = std::move(f)](Builder& d, uint32_t n) {
    return d.Pointwise(n, [&](Body& b, loop::ScalarType ct) -> absl::StatusOr<int32_t> {
      return f(d, n, b, b.Cast(d.LoadB(b, d.In(n, 0)), ct), ct);
    });
  };
}

}  // namespace kiln::decompose
