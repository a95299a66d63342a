#pragma once

// Connects the CPU runtime's tests to the reference interpreter: converting tensors and
// call arguments between the two, a FallbackHook that runs fallback steps through the
// interpreter, a runner that lets the compiler's checks execute artifacts on the runtime,
// random tensors with chosen layouts, and comparison with tolerances.

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "client/runtime/call.h"
#include "client/runtime/tensor.h"
#include "compiler/exec/check.h"
#include "compiler/interp/interpreter.h"

namespace kiln::runtime::testing {

// Call arguments for extern-op tests.
inline CallValue V(Tensor t) { return CallValue{std::move(t)}; }
inline CallValue V(int64_t i) { return CallValue{i}; }
inline CallValue V(double d) { return CallValue{d}; }
inline CallValue B(bool b) { return CallValue{b}; }
inline CallValue None() { return CallValue{}; }
inline CallValue Ints(const std::vector<int64_t>& v) {
  CallValue::List l;
  for (int64_t i : v) l.push_back(CallValue{i});
  return CallValue{std::move(l)};
}
inline CallValue Bools(const std::vector<bool>& v) {
  CallValue::List l;
  for (bool b : v) l.push_back(CallValue{static_cast<bool>(b)});
  return CallValue{std::move(l)};
}

// A contiguous interpreter copy of `t` (values rounded to t's dtype, as stored).
interp::Tensor ToInterp(const Tensor& t);
interp::Arg ToInterp(const CallValue& v);

// A runtime tensor with t's sizes, strides and storage offset (fresh memory) and its values.
Tensor FromInterp(const interp::Tensor& t);

// Writes an interpreter result into a runtime tensor of the same sizes.
absl::Status WriteResult(const interp::Value& value, const Tensor& out);

// A FallbackHook that runs each fallback op with interp::RunOp.
FallbackHook InterpFallback();

// An exec::Runner that loads the artifact into a CpuRuntime and runs it: inputs converted
// with FromInterp (symbolic ints as Tensor::Scalar), buffers poisoned, fallback steps through
// InterpFallback, the RNG seed, offset and thread count taken from the ExecOptions, and the
// outputs converted back (symbolic-scalar outputs as ints, None as None).
exec::Runner RuntimeRunner();

// Runs `op` in the interpreter on runtime arguments (with `options`, its RNG stream at
// options.rng_offset; the arguments' own metadata is not followed).
absl::StatusOr<std::vector<interp::Value>> RunInterp(
    const std::string& op, const std::vector<CallValue>& args,
    const std::vector<std::pair<std::string, CallValue>>& kwargs = {},
    interp::RunOptions options = {});

enum class Layout {
  kContiguous,
  kTransposed,  // the last two dims are swapped in memory
  kStrided,     // every other element of a larger buffer, at an offset
};

// A tensor of `sizes` with values uniform in [lo, hi), laid out as asked.
Tensor RandomTensor(const std::vector<int64_t>& sizes, DType dtype, Layout layout,
                    std::mt19937_64& rng, double lo = -1.0, double hi = 1.0);

// |got - want| <= atol + rtol * |want| elementwise (NaNs must match).
::testing::AssertionResult AllClose(const std::vector<double>& got, const std::vector<double>& want,
                                    double rtol, double atol);

// Tolerances for comparing a runtime result of `dtype` with the double-precision oracle.
struct Tolerance {
  double rtol, atol;
};
Tolerance ToleranceFor(DType dtype);

// Whether two tensors hold identical bytes element by element.
bool SameBytes(const Tensor& a, const Tensor& b);

}  // namespace kiln::runtime::testing
