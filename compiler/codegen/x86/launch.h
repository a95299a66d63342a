#pragma once

// How the x86-64 runtime launches a kernel, and so how the kernel's entry walks its
// parallel space. The entry (proto/kernel_abi.h) computes the iterations [begin, end) of an
// outer range [0, grid) that the runtime splits across threads; the kernel loops over the
// rest itself.
//
// A kernel that reduces (or has no parallel dimension) puts every parallel dimension in the
// outer range, flattened row-major: each iteration is one row of its reduction. A kernel with
// a single parallel dimension and no reduction is cut into chunks of kChunk consecutive
// elements, so one iteration is enough work to be worth a thread. Any other kernel puts all
// parallel dimensions but the innermost in the outer range and loops over the innermost,
// which the vectorizer widens. Pure functions.

#include <cstdint>

#include "compiler/loop/index_expr.h"
#include "compiler/loop/ir.h"

namespace kiln::codegen::x86 {

// Elements per outer iteration of a chunked kernel.
inline constexpr int64_t kChunk = 4096;

// The outer range [0, grid) covers parallel dimensions [0, outer_dims) flattened row-major.
// When `chunk` > 0 the kernel has a single parallel dimension (no reduction) and each outer
// iteration covers `chunk` consecutive elements of it.
struct LaunchSplit {
  int32_t outer_dims = 0;
  int64_t chunk = 0;
  loop::IndexExpr grid;
};

LaunchSplit SplitForLaunch(const loop::Kernel& kernel);

}  // namespace kiln::codegen::x86
