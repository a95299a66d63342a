#pragma once

// Integer index expressions of the loop IR: sizes, strides, offsets and element indices as
// polynomials over loop variables and symbols, with floor and ceiling division, modulo, Max
// and Min as atoms. An IndexExpr is kept in a normal form (a sorted sum of terms, each an
// integer coefficient times a sorted product of atoms; Max and Min flattened, their
// arguments sorted and those that provably never decide dropped), so two expressions that
// normalize alike compare equal and print alike; that is what makes fusion decisions and
// artifact bytes deterministic.
//
// Every quantity an IndexExpr stands for is a non-negative integer at run time (sizes,
// strides, loop indices), which is what lets FloorDiv and Mod simplify: given the extent of
// each loop variable, (a*d + b) // d is a when 0 <= b < d can be proven, and Max(1, x) is x
// when x >= 1 can be. Symbols are taken to be >= 0.
//
// A size outside these forms (Abs, Piecewise, a float, ...) can still be carried as an
// opaque atom: it prints and evaluates as its sympy text, and takes part in sums and
// products like a symbol, but no kernel can compute it (Computable() is false), so the
// nodes that would need it in a kernel fall back. Immutable values; safe to share across
// threads.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "compiler/sym/expr.h"

namespace kiln::loop {

class IndexExpr;

// One factor of a term: a loop variable, a symbol, FloorDiv/CeilDiv/Mod of two expressions,
// Max/Min (n arguments as a right-nested chain of pairs: Max(a, Max(b, c))), or an opaque
// sympy expression.
struct Atom {
  enum class Kind : uint8_t { kVar, kSym, kDiv, kMod, kCeilDiv, kMax, kMin, kOpaque };
  Kind kind = Kind::kVar;
  int32_t id = 0;                                                   // kVar, kSym
  std::shared_ptr<const std::pair<IndexExpr, IndexExpr>> operands;  // kDiv .. kMin
  sym::ExprPtr opaque;  // kOpaque: the expression, its symbols named s<id>
  std::string key;      // canonical text; atoms order and compare by it
};

struct Term {
  int64_t coef = 0;
  std::vector<Atom> factors;  // sorted by key; empty for the constant term
  std::string key;            // the factors' keys joined, "" for the constant term
};

// The extents of loop variables (exclusive upper bounds), for simplification. A variable
// with no known extent returns nullptr.
using VarExtents = std::function<const IndexExpr*(int32_t var)>;

class IndexExpr {
 public:
  IndexExpr() = default;  // zero
  static IndexExpr Const(int64_t value);
  static IndexExpr Var(int32_t id);
  static IndexExpr Sym(int32_t id);

  bool is_zero() const { return terms_.empty(); }
  bool is_const() const { return terms_.empty() || (terms_.size() == 1 && terms_[0].key.empty()); }
  int64_t const_value() const { return terms_.empty() ? 0 : terms_[0].coef; }  // is_const only
  const std::vector<Term>& terms() const { return terms_; }
  // The canonical text, also the identity: equal keys mean equal expressions.
  const std::string& key() const { return key_; }

  friend IndexExpr operator+(const IndexExpr& a, const IndexExpr& b);
  friend IndexExpr operator-(const IndexExpr& a, const IndexExpr& b);
  friend IndexExpr operator*(const IndexExpr& a, const IndexExpr& b);
  friend bool operator==(const IndexExpr& a, const IndexExpr& b) { return a.key_ == b.key_; }
  friend bool operator!=(const IndexExpr& a, const IndexExpr& b) { return a.key_ != b.key_; }

  // Floor division, ceiling division and modulo by a positive divisor, simplified as far as
  // the extents allow.
  static IndexExpr FloorDiv(const IndexExpr& a, const IndexExpr& d, const VarExtents& extents);
  static IndexExpr CeilDiv(const IndexExpr& a, const IndexExpr& d, const VarExtents& extents);
  static IndexExpr Mod(const IndexExpr& a, const IndexExpr& d, const VarExtents& extents);
  // The largest / smallest of `args` (at least one): nested Max (Min) flattened, duplicates
  // and arguments that provably never decide dropped, a single argument returned as it is.
  static IndexExpr Max(absl::Span<const IndexExpr> args, const VarExtents& extents);
  static IndexExpr Min(absl::Span<const IndexExpr> args, const VarExtents& extents);
  // An integer expression the forms above do not cover, as one opaque atom. `sym_id` maps
  // each of its symbols to an id; INVALID_ARGUMENT for a symbol it does not know (-1) or an
  // L['tN'] reference.
  static absl::StatusOr<IndexExpr> Opaque(const sym::Expr& expr,
                                          const std::function<int32_t(absl::string_view)>& sym_id);

