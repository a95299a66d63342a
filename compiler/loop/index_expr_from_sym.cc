// IndexExprFromSym: a size in sympy form (a compiler/sym tree) as an index expression.
//
// The tree is walked bottom-up in its post-order layout, as the evaluator walks it: each
// node becomes an IndexExpr, or a pending quotient (IntTrueDiv(a, b), a/b) that only
// CeilToInt and FloorToInt may consume. Anything else stops the walk as UNIMPLEMENTED.

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "compiler/loop/index_expr.h"
#include "compiler/sym/expr_tree.h"

namespace kiln::loop {
namespace {

using sym::ChainKind;
using sym::ChainOp;
using sym::Function;
using sym::NodeKind;

// Exponents beyond this are not sizes; they would only overflow coefficients.
constexpr int64_t kMaxExponent = 16;

// What one node of the tree stands for.
struct Slot {
  std::optional<IndexExpr> value;                           // an integer expression
  std::optional<std::pair<IndexExpr, IndexExpr>> quotient;  // a true division, pending
};

class Converter {
 public:
  Converter(const sym::Expr& expr, const std::function<int32_t(absl::string_view)>& sym_id)
      : expr_(expr), sym_id_(sym_id), slots_(expr.nodes().size()) {}

  absl::StatusOr<IndexExpr> Run() {
    for (uint32_t i = 0; i < expr_.nodes().size(); ++i) {
      if (!Convert(expr_.node(i), &slots_[i])) {
        return absl::UnimplementedError(absl::StrCat("symbolic expression `", sym::Print(expr_),
                                                     "` is outside what the loop IR represents"));
      }
    }
    const Slot& root = slots_[expr_.root()];
    if (!root.value) {
      return absl::UnimplementedError(
          absl::StrCat("symbolic expression `", sym::Print(expr_),
                       "` is outside what the loop IR represents (not an integer)"));
    }
    return *root.value;
  }

 private:
  // The integer expression of child k, or null.
  const IndexExpr* Int(const sym::Expr::Node& n, uint32_t k) const {
    const Slot& s = slots_[expr_.child(n, k)];
    return s.value ? &*s.value : nullptr;
  }

  // The value of child k when it is a non-negative integer constant up to `limit`.
  std::optional<int64_t> SmallConstant(const sym::Expr::Node& n, uint32_t k, int64_t limit) const {
    const IndexExpr* e = Int(n, k);
    if (e == nullptr || !e->is_const() || e->const_value() < 0 || e->const_value() > limit) {
      return std::nullopt;
    }
    return e->const_value();
  }

  static std::optional<IndexExpr> Power(const IndexExpr& base, int64_t exponent) {
    if (base.is_const()) {
      int64_t r = 1;
      for (int64_t i = 0; i < exponent; ++i) {
        if (__builtin_mul_overflow(r, base.const_value(), &r)) return std::nullopt;
      }
      return IndexExpr::Const(r);
    }
    IndexExpr r = IndexExpr::Const(1);
    for (int64_t i = 0; i < exponent; ++i) r = r * base;
    return r;
  }

  // Fills `out` for `n`; false when `n` is outside the forms an IndexExpr takes.
  bool Convert(const sym::Expr::Node& n, Slot* out) {
    switch (n.kind) {
      case NodeKind::kInt:
        out->value = IndexExpr::Const(n.int_value);
        return true;
      case NodeKind::kSymbol: {
        const int32_t id = sym_id_(expr_.name(n));
        if (id < 0) return false;
        out->value = IndexExpr::Sym(id);
        return true;
      }
      case NodeKind::kNeg: {
        const IndexExpr* a = Int(n, 0);
        if (a == nullptr) return false;
        out->value = IndexExpr() - *a;
        return true;
      }
      case NodeKind::kPow: {
        const IndexExpr* base = Int(n, 0);
        const std::optional<int64_t> exponent = SmallConstant(n, 1, kMaxExponent);
        if (base == nullptr || !exponent) return false;
        out->value = Power(*base, *exponent);
        return out->value.has_value();
      }
      case NodeKind::kChain:
        return Chain(n, out);
      case NodeKind::kCall:
        return Call(n, out);
      default:  // floats, bools, infinities, L['tN'], not, conditional expressions
        return false;
    }
  }

