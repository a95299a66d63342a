#pragma once

// Kernel names that say what a kernel computes, for profiles and traces: the ops of the graph
// nodes it computes, in canonical order, views and copies left out ("amax_sub_exp_sum_log"),
// like the fused names other PyTorch compilers give their kernels. A backend's entry symbol is
// "kiln_k<i>_<name>" (codegen/llvm/kernel_module.h), so a kernel is told apart from the
// kernels of other graphs in a profile, and kernels that share a code share its first name.
// A pure function of the graph and the program: the same graph names its kernels alike.

#include <string>

#include "compiler/canon/canonical_graph.h"
#include "compiler/loop/ir.h"

namespace kiln::lower {

// The longest name NameKernels gives: ops past it are left out of the name.
inline constexpr size_t kMaxKernelNameChars = 48;

// The name of a kernel computing `nodes` (canonical names, "%12", "%12.1", "%12~3"): the
// distinct op names of those nodes in canonical order (the name part of "aten.amax.default"),
// views and ops that only copy, convert or make constants left out, joined by '_' as far as
// kMaxKernelNameChars allows; "" when no op is left.
std::string KernelName(const canon::CanonicalGraph& canonical,
                       const std::vector<std::string>& nodes);

// Sets every kernel's name to KernelName of its nodes.
void NameKernels(const canon::CanonicalGraph& canonical, loop::Program& program);

}  // namespace kiln::lower
