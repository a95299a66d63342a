#pragma once

// Lower: the primitive graph into the loop IR. Every Compute becomes one kernel (parallel
// dimensions from its non-reduced dims, reduction dimensions from its reduced ones, size-1
// dimensions dropped), every tensor that owns storage one buffer, every view an index map
// (loads read the viewed buffer through the view's strides and offset), every extern and
// fallback one step with strided tensor views of its operands. Fusion comes afterwards.
// A pure function of its input.

#include "absl/status/statusor.h"
#include "compiler/decompose/decompose.h"
#include "compiler/loop/ir.h"

namespace kiln::lower {

absl::StatusOr<loop::Program> Lower(const decompose::PrimGraph& graph);

}  // namespace kiln::lower
