#include "compiler/sym/guards.h"

#include <string>
#include <utility>
#include <variant>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "compiler/sym/expr_tree.h"

namespace kiln::sym {
namespace {

// "s0=64, L['t1']=2048" for the symbols `expr` mentions; unbound ones say so.
std::string DescribeValues(const Expr& expr, const Bindings& bindings) {
  std::vector<std::string> parts;
  for (const std::string& name : FreeSymbols(expr)) {
    auto bound = [&](absl::string_view key) -> const Value* {
      auto it = bindings.symbols.find(key);
      return it == bindings.symbols.end() ? nullptr : &it->second;
    };
    const Value* v = nullptr;
    if (absl::StartsWith(name, "L['t")) {
      size_t index = 0;
      for (char c : absl::string_view(name).substr(4, name.size() - 6))
        index = index * 10 + (c - '0');
      if (index < bindings.python_inputs.size() && !bindings.python_inputs[index].empty()) {
        v = bound(bindings.python_inputs[index]);
      } else {
        v = bound(name);
      }
    } else {
      v = bound(name);
    }
    parts.push_back(absl::StrCat(name, "=", v ? FormatValue(*v) : "<unbound>"));
  }
  return parts.empty() ? "no symbols" : absl::StrJoin(parts, ", ");
}

bool IsSymbolExpr(const Expr& expr, std::string* name) {
  std::vector<std::string> symbols = FreeSymbols(expr);
  if (symbols.size() != 1 || Print(expr) != symbols[0]) return false;
  *name = symbols[0];
  return true;
}

}  // namespace

absl::StatusOr<Bindings> BindingsFromGraph(const v1::Graph& graph) {
  Bindings b;
  for (const v1::Symbol& s : graph.symbols()) {
    if (s.hint_case() == v1::Symbol::kIntHint) {
      b.symbols.emplace(s.name(), Value(s.int_hint()));
    } else if (s.hint_case() == v1::Symbol::kFloatHint) {
      b.symbols.emplace(s.name(), Value(s.float_hint()));
    }
  }
  // L['tN'] bindings computed from expressions go in after the walk, so that an input's
  // value never depends on another input's.
  std::vector<std::pair<std::string, Value>> computed;
  for (int i = 0; i < graph.inputs_size(); ++i) {
    const v1::GraphInput& input = graph.inputs(i);
    if (!input.meta().has_symbolic()) continue;
    const size_t n = b.python_inputs.size();
    b.python_inputs.emplace_back();
    absl::StatusOr<ExprPtr> expr = Parse(input.meta().symbolic().expr());
    if (!expr.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("inputs[", i, "] (\"", input.name(),
                       "\") meta.symbolic.expr: ", expr.status().message()));
    }
    std::string symbol;
    if (IsSymbolExpr(**expr, &symbol) && !absl::StartsWith(symbol, "L[")) {
      b.python_inputs[n] = std::move(symbol);
      continue;
    }
    // An expression over unhinted symbols stays unbound, like those symbols.
    absl::StatusOr<Value> value = Evaluate(**expr, b);
    if (value.ok()) computed.emplace_back(absl::StrCat("L['t", n, "']"), *value);
  }
  for (auto& [name, value] : computed) b.symbols.insert_or_assign(name, value);
  return b;
}

absl::StatusOr<CompiledGuards> CompiledGuards::Compile(const v1::Guards& guards) {
  CompiledGuards out;
  out.guards_.reserve(static_cast<size_t>(guards.shape_env_size()) + 1);
  auto add = [&](std::string field, const std::string& text) -> absl::Status {
    absl::StatusOr<ExprPtr> expr = Parse(text);
    if (!expr.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": cannot parse `", text, "`: ", expr.status().message()));
    }
    out.guards_.push_back(Guard{std::move(field), text, *std::move(expr)});
    return absl::OkStatus();
  };
  for (int i = 0; i < guards.shape_env_size(); ++i) {
    absl::Status s = add(absl::StrCat("guards.shape_env[", i, "]"), guards.shape_env(i));
    if (!s.ok()) return s;
  }
  if (!guards.python_expr().empty()) {
    absl::Status s = add("guards.python_expr", guards.python_expr());
    if (!s.ok()) return s;
  }
  return out;
}

GuardCheck CompiledGuards::Check(const Bindings& bindings) const {
  GuardCheck result;
  for (const Guard& g : guards_) {
    absl::StatusOr<bool> holds = EvaluateBool(*g.expr, bindings);
    if (holds.ok() && *holds) continue;
    result.holds = false;
    result.field = g.field;
    result.guard = g.text;
    const std::string values = DescribeValues(*g.expr, bindings);
    if (holds.ok()) {
      result.message = absl::StrCat("guard miss: `", g.text, "` is false at ", values);
    } else {
      result.error = holds.status();
      result.message = absl::StrCat("guard miss: `", g.text, "` cannot be evaluated at ", values,
                                    ": ", holds.status().message());
    }
    return result;
  }
  return result;
}

GuardCheck CheckSymbolRanges(const v1::Graph& graph, const Bindings& bindings) {
  GuardCheck result;
  for (int i = 0; i < graph.symbols_size(); ++i) {
    const v1::Symbol& s = graph.symbols(i);
    auto it = bindings.symbols.find(s.name());
    if (it == bindings.symbols.end()) continue;
    for (const bool lower : {true, false}) {
      const v1::Bound& bound = lower ? s.lower() : s.upper();
      Value limit;
      if (bound.kind_case() == v1::Bound::kIntValue) {
        limit = Value(bound.int_value());
      } else if (bound.kind_case() == v1::Bound::kFloatValue) {
        limit = Value(bound.float_value());
      } else {
        continue;  // infinite or absent: no limit
      }
      const Order o = CompareValues(it->second, limit);
      if (o == Order::kEqual || o == (lower ? Order::kGreater : Order::kLess)) continue;
      result.holds = false;
      result.field = absl::StrCat("symbols[", i, "].", lower ? "lower" : "upper");
      result.guard = absl::StrCat(s.name(), lower ? " >= " : " <= ", FormatValue(limit));
      result.message = absl::StrCat("symbol ", s.name(), "=", FormatValue(it->second), " is ",
                                    o == Order::kUnordered ? "not comparable with its"
                                    : lower                ? "below its lower"
                                                           : "above its upper",
                                    " bound ", FormatValue(limit));
      return result;
    }
  }
  return result;
}

}  // namespace kiln::sym
