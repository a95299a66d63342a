#pragma once

// Symbolic expressions as PyTorch prints them: sizes and strides in sympy form
// ("256*s75", "Max(1, 32*CeilToInt(IntTrueDiv(s75, 32)))"), ShapeEnv guards in sympy form
// ("Eq(s0, 128)", "s1 >= 2", "Eq(zf97, 1.0e-5)") and guard expressions in the Python form
// of ShapeEnv.produce_guards_expression ("L['t1'] == 128*L['t0'] and 2 <= L['t0']").
//
// Parsing accepts exactly the grammar documented in expr.cc; anything else is
// INVALID_ARGUMENT naming the offending token and its position, never a guess. Evaluation
// follows Python: integers are exact 64-bit (overflow is an error, not a wrap), `//` and
// `%`/Mod floor towards negative infinity, `/` is true division. Expressions are immutable
// and safe to share across threads.

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kiln::sym {

// The value of an expression: an integer, a float or a bool.
using Value = std::variant<int64_t, double, bool>;

class Expr;
using ExprPtr = std::shared_ptr<const Expr>;

// How symbols get their values during evaluation. Symbols are named as in sympy form
// ("s0", "u3", "zf97"); `L['tN']` in Python-form guards is looked up as "L['tN']" unless a
// binding for it exists under `python_inputs` (the N-th symbolic input's symbol name).
struct Bindings {
  std::map<std::string, Value, std::less<>> symbols;
  std::vector<std::string> python_inputs;  // L['t0'] -> python_inputs[0], ...
};

// Parses one expression in sympy form or Python guard form (both grammars are accepted;
// they share operators and differ in function names and `L[...]` references).
absl::StatusOr<ExprPtr> Parse(absl::string_view text);

// Evaluates `expr`. INVALID_ARGUMENT for an unbound symbol (naming it) or a type error;
// OUT_OF_RANGE for integer overflow or division by zero.
absl::StatusOr<Value> Evaluate(const Expr& expr, const Bindings& bindings);

// Evaluates to a bool (guards); an integer is true when non-zero.
absl::StatusOr<bool> EvaluateBool(const Expr& expr, const Bindings& bindings);

// Evaluates to an int64 (sizes, strides); a float result is an error.
absl::StatusOr<int64_t> EvaluateInt(const Expr& expr, const Bindings& bindings);

// A canonical printing: the same expression always prints the same way, and two
// expressions that differ print differently. Parse(Print(e)) gives an equal expression.
std::string Print(const Expr& expr);

// The distinct symbols `expr` mentions (L['tN'] references as "L['tN']"), in order of
// first appearance.
std::vector<std::string> FreeSymbols(const Expr& expr);

// A copy of `expr` with symbols renamed through `renaming` (names not in it stay).
ExprPtr RenameSymbols(const Expr& expr,
                      const std::map<std::string, std::string, std::less<>>& renaming);

}  // namespace kiln::sym
