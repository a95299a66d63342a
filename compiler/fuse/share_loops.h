#pragma once

// Tidying a fused kernel so that it reads its inputs as few times as it can.
//
//  - JoinIndependentLoops: a loop stage that uses nothing of the loop stages and non-looping
//    stages since an earlier loop stage (only values from before that loop, and its own) runs
//    inside that loop. Batch norm's backward sums the gradient and the gradient times the
//    normalized input in two loops of the same space that read the same three tensors; joined,
//    one pass reads them once, and the kernel has one loop that SplitReductions can cut. A loop
//    that reads what the stages in between store, or stores what they touch, stays where it
//    is. Each reduce still accumulates the same values in the same order.
//  - ShareValues: instructions that compute what an earlier visible one computes (same
//    operation, operands, index, mask) are dropped and their uses read the earlier value.
//    Loads are shared only from buffers the kernel never stores into. Visibility follows the
//    stages (loop/ir.h): a value of a stage that does not loop, or a reduce result, is seen by
//    later stages; any other value of a looping stage only within that stage. Kernels joined
//    from independent pieces (Kernel::segments) are left alone: sharing would tie the pieces
//    together.
//  - RecomputeAcrossLoops: in a kernel of several loops, a later loop's load of what an earlier
//    loop stored at the same index (a residual sum that a layer norm's first loop computes and
//    stores, its other loops read) recomputes the stored value from the instructions of the
//    earlier loop instead: those load buffers the kernel never stores, which code generation
//    may keep in registers across the loops, where a load of a buffer the kernel stores into
//    must go to memory after each barrier between them. A value that takes a reduce, a store,
//    a load of a buffer the kernel stores into or more than 200 instructions stays a load. A
//    value stored into a half type is recomputed at full precision, as the first loop used it.
//
// All three are deterministic. The first two keep every stored value bit for bit, and so does
// the third but for a value the first loop stored into a half type, which the later loops now
// use at the precision the first loop computed it in.

#include "compiler/loop/ir.h"

namespace kiln::fuse {

void JoinIndependentLoops(loop::Kernel& kernel);
void ShareValues(loop::Kernel& kernel);
void RecomputeAcrossLoops(loop::Kernel& kernel);

}  // namespace kiln::fuse
