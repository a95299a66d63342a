#pragma once

// What the CPU runtime's tests add to kiln_check's bridge to the reference interpreter
// (compiler/tools/check/interp_bridge.h, whose conversions and interpreter fallback are
// available here by their short names): call-argument shorthands, random tensors with
// chosen layouts, and comparison with tolerances.

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <utility>
#include <vector>

#include "client/runtime/call.h"
#include "client/runtime/tensor.h"
#include "compiler/tools/check/interp_bridge.h"

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

using check::FromInterp;
using check::InterpFallback;
using check::RunInterp;
using check::ToInterp;
using check::WriteResult;

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
