#pragma once

// What Kiln's code generators ask of an LLVM target, whichever it is: a target machine for a
// TargetDescription, modules laid out for it, LLVM's standard optimization pipeline at O0..O3,
// and a module's code as an object or assembly file.
//
// Floating-point contraction is never enabled (FPOpFusion::Strict) on any target, so that
// results match separate multiplies and adds. The same module, description and options always
// give the same bytes. Thread-safe: the functions may run concurrently on distinct target
// machines and modules; one target machine or module is used by one thread at a time.

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/Module.h"
#include "llvm/Passes/PassBuilder.h"
#include "llvm/Support/CodeGen.h"
#include "llvm/Target/TargetMachine.h"

namespace kiln::codegen {

// The LLVM target a code generator emits for, and how.
struct TargetDescription {
  std::string_view triple;
  std::string_view cpu;
  std::string_view features;                         // "" for the CPU's own
  std::optional<llvm::Reloc::Model> relocation;      // nullopt: the target's default
  std::optional<llvm::CodeModel::Model> code_model;  // nullopt: the target's default
  // Registers the target's parts with LLVM (LLVMInitialize<Target>TargetInfo, Target,
  // TargetMC, AsmPrinter). MakeTargetMachine calls it once per process, before the target's
  // first machine.
  void (*initialize)() = nullptr;
};

// A target machine for `target` whose code generator works at `opt_level` (0..3; 3 is
// LLVM's Aggressive level, the others its Default). INTERNAL when LLVM does not know the
// target.
absl::StatusOr<std::unique_ptr<llvm::TargetMachine>> MakeTargetMachine(
    const TargetDescription& target, int opt_level);

// An empty module `name` in `context`, with the triple and data layout of `machine`.
std::unique_ptr<llvm::Module> NewModule(llvm::LLVMContext& context, const std::string& name,
                                        const llvm::TargetMachine& machine);

// Marks every function that `module` defines with the CPU and features of `machine`, so that
// the optimizer's cost models and the code generator see the same target.
void SetTargetAttributes(llvm::Module& module, const llvm::TargetMachine& machine);

// Runs LLVM's standard pipeline for `opt_level` (0..3) on `module`, with the passes that
// `machine` adds to it (NVPTX: NVVMReflect) and the loop transformations `tuning` allows.
void Optimize(llvm::TargetMachine& machine, llvm::Module& module, int opt_level,
              const llvm::PipelineTuningOptions& tuning = {});

// The code of `module` as `file_type` says: object code, or assembly (PTX on NVPTX). INTERNAL
// when the target cannot emit that kind of file.
absl::StatusOr<std::string> EmitFile(llvm::TargetMachine& machine, llvm::Module& module,
                                     llvm::CodeGenFileType file_type);

}  // namespace kiln::codegen
