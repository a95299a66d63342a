#pragma once

// How a kernel runs on an sm_90 GPU, and so how its entry walks its parallel space. Every
// kernel is one flat range: its parallel dimensions flattened row-major into `points`
// elements. Each thread takes point blockIdx.x * blockDim.x + threadIdx.x and then every
// gridDim.x * blockDim.x-th point after it (a grid-stride loop), so any grid computes every
// point exactly once. A point is one element of a pointwise kernel or one row of a reduction,
// which its thread reduces on its own, or, for long reductions, a whole block's
// (ReductionThreads): then block blockIdx.x takes point blockIdx.x and every gridDim.x-th
// after it.
//
// Blocks have kBlockThreads threads. The grid covers every point once where that takes at
// most kMaxBlocks blocks (a few waves of blocks over the H100's 132 SMs); a larger constant
// range gets kMaxBlocks blocks that stride over it. A range with symbolic extent gets one
// thread per point (the launch configuration has no minimum to cap it with). A range of
// zero points gives a grid of 0, which the runtime does not launch. Pure functions.

#include <cstdint>

#include "compiler/codegen/backend.h"
#include "compiler/loop/index_expr.h"
#include "compiler/loop/ir.h"

namespace kiln::codegen::nvptx {

inline constexpr int64_t kBlockThreads = 256;
inline constexpr int64_t kStreamingMultiprocessors = 132;
inline constexpr int64_t kBlocksPerMultiprocessor = 8;
inline constexpr int64_t kMaxBlocks = kStreamingMultiprocessors * kBlocksPerMultiprocessor;

// The number of points of `kernel`: the product of its parallel extents (1 without any).
loop::IndexExpr PointsOf(const loop::Kernel& kernel);

// Reductions shorter than this stay in one thread per point.
inline constexpr int64_t kMinBlockReduction = 64;

// The threads that share each point of `kernel` and split its reductions (a block per
// point: warp shuffles, then shared memory across the block's warps), or 0 when each point
// is one thread's. A kernel shares its points when it reduces over kMinBlockReduction or
// more elements (or a symbolic count) and its loops store nowhere data decides (a scatter
// adds into rows in order, so its threads must own whole columns). 64 to kBlockThreads
// threads, a power of two, the fewest that cover a constant reduction.
int64_t ReductionThreads(const loop::Kernel& kernel);

// One thread per point: grid {blocks, 1, 1}, block {kBlockThreads, 1, 1}. A block per
// point (ReductionThreads > 0): grid {points, at most kMaxBlocks}, block {threads, 1, 1}.
KernelSchedule ScheduleKernel(const loop::Kernel& kernel);

}  // namespace kiln::codegen::nvptx
