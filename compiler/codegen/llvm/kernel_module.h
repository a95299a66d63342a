#pragma once

// How Kiln's LLVM code generators compile a loop program: kernel by kernel, each kernel an
// LLVM module of its own (a KernelModule) with its own context and target machine, so that
// kernels compile in parallel and each kernel's code depends on that kernel alone
// (CompileKernels). A target supplies its TargetDescription and KernelAbi, and turns each
// emitted module into its code: what it links into the module, the optimization it asks for,
// what it checks, and what it makes of the file LLVM emits are its own.
//
// Kernels whose IR is the same but for their names (a transformer's layers, a network's
// repeated blocks) are compiled once: the code of the first of them in program order serves
// the others, under its entry symbol.

#include <cstddef>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "compiler/codegen/llvm/codegen_options.h"
#include "compiler/codegen/llvm/kernel_emitter.h"
#include "compiler/codegen/llvm/target_machine.h"
#include "compiler/loop/ir.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/Module.h"
#include "llvm/Passes/PassBuilder.h"
#include "llvm/Support/CodeGen.h"
#include "llvm/Target/TargetMachine.h"

namespace kiln::codegen {

// The entry symbol of program kernel `index`: "kiln_k<index>", then "_<name>" where the kernel
// has a name (lower/kernel_names.h).
std::string EntryName(const loop::Program& program, size_t index);

// Kernel `index` of a program in an LLVM module of its own, for one target. Used by one
// thread at a time; distinct ones are independent.
class KernelModule {
 public:
  // The kernel, named EntryName(program, index), emitted through `abi` into a new module for
  // `target` and verified; code is generated at options.opt_level. INTERNAL when LLVM does not
  // know the target, the emitter cannot express the kernel, or its IR is invalid.
  static absl::StatusOr<KernelModule> Emit(const TargetDescription& target,
                                           const CodegenOptions& options,
                                           const loop::Program& program, size_t index,
                                           const KernelAbi& abi);

  // The SHA-256 of the kernel's IR as Emit makes it, emitted under one name for every kernel:
  // kernels of equal digests compile to the same code but for their names. INTERNAL as Emit.
  static absl::StatusOr<std::string> CodeDigest(const TargetDescription& target,
                                                const CodegenOptions& options,
                                                const loop::Program& program, size_t index,
                                                const KernelAbi& abi);

  // The kernel's entry symbol.
  const std::string& name() const { return name_; }
  llvm::Module& module() { return *module_; }

  // Marks the module's functions with the target's CPU and features and runs LLVM's standard
  // pipeline at the options' level, with the loop transformations `tuning` allows.
  void Optimize(const llvm::PipelineTuningOptions& tuning = {});

  // The module's code as `file_type` says (object code or assembly). Where the options ask
  // for IR, the module's IR as code generation starts from it is kept first (llvm_ir()).
  // INTERNAL when the target cannot emit that kind of file.
  absl::StatusOr<std::string> EmitFile(llvm::CodeGenFileType file_type);

  // The IR that EmitFile kept; empty unless the options asked for it.
  const std::string& llvm_ir() const { return llvm_ir_; }

 private:
  static absl::StatusOr<KernelModule> EmitNamed(const TargetDescription& target,
                                                const CodegenOptions& options,
                                                const loop::Program& program, size_t index,
                                                const KernelAbi& abi, std::string name);

  KernelModule(std::string name, const CodegenOptions& options,
               std::unique_ptr<llvm::LLVMContext> context,
               std::unique_ptr<llvm::TargetMachine> machine, std::unique_ptr<llvm::Module> module)
      : name_(std::move(name)),
        options_(options),
        context_(std::move(context)),
        machine_(std::move(machine)),
        module_(std::move(module)) {}

