#include "compiler/codegen/nvptx/codegen.h"

#include <algorithm>
#include <atomic>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "compiler/codegen/llvm/kernel_emitter.h"
#include "compiler/codegen/nvptx/kernel_abi.h"
#include "compiler/codegen/nvptx/libdevice.h"
#include "compiler/codegen/nvptx/nvjitlink.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/LegacyPassManager.h"
#include "llvm/IR/Module.h"
#include "llvm/IR/Verifier.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Passes/PassBuilder.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/Target/TargetMachine.h"
#include "llvm/Target/TargetOptions.h"

extern "C" {
void LLVMInitializeNVPTXTargetInfo();
void LLVMInitializeNVPTXTarget();
void LLVMInitializeNVPTXTargetMC();
void LLVMInitializeNVPTXAsmPrinter();
}

namespace kiln::codegen::nvptx {
namespace {

void InitializeLlvm() {
  static std::once_flag once;
  std::call_once(once, [] {
    LLVMInitializeNVPTXTargetInfo();
    LLVMInitializeNVPTXTarget();
    LLVMInitializeNVPTXTargetMC();
    LLVMInitializeNVPTXAsmPrinter();
  });
}

absl::StatusOr<std::unique_ptr<llvm::TargetMachine>> MakeTargetMachine(
    const CodegenOptions& options) {
  std::string error;
  const llvm::Target* target = llvm::TargetRegistry::lookupTarget(kTargetTriple, error);
  if (target == nullptr) return absl::InternalError(absl::StrCat("codegen: ", error));
  llvm::TargetOptions to;
  to.AllowFPOpFusion = llvm::FPOpFusion::Strict;
  std::unique_ptr<llvm::TargetMachine> tm(target->createTargetMachine(
      kTargetTriple, kCudaArch, kPtxFeatures, to, std::nullopt, std::nullopt,
      options.opt_level >= 3 ? llvm::CodeGenOpt::Aggressive : llvm::CodeGenOpt::Default));
  if (!tm) return absl::InternalError("codegen: no target machine for NVPTX");
  return tm;
}

std::unique_ptr<llvm::Module> NewModule(llvm::LLVMContext& ctx, const std::string& name,
                                        llvm::TargetMachine& tm) {
  auto module = std::make_unique<llvm::Module>(name, ctx);
  module->setTargetTriple(kTargetTriple);
  module->setDataLayout(tm.createDataLayout());
  return module;
}

absl::StatusOr<std::string> EmitPtx(llvm::TargetMachine& tm, llvm::Module& module) {
  llvm::SmallVector<char, 0> ptx;
  {
    llvm::raw_svector_ostream os(ptx);
    llvm::legacy::PassManager pm;
    if (tm.addPassesToEmitFile(pm, os, nullptr, llvm::CGFT_AssemblyFile)) {
      return absl::InternalError("codegen: the NVPTX target cannot emit PTX");
    }
    pm.run(module);
  }
  return std::string(ptx.data(), ptx.size());
}

void Optimize(llvm::TargetMachine& tm, llvm::Module& module, const CodegenOptions& options) {
  llvm::LoopAnalysisManager lam;
  llvm::FunctionAnalysisManager fam;
  llvm::CGSCCAnalysisManager cgam;
  llvm::ModuleAnalysisManager mam;
  // The NVPTX target machine adds NVVMReflect to the pipeline, which answers libdevice's
  // __nvvm_reflect queries.
  llvm::PassBuilder pb(&tm);
  pb.registerModuleAnalyses(mam);
  pb.registerCGSCCAnalyses(cgam);
  pb.registerFunctionAnalyses(fam);
  pb.registerLoopAnalyses(lam);
  pb.crossRegisterProxies(lam, fam, cgam, mam);
  llvm::OptimizationLevel level = options.opt_level <= 0   ? llvm::OptimizationLevel::O0
                                  : options.opt_level == 1 ? llvm::OptimizationLevel::O1
                                  : options.opt_level == 2 ? llvm::OptimizationLevel::O2
                                                           : llvm::OptimizationLevel::O3;
  llvm::ModulePassManager mpm = level == llvm::OptimizationLevel::O0
                                    ? pb.buildO0DefaultPipeline(level)
                                    : pb.buildPerModuleDefaultPipeline(level);
  mpm.run(module, mam);
}

absl::StatusOr<KernelBinary> CompileKernel(const loop::Program& program, size_t index,
                                           const CodegenOptions& options, std::string* llvm_ir) {
  auto tm = MakeTargetMachine(options);
  if (!tm.ok()) return tm.status();
  const std::string name = absl::StrCat("kiln_k", index);
  llvm::LLVMContext ctx;
  std::unique_ptr<llvm::Module> module = NewModule(ctx, name, **tm);
  if (absl::Status s = EmitKernel(*module, program, program.kernels[index], name, GpuKernelAbi());
      !s.ok()) {
    return s;
  }
  {
    std::string msg;
    llvm::raw_string_ostream os(msg);
    if (llvm::verifyModule(*module, &os)) {
      return absl::InternalError(absl::StrCat("codegen: invalid LLVM IR: ", os.str()));
    }
  }
  if (absl::Status s = LinkLibdevice(*module, name); !s.ok()) return s;
  for (llvm::Function& f : *module) {
    if (f.isDeclaration()) continue;
    f.addFnAttr("target-cpu", kCudaArch);
    f.addFnAttr("target-features", kPtxFeatures);
  }
  Optimize(**tm, *module, options);
  for (llvm::Function& f : *module) {
    if (f.isDeclaration() && !f.isIntrinsic() && !f.use_empty()) {
      return absl::InternalError(absl::StrCat("codegen: generated code needs `", f.getName().str(),
                                              "`, which libdevice does not have"));
    }
  }
  if (options.emit_llvm_ir) {
    llvm::raw_string_ostream os(*llvm_ir);
    module->print(os, nullptr);
  }
  KernelBinary out;
  auto ptx = EmitPtx(**tm, *module);
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
  InitializeLlvm();
  CodegenOptions options;
  auto tm = MakeTargetMachine(options);
  if (!tm.ok()) return tm.status();
  llvm::LLVMContext ctx;
  std::unique_ptr<llvm::Module> module = NewModule(ctx, "kiln", **tm);
  return EmitPtx(**tm, *module);
}

absl::StatusOr<CodegenResult> GenerateCubins(const loop::Program& program,
                                             const CodegenOptions& options) {
  InitializeLlvm();
  const size_t n = program.kernels.size();
  std::vector<absl::StatusOr<KernelBinary>> kernels(n, absl::InternalError("not compiled"));
  std::vector<std::string> ir(n);
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i = next++; i < n; i = next++) {
      kernels[i] = CompileKernel(program, i, options, &ir[i]);
    }
  };
  const size_t threads =
      std::min<size_t>(n, options.threads > 0 ? static_cast<size_t>(options.threads)
                                              : std::max(1u, std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  for (size_t t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();

  CodegenResult result;
  for (size_t i = 0; i < n; ++i) {
    if (!kernels[i].ok()) return kernels[i].status();
    result.kernels.push_back(*std::move(kernels[i]));
    result.llvm_ir += ir[i];
  }
  return result;
}

}  // namespace kiln::codegen::nvptx
