#pragma once

// Dropout as Kiln's random streams define it (compiler/interp/philox.h holds the definition
// and its reference implementation; the runtime keeps its own, since it never links the
// compiler, and kiln_check holds the two to each other): element `index` of an op drawing
// from Philox stream `stream` under the run's `seed` takes the top 24 of its Philox4x32-10
// bits, is kept iff they reach ceil(p * 2^24), and a kept element is scaled by 1 / (1 - p).
// Immutable; safe to share between threads.

#include <cstdint>

namespace kiln::runtime {

class Dropout {
 public:
  Dropout(double p, uint64_t seed, uint64_t stream);

  // Whether any element can be dropped (p > 0).
  bool active() const { return threshold_ > 0; }
  // What element `index` is multiplied by: 0 when dropped, 1 / (1 - p) when kept.
  double Factor(uint64_t index) const;

 private:
  uint32_t threshold_;  // keep iff (bits >> 8) >= threshold_
  double scale_;
  uint64_t seed_;
  uint64_t stream_;
};

// The 32 random bits of element `index` of `stream` under `seed`: word index % 4 of
// Philox4x32-10 with counter (index / 4, stream) and key `seed`, each as two 32-bit halves,
// low first.
uint32_t PhiloxBits(uint64_t seed, uint64_t stream, uint64_t index);

}  // namespace kiln::runtime
