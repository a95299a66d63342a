#include "compiler/interp/dtype.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

namespace kiln::interp {
namespace {

// bfloat16 by bit manipulation of float32 with round-to-nearest-even, as torch does for
// finite float inputs.
double Bf16Reference(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  const uint32_t lsb = (bits >> 16) & 1;
  bits += 0x7fff + lsb;
  bits &= 0xffff0000u;
  float r;
  std::memcpy(&r, &bits, 4);
  return r;
}

TEST(DType, Bfloat16RoundsToNearestEven) {
  EXPECT_EQ(RoundToDType(1.0, v1::DTYPE_BFLOAT16), 1.0);
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties go to the even 1.
  EXPECT_EQ(RoundToDType(1.0 + std::ldexp(1, -8), v1::DTYPE_BFLOAT16), 1.0);
  // 1 + 3 * 2^-8 is halfway between 1 + 2^-7 and 1 + 2^-6: ties go to even 1 + 2^-6.
  EXPECT_EQ(RoundToDType(1.0 + 3 * std::ldexp(1, -8), v1::DTYPE_BFLOAT16), 1.0 + std::ldexp(1, -6));
  EXPECT_EQ(RoundToDType(1e39, v1::DTYPE_BFLOAT16), std::numeric_limits<double>::infinity());
  EXPECT_TRUE(std::isnan(RoundToDType(NAN, v1::DTYPE_BFLOAT16)));
  // Agrees with the bit-level float32 -> bfloat16 conversion on float32 values,
  // subnormals included.
  uint32_t state = 12345;
  for (int i = 0; i < 100000; ++i) {
    state = state * 1664525u + 1013904223u;
    float f;
    uint32_t bits = state;
    if ((bits & 0x7f800000u) == 0x7f800000u) continue;  // inf / NaN
    std::memcpy(&f, &bits, 4);
    ASSERT_EQ(RoundToDType(f, v1::DTYPE_BFLOAT16), Bf16Reference(f)) << f;
  }
}

TEST(DType, Float16RoundsToNearestEvenWithSubnormalsAndOverflow) {
  EXPECT_EQ(RoundToDType(65504.0, v1::DTYPE_FLOAT16), 65504.0);
  EXPECT_EQ(RoundToDType(65519.0, v1::DTYPE_FLOAT16), 65504.0);
  EXPECT_EQ(RoundToDType(65520.0, v1::DTYPE_FLOAT16), std::numeric_limits<double>::infinity());
  EXPECT_EQ(RoundToDType(std::ldexp(1, -24), v1::DTYPE_FLOAT16), std::ldexp(1, -24));
  EXPECT_EQ(RoundToDType(std::ldexp(1, -25), v1::DTYPE_FLOAT16), 0.0);  // tie to even 0
  EXPECT_EQ(RoundToDType(std::ldexp(3, -26), v1::DTYPE_FLOAT16), std::ldexp(1, -24));
  EXPECT_EQ(RoundToDType(1.0 + std::ldexp(1, -11), v1::DTYPE_FLOAT16), 1.0);
  EXPECT_EQ(RoundToDType(0.1, v1::DTYPE_FLOAT16), 0.0999755859375);
}

TEST(DType, FloatAndIntegerConversions) {
  EXPECT_EQ(RoundToDType(0.1, v1::DTYPE_FLOAT32), static_cast<double>(0.1f));
  EXPECT_EQ(RoundToDType(-2.7, v1::DTYPE_INT64), -2.0);
  EXPECT_EQ(RoundToDType(300.0, v1::DTYPE_UINT8), 44.0);
  EXPECT_EQ(RoundToDType(-1.0, v1::DTYPE_UINT8), 255.0);
  EXPECT_EQ(RoundToDType(128.0, v1::DTYPE_INT8), -128.0);
  EXPECT_EQ(RoundToDType(0.5, v1::DTYPE_BOOL), 1.0);
  EXPECT_EQ(WrapToDType(int64_t{1} << 31, v1::DTYPE_INT32), INT32_MIN);
  EXPECT_EQ(WrapToDType(70000, v1::DTYPE_INT16), 70000 - 65536);
}

TEST(DType, PromotionFollowsTorch) {
  EXPECT_EQ(PromoteTypes(v1::DTYPE_UINT8, v1::DTYPE_INT8), v1::DTYPE_INT16);
  EXPECT_EQ(PromoteTypes(v1::DTYPE_BFLOAT16, v1::DTYPE_FLOAT16), v1::DTYPE_FLOAT32);
  EXPECT_EQ(PromoteTypes(v1::DTYPE_INT64, v1::DTYPE_FLOAT16), v1::DTYPE_FLOAT16);
  EXPECT_EQ(PromoteTypes(v1::DTYPE_BOOL, v1::DTYPE_INT32), v1::DTYPE_INT32);
  EXPECT_EQ(PromoteTypes(v1::DTYPE_FLOAT32, v1::DTYPE_FLOAT64), v1::DTYPE_FLOAT64);

  // A zero-dim float64 tensor does not widen a float32 tensor; a float scalar turns an
  // int tensor into the default float32; a zero-dim float tensor promotes an int tensor.
  ResultTypeState a;
  a.AddTensor(v1::DTYPE_FLOAT32, false);
  a.AddTensor(v1::DTYPE_FLOAT64, true);
  EXPECT_EQ(a.Result(), v1::DTYPE_FLOAT32);
  ResultTypeState b;
  b.AddTensor(v1::DTYPE_INT64, false);
  b.AddScalar(v1::DTYPE_FLOAT64);
  EXPECT_EQ(b.Result(), v1::DTYPE_FLOAT32);
  ResultTypeState c;
  c.AddTensor(v1::DTYPE_INT32, false);
  c.AddTensor(v1::DTYPE_FLOAT64, true);
  EXPECT_EQ(c.Result(), v1::DTYPE_FLOAT64);
  ResultTypeState d;
  d.AddTensor(v1::DTYPE_INT32, false);
  d.AddScalar(v1::DTYPE_INT64);
  EXPECT_EQ(d.Result(), v1::DTYPE_INT32);
  ResultTypeState e;
  e.AddTensor(v1::DTYPE_BFLOAT16, false);
  e.AddScalar(v1::DTYPE_FLOAT64);
  EXPECT_EQ(e.Result(), v1::DTYPE_BFLOAT16);
  ResultTypeState f;
  f.AddTensor(v1::DTYPE_BOOL, false);
  f.AddScalar(v1::DTYPE_INT64);
  EXPECT_EQ(f.Result(), v1::DTYPE_INT64);
}

}  // namespace
}  // namespace kiln::interp
