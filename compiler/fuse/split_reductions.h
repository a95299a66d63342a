#pragma once

// SplitReductions: a reduction with few points and long rows cut across the machine.
//
// A kernel that reduces long rows into few points (a column sum down 65,536 rows into 1,024
// sums, batch norm's backward summing N·H·W elements into each of 64 channels) gives a GPU
// only as many blocks as it has points or groups of points: most of its SMs wait while a few
// stream the whole input. Such a kernel becomes two:
//  - the parts kernel: its points times `parts`, each reducing one slice of the reduction
//    space (one reduction dimension cut into `parts` equal slices) and storing every reduce
//    result into a buffer of partials, [parts, points] in that order, so that a column
//    reduction's points stay innermost;
//  - the combine kernel: the kernel's own points, each reducing its `parts` partials in order
//    with the same reduce kinds, then running the kernel's epilogue (the stages after the
//    reduction) on the combined values.
// The partials combine in a fixed order, so results do not vary between runs; they differ
// from the whole kernel's only by the order of accumulation.
//
// A kernel is cut when every extent is constant, it is fusible, exactly one of its stages
// loops, the stages before that one store nothing (both kernels recompute them), its
// reductions are sum, prod, max, min, any or all (not arg reductions), and the stages after
// it use no value of the loop but the reduce results. Which kernels are worth cutting, and
// into how many parts, is the backend's call (codegen::Backend::ReductionParts); the pass
// cuts the reduction dimension that takes the most parts up to that many (the outermost on a
// tie), as the largest divisor of its extent. Deterministic: decisions follow program order.

#include <cstdint>
#include <functional>

#include "compiler/loop/ir.h"

namespace kiln::fuse {

// How many parts kernel `kernel` of `program` should be cut into; 1 or less keeps it whole.
using ReductionPartsFn = std::function<int64_t(const loop::Program&, const loop::Kernel&)>;

// `program` with every kernel that `parts` asks to cut, and that can be, replaced by its
// parts and combine kernels (launched one after the other where the kernel was), each cut
// reduction adding one intermediate buffer of partials per reduce result. Kernels stay in
// launch order.
loop::Program SplitReductions(loop::Program program, const ReductionPartsFn& parts);

}  // namespace kiln::fuse
