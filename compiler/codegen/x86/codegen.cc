#include "compiler/codegen/x86/codegen.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "compiler/codegen/llvm/kernel_module.h"
#include "compiler/codegen/llvm/target_machine.h"
#include "compiler/codegen/x86/kernel_abi.h"
#include "compiler/codegen/x86/link.h"
#include "llvm/IR/DerivedTypes.h"
#include "llvm/IR/Function.h"
#include "llvm/Object/ObjectFile.h"
#include "llvm/Passes/PassBuilder.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/TargetSelect.h"

namespace kiln::codegen::x86 {
namespace {

constexpr TargetDescription kTarget{
    .triple = kTargetTriple,
    .cpu = kTargetCpu,
    .features = "",
    .relocation = llvm::Reloc::PIC_,
    .code_model = llvm::CodeModel::Small,
    .initialize =
        [] {
          LLVMInitializeX86TargetInfo();
          LLVMInitializeX86Target();
          LLVMInitializeX86TargetMC();
          LLVMInitializeX86AsmPrinter();
        },
};

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
absl::Status CheckImports(const std::string& object) {
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

// `object`, unless it calls something outside libc and libm.
absl::StatusOr<std::string> CheckedObject(absl::StatusOr<std::string> object) {
  if (!object.ok()) return object.status();
  if (absl::Status s = CheckImports(*object); !s.ok()) return s;
  return object;
}

// One kernel's object code and the widest vector its loops got.
struct KernelObject {
  std::string object;
  int32_t vector_width = 1;
};

absl::StatusOr<KernelObject> ObjectOf(KernelModule& kernel, int opt_level) {
  llvm::PipelineTuningOptions tuning;
  tuning.LoopVectorization = opt_level >= 2;
  tuning.SLPVectorization = opt_level >= 2;
  // Kernels are memory-bound loops that the vectorizer already widens and interleaves:
  // unrolling them further left run times unchanged on the shared graphs and doubled
  // both code size and compile time.
  tuning.LoopUnrolling = false;
  kernel.Optimize(tuning);
  KernelObject result;
  if (llvm::Function* f = kernel.module().getFunction(kernel.name())) {
    for (llvm::BasicBlock& bb : *f) {
      for (llvm::Instruction& inst : bb) {
        if (auto* vt = llvm::dyn_cast<llvm::FixedVectorType>(inst.getType())) {
          result.vector_width =
              std::max<int32_t>(result.vector_width, static_cast<int32_t>(vt->getNumElements()));
        }
      }
    }
  }
  auto object = CheckedObject(kernel.EmitFile(llvm::CGFT_ObjectFile));
  if (!object.ok()) return object.status();
  result.object = *std::move(object);
  return result;
}

}  // namespace

absl::StatusOr<CodegenResult> GenerateSharedObject(const loop::Program& program,
                                                   const CodegenOptions& options) {
  // Each kernel is its own module, so kernels compile in parallel; the objects (one per
  // distinct kernel) are linked in kernel order, so the bytes do not depend on the number of
  // threads.
  auto kernels = CompileKernels<KernelObject>(
      kTarget, CpuKernelAbi(), program, options,
      [&](KernelModule& kernel) { return ObjectOf(kernel, options.opt_level); });
  if (!kernels.ok()) return kernels.status();
  CodegenResult result;
  result.llvm_ir = std::move(kernels->llvm_ir);
  for (size_t i = 0; i < program.kernels.size(); ++i) {
    result.vector_widths.push_back(kernels->codes[kernels->code_of[i]].vector_width);
    result.entry.push_back(kernels->EntryOf(i));
  }
  std::vector<std::string> objects;
  for (KernelObject& k : kernels->codes) objects.push_back(std::move(k.object));
  if (objects.empty()) {
    auto empty = CheckedObject(EmitEmptyModule(kTarget, options.opt_level, llvm::CGFT_ObjectFile));
    if (!empty.ok()) return empty.status();
    objects.push_back(*std::move(empty));
  }
  auto so = LinkSharedObject(objects);
  if (!so.ok()) return so.status();
  result.shared_object = *std::move(so);
  return result;
}

}  // namespace kiln::codegen::x86
