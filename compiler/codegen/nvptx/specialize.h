#pragma once

// The loop program as sm_90's code runs it. Fusion's program is portable: every target runs
// it as written. Some of its checks are always true in the code this backend generates, and
// dropping them lets that code be faster; Specialize makes those rewrites, after the portable
// phases and before Schedule and Generate.
//
// A padded join's segment runs over its own points only on sm_90 (EmitSegments narrows the
// walk to loop::Kernel::segment_points), so the masks fuse::PadTo put on its loads and stores,
// p0 < the segment's points, hold at every point it visits. Without them those accesses can
// move as vectors (codegen/llvm/point_runs.h WalksContiguously).

#include "compiler/loop/ir.h"

namespace kiln::codegen::nvptx {

// `kernel` with the masks of its segments' accesses that compare p0 below a bound of at least
// the segment's own points dropped, where sm_90 gives each segment threads for its own points
// (launch.h SegmentsOf, and segment_points has one count per segment). A mask that is such a
// comparison and'ed with another keeps the other. Any other kernel is returned as it is.
loop::Kernel DropSegmentBounds(loop::Kernel kernel);

// Every kernel of `program` through DropSegmentBounds.
loop::Program Specialize(loop::Program program);

}  // namespace kiln::codegen::nvptx
