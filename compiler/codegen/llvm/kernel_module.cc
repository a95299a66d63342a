#include "compiler/codegen/llvm/kernel_module.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "llvm/IR/Verifier.h"
#include "llvm/Support/raw_ostream.h"
#include "proto/base/digest.h"
#include "proto/base/thread_pool.h"

namespace kiln::codegen {

std::string EntryName(const loop::Program& program, size_t index) {
  const std::string& name = program.kernels[index].name;
  return absl::StrCat("kiln_k", index, name.empty() ? "" : "_", name);
}

absl::StatusOr<KernelModule> KernelModule::Emit(const TargetDescription& target,
                                                const CodegenOptions& options,
                                                const loop::Program& program, size_t index,
                                                const KernelAbi& abi) {
  return EmitNamed(target, options, program, index, abi, EntryName(program, index));
}

absl::StatusOr<std::string> KernelModule::CodeDigest(const TargetDescription& target,
                                                     const CodegenOptions& options,
                                                     const loop::Program& program, size_t index,
                                                     const KernelAbi& abi) {
  absl::StatusOr<KernelModule> kernel = EmitNamed(target, options, program, index, abi, "kiln_k");
  if (!kernel.ok()) return kernel.status();
  std::string ir;
  llvm::raw_string_ostream os(ir);
  kernel->module().print(os, nullptr);
  return Sha256Hex(os.str());
}

absl::StatusOr<KernelModule> KernelModule::EmitNamed(const TargetDescription& target,
                                                     const CodegenOptions& options,
                                                     const loop::Program& program, size_t index,
                                                     const KernelAbi& abi, std::string name) {
  absl::StatusOr<std::unique_ptr<llvm::TargetMachine>> machine =
      MakeTargetMachine(target, options.opt_level);
  if (!machine.ok()) return machine.status();
  auto context = std::make_unique<llvm::LLVMContext>();
  std::unique_ptr<llvm::Module> module = NewModule(*context, name, **machine);
  if (absl::Status s = EmitKernel(*module, program, program.kernels[index], name, abi); !s.ok()) {
    return s;
  }
  std::string errors;
  llvm::raw_string_ostream os(errors);
  if (llvm::verifyModule(*module, &os)) {
    return absl::InternalError(absl::StrCat("codegen: invalid LLVM IR: ", os.str()));
  }
  return KernelModule(std::move(name), options, std::move(context), *std::move(machine),
                      std::move(module));
}

void KernelModule::Optimize(const llvm::PipelineTuningOptions& tuning) {
  SetTargetAttributes(*module_, *machine_);
  codegen::Optimize(*machine_, *module_, options_.opt_level, tuning);
}

absl::StatusOr<std::string> KernelModule::EmitFile(llvm::CodeGenFileType file_type) {
  // Code generation rewrites the module's IR (CodeGenPrepare and the passes after it), so the
  // optimized IR is printed before it starts.
  if (options_.emit_llvm_ir) {
    llvm::raw_string_ostream os(llvm_ir_);
    module_->print(os, nullptr);
  }
  return codegen::EmitFile(*machine_, *module_, file_type);
}

absl::StatusOr<std::string> EmitEmptyModule(const TargetDescription& target, int opt_level,
                                            llvm::CodeGenFileType file_type) {
  absl::StatusOr<std::unique_ptr<llvm::TargetMachine>> machine =
      MakeTargetMachine(target, opt_level);
  if (!machine.ok()) return machine.status();
  llvm::LLVMContext context;
  std::unique_ptr<llvm::Module> module = NewModule(context, "kiln", **machine);
  return EmitFile(**machine, *module, file_type);
}

void RunEachKernel(size_t n, int threads, absl::FunctionRef<void(size_t)> fn) {
  const size_t workers =
      std::min(n, static_cast<size_t>(threads > 0 ? threads : HardwareThreads()));
  if (workers <= 1) {
    for (size_t i = 0; i < n; ++i) fn(i);
    return;
  }
  // Kernels take the pool's workers in order as they come free (its queue is first come first
  // served), so a few slow kernels do not hold up a share of fast ones.
  ThreadPoolOptions options;
  options.workers = static_cast<int>(workers);
  ThreadPool pool(options);
  for (size_t i = 0; i < n; ++i) {
    // A pool with workers and an unbounded queue refuses nothing before Shutdown; should it,
    // the kernel runs here instead.
    if (!pool.Submit([fn, i] { fn(i); }).ok()) fn(i);
  }
  pool.Shutdown();
}

}  // namespace kiln::codegen
