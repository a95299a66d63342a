#pragma once

// Connects the client's CPU runtime to the reference interpreter: tensors and call arguments
// converted between the two, and a FallbackHook that runs fallback steps through the
// interpreter. For checking artifacts (kilnc --check, the compiler's and the runtime's
// tests); the runtime itself never links the interpreter.

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/runtime/call.h"
#include "client/runtime/tensor.h"
#include "compiler/interp/interpreter.h"

namespace kiln::check {

// A contiguous interpreter copy of `t` (values rounded to t's dtype, as stored).
interp::Tensor ToInterp(const runtime::Tensor& t);
interp::Arg ToInterp(const runtime::CallValue& v);

// A runtime tensor with t's sizes, strides and storage offset (fresh memory) and its values.
runtime::Tensor FromInterp(const interp::Tensor& t);

// Writes an interpreter result (a tensor of out's sizes, or an int) into `out`;
// INVALID_ARGUMENT when it does not fit. An undefined `out` takes nothing.
absl::Status WriteResult(const interp::Value& value, const runtime::Tensor& out);

// Runs `op` in the interpreter on runtime arguments (with `options`, its RNG stream at
// options.rng_offset; the arguments' own metadata is not followed).
absl::StatusOr<std::vector<interp::Value>> RunInterp(
    const std::string& op, const std::vector<runtime::CallValue>& args,
    const std::vector<std::pair<std::string, runtime::CallValue>>& kwargs = {},
    interp::RunOptions options = {});

// A FallbackHook that runs each fallback op with interp::RunOp, on the call's RNG stream.
runtime::FallbackHook InterpFallback();

}  // namespace kiln::check
