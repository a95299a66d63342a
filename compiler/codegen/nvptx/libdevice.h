#pragma once

// CUDA's libdevice (libdevice.10.bc, built into Kiln) as the math library of sm_90 kernels.
// NVPTX has no libm: the float functions the kernel emitter leaves to the target (llvm.exp,
// llvm.pow, ..., frem, and calls of libm names such as "expm1f") become calls of their
// libdevice counterparts (__nv_expf, __nv_powf, __nv_fmodf, __nv_expm1f), and only the
// libdevice functions a module calls are linked into it, then made internal so that the
// optimizer inlines them and drops the rest. Its __nvvm_reflect queries are answered by
// LLVM's NVVMReflect pass in the NVPTX optimization pipeline, with denormals kept
// (nvvm-reflect-ftz = 0), as PyTorch's CUDA kernels keep them.

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "llvm/IR/Module.h"

namespace kiln::codegen::nvptx {

// The bitcode of libdevice as this build embeds it.
absl::string_view LibdeviceBitcode();

// The SHA-256 of LibdeviceBitcode(), in hex, for key facts.
absl::string_view LibdeviceSha256();

// Rewrites every math call of `module` to libdevice, links the libdevice functions it needs
// and gives every function and global but `entry` internal linkage. INTERNAL when a math call
// is of a type libdevice has no function for, or libdevice does not link. A libm name that
// libdevice lacks stays an undefined declaration, which code generation reports.
absl::Status LinkLibdevice(llvm::Module& module, const std::string& entry);

}  // namespace kiln::codegen::nvptx
