#pragma once

// PadMatmulRows: an intermediate matrix of 16-bit floats that a matmul reads or writes gets
// rows whose bytes are a multiple of the target's alignment.
//
// cuBLAS's tensor-core kernels for fp16 and bf16 need every row of every operand to start at
// a multiple of 16 bytes. A row of 50,257 bf16 logits does not, and a matmul over such rows
// falls back to kernels several times slower: GPT-2's vocabulary projection and its two
// gradients took 3.9 ms of an H100's step where the aligned ones take about 0.6. So where a
// matmul's operand or result lives in an intermediate buffer of rows of C elements, the
// buffer's rows become Cp elements (C rounded up to the alignment) and the C - Cp elements
// after each row are never touched: element e of the buffer moves to
// (e / C) * Cp + e % C, in every kernel's loads and stores and every view of extern calls.
//
// It happens before fusion, while each kernel still indexes its tensors by their dimensions
// (`C*p0 + p1`), so that the move simplifies to `Cp*p0 + p1`; a buffer with any index that
// does not (a flattened walk, a data-dependent term), a view that crosses rows, a symbolic
// size, or a place among the graph's outputs or inputs keeps its layout.
//
// A matmul view left unaligned that way (a graph's logits are its output, their gradient the
// backward's input) goes through a padded copy instead: a kernel copies an operand's rows
// into an aligned buffer before the matmul (one copy for every matmul that reads the same
// rows before they change), and a result written to aligned rows is copied to its place
// after it. A copy moves the matrix once at memory speed; the unaligned kernels lose more.
//
// Aligned rows are not all: cuBLAS also picks its slow kernels when the extent along an
// operand's contiguous dimension is unaligned (50,257 logits in rows 50,264 apart still run
// 5x slower on an H200). So such a matmul then runs on its M, K and N rounded up: the extra
// columns and rows land in the padding of rows this phase aligned, past the end of an
// intermediate (which grows), or in a copy of the operand; K's extra part of both operands
// is zeroed first so that it adds nothing, and M's and N's only make results nobody reads (a
// result that cannot grow where it is is written to a copy and copied out).
//
// The kernels' results are the same values at the same logical positions, bit for bit.
//
// Deterministic: buffers are considered in order, and the outcome depends only on the
// program.

#include <cstdint>

#include "compiler/loop/ir.h"

namespace kiln::fuse {

// `program` with the rows of its matmuls' 16-bit float intermediates padded to multiples of
// `row_alignment_bytes` (a power of two; 0 changes nothing), and its matmuls' extents too.
loop::Program PadMatmulRows(loop::Program program, int64_t row_alignment_bytes);

// The number of elements a row of `c` elements of `item_bytes` each takes once padded to a
// multiple of `row_alignment_bytes`.
int64_t PaddedRow(int64_t c, int64_t item_bytes, int64_t row_alignment_bytes);

}  // namespace kiln::fuse
