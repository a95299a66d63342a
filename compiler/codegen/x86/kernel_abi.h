#pragma once

// The x86-64 side of a kernel's code (proto/kernel_abi.h): the exported entry
//
//     void kiln_k<i>(void* const* params, int64_t begin, int64_t end);
//
// reads each parameter from the array (a buffer's address, or the address of an int64_t
// holding a symbol or the RNG seed or offset) and calls the body, which walks the outer
// iterations [begin, end) of the kernel's launch split (launch.h) and loops over the rest of
// the parallel space itself. The innermost parallel loop is marked for the vectorizer.

#include <string>
#include <vector>

#include "compiler/codegen/llvm/kernel_emitter.h"

namespace kiln::codegen::x86 {

class CpuKernelAbi final : public KernelAbi {
 public:
  // Launch parameters: begin, end (i64).
  std::vector<llvm::Type*> LaunchParams(llvm::LLVMContext& context) const override;
  void EmitEntry(llvm::Module& module, const std::string& name, const plan::KernelParams& params,
                 llvm::Function* body) const override;
  absl::Status EmitParallel(ParallelSpace& space) const override;
};

}  // namespace kiln::codegen::x86
