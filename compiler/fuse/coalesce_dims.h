#pragma once

// CoalesceDims: adjacent loop dimensions that every index walks as one become one.
//
// Lowering keeps a tensor's dimensions as loop variables: a per-channel sum over an
// [N, C, H, W] input reduces over (n, h, w), and a pointwise op over [B, T, C] walks three
// parallel variables. Code generation turns each variable past the first back into a
// division and a remainder of a flat index, per element; where the memory behind the
// variables is contiguous that work buys nothing, and it hides runs that could move as
// vectors (a row of 50,257 elements never starts aligned, while the flat index does).
//
// Two adjacent variables u (outer) and v (inner, extent E) of the same kind (both parallel or
// both reduction) merge into one variable m of extent E_u * E_v when every index of the
// kernel (loads, stores, kIndex values) is affine in u and v (each appears only as a plain
// factor, never inside a division, modulo, Max or Min, and never times another variable)
// and u's coefficient is E times v's: then c_u*u + c_v*v = c_v*(E*u + v) = c_v*m, so every
// index keeps its value. A constant dimension of extent 1 is dropped (its variable is 0),
// unless it is the last of its kind. Variables are renumbered; instructions, stages and
// buffers are unchanged, so results are bit for bit the same.
//
// Deterministic: pairs are tried from the innermost outward, repeatedly, in program order.

#include <cstdint>
#include <optional>
#include <vector>

#include "compiler/loop/ir.h"

namespace kiln::fuse {

// `kernel` with its mergeable dimensions merged; the kernel unchanged when none merge.
loop::Kernel CoalesceDims(loop::Kernel kernel);

// FlattenUnalignedRows: a pointwise kernel whose every store walks the whole parallel space as
// one contiguous range (c = 1 above, for every pair of adjacent dimensions), over rows whose
// bytes are not a multiple of kRowAlignmentBytes, while some load does not (it reads them out
// of rows padded for a matmul, PadMatmulRows), walks that flat range instead: each variable
// becomes the flat index's quotient and remainder by the extents inside it. Its stores then
// move aligned runs of the flat index as vectors, where along rows of 50,257 bf16 logits no
// run could align and the kernel wrote an element a thread; its other loads index each
// element apart. Values and the elements each access touches are unchanged. GPT-2 124M bf16's
// copy of its logits out of padded rows went from 314-325 us to 112 us on an H200.
inline constexpr int64_t kRowAlignmentBytes = 16;
loop::Kernel FlattenUnalignedRows(const loop::Program& program, loop::Kernel kernel);

// Every kernel of `program` coalesced, then flattened where FlattenUnalignedRows says.
loop::Program CoalesceDims(loop::Program program);

// `kernel` with runs of its adjacent parallel dimensions merged so that its parallel extents
// are `parallel` (a pointwise op over a view [B, T, N] of a matmul's [B*T, N] result, seen
// over the matmul's space), or nullopt when the extents do not group that way or some
// merge is not one every index allows. Reduction dimensions are left as they are.
std::optional<loop::Kernel> CoalesceTo(const loop::Kernel& kernel,
                                       const std::vector<loop::IndexExpr>& parallel);

// A pointwise `kernel` with each parallel dimension split into a run of `parallel`'s whose
// extents multiply to it, every index rewritten through the split (a kernel over the [B*T, N]
// view of a layer norm's rows, seen over the norm's [B, T] rows and N elements: the row
// variable becomes T*b + t), or nullopt when the extents do not group that way or the kernel
// reduces, has segments or dynamic strides over its variables. Indices stay affine where they
// were, so the kernel computes the same values at the same points.
std::optional<loop::Kernel> SplitTo(const loop::Kernel& kernel,
                                    const std::vector<loop::IndexExpr>& parallel);

// A pointwise `kernel` over one constant dimension [n] seen over [extent] (extent > n): every
// load and store also masked by p0 < n, so the points past n touch no memory and store
// nothing. Segment starts (loop::Kernel::segments) move with their instructions, and each
// mask is computed in the segment that uses it; each segment's points (segment_points) stay
// what they were (n where the kernel had none), a kernel of no segments becoming one segment.
loop::Kernel PadTo(const loop::Kernel& kernel, int64_t extent);

}  // namespace kiln::fuse
