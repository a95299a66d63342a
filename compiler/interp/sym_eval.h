#pragma once

// Evaluates the integer size expressions the interpreter meets in graph metadata and
// arguments ("128*s77", "s0 + 1", "FloorDiv(s0, 2)") given the symbols' values. A small
// evaluator of its own rather than compiler/sym's, so the oracle stays independent of
// what it checks. Accepts integers, symbols, + - * // % **, unary minus, parentheses, the
// functions Max, Min, FloorDiv, Mod and CeilDiv, and CeilToInt/FloorToInt of IntTrueDiv(a, b)
// (the exact ceiling or floor of a/b); anything else is INVALID_ARGUMENT.

#include <cstdint>
#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kiln::interp {

absl::StatusOr<int64_t> EvalSymInt(absl::string_view expr,
                                   const std::map<std::string, int64_t, std::less<>>& symbols);

// Whether `expr` is a bare symbol name ("s77").
bool IsBareSymbol(absl::string_view expr);

}  // namespace kiln::interp
