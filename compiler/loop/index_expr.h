#pragma once

// Integer index expressions of the loop IR: sizes, strides, offsets and element indices as
// polynomials over loop variables and symbols, with floor division and modulo as opaque
// atoms. An IndexExpr is kept in a normal form (a sorted sum of terms, each an integer
// coefficient times a sorted product of atoms), so two expressions that normalize alike
// compare equal and print alike; that is what makes fusion decisions and artifact bytes
// deterministic.
//
// Every quantity an IndexExpr stands for is a non-negative integer at run time (sizes,
// strides, loop indices), which is what lets FloorDiv and Mod simplify: given the extent of
// each loop variable, (a*d + b) // d is a when 0 <= b < d can be proven. Immutable values;
// safe to share across threads.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace kiln::loop {

class IndexExpr;

// One factor of a term: a loop variable, a symbol, or FloorDiv/Mod of two expressions.
struct Atom {
  enum class Kind : uint8_t { kVar, kSym, kDiv, kMod };
  Kind kind = Kind::kVar;
  int32_t id = 0;                                                   // kVar, kSym
  std::shared_ptr<const std::pair<IndexExpr, IndexExpr>> operands;  // kDiv, kMod
  std::string key;  // canonical text; atoms order and compare by it
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

  // Floor division and modulo by a positive divisor, simplified as far as the extents allow.
  static IndexExpr FloorDiv(const IndexExpr& a, const IndexExpr& d, const VarExtents& extents);
  static IndexExpr Mod(const IndexExpr& a, const IndexExpr& d, const VarExtents& extents);

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

  // The value for the given symbol and variable values. OUT_OF_RANGE on overflow or a
  // division by zero.
  absl::StatusOr<int64_t> Evaluate(absl::Span<const int64_t> syms,
                                   absl::Span<const int64_t> vars) const;

  // Sympy-form text over symbol names ("128*s0 + 4", "FloorDiv(s0 + 3, 4)"); variables print
  // as p<N>. Parses with kiln::sym::Parse when it mentions no variables.
  std::string ToString(absl::Span<const std::string> sym_names) const;

 private:
  // A single variable or symbol with coefficient 1.
  static IndexExpr Leaf(Atom::Kind kind, int32_t id);
  void Normalize();  // sorts and merges terms, drops zeros, computes key_
  std::vector<Term> terms_;
  std::string key_ = "0";
};

// Parses the sympy-form text of a size, stride or offset into an IndexExpr: integers,
// symbols, +, -, *, parentheses, FloorDiv/Mod/`//`/`%`. `sym_id` maps a symbol name to its
// id (or -1: unknown). UNIMPLEMENTED for any other form (Max, CeilToInt, ...).
absl::StatusOr<IndexExpr> ParseIndexExpr(absl::string_view text,
                                         const std::function<int32_t(absl::string_view)>& sym_id);

}  // namespace kiln::loop
