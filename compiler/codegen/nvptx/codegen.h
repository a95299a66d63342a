#pragma once

// sm_90 code generation through LLVM 16's NVPTX backend: every kernel of a loop program is
// emitted by the target-neutral kernel emitter (codegen/llvm) as a PTX kernel of the GPU
// entry ABI (kernel_abi.h), its math linked from libdevice (libdevice.h), optimized with
// LLVM's O2 pipeline, printed as PTX for sm_90 (PTX ISA 7.8) and assembled into a cubin by
// nvJitLink (nvjitlink.h). FMA contraction is never enabled, as on x86-64, so results match
// separate multiplies and adds. No compiler or assembler process is started.
//
// Each kernel is its own PTX and cubin, so kernels compile in parallel and the bytes do not
// depend on the number of threads. Thread-safe: each kernel gets its own LLVM context.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/codegen/llvm/codegen_options.h"
#include "compiler/loop/ir.h"

namespace kiln::codegen::nvptx {

inline constexpr char kTargetTriple[] = "nvptx64-nvidia-cuda";
inline constexpr char kPtxFeatures[] = "+ptx78";

// One kernel's code.
struct KernelBinary {
  std::string ptx;
  std::string cubin;
  int32_t registers = 0;
  int32_t static_shared_memory_bytes = 0;
};

struct CodegenResult {
  // One per distinct kernel (codegen/llvm/kernel_module.h), in program order of the first
  // kernel of each.
  std::vector<KernelBinary> codes;
  std::vector<size_t> code_of;     // for each program kernel, its code
  std::vector<std::string> entry;  // for each program kernel, its entry in its code
  std::string llvm_ir;             // when asked for

  // Program kernel `kernel`'s code.
  const KernelBinary& CodeOf(size_t kernel) const { return codes[code_of[kernel]]; }
};

// Kernel i is the PTX entry "kiln_k<j>_<name>", j <= i the first kernel with the same code
// (codegen/llvm/kernel_module.h EntryName), with parameters in plan::ParamsOf order.
absl::StatusOr<CodegenResult> GenerateCubins(const loop::Program& program,
                                             const CodegenOptions& options = {});

// The PTX of a module without kernels: what a plan of extern steps alone loads.
absl::StatusOr<std::string> EmptyPtx();

}  // namespace kiln::codegen::nvptx
