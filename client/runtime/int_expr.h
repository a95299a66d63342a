#pragma once

// Integer expressions over symbols, as CompiledGraphs carry them in SymInt.expr (buffer
// sizes, arena offsets, view geometry, launch extents). This is the client's own small
// evaluator, kept apart from the compiler's (compiler/sym) so the runtime links nothing
// from the compiler. It accepts the integer subset of sympy's printing that artifacts use:
//
//   sum     := term { ("+" | "-") term }
//   term    := unary { ("*" | "//" | "%") unary }
//   unary   := "-" unary | power
//   power   := primary [ "**" unary ]
//   primary := INT | SYMBOL | "(" sum ")" | FUNCTION "(" sum { "," sum } ")"
//
// FUNCTION is Max/Min (max/min; one or more arguments), Abs (abs), FloorDiv and CleanDiv
// (`//`), CeilDiv, Mod and PythonMod (`%`), PowByNatural (`**`), and CeilToInt/FloorToInt
// applied directly to IntTrueDiv(a, b) (the ceiling/floor of an exact quotient). SYMBOL is
// any identifier naming one of the artifact's symbols. Arithmetic is Python's on exact
// 64-bit integers: `//` and `%` floor toward negative infinity; overflow, division by zero
// and a negative exponent are OUT_OF_RANGE, never a wrap. Anything outside the subset
// (floats, comparisons, unknown functions or symbols) is INVALID_ARGUMENT naming the text
// and position.
//
// An IntExpr is immutable after parsing: evaluation is a const call that allocates nothing
// for small expressions and is safe from any number of threads.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace kiln::runtime {

class IntExpr {
 public:
  // The constant 0.
  IntExpr() = default;
  static IntExpr Constant(int64_t value);

  // Parses `text`; symbols resolve to their positions in `symbols`, which Evaluate's
  // `values` then follow.
  static absl::StatusOr<IntExpr> Parse(absl::string_view text,
                                       absl::Span<const std::string> symbols);

  // The value with symbol i bound to values[i].
  absl::StatusOr<int64_t> Evaluate(absl::Span<const int64_t> values) const;

  bool is_constant() const { return code_.size() == 1 && code_[0].op == Op::kConst; }
  // The source text, for messages ("" for constants made by Constant()).
  const std::string& text() const { return text_; }

 private:
  enum class Op : uint8_t {
    kConst,
    kSymbol,
    kNeg,
    kAdd,
    kSub,
    kMul,
    kFloorDiv,
    kCeilDiv,
    kMod,
    kPow,
    kAbs,
    kMax,
    kMin
  };
  struct Instr {
    Op op;
    int64_t arg;  // kConst: the value; kSymbol: its index; kMax/kMin: argument count
  };
  friend class IntExprParser;

  std::vector<Instr> code_ = {{Op::kConst, 0}};  // postfix
  std::string text_;
};

}  // namespace kiln::runtime
