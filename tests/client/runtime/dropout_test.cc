// The runtime's Philox bits and dropout decisions: a published Philox4x32-10 answer, the
// interpreter's bits and decisions, and the keep threshold exactly at its boundary.

#include "client/runtime/dropout.h"

#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <random>

#include "compiler/interp/philox.h"

namespace kiln::runtime {
namespace {

// Random123's known answer for philox4x32_R(10, counter 0, key 0).
TEST(DropoutTest, PhiloxBitsOfTheZeroCounterAndKeyAreRandom123s) {
  const std::array<uint32_t, 4> want = {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8};
  for (uint64_t w = 0; w < 4; ++w) EXPECT_EQ(PhiloxBits(0, 0, w), want[w]) << w;
}

// The interpreter defines the bits (compiler/interp/philox.h); the runtime's own
// implementation draws the same ones, all 64 bits of seed, stream and index included.
TEST(DropoutTest, PhiloxBitsAreTheInterpretersAndSoAreTheDecisions) {
  std::mt19937_64 rng(99);
  for (int n = 0; n < 2000; ++n) {
    const uint64_t seed = rng(), stream = rng(), index = n < 1000 ? rng() : rng() % 4096;
    ASSERT_EQ(PhiloxBits(seed, stream, index), interp::PhiloxBits(seed, stream, index))
        << seed << " " << stream << " " << index;
    const double p = static_cast<double>(n % 10) / 10;
    EXPECT_EQ(Dropout(p, seed, stream).Factor(index) != 0,
              interp::DropoutKeeps(seed, stream, index, p));
  }
}

// Element 0 of stream 0 under seed 0 has bits 0x6627e8d5: kept exactly while
// ceil(p * 2^24) <= 0x6627e8.
TEST(DropoutTest, KeepsWhereTheTop24BitsReachTheThreshold) {
  const double at = std::ldexp(double{0x6627e8}, -24);
  EXPECT_EQ(Dropout(at, 0, 0).Factor(0), 1 / (1 - at));
  EXPECT_EQ(Dropout(std::nextafter(at, 1.0), 0, 0).Factor(0), 0);
}

TEST(DropoutTest, NoneAllOrAboutAFraction) {
  const Dropout none(0, 7, 3), all(1, 7, 3), half(0.5, 7, 3);
  EXPECT_FALSE(none.active());
  EXPECT_TRUE(half.active());
  int kept = 0;
  for (uint64_t i = 0; i < 10000; ++i) {
    EXPECT_EQ(none.Factor(i), 1);
    EXPECT_EQ(all.Factor(i), 0);
    const double f = half.Factor(i);
    EXPECT_TRUE(f == 0 || f == 2) << f;
    kept += f == 2;
  }
  EXPECT_NEAR(kept, 5000, 200);
}

}  // namespace
}  // namespace kiln::runtime
