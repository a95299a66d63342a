#pragma once

// The sm_90 backend, target "cuda:sm_90": every kernel becomes a PTX kernel of the CUDA entry
// ABI (proto/kernel_abi.h), assembled into a cubin of its own (codegen.h) and launched over
// the grid that launch.h describes. Modules come in pairs: kernel i's cubin
// (BINARY_KIND_CUBIN) is modules[2i], and the PTX it was assembled from (BINARY_KIND_PTX, for
// a driver that JIT-compiles it on a newer GPU) is modules[2i + 1]. A program without kernels
// gets one pair of empty modules. Registers and static shared memory per kernel come from the
// cubin; its vector width is the elements of each of its threads' runs (launch.h VectorLanes).
//
// Built only when nvJitLink is found at build time (KILN_HAVE_CUDA); Generate fails as
// UNAVAILABLE where nvJitLink does not load at run time.

#include <memory>

#include "compiler/codegen/backend.h"

namespace kiln::codegen::nvptx {

std::unique_ptr<codegen::Backend> NewBackend();

}  // namespace kiln::codegen::nvptx
