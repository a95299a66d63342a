#include "compiler/codegen/llvm/target_machine.h"

#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/IR/LegacyPassManager.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/Target/TargetOptions.h"
#include "proto/base/sync.h"

namespace kiln::codegen {
namespace {

// The targets this process has registered with LLVM, by their initialization function. LLVM's
// target registry may not be written while it is read, so registering a target and looking
// one up hold `mu`.
struct Registrations {
  Mutex mu;
  absl::flat_hash_set<void (*)()> done ABSL_GUARDED_BY(mu);
};

Registrations& TargetRegistrations() {
  static auto* registrations = new Registrations();
  return *registrations;
}

absl::StatusOr<const llvm::Target*> LookUp(const TargetDescription& target) {
  Registrations& registrations = TargetRegistrations();
  MutexLock lock(&registrations.mu);
  if (target.initialize != nullptr && registrations.done.insert(target.initialize).second) {
    target.initialize();
  }
  std::string error;
  const llvm::Target* found = llvm::TargetRegistry::lookupTarget(std::string(target.triple), error);
  if (found == nullptr) return absl::InternalError(absl::StrCat("codegen: ", error));
  return found;
}

}  // namespace

absl::StatusOr<std::unique_ptr<llvm::TargetMachine>> MakeTargetMachine(
    const TargetDescription& target, int opt_level) {
  absl::StatusOr<const llvm::Target*> found = LookUp(target);
  if (!found.ok()) return found.status();
  llvm::TargetOptions options;
  options.AllowFPOpFusion = llvm::FPOpFusion::Strict;
  std::unique_ptr<llvm::TargetMachine> machine((*found)->createTargetMachine(
      target.triple, target.cpu, target.features, options, target.relocation, target.code_model,
      opt_level >= 3 ? llvm::CodeGenOpt::Aggressive : llvm::CodeGenOpt::Default));
  if (!machine) {
    return absl::InternalError(
        absl::StrCat("codegen: no target machine for ", std::string(target.triple)));
  }
  return machine;
}

std::unique_ptr<llvm::Module> NewModule(llvm::LLVMContext& context, const std::string& name,
                                        const llvm::TargetMachine& machine) {
  auto module = std::make_unique<llvm::Module>(name, context);
  module->setTargetTriple(machine.getTargetTriple().str());
  module->setDataLayout(machine.createDataLayout());
  return module;
}

void SetTargetAttributes(llvm::Module& module, const llvm::TargetMachine& machine) {
  const llvm::StringRef cpu = machine.getTargetCPU();
  const llvm::StringRef features = machine.getTargetFeatureString();
  for (llvm::Function& f : module) {
    if (f.isDeclaration()) continue;
    f.addFnAttr("target-cpu", cpu);
    if (!features.empty()) f.addFnAttr("target-features", features);
  }
}

void Optimize(llvm::TargetMachine& machine, llvm::Module& module, int opt_level,
              const llvm::PipelineTuningOptions& tuning) {
  llvm::LoopAnalysisManager lam;
  llvm::FunctionAnalysisManager fam;
  llvm::CGSCCAnalysisManager cgam;
  llvm::ModuleAnalysisManager mam;
  llvm::PassBuilder pb(&machine, tuning);
  pb.registerModuleAnalyses(mam);
  pb.registerCGSCCAnalyses(cgam);
  pb.registerFunctionAnalyses(fam);
  pb.registerLoopAnalyses(lam);
  pb.crossRegisterProxies(lam, fam, cgam, mam);
  const llvm::OptimizationLevel level = opt_level <= 0   ? llvm::OptimizationLevel::O0
                                        : opt_level == 1 ? llvm::OptimizationLevel::O1
                                        : opt_level == 2 ? llvm::OptimizationLevel::O2
                                                         : llvm::OptimizationLevel::O3;
  llvm::ModulePassManager mpm = level == llvm::OptimizationLevel::O0
                                    ? pb.buildO0DefaultPipeline(level)
                                    : pb.buildPerModuleDefaultPipeline(level);
  mpm.run(module, mam);
}

absl::StatusOr<std::string> EmitFile(llvm::TargetMachine& machine, llvm::Module& module,
                                     llvm::CodeGenFileType file_type) {
  llvm::SmallVector<char, 0> bytes;
  {
    llvm::raw_svector_ostream os(bytes);
    llvm::legacy::PassManager pm;
    if (machine.addPassesToEmitFile(pm, os, nullptr, file_type)) {
      return absl::InternalError(
          absl::StrCat("codegen: ", machine.getTargetTriple().str(), " cannot emit ",
                       file_type == llvm::CGFT_ObjectFile ? "object files" : "assembly"));
    }
    pm.run(module);
  }
  return std::string(bytes.data(), bytes.size());
}

}  // namespace kiln::codegen