  std::string name_;
  CodegenOptions options_;
  std::string llvm_ir_;
  // The module lives in the context and is laid out for the machine: declared after both, so
  // that it goes first.
  std::unique_ptr<llvm::LLVMContext> context_;
  std::unique_ptr<llvm::TargetMachine> machine_;
  std::unique_ptr<llvm::Module> module_;
};

// The code of a module without kernels (named "kiln") for `target`, generated at `opt_level`,
// as `file_type` says: what a program of extern steps alone loads.
absl::StatusOr<std::string> EmitEmptyModule(const TargetDescription& target, int opt_level,
                                            llvm::CodeGenFileType file_type);

// Runs fn(i) for every i in [0, n) on up to `threads` threads (<= 0: one per hardware thread),
// each i once; on the calling thread alone when one thread suffices. Returns when all have
// run.
void RunEachKernel(size_t n, int threads, absl::FunctionRef<void(size_t index)> fn);

// What a target made of every kernel of a program: one code per distinct kernel.
template <typename T>
struct CompiledKernels {
  std::vector<T> codes;  // in program order of the first kernel of each
  // For each program kernel, the index of its code in `codes`.
  std::vector<size_t> code_of;
  // For each code, the program kernel it was compiled as, and its entry symbol: that kernel's
  // EntryName.
  std::vector<size_t> compiled_as;
  std::vector<std::string> entries;
  std::string llvm_ir;  // every code's IR, in order, where the options asked for it

  // The entry symbol of program kernel `kernel`'s code.
  const std::string& EntryOf(size_t kernel) const { return entries[code_of[kernel]]; }
};

// Every kernel of `program` emitted for `target` through `abi` (KernelModule::Emit) and turned
// into a T by `compile`, on options.threads threads, once for each distinct kernel (see the
// file's comment); or the failure of the first kernel, in kernel order, that failed. Neither
// the results nor the failure reported depend on the number of threads. `compile` runs on
// several threads at once, each time on another kernel.
template <typename T>
absl::StatusOr<CompiledKernels<T>> CompileKernels(
    const TargetDescription& target, const KernelAbi& abi, const loop::Program& program,
    const CodegenOptions& options, absl::FunctionRef<absl::StatusOr<T>(KernelModule&)> compile) {
  const size_t n = program.kernels.size();
  // The kernels' digests, emitted in parallel (emitting is a small part of compiling). A
  // kernel that cannot be emitted is a code of its own, which fails when it is compiled.
  std::vector<absl::StatusOr<std::string>> digests(n);
  RunEachKernel(n, options.threads, [&](size_t i) {
    digests[i] = KernelModule::CodeDigest(target, options, program, i, abi);
  });
  CompiledKernels<T> out;
  out.code_of.resize(n);
  absl::flat_hash_map<std::string, size_t> code_by_digest;
  for (size_t i = 0; i < n; ++i) {
    if (digests[i].ok()) {
      auto [at, inserted] = code_by_digest.try_emplace(*digests[i], out.compiled_as.size());
      out.code_of[i] = at->second;
      if (!inserted) continue;
    } else {
      out.code_of[i] = out.compiled_as.size();
    }
    out.compiled_as.push_back(i);
    out.entries.push_back(EntryName(program, i));
  }

  const size_t codes = out.compiled_as.size();
  std::vector<absl::StatusOr<T>> compiled(codes);
  std::vector<std::string> ir(codes);
  RunEachKernel(codes, options.threads, [&](size_t c) {
    absl::StatusOr<KernelModule> kernel =
        KernelModule::Emit(target, options, program, out.compiled_as[c], abi);
    if (!kernel.ok()) {
      compiled[c] = kernel.status();
      return;
    }
    compiled[c] = compile(*kernel);
    ir[c] = kernel->llvm_ir();
  });
  out.codes.reserve(codes);
  for (size_t c = 0; c < codes; ++c) {
    if (!compiled[c].ok()) return compiled[c].status();
    out.codes.push_back(*std::move(compiled[c]));
    out.llvm_ir += ir[c];
  }
  return out;
}

}  // namespace kiln::codegen
