#pragma once

// Symbolic expressions as PyTorch prints them: sizes and strides in sympy form
// ("256*s75", "Max(1, 32*CeilToInt(IntTrueDiv(s75, 32)))"), ShapeEnv guards in sympy form
// ("Eq(s0, 128)", "s1 >= 2", "Eq(zf97, 1.0e-5)") and guard expressions in the Python form
// of ShapeEnv.produce_guards_expression ("L['t1'] == 128*L['t0'] and 2 <= L['t0']").
//
// Parsing accepts exactly the grammar below; anything else is INVALID_ARGUMENT naming the
// offending token and its position (a 0-based byte offset), never a guess. Evaluation
// follows Python: integers are exact 64-bit (overflow is an error, not a wrap), `//` and
// `%`/Mod floor towards negative infinity, `/` is true division. Expressions are immutable
// and safe to share across threads.
//
// Grammar (Python's precedence and associativity; whitespace is spaces and tabs):
//
//   expression  := disjunction [ "if" disjunction "else" expression ]
//   disjunction := conjunction { "or" conjunction }
//   conjunction := inversion { "and" inversion }
//   inversion   := "not" inversion | comparison
//   comparison  := bitor { ("==" | "!=" | "<" | "<=" | ">" | ">=") bitor }  (chains: 2 <= x < 5)
//   bitor       := bitand { "|" bitand }
//   bitand      := sum { "&" sum }
//   sum         := term { ("+" | "-") term }
//   term        := factor { ("*" | "/" | "//" | "%") factor }
//   factor      := "-" factor | "~" factor | power
//   power       := primary [ "**" factor ]
//   primary     := INT | FLOAT | "True" | "False" | "oo" | "int_oo" | "math.inf"
//                | SYMBOL | "L['t" DIGITS "']" | "(" expression ")"
//                | FUNCTION "(" expression { "," expression } ")"
//                | "Piecewise" "(" pair { "," pair } ")"
//   pair        := "(" expression "," expression ")"            (value, condition)
//   INT         := DIGITS (at most 2**63 - 1; 2**63 only right after a unary minus)
//   FLOAT       := DIGITS "." [DIGITS] [EXP] | "." DIGITS [EXP] | DIGITS EXP   (finite)
//   EXP         := ("e" | "E") ["+" | "-"] DIGITS
//   SYMBOL      := ("s" | "u" | "zf" | "zuf") DIGITS   (ShapeEnv's size, unbacked int, float
//                  and unbacked float symbols; DIGITS without leading zeros)
//   FUNCTION    := Eq Ne Lt Le Gt Ge And Or Not Max Min Abs FloorDiv CeilDiv Mod PythonMod
//                  CleanDiv IntTrueDiv FloatTrueDiv CeilToInt FloorToInt TruncToInt
//                  RoundToInt RoundDecimal TruncToFloat ToFloat PowByNatural FloatPow
//                  Identity LShift RShift BitwiseFn_bitwise_and BitwiseFn_bitwise_or
//                  IsNonOverlappingAndDenseIndicator OpaqueUnaryFn_NAME (NAME: sqrt cos cosh
//                  sin sinh tan tanh asin acos atan exp log asinh log2), sympy's floor and
//                  ceiling, and the names PyTorch's Python printer uses for some of them: max
//                  min abs round math.floor math.ceil math.trunc torch.sym_float math.NAME
//
// These are every function torch.utils._sympy and sympy put in ShapeEnv sizes and guards
// (Inductor's ModularIndexing and Where never reach them). Python-printer names and sympy's
// floor/ceiling parse to the same tree as their sympy names (`max(a, b)` is `Max(a, b)`,
// `round(x)` RoundToInt, `round(x, n)` RoundDecimal, `math.sqrt(x)` OpaqueUnaryFn_sqrt),
// `math.inf` to `oo`, and `~x` (sympy's printing of Not) to `Not(x)`. A minus sign directly
// before a number literal (not followed by `**`) is part of the literal. Nesting deeper than
// kMaxDepth (parentheses, calls, unary operators, `**`, conditional expressions) is
// INVALID_ARGUMENT.
//
// Values: `oo`, `int_oo` and `math.inf` evaluate to the float +infinity. Bools act as the
// integers 0 and 1 in arithmetic, as in Python. `and`/`or` return one of their operands and
// stop at the first deciding one, as in Python; And/Or (any number of arguments, at least
// one) return a bool and also stop early. Eq..Ge compare like Python's operators (ints and
// floats exactly). Max/Min return the first extreme argument. FloorDiv and CleanDiv are
// `//`, Mod and PythonMod are `%`, IntTrueDiv and FloatTrueDiv are `/` (int/int is
// correctly rounded), CeilDiv is the ceiling of the exact quotient, PowByNatural is `**`,
// FloatPow is `**` on floats, CeilToInt/FloorToInt/TruncToInt/RoundToInt are
// math.ceil/floor/trunc and round() (ties to even; OUT_OF_RANGE when the result does not fit
// int64), RoundDecimal(x, n) is round(float(x), n) (correctly rounded, as CPython), ToFloat is
// float(), TruncToFloat is float(math.trunc(x)), Identity is its argument. `&` and `|` (and
// BitwiseFn_bitwise_and/or) are Python's on ints and bools, which on the bools of relations
// are sympy's And/Or; LShift/RShift are `<<`/`>>` (a negative count is INVALID_ARGUMENT).
// IsNonOverlappingAndDenseIndicator(sizes..., strides...) is torch's
// eval_is_non_overlapping_and_dense as 1 or 0. OpaqueUnaryFn_NAME is math.NAME(float(x)) with
// Python's errors: INVALID_ARGUMENT for a domain error, OUT_OF_RANGE for an overflow.
// Piecewise returns the value of its first pair whose condition holds (INVALID_ARGUMENT if
// none does).

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