  bool Chain(const sym::Expr::Node& n, Slot* out) {
    const auto kind = static_cast<ChainKind>(n.op);
    if (kind != ChainKind::kSum && kind != ChainKind::kProduct) return false;
    const IndexExpr* first = Int(n, 0);
    if (first == nullptr) return false;
    IndexExpr acc = *first;
    for (uint32_t k = 0; k + 1 < n.count; ++k) {
      const IndexExpr* x = Int(n, k + 1);
      if (x == nullptr) return false;
      switch (expr_.chain_op(n, k)) {
        case ChainOp::kAdd:
          acc = acc + *x;
          break;
        case ChainOp::kSub:
          acc = acc - *x;
          break;
        case ChainOp::kMul:
          acc = acc * *x;
          break;
        case ChainOp::kFloorDiv:
          acc = IndexExpr::FloorDiv(acc, *x, nullptr);
          break;
        case ChainOp::kMod:
          acc = IndexExpr::Mod(acc, *x, nullptr);
          break;
        case ChainOp::kTrueDiv:
          // Only as the whole of a rounding function's argument.
          if (k + 2 != n.count) return false;
          out->quotient.emplace(acc, *x);
          return true;
        default:
          return false;
      }
    }
    out->value = std::move(acc);
    return true;
  }

  bool Call(const sym::Expr::Node& n, Slot* out) {
    const auto f = static_cast<Function>(n.op);
    std::vector<IndexExpr> args;
    for (uint32_t k = 0; k < n.count; ++k) {
      if (const IndexExpr* a = Int(n, k)) args.push_back(*a);
    }
    const bool all_ints = args.size() == n.count;
    switch (f) {
      case Function::kMax:
      case Function::kMin:
        if (!all_ints) return false;
        out->value =
            f == Function::kMax ? IndexExpr::Max(args, nullptr) : IndexExpr::Min(args, nullptr);
        return true;
      case Function::kFloorDiv:
      case Function::kCleanDiv:
        if (!all_ints) return false;
        out->value = IndexExpr::FloorDiv(args[0], args[1], nullptr);
        return true;
      case Function::kMod:
      case Function::kPythonMod:
        if (!all_ints) return false;
        out->value = IndexExpr::Mod(args[0], args[1], nullptr);
        return true;
      case Function::kCeilDiv:
        if (!all_ints) return false;
        out->value = IndexExpr::CeilDiv(args[0], args[1], nullptr);
        return true;
      case Function::kIntTrueDiv:
        if (!all_ints) return false;
        out->quotient.emplace(args[0], args[1]);
        return true;
      case Function::kCeilToInt:
      case Function::kFloorToInt: {
        // Of an integer: the integer itself; of a quotient: its exact ceiling or floor.
        if (all_ints) {
          out->value = args[0];
          return true;
        }
        const Slot& q = slots_[expr_.child(n, 0)];
        if (!q.quotient) return false;
        out->value = f == Function::kCeilToInt
                         ? IndexExpr::CeilDiv(q.quotient->first, q.quotient->second, nullptr)
                         : IndexExpr::FloorDiv(q.quotient->first, q.quotient->second, nullptr);
        return true;
      }
      case Function::kTruncToInt:
      case Function::kRoundToInt:
      case Function::kIdentity:
        // Of an integer, each is the integer itself.
        if (!all_ints) return false;
        out->value = args[0];
        return true;
      case Function::kPowByNatural: {
        const std::optional<int64_t> exponent = SmallConstant(n, 1, kMaxExponent);
        if (!all_ints || !exponent) return false;
        out->value = Power(args[0], *exponent);
        return out->value.has_value();
      }
      case Function::kLShift:
      case Function::kRShift: {
        const std::optional<int64_t> shift = SmallConstant(n, 1, 62);
        if (!all_ints || !shift) return false;
        const IndexExpr scale = IndexExpr::Const(int64_t{1} << *shift);
        out->value =
            f == Function::kLShift ? args[0] * scale : IndexExpr::FloorDiv(args[0], scale, nullptr);
        return true;
      }
      default:
        return false;
    }
  }

  const sym::Expr& expr_;
  const std::function<int32_t(absl::string_view)>& sym_id_;
  std::vector<Slot> slots_;
};

}  // namespace

absl::StatusOr<IndexExpr> IndexExprFromSym(
    const sym::Expr& expr, const std::function<int32_t(absl::string_view)>& sym_id) {
  return Converter(expr, sym_id).Run();
}

absl::StatusOr<IndexExpr> ParseIndexExpr(absl::string_view text,
                                         const std::function<int32_t(absl::string_view)>& sym_id) {
  absl::StatusOr<sym::ExprPtr> expr = sym::Parse(text);
  if (!expr.ok()) return expr.status();
  return IndexExprFromSym(**expr, sym_id);
}

}  // namespace kiln::loop
