// Expr's structural operations: equality, free symbols, renaming, and the function table.

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "compiler/sym/expr.h"
#include "compiler/sym/expr_tree.h"

namespace kiln::sym {

const FunctionInfo& InfoOf(Function f) {
  // Indexed by Function; max_args 0 means "no upper limit". Piecewise counts pairs.
  static constexpr FunctionInfo kInfo[] = {
      {"Eq", 2, 2},
      {"Ne", 2, 2},
      {"Lt", 2, 2},
      {"Le", 2, 2},
      {"Gt", 2, 2},
      {"Ge", 2, 2},
      {"And", 1, 0},
      {"Or", 1, 0},
      {"Not", 1, 1},
      {"Max", 1, 0},
      {"Min", 1, 0},
      {"Abs", 1, 1},
      {"FloorDiv", 2, 2},
      {"CeilDiv", 2, 2},
      {"Mod", 2, 2},
      {"PythonMod", 2, 2},
      {"CleanDiv", 2, 2},
      {"IntTrueDiv", 2, 2},
      {"FloatTrueDiv", 2, 2},
      {"CeilToInt", 1, 1},
      {"FloorToInt", 1, 1},
      {"TruncToInt", 1, 1},
      {"ToFloat", 1, 1},
      {"PowByNatural", 2, 2},
      {"FloatPow", 2, 2},
      {"Piecewise", 1, 0},
      {"RoundToInt", 1, 1},
      {"RoundDecimal", 2, 2},
      {"TruncToFloat", 1, 1},
      {"Identity", 1, 1},
      {"LShift", 2, 2},
      {"RShift", 2, 2},
      {"BitwiseFn_bitwise_and", 2, 2},
      {"BitwiseFn_bitwise_or", 2, 2},
      {"IsNonOverlappingAndDenseIndicator", 2, 0},
      {"OpaqueUnaryFn_sqrt", 1, 1},
      {"OpaqueUnaryFn_cos", 1, 1},
      {"OpaqueUnaryFn_cosh", 1, 1},
      {"OpaqueUnaryFn_sin", 1, 1},
      {"OpaqueUnaryFn_sinh", 1, 1},
      {"OpaqueUnaryFn_tan", 1, 1},
      {"OpaqueUnaryFn_tanh", 1, 1},
      {"OpaqueUnaryFn_asin", 1, 1},
      {"OpaqueUnaryFn_acos", 1, 1},
      {"OpaqueUnaryFn_atan", 1, 1},
      {"OpaqueUnaryFn_exp", 1, 1},
      {"OpaqueUnaryFn_log", 1, 1},
      {"OpaqueUnaryFn_asinh", 1, 1},
      {"OpaqueUnaryFn_log2", 1, 1},
  };
  static_assert(sizeof(kInfo) / sizeof(kInfo[0]) == kNumFunctions);
  return kInfo[static_cast<size_t>(f)];
}

bool Expr::Equals(const Expr& other) const {
  if (nodes_.size() != other.nodes_.size()) return false;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    const Node& a = nodes_[i];
    const Node& b = other.nodes_[i];
    if (a.kind != b.kind || a.op != b.op) return false;
    switch (a.kind) {
      case NodeKind::kInt:
      case NodeKind::kBool:
        if (a.int_value != b.int_value) return false;
        break;
      case NodeKind::kFloat:
        if (std::memcmp(&a.float_value, &b.float_value, sizeof(double)) != 0) return false;
        break;
      case NodeKind::kInfinity:
        break;
      case NodeKind::kSymbol:
      case NodeKind::kInput:
        if (name(a) != other.name(b)) return false;
        break;
      default:
        if (a.count != b.count) return false;
        for (uint32_t k = 0; k < a.count; ++k) {
          if (child(a, k) != other.child(b, k)) return false;
        }
        if (a.kind == NodeKind::kChain && HasChainOps(static_cast<ChainKind>(a.op))) {
          for (uint32_t k = 0; k + 1 < a.count; ++k) {
            if (chain_op(a, k) != other.chain_op(b, k)) return false;
          }
        }
        break;
    }
  }
  return true;
}

bool Equal(const Expr& a, const Expr& b) { return a.Equals(b); }

std::vector<std::string> FreeSymbols(const Expr& expr) {
  // Post-order keeps leaves in their left-to-right order, which is the order of the text.
  std::vector<std::string> out;
  for (const Expr::Node& n : expr.nodes()) {
    if (n.kind != NodeKind::kSymbol && n.kind != NodeKind::kInput) continue;
    absl::string_view name = expr.name(n);
    bool seen = false;
    for (const std::string& s : out) {
      if (s == name) {
        seen = true;
        break;
      }
    }
    if (!seen) out.emplace_back(name);
  }
  return out;
}

ExprPtr RenameSymbols(const Expr& expr,
                      const std::map<std::string, std::string, std::less<>>& renaming) {
  return std::make_shared<const Expr>(expr.WithNames([&](absl::string_view name) {
    auto it = renaming.find(name);
    return it == renaming.end() ? name : absl::string_view(it->second);
  }));
}

}  // namespace kiln::sym