  // Whether code can compute this: false when an opaque atom occurs anywhere in it.
  bool Computable() const;

  // Whether 0 <= this < bound holds for every value of the symbols (>= 0) and variables
  // (inside their extents), as far as a polynomial bound can prove.
  bool ProvablyBelow(const IndexExpr& bound, const VarExtents& extents) const;

  // Replaces every variable v by map(v) and renormalizes (divisions are re-simplified with
  // `extents`, which describe the variables of the result).
  IndexExpr SubstituteVars(const std::function<IndexExpr(int32_t)>& map,
                           const VarExtents& extents) const;
  IndexExpr RenameSyms(const std::function<int32_t(int32_t)>& map) const;

  bool UsesVars() const;
  void CollectVars(std::vector<int32_t>* vars) const;  // appends, may repeat
  void CollectSyms(std::vector<int32_t>* syms) const;  // appends, may repeat

  // The value for the given symbol and variable values, with Python's floor semantics for
  // FloorDiv and Mod. OUT_OF_RANGE on overflow or a division by zero.
  absl::StatusOr<int64_t> Evaluate(absl::Span<const int64_t> syms,
                                   absl::Span<const int64_t> vars) const;

  // Sympy-form text over symbol names ("128*s0 + 4", "FloorDiv(s0 + 3, 4)", "CeilDiv(s0,
  // 32)", "Max(1, s0, s1)"); variables print as p<N>. Parses with kiln::sym::Parse when it
  // mentions no variables, and without opaque atoms stays within what the client runtime's
  // IntExpr evaluates.
  std::string ToString(absl::Span<const std::string> sym_names) const;

 private:
  // A single variable or symbol with coefficient 1.
  static IndexExpr Leaf(Atom::Kind kind, int32_t id);
  // A single atom with coefficient 1.
  static IndexExpr OfAtom(Atom a);
  static IndexExpr MinMax(Atom::Kind kind, absl::Span<const IndexExpr> args,
                          const VarExtents& extents);
  // A normalized sum of `terms`.
  static IndexExpr OfTerms(std::vector<Term> terms);
  // Splits a = g*big + small and d = g*rest with g a monomial, 0 <= small < g provably, g the
  // first such common factor of d and a term of a; false when there is none (g = 1).
  static bool SplitByCommonFactor(const IndexExpr& a, const IndexExpr& d, const VarExtents& extents,
                                  IndexExpr* g, IndexExpr* rest, IndexExpr* big, IndexExpr* small);
  void Normalize();  // sorts and merges terms, drops zeros, computes key_
  // Rewrites c*D*FloorDiv(x, D) + c*Mod(x, D) as c*x (what a view's unravelling leaves after
  // a reshape back), then normalizes again.
  void CombineDivMod();
  std::vector<Term> terms_;
  std::string key_ = "0";
};

// Converts a size, stride or offset in sympy form (a compiler/sym expression) into an
// IndexExpr: integers, symbols, + - *, `**` and PowByNatural with a small constant exponent,
// FloorDiv/CleanDiv/`//`, Mod/PythonMod/`%`, CeilDiv, CeilToInt and FloorToInt of
// IntTrueDiv or `/` (the exact ceiling or floor of the quotient; PyTorch rounds it through a
// double first, and the two agree below 2**53), Max/Min, Identity, and LShift/RShift by a
// constant. `sym_id` maps a symbol name to its id (or -1: unknown). UNIMPLEMENTED, naming the
// expression, for any other form (Abs, Piecewise, floats, an unknown symbol, ...).
absl::StatusOr<IndexExpr> IndexExprFromSym(const sym::Expr& expr,
                                           const std::function<int32_t(absl::string_view)>& sym_id);

// kiln::sym::Parse then IndexExprFromSym; INVALID_ARGUMENT for text that does not parse.
absl::StatusOr<IndexExpr> ParseIndexExpr(absl::string_view text,
                                         const std::function<int32_t(absl::string_view)>& sym_id);

}  // namespace kiln::loop
