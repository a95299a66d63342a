#include "compiler/codegen/x86/codegen.h"

#include <algorithm>
#include <atomic>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "compiler/codegen/llvm/kernel_emitter.h"
#include "compiler/codegen/x86/kernel_abi.h"
#include "compiler/codegen/x86/link.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/LegacyPassManager.h"
#include "llvm/IR/Module.h"
#include "llvm/IR/Verifier.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Object/ObjectFile.h"
#include "llvm/Passes/PassBuilder.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/Target/TargetMachine.h"
#include "llvm/Target/TargetOptions.h"

namespace kiln::codegen::x86 {
namespace {

void InitializeLlvm() {
  static std::once_flag once;
  std::call_once(once, [] {
    LLVMInitializeX86TargetInfo();
    LLVMInitializeX86Target();
    LLVMInitializeX86TargetMC();
    LLVMInitializeX86AsmPrinter();
  });
}

// Functions the generated code may call: libm and the few libc routines LLVM itself emits.
const absl::flat_hash_set<std::string>& AllowedImports() {
  static const auto* names = [] {
    auto* s = new absl::flat_hash_set<std::string>{"memset", "memcpy", "memmove"};
    for (const char* f :
         {"exp",   "exp2",  "expm1",  "log",   "log2",     "log10",     "log1p", "sin",
          "cos",   "tan",   "asin",   "acos",  "atan",     "sinh",      "cosh",  "tanh",
          "erf",   "erfc",  "pow",    "atan2", "fmod",     "lgamma",    "sqrt",  "ldexp",
          "floor", "ceil",  "trunc",  "round", "rint",     "nearbyint", "fmax",  "fmin",
          "cbrt",  "exp10", "sincos", "hypot", "roundeven"}) {
      s->insert(f);
      s->insert(absl::StrCat(f, "f"));
    }
    return s;
  }();
  return *names;
}

// Fails unless every symbol `object` leaves undefined is in libc or libm.
absl::Status CheckImports(const llvm::SmallVector<char, 0>& object) {
  auto buffer = llvm::MemoryBuffer::getMemBuffer(llvm::StringRef(object.data(), object.size()),
                                                 "kernel.o", false);
  auto file = llvm::object::ObjectFile::createObjectFile(buffer->getMemBufferRef());
  if (!file) {
    return absl::InternalError(
        absl::StrCat("codegen: unreadable object: ", llvm::toString(file.takeError())));
  }
  for (const llvm::object::SymbolRef& sym : (*file)->symbols()) {
    auto flags = sym.getFlags();
    if (!flags) {
      llvm::consumeError(flags.takeError());
      continue;
    }
    if (!(*flags & llvm::object::SymbolRef::SF_Undefined)) continue;
    auto name = sym.getName();
    if (!name) {
      llvm::consumeError(name.takeError());
      continue;
    }
    if (name->empty()) continue;
    if (!AllowedImports().contains(name->str())) {
      return absl::InternalError(absl::StrCat("codegen: generated code needs `", name->str(),
                                              "`, which is not in libc or libm"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<llvm::TargetMachine>> MakeTargetMachine(
    const CodegenOptions& options) {
  std::string error;
  const llvm::Target* target = llvm::TargetRegistry::lookupTarget(kTargetTriple, error);
  if (target == nullptr) return absl::InternalError(absl::StrCat("codegen: ", error));
  llvm::TargetOptions to;
  to.AllowFPOpFusion = llvm::FPOpFusion::Strict;
  std::unique_ptr<llvm::TargetMachine> tm(target->createTargetMachine(
      kTargetTriple, kTargetCpu, "", to, llvm::Reloc::PIC_, llvm::CodeModel::Small,
      options.opt_level >= 3 ? llvm::CodeGenOpt::Aggressive : llvm::CodeGenOpt::Default));
  if (!tm) return absl::InternalError("codegen: no target machine for x86-64");
  return tm;
}

// Object code for `module`, which may call nothing outside libc and libm.
absl::StatusOr<std::string> EmitObject(llvm::TargetMachine& tm, llvm::Module& module) {
  llvm::SmallVector<char, 0> object;
  {
    llvm::raw_svector_ostream os(object);
    llvm::legacy::PassManager pm;
    if (tm.addPassesToEmitFile(pm, os, nullptr, llvm::CGFT_ObjectFile)) {
      return absl::InternalError("codegen: the target cannot emit object files");
    }
    pm.run(module);
  }
  if (absl::Status s = CheckImports(object); !s.ok()) return s;
  return std::string(object.data(), object.size());
}

// One kernel compiled on its own: object code, the widest vector its loops got, its IR.
struct KernelObject {
  std::string object;
  int32_t vector_width = 1;
  std::string llvm_ir;
};

absl::StatusOr<KernelObject> CompileKernel(const loop::Program& program, size_t index,
                                           const CodegenOptions& options) {
  auto tm = MakeTargetMachine(options);
  if (!tm.ok()) return tm.status();
  const std::string name = absl::StrCat("kiln_k", index);
  llvm::LLVMContext ctx;
  auto module = std::make_unique<llvm::Module>(name, ctx);
  module->setTargetTriple(kTargetTriple);
  module->setDataLayout((*tm)->createDataLayout());
  if (absl::Status s = EmitKernel(*module, program, program.kernels[index], name, CpuKernelAbi());
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
  for (llvm::Function& f : *module) {
    if (f.isDeclaration()) continue;
    f.addFnAttr("target-cpu", kTargetCpu);
  }

  {
    llvm::LoopAnalysisManager lam;
    llvm::FunctionAnalysisManager fam;
    llvm::CGSCCAnalysisManager cgam;
    llvm::ModuleAnalysisManager mam;
    llvm::PipelineTuningOptions pto;
    pto.LoopVectorization = options.opt_level >= 2;
    pto.SLPVectorization = options.opt_level >= 2;
    // Kernels are memory-bound loops that the vectorizer already widens and interleaves:
    // unrolling them further left run times unchanged on the shared graphs and doubled
    // both code size and compile time.
    pto.LoopUnrolling = false;
    llvm::PassBuilder pb(tm->get(), pto);
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
    mpm.run(*module, mam);
  }

  KernelObject result;
  if (llvm::Function* f = module->getFunction(name)) {
    for (llvm::BasicBlock& bb : *f) {
      for (llvm::Instruction& inst : bb) {
        if (auto* vt = llvm::dyn_cast<llvm::FixedVectorType>(inst.getType())) {
          result.vector_width =
              std::max<int32_t>(result.vector_width, static_cast<int32_t>(vt->getNumElements()));
        }
      }
    }
  }
  if (options.emit_llvm_ir) {
    llvm::raw_string_ostream os(result.llvm_ir);
    module->print(os, nullptr);
  }

  auto object = EmitObject(**tm, *module);
  if (!object.ok()) return object.status();
  result.object = *std::move(object);
  return result;
}

// The object of a module without kernels: what a plan of extern steps alone links.
absl::StatusOr<std::string> EmptyObject(const CodegenOptions& options) {
  auto tm = MakeTargetMachine(options);
  if (!tm.ok()) return tm.status();
  llvm::LLVMContext ctx;
  llvm::Module module("kiln", ctx);
  module.setTargetTriple(kTargetTriple);
  module.setDataLayout((*tm)->createDataLayout());
  return EmitObject(**tm, module);
}

}  // namespace

absl::StatusOr<CodegenResult> GenerateSharedObject(const loop::Program& program,
                                                   const CodegenOptions& options) {
  InitializeLlvm();
  // Each kernel is its own module, so kernels compile in parallel; the objects are linked in
  // kernel order, so the bytes do not depend on the number of threads.
  const size_t n = program.kernels.size();
  std::vector<absl::StatusOr<KernelObject>> kernels(n, absl::InternalError("not compiled"));
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i = next++; i < n; i = next++) kernels[i] = CompileKernel(program, i, options);
  };
  const size_t threads =
      std::min<size_t>(n, options.threads > 0 ? static_cast<size_t>(options.threads)
                                              : std::max(1u, std::thread::hardware_concurrency()));
  std::vector<std::thread> helpers;
  for (size_t t = 1; t < threads; ++t) helpers.emplace_back(work);
  work();
  for (std::thread& t : helpers) t.join();

  CodegenResult result;
  std::vector<std::string> objects;
  for (absl::StatusOr<KernelObject>& k : kernels) {
    if (!k.ok()) return k.status();
    result.vector_widths.push_back(k->vector_width);
    result.llvm_ir += k->llvm_ir;
    objects.push_back(std::move(k->object));
  }
  if (objects.empty()) {
    auto empty = EmptyObject(options);
    if (!empty.ok()) return empty.status();
    objects.push_back(*std::move(empty));
  }
  auto so = LinkSharedObject(objects);
  if (!so.ok()) return so.status();
  result.shared_object = *std::move(so);
  return result;
}

}  // namespace kiln::codegen::x86
