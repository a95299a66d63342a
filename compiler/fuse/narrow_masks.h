#pragma once

// NarrowMaskedIndices: a load or store whose mask confines loop variables to a part of their
// range has its index simplified within that part.
//
// A concatenation reads each input under a mask on the concatenated variable (the second
// third of a qkv gradient's rows is `64 <= p2 < 128`), and its index is the input's view
// composed with the shift, simplified over the variable's whole extent: unravelling a
// reshape there leaves divisions and remainders that only the part makes constant, as in
// 16*Mod(FloorDiv(p2, 64) + p1 - 1, 64) + 4096*FloorDiv(64*p1 + p2 - 64, 4096) over p2 in
// [0, 192), which is 16*p1 over p2 in [64, 128). Each such index is rewritten over the part
// (every variable v with lo <= v < hi becomes lo + v' with v' < hi - lo), simplified there,
// and rewritten back (v' = v - lo), with v's extent left unknown so that nothing is proven
// outside the part: at every point the mask lets through, the new index has the old one's
// value; at the others the access does not happen.
//
// The mask's bounds are read from its conjunction (kAnd) of comparisons (kLt, kLe, kGt,
// kGe) between a variable's kIndex and a kIndex or kConst that uses no variables; any other
// conjunct bounds nothing, and a disjunction ends the walk. Data-dependent index terms are
// kept as they are. Deterministic; the instructions' order and values are unchanged.

#include "compiler/loop/ir.h"

namespace kiln::fuse {

// `kernel` with each masked access's index narrowed as above.
loop::Kernel NarrowMaskedIndices(loop::Kernel kernel);

// NarrowMaskedIndices over every kernel of `program`.
loop::Program NarrowMaskedIndices(loop::Program program);

}  // namespace kiln::fuse
