#pragma once

// Integer expressions over symbols, as graphs and CompiledGraphs carry them in SymInt.expr
// (sizes, strides, buffer sizes, arena offsets, view geometry, launch extents). One
// evaluator for the CPU runtime and the reference interpreter; it is apart from the
// compiler's symbolic algebra (compiler/sym), so neither of them links the compiler. It
// accepts the integer subset of sympy's printing that Kiln's graphs and artifacts use:
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
// any identifier naming one of the given symbols. Arithmetic is Python's on exact 64-bit
// integers: `//` and `%` floor toward negative infinity; overflow, division by zero and a
// negative exponent are OUT_OF_RANGE, never a wrap. Anything outside the subset (floats,
// comparisons, unknown functions or symbols) is INVALID_ARGUMENT naming the text and
// position, and so is nesting (parentheses, function calls, unary minus, `**`) deeper than
// kMaxNesting levels: parsing recurses, and hostile text must not exhaust the stack.
//
// An IntExpr is immutable after parsing: evaluation is a const call that allocates nothing
// for small expressions and is safe from any number of threads.

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace kiln {

class IntExpr {
 public:
  // The deepest nesting Parse accepts.
  static constexpr int kMaxNesting = 64;

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

// Parses `text` and evaluates it with each symbol's value looked up by name in `symbols`:
// for callers that meet an expression once (the reference interpreter). A symbol missing
// from `symbols` is INVALID_ARGUMENT, like any unknown name.
absl::StatusOr<int64_t> EvaluateIntExpr(absl::string_view text,
                                        const std::map<std::string, int64_t, std::less<>>& symbols);

}  // namespace kiln
