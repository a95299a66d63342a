#include "client/runtime/dropout.h"

#include <array>
#include <cmath>

namespace kiln::runtime {

uint32_t PhiloxBits(uint64_t seed, uint64_t stream, uint64_t index) {
  // Salmon et al., "Parallel random numbers: as easy as 1, 2, 3" (SC'11): ten rounds of two
  // 32x32->64 multiplications, the key bumped by the Weyl constants between rounds.
  const uint64_t block = index >> 2;
  std::array<uint32_t, 4> x = {static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32),
                               static_cast<uint32_t>(stream), static_cast<uint32_t>(stream >> 32)};
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    const uint64_t a = uint64_t{0xD2511F53} * x[0];
    const uint64_t b = uint64_t{0xCD9E8D57} * x[2];
    x = {static_cast<uint32_t>(b >> 32) ^ x[1] ^ k0, static_cast<uint32_t>(b),
         static_cast<uint32_t>(a >> 32) ^ x[3] ^ k1, static_cast<uint32_t>(a)};
    k0 += 0x9E3779B9;
    k1 += 0xBB67AE85;
  }
  return x[index & 3];
}

Dropout::Dropout(double p, uint64_t seed, uint64_t stream)
    : threshold_(!(p > 0) ? 0
                 : p >= 1 ? uint32_t{1} << 24
                          : static_cast<uint32_t>(std::ceil(std::ldexp(p, 24)))),
      scale_(p >= 1 ? 0 : 1 / (1 - p)),
      seed_(seed),
      stream_(stream) {}

double Dropout::Factor(uint64_t index) const {
  if (threshold_ == 0) return 1;
  return (PhiloxBits(seed_, stream_, index) >> 8) >= threshold_ ? scale_ : 0;
}

}  // namespace kiln::runtime
