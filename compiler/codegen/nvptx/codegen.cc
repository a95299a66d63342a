#include "compiler/codegen/nvptx/codegen.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "compiler/codegen/llvm/kernel_module.h"
#include "compiler/codegen/llvm/target_machine.h"
#include "compiler/codegen/nvptx/kernel_abi.h"
#include "compiler/codegen/nvptx/libdevice.h"
#include "compiler/codegen/nvptx/nvjitlink.h"
#include "llvm/IR/Function.h"

extern "C" {
void LLVMInitializeNVPTXTargetInfo();
void LLVMInitializeNVPTXTarget();
void LLVMInitializeNVPTXTargetMC();
void LLVMInitializeNVPTXAsmPrinter();
}

namespace kiln::codegen::nvptx {
namespace {

constexpr TargetDescription kTarget{
    .triple = kTargetTriple,
    .cpu = kCudaArch,
    .features = kPtxFeatures,
    .relocation = std::nullopt,
    .code_model = std::nullopt,
    .initialize =
        [] {
          LLVMInitializeNVPTXTargetInfo();
          LLVMInitializeNVPTXTarget();
          LLVMInitializeNVPTXTargetMC();
          LLVMInitializeNVPTXAsmPrinter();
        },
};

absl::StatusOr<KernelBinary> BinaryOf(KernelModule& kernel) {
  const std::string& name = kernel.name();
  if (absl::Status s = LinkLibdevice(kernel.module(), name); !s.ok()) return s;
  // The NVPTX target machine adds NVVMReflect to the pipeline, which answers libdevice's
  // __nvvm_reflect queries.
  kernel.Optimize();
  for (llvm::Function& f : kernel.module()) {
    if (f.isDeclaration() && !f.isIntrinsic() && !f.use_empty()) {
      return absl::InternalError(absl::StrCat("codegen: generated code needs `", f.getName().str(),
                                              "`, which libdevice does not have"));
    }
  }
  KernelBinary out;
  auto ptx = kernel.EmitFile(llvm::CGFT_AssemblyFile);
  if (!ptx.ok()) return ptx.status();
  out.ptx = *std::move(ptx);
  auto cubin = AssembleCubin(out.ptx);
  if (!cubin.ok()) {
    return absl::Status(cubin.status().code(), absl::StrCat(name, ": ", cubin.status().message()));
  }
  out.cubin = *std::move(cubin);
  auto resources = ResourcesOf(out.cubin, name);
  if (!resources.ok()) return resources.status();
  out.registers = resources->registers;
  out.static_shared_memory_bytes = resources->static_shared_memory_bytes;
  return out;
}

}  // namespace

absl::StatusOr<std::string> EmptyPtx() {
  return EmitEmptyModule(kTarget, CodegenOptions().opt_level, llvm::CGFT_AssemblyFile);
}

absl::StatusOr<CodegenResult> GenerateCubins(const loop::Program& program,
                                             const CodegenOptions& options) {
  auto kernels = CompileKernels<KernelBinary>(kTarget, GpuKernelAbi(), program, options, BinaryOf);
  if (!kernels.ok()) return kernels.status();
  CodegenResult result;
  for (size_t i = 0; i < program.kernels.size(); ++i) result.entry.push_back(kernels->EntryOf(i));
  result.codes = std::move(kernels->codes);
  result.code_of = std::move(kernels->code_of);
  result.llvm_ir = std::move(kernels->llvm_ir);
  return result;
}

}  // namespace kiln::codegen::nvptx
