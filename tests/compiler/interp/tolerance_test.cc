#include "compiler/interp/tolerance.h"

#include <gtest/gtest.h>

#include <cmath>

namespace kiln::interp {
namespace {

TEST(ToleranceTest, WithinTheBoundOfTheValueAndItsTerms) {
  const Tolerance tol = PyTorchTolerance(v1::DTYPE_FLOAT32);
  // rtol 1e-4 of 2 plus atol 1e-5 of the terms' magnitude 10: 3e-4.
  EXPECT_TRUE(tol.Allows(2, 2 + 2.9e-4, 10));
  EXPECT_FALSE(tol.Allows(2, 2 + 3.1e-4, 10));
}

TEST(ToleranceTest, NaNMatchesOnlyNaN) {
  const Tolerance tol = PyTorchTolerance(v1::DTYPE_FLOAT32);
  EXPECT_TRUE(tol.Allows(NAN, NAN, 1));
  EXPECT_FALSE(tol.Allows(NAN, 1, 1));
  EXPECT_FALSE(tol.Allows(1, NAN, 1));
}

// A padded logsumexp row is +inf and a masked score -inf: only the same infinity matches, not
// the largest finite value (whose distance from it is as infinite as its bound).
TEST(ToleranceTest, AnInfinityMatchesOnlyItself) {
  const Tolerance tol = PyTorchTolerance(v1::DTYPE_FLOAT32);
  EXPECT_TRUE(tol.Allows(INFINITY, INFINITY, 1));
  EXPECT_FALSE(tol.Allows(INFINITY, 3e38, 1));
  EXPECT_FALSE(tol.Allows(-INFINITY, -3e38, 1));
  EXPECT_FALSE(tol.Allows(-INFINITY, INFINITY, 1));
  EXPECT_FALSE(tol.Allows(3e38, INFINITY, 1e38));
}

}  // namespace
}  // namespace kiln::interp
