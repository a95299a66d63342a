#include "compiler/tools/check/compare.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "absl/strings/match.h"

namespace kiln::check {
namespace {

interp::Tensor F32(std::vector<double> values) {
  const int64_t n = static_cast<int64_t>(values.size());
  return interp::Tensor::FromDoubles({n}, v1::DTYPE_FLOAT32, values);
}

interp::Tensor F64(std::vector<double> values) {
  const int64_t n = static_cast<int64_t>(values.size());
  return interp::Tensor::FromDoubles({n}, v1::DTYPE_FLOAT64, values);
}

// Eager rounding put `expected` up to 1/32 from the exact values.
Expectation Autocast(std::vector<double> expected, std::vector<double> exact) {
  Expectation e;
  e.expected = F32(std::move(expected));
  e.exact = F64(std::move(exact));
  e.rtol = 1e-5;
  return e;
}

TEST(CompareTest, ElementsWithinTheBoundPass) {
  Expectation e;
  e.expected = F32({1, -2, 4});
  e.rtol = 1e-5;
  // The bound is rtol * (|expected| + 4): 6e-5 at the second element.
  const Verdict v = CompareTensor(F32({1, -2 + 5e-5, 4}), e);
  EXPECT_TRUE(v.ok) << v.message;
  EXPECT_GT(v.worst, 0.8);
  EXPECT_LE(v.worst, 1);
}

TEST(CompareTest, WithoutAnExactValueThereIsNoSecondChance) {
  Expectation e;
  e.expected = F32({1, -2, 4});
  e.rtol = 1e-5;
  const Verdict v = CompareTensor(F32({1, -2.001, 4}), e);
  EXPECT_FALSE(v.ok);
  EXPECT_TRUE(absl::StrContains(v.message, "element 1: got -2.001, expected -2")) << v.message;
  EXPECT_GT(v.worst, 1);
}

// Its bound, rtol * (inf + scale), is infinite: no finite value may pass for it.
TEST(CompareTest, AnInfiniteExpectedValueTakesNoFiniteResult) {
  Expectation e;
  e.expected = F32({-INFINITY, 2});
  e.rtol = 1e-5;
  EXPECT_TRUE(CompareTensor(F32({-INFINITY, 2}), e).ok);
  const Verdict v = CompareTensor(F32({-3e38, 2}), e);
  EXPECT_FALSE(v.ok);
  EXPECT_TRUE(absl::StrContains(v.message, "element 0: got -3e+38, expected -inf")) << v.message;
  EXPECT_FALSE(CompareTensor(F32({INFINITY, 2}), e).ok);
}

// Logits of magnitude 100 computed to 5e-6 of it move a probability by 5e-4 of itself.
TEST(CompareTest, SoftmaxProbabilitiesAreBoundedByTheirLogitsMagnitude) {
  Expectation e;
  e.expected = F32({0.25, 0.75});
  e.rtol = 1e-5;
  const interp::Tensor actual = F32({0.25 * (1 + 5e-4), 0.75 - 0.25 * 5e-4});
  EXPECT_FALSE(CompareTensor(actual, e).ok);
  e.logit_scale = 100;
  const Verdict v = CompareTensor(actual, e);
  EXPECT_TRUE(v.ok) << v.message;
  EXPECT_FALSE(CompareTensor(F32({0.25 * 1.01, 0.75}), e).ok);
}

TEST(CompareTest, AsCloseToTheExactValueAsEagerRoundingPasses) {
  const Expectation e = Autocast({1 + 1.0 / 32, 2, 3 - 1.0 / 32, 4}, {1, 2, 3, 4});
  const Verdict v = CompareTensor(F32({1, 2 + 1.0 / 32, 3 + 1.0 / 64, 4}), e);
  EXPECT_TRUE(v.ok) << v.message;
  EXPECT_LE(v.worst, 1);
}

TEST(CompareTest, MoreThanThreeTimesEagerRoundingsErrorFails) {
  const Expectation e = Autocast({1 + 1.0 / 32, 2, 3 - 1.0 / 32, 4}, {1, 2, 3, 4});
  const Verdict v = CompareTensor(F32({1, 2 + 4.0 / 32, 3, 4}), e);
  EXPECT_FALSE(v.ok);
  EXPECT_TRUE(absl::StrContains(v.message, "from the exact value: off by 0.125 at most"))
      << v.message;
  EXPECT_GT(v.worst, 1);
}

// A float32 loss of a bfloat16 graph: eager happened to land within 3e-4 of the exact value;
// 2.8e-3 off is still bfloat16's rounding (within 1e-3 of the loss beyond 3x eager's error),
// 1e-2 off is not.
TEST(CompareTest, AScalarOfALowPrecisionGraphGetsPyTorchsFloor) {
  Expectation e = Autocast({2.62695}, {2.62665});
  e.expected = interp::Tensor::FromDoubles({}, v1::DTYPE_FLOAT32, {2.62695});
  e.exact = interp::Tensor::FromDoubles({}, v1::DTYPE_FLOAT64, {2.62665});
  const Verdict close =
      CompareTensor(interp::Tensor::FromDoubles({}, v1::DTYPE_FLOAT32, {2.62945}), e);
  EXPECT_TRUE(close.ok) << close.message;
  const Verdict off =
      CompareTensor(interp::Tensor::FromDoubles({}, v1::DTYPE_FLOAT32, {2.63665}), e);
  EXPECT_FALSE(off.ok);
  EXPECT_TRUE(absl::StrContains(off.message, "allowed: 3x that + 0.0026")) << off.message;
}

TEST(CompareTest, NonFiniteWhereTheExactValueIsFiniteFails) {
  const Expectation e = Autocast({1 + 1.0 / 32, 2, 70000}, {1, 2, 70000});
  const Verdict v = CompareTensor(F32({1, 2, INFINITY}), e);
  EXPECT_FALSE(v.ok);
  EXPECT_TRUE(absl::StrContains(v.message, "element 2 is inf where the exact value is 70000"))
      << v.message;
}

// float16 overflows at 65504: where eager rounding overflowed, the artifact may too.
TEST(CompareTest, OverflowingWhereEagerRoundingOverflowsPasses) {
  const Expectation e = Autocast({1 + 1.0 / 32, 2, INFINITY}, {1, 2, 70000});
  EXPECT_TRUE(CompareTensor(F32({1, 2 + 1.0 / 64, INFINITY}), e).ok);
  const Verdict finite = CompareTensor(F32({1, 2 + 1.0 / 64, 70000}), e);
  EXPECT_TRUE(finite.ok) << finite.message;
}

// Where the exact value is not finite (a masked logit), the elementwise bound holds.
TEST(CompareTest, ElementsWhoseExactValueIsNotFiniteMeetTheBound) {
  const Expectation e = Autocast({1 + 1.0 / 32, 2, -INFINITY}, {1, 2, -INFINITY});
  const Verdict v = CompareTensor(F32({1, 2, -3e38}), e);
  EXPECT_FALSE(v.ok);
  EXPECT_TRUE(absl::StrContains(v.message, "element 2 is -3e+38 where the exact value is -inf"))
      << v.message;
}

}  // namespace
}  // namespace kiln::check
