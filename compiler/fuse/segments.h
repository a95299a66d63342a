#pragma once

// The segments of a kernel joined from independent pieces (loop::Kernel::segments), as Fuse
// joins kernels one after another into one.

#include <cstdint>

#include "compiler/loop/ir.h"

namespace kiln::fuse {

// Segments of a kernel of one stage (loop::Kernel::segments) after instructions [start, n)
// joined it: a segment of their own when they use no value of the kernel; else they become
// one segment, last, with every segment whose values they use, the other segments keeping
// their order ahead of it. Segments share no values, and kernels joined into one never
// read what another writes but at the same point (Fuse, joining them, turned such loads into the
// stored values), so moving segments past each other changes nothing, which is checked:
// where the moved ones store what the others touch, or the other way round, everything
// from the first segment used on stays one piece in its order.
void PlaceInSegment(loop::Kernel& k, int32_t start);

// Joins independent `c`, appended to `k` at instruction `start` over the same one dimension
// (a padded join), as segments of their own: c's own segments, or c as one, each with its
// points (loop::Kernel::segment_points).
void AddSegments(loop::Kernel& k, const loop::Kernel& c, int32_t start);

}  // namespace kiln::fuse
