#include "compiler/codegen/nvptx/libdevice.h"

#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "llvm/Bitcode/BitcodeReader.h"
#include "llvm/IR/Constants.h"
#include "llvm/IR/Function.h"
#include "llvm/IR/Instructions.h"
#include "llvm/IR/Intrinsics.h"
#include "llvm/Linker/Linker.h"
#include "llvm/Support/MemoryBuffer.h"

namespace kiln::codegen::nvptx {
namespace {

// The libm-style base name of a float intrinsic NVPTX cannot select, or "".
const char* MathIntrinsicName(llvm::Intrinsic::ID id) {
  switch (id) {
    case llvm::Intrinsic::exp:
      return "exp";
    case llvm::Intrinsic::exp2:
      return "exp2";
    case llvm::Intrinsic::log:
      return "log";
    case llvm::Intrinsic::log2:
      return "log2";
    case llvm::Intrinsic::log10:
      return "log10";
    case llvm::Intrinsic::pow:
      return "pow";
    case llvm::Intrinsic::sin:
      return "sin";
    case llvm::Intrinsic::cos:
      return "cos";
    default:
      return "";
  }
}

// "__nv_<base>f" for float, "__nv_<base>" for double; nullptr for any other type.
llvm::Function* LibdeviceDeclaration(llvm::Module& m, absl::string_view base,
                                     llvm::FunctionType* type) {
  llvm::Type* t = type->getReturnType();
  if (!t->isFloatTy() && !t->isDoubleTy()) return nullptr;
  const std::string name = absl::StrCat("__nv_", base, t->isFloatTy() ? "f" : "");
  return llvm::cast<llvm::Function>(m.getOrInsertFunction(name, type).getCallee());
}

absl::Status RewriteMathCalls(llvm::Module& m) {
  std::vector<llvm::Function*> declarations;
  for (llvm::Function& f : m) {
    if (f.isDeclaration() && !f.getName().startswith("__nv_")) declarations.push_back(&f);
  }
  for (llvm::Function* f : declarations) {
    if (f->use_empty()) continue;
    std::string base;
    if (f->isIntrinsic()) {
      base = MathIntrinsicName(f->getIntrinsicID());
      if (base.empty()) continue;  // selected by NVPTX itself
    } else {
      // A libm name: "expm1f" (float) or "expm1" (double).
      base = f->getName().str();
      if (f->getReturnType()->isFloatTy() && !base.empty() && base.back() == 'f') base.pop_back();
    }
    llvm::Function* nv = LibdeviceDeclaration(m, base, f->getFunctionType());
    if (nv == nullptr) {
      return absl::InternalError(
          absl::StrCat("codegen: no libdevice function for `", f->getName().str(), "`"));
    }
    f->replaceAllUsesWith(nv);
    f->eraseFromParent();
  }
  // frem: NVPTX expands it inexactly; fmod is exact.
  std::vector<llvm::BinaryOperator*> frems;
  for (llvm::Function& f : m) {
    for (llvm::BasicBlock& bb : f) {
      for (llvm::Instruction& inst : bb) {
        if (inst.getOpcode() == llvm::Instruction::FRem) {
          frems.push_back(llvm::cast<llvm::BinaryOperator>(&inst));
        }
      }
    }
  }
  for (llvm::BinaryOperator* frem : frems) {
    llvm::Type* t = frem->getType();
    llvm::Function* fmod =
        LibdeviceDeclaration(m, "fmod", llvm::FunctionType::get(t, {t, t}, false));
    if (fmod == nullptr) return absl::InternalError("codegen: frem of a non-scalar float");
    llvm::CallInst* call =
        llvm::CallInst::Create(fmod, {frem->getOperand(0), frem->getOperand(1)}, "", frem);
    frem->replaceAllUsesWith(call);
    frem->eraseFromParent();
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status LinkLibdevice(llvm::Module& module, const std::string& entry) {
  if (absl::Status s = RewriteMathCalls(module); !s.ok()) return s;
  bool needed = false;
  for (llvm::Function& f : module) needed |= f.isDeclaration() && f.getName().startswith("__nv_");
  if (needed) {
    const absl::string_view bitcode = LibdeviceBitcode();
    auto lib = llvm::getLazyBitcodeModule(
        llvm::MemoryBufferRef(llvm::StringRef(bitcode.data(), bitcode.size()), "libdevice.10.bc"),
        module.getContext());
    if (!lib) {
      return absl::InternalError(
          absl::StrCat("codegen: unreadable libdevice: ", llvm::toString(lib.takeError())));
    }
    (*lib)->setTargetTriple(module.getTargetTriple());
    (*lib)->setDataLayout(module.getDataLayout());
    if (llvm::Linker::linkModules(module, std::move(*lib), llvm::Linker::Flags::LinkOnlyNeeded)) {
      return absl::InternalError("codegen: libdevice does not link");
    }
  }
  for (llvm::Function& f : module) {
    if (!f.isDeclaration() && f.getName() != entry)
      f.setLinkage(llvm::GlobalValue::InternalLinkage);
  }
  for (llvm::GlobalVariable& g : module.globals()) {
    if (!g.isDeclaration()) g.setLinkage(llvm::GlobalValue::InternalLinkage);
  }
  module.addModuleFlag(llvm::Module::Override, "nvvm-reflect-ftz", uint32_t{0});
  return absl::OkStatus();
}

}  // namespace kiln::codegen::nvptx
