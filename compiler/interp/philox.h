#pragma once

// Kiln's counter-based random numbers: Philox4x32-10 (Salmon et al., "Parallel random
// numbers: as easy as 1, 2, 3", SC'11), and the exact definition of which random bits each
// element of an RNG op uses. Compiled CPU and GPU kernels must reproduce these bits
// exactly; the interpreter is the definition's reference implementation.
//
// Stream of an op. A run gets a 64-bit `seed` and a 64-bit `offset`. The graph's RNG ops
// (native_dropout, the attention ops, rand_like, ...: the ops proto/ops/registry.h marks as
// drawing random numbers) are numbered k = 0, 1, ... in node order; every such node takes a number
// whether or not it ends up drawing (p == 0, train == False), so the numbering depends on the graph
// alone. Op k draws from stream
//     stream = offset + k            (mod 2^64)
// and a graph advances the run offset by its number of RNG ops per run, so a CUDA graph
// replays with a fresh offset and nothing else changed.
//
// Bits of an element. Element i of an op (i = the row-major position in the op's logical
// shape: the output's shape for dropout, [B, H, L, S] for attention probabilities,
// independent of strides) uses
//     key     = (lo32(seed), hi32(seed))
//     counter = (lo32(i / 4), hi32(i / 4), lo32(stream), hi32(stream))
//     x       = Philox4x32_10(counter, key)[i % 4]
//     u       = (x >> 8) * 2^-24                     in [0, 1), exact in float32
// so one Philox call serves four consecutive elements.
//
// Dropout with probability p keeps element i iff (x >> 8) >= ceil(p * 2^24), i.e. iff
// u >= p; a kept element is scaled by 1 / (1 - p) (0 when p == 1). p == 0 keeps everything
// and p == 1 drops everything. Kernels compare the integer x >> 8 with the threshold
// computed once on the host, so no float rounding enters the mask.

#include <array>
#include <cstdint>

namespace kiln::interp {

using PhiloxCounter = std::array<uint32_t, 4>;
using PhiloxKey = std::array<uint32_t, 2>;

// Philox4x32 with 10 rounds, as Random123's philox4x32_R(10, ctr, key).
PhiloxCounter Philox4x32_10(PhiloxCounter counter, PhiloxKey key);

// The 32 random bits of element `index` in stream `stream` under `seed` (see above).
uint32_t PhiloxBits(uint64_t seed, uint64_t stream, uint64_t index);

// u = (bits >> 8) * 2^-24.
double PhiloxUniform(uint64_t seed, uint64_t stream, uint64_t index);

// The dropout threshold ceil(p * 2^24) for 0 <= p <= 1; keep iff (bits >> 8) >= threshold.
uint32_t DropoutThreshold(double p);

// Whether dropout with probability p keeps element `index` of stream `stream`.
bool DropoutKeeps(uint64_t seed, uint64_t stream, uint64_t index, double p);

// The scale applied to kept elements: 1 / (1 - p), or 0 when p == 1.
double DropoutScale(double p);

}  // namespace kiln::interp
