#include "compiler/interp/philox.h"

#include <cmath>

namespace kiln::interp {
namespace {

constexpr uint32_t kMultiplier0 = 0xD2511F53;
constexpr uint32_t kMultiplier1 = 0xCD9E8D57;
constexpr uint32_t kWeyl0 = 0x9E3779B9;
constexpr uint32_t kWeyl1 = 0xBB67AE85;

PhiloxCounter Round(const PhiloxCounter& c, const PhiloxKey& k) {
  const uint64_t p0 = uint64_t{kMultiplier0} * c[0];
  const uint64_t p1 = uint64_t{kMultiplier1} * c[2];
  const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32);
  const uint32_t lo0 = static_cast<uint32_t>(p0);
  const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32);
  const uint32_t lo1 = static_cast<uint32_t>(p1);
  return {hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0};
}

}  // namespace

PhiloxCounter Philox4x32_10(PhiloxCounter counter, PhiloxKey key) {
  for (int r = 0; r < 10; ++r) {
    if (r > 0) {
      key[0] += kWeyl0;
      key[1] += kWeyl1;
    }
    counter = Round(counter, key);
  }
  return counter;
}

uint32_t PhiloxBits(uint64_t seed, uint64_t stream, uint64_t index) {
  const uint64_t block = index / 4;
  const PhiloxCounter counter = {static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32),
                                 static_cast<uint32_t>(stream),
                                 static_cast<uint32_t>(stream >> 32)};
  const PhiloxKey key = {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)};
  return Philox4x32_10(counter, key)[index % 4];
}

double PhiloxUniform(uint64_t seed, uint64_t stream, uint64_t index) {
  return std::ldexp(static_cast<double>(PhiloxBits(seed, stream, index) >> 8), -24);
}

uint32_t DropoutThreshold(double p) {
  if (!(p > 0.0)) return 0;
  if (p >= 1.0) return uint32_t{1} << 24;
  return static_cast<uint32_t>(std::ceil(std::ldexp(p, 24)));
}

bool DropoutKeeps(uint64_t seed, uint64_t stream, uint64_t index, double p) {
  return (PhiloxBits(seed, stream, index) >> 8) >= DropoutThreshold(p);
}

double DropoutScale(double p) { return p >= 1.0 ? 0.0 : 1.0 / (1.0 - p); }

}  // namespace kiln::interp