class Expr;  // defined in compiler/sym/expr_tree.h, internal to compiler/sym
using ExprPtr = std::shared_ptr<const Expr>;

// The deepest nesting Parse accepts; deeper input is INVALID_ARGUMENT, not a stack overflow.
inline constexpr int kMaxDepth = 128;

// How symbols get their values during evaluation. Symbols are named as in sympy form
// ("s0", "u3", "zf97"); `L['tN']` in Python-form guards is looked up as "L['tN']" unless a
// binding for it exists under `python_inputs` (the N-th symbolic input's symbol name; an
// empty name there means "look up L['tN']").
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

// Evaluates to a bool (guards); an integer or float is true when non-zero, as in Python.
absl::StatusOr<bool> EvaluateBool(const Expr& expr, const Bindings& bindings);

// Evaluates to an int64 (sizes, strides); a float or bool result is INVALID_ARGUMENT.
absl::StatusOr<int64_t> EvaluateInt(const Expr& expr, const Bindings& bindings);

// A canonical printing: the same expression always prints the same way, and two
// expressions that differ print differently. Parse(Print(e)) gives an equal expression.
// Floats print as Python's repr does ("1e-05", "2.0"); operators are spaced as in
// "s0 + 2*s1 >= 4 and s2 // 2 == L['t0']**2".
std::string Print(const Expr& expr);

// Whether two expressions are the same tree (floats compared bit for bit).
bool Equal(const Expr& a, const Expr& b);

// A value as Python prints it: "64", "1e-05", "2.0", "True", "inf".
std::string FormatValue(const Value& value);

// The distinct symbols `expr` mentions (L['tN'] references as "L['tN']"), in order of
// first appearance.
std::vector<std::string> FreeSymbols(const Expr& expr);

// A copy of `expr` with symbols renamed through `renaming` (names not in it stay). Only
// symbols are renamed; L['tN'] references are positional and stay. New names should be
// symbol names, or Print's output will not parse.
ExprPtr RenameSymbols(const Expr& expr,
                      const std::map<std::string, std::string, std::less<>>& renaming);

}  // namespace kiln::sym
