#pragma once

// Helpers the interpreter's tests share: building small tensors, running one op, and
// comparing results.

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "compiler/interp/interpreter.h"

namespace kiln::interp::testing {

inline Tensor T(std::vector<int64_t> sizes, std::vector<double> values,
                v1::DType dtype = v1::DTYPE_FLOAT64) {
  return Tensor::FromDoubles(std::move(sizes), dtype, values);
}

inline Tensor I(std::vector<int64_t> sizes, std::vector<int64_t> values,
                v1::DType dtype = v1::DTYPE_INT64) {
  return Tensor::FromInts(std::move(sizes), dtype, values);
}

// Runs an op and returns all its results; fails the test on error.
inline std::vector<Value> RunAll(const std::string& target, std::vector<Arg> args,
                                 std::vector<std::pair<std::string, Arg>> kwargs = {},
                                 const RunOptions& options = {}) {
  absl::StatusOr<std::vector<Value>> r = RunOp(target, std::move(args), std::move(kwargs), options);
  EXPECT_TRUE(r.ok()) << target << ": " << r.status();
  if (!r.ok()) return {};
  return *std::move(r);
}

// Runs an op and returns result `i` as a tensor.
inline Tensor Run1(const std::string& target, std::vector<Arg> args,
                   std::vector<std::pair<std::string, Arg>> kwargs = {}, size_t i = 0,
                   const RunOptions& options = {}) {
  std::vector<Value> r = RunAll(target, std::move(args), std::move(kwargs), options);
  if (r.size() <= i || !std::holds_alternative<Tensor>(r[i])) {
    ADD_FAILURE() << target << ": result " << i << " is not a tensor";
    return Tensor();
  }
  return std::get<Tensor>(r[i]);
}

inline ::testing::AssertionResult Near(const std::vector<double>& got,
                                       const std::vector<double>& want, double tol = 1e-12) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure() << "size " << got.size() << " vs " << want.size();
  }
  for (size_t i = 0; i < got.size(); ++i) {
    const bool both_nan = std::isnan(got[i]) && std::isnan(want[i]);
    if (both_nan || got[i] == want[i]) continue;
    if (!(std::fabs(got[i] - want[i]) <= tol * std::max(1.0, std::fabs(want[i])))) {
      return ::testing::AssertionFailure()
             << "element " << i << ": got " << got[i] << ", want " << want[i];
    }
  }
  return ::testing::AssertionSuccess();
}

inline ::testing::AssertionResult Is(const Tensor& t, const std::vector<int64_t>& sizes,
                                     const std::vector<double>& values, double tol = 1e-12) {
  if (!t.defined()) return ::testing::AssertionFailure() << "undefined tensor";
  if (t.sizes() != sizes) {
    return ::testing::AssertionFailure() << "sizes of " << t.DebugString();
  }
  return Near(t.ToDoubles(), values, tol);
}

}  // namespace kiln::interp::testing
