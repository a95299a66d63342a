#include "compiler/codegen/x86/kernel_abi.h"

#include "compiler/codegen/x86/launch.h"
#include "llvm/IR/DerivedTypes.h"
#include "llvm/IR/Function.h"

namespace kiln::codegen::x86 {
namespace {

// Loops over parallel dimensions [d, np) inside one outer iteration `outer`; a chunked
// kernel's only dimension covers the chunk `outer` names.
absl::Status InnerDims(ParallelSpace& space, size_t d, size_t np, const LaunchSplit& split,
                       llvm::Value* outer) {
  if (d == np) return space.EmitPoint();
  llvm::IRBuilder<>& b = space.builder();
  llvm::Value* lo = b.getInt64(0);
  llvm::Value* hi = space.Extent(d);
  if (split.chunk > 0) {
    lo = b.CreateMul(outer, b.getInt64(static_cast<uint64_t>(split.chunk)));
    llvm::Value* lim = b.CreateAdd(lo, b.getInt64(static_cast<uint64_t>(split.chunk)));
    hi = b.CreateSelect(b.CreateICmpSLT(lim, hi), lim, hi);
  }
  return space.Loop(
      lo, hi, b.getInt64(1),
      [&](llvm::Value* iv) -> absl::Status {
        space.Bind(d, iv);
        return InnerDims(space, d + 1, np, split, outer);
      },
      d + 1 == np);
}

}  // namespace

std::vector<llvm::Type*> CpuKernelAbi::LaunchParams(llvm::LLVMContext& context) const {
  return {llvm::Type::getInt64Ty(context), llvm::Type::getInt64Ty(context)};
}

void CpuKernelAbi::EmitEntry(llvm::Module& module, const std::string& name,
                             const plan::KernelParams& params, llvm::Function* body) const {
  llvm::LLVMContext& ctx = module.getContext();
  llvm::Type* ptr = llvm::PointerType::getUnqual(ctx);
  llvm::Type* i64 = llvm::Type::getInt64Ty(ctx);
  auto* entry_ty = llvm::FunctionType::get(llvm::Type::getVoidTy(ctx), {ptr, i64, i64}, false);
  auto* entry = llvm::Function::Create(entry_ty, llvm::Function::ExternalLinkage, name, module);
  entry->addFnAttr(llvm::Attribute::NoUnwind);
  llvm::IRBuilder<> eb(llvm::BasicBlock::Create(ctx, "entry", entry));
  std::vector<llvm::Value*> args;
  unsigned slot = 0;
  auto param_ptr = [&]() {
    return eb.CreateLoad(ptr, eb.CreateConstInBoundsGEP1_64(ptr, entry->getArg(0), slot++));
  };
  for (size_t i = 0; i < params.buffers.size(); ++i) args.push_back(param_ptr());
  for (size_t i = 0; i < params.symbols.size(); ++i) {
    args.push_back(eb.CreateLoad(i64, param_ptr()));
  }
  if (params.rng) {
    args.push_back(eb.CreateLoad(i64, param_ptr()));
    args.push_back(eb.CreateLoad(i64, param_ptr()));
  }
  args.push_back(entry->getArg(1));
  args.push_back(entry->getArg(2));
  eb.CreateCall(body, args);
  eb.CreateRetVoid();
}

absl::Status CpuKernelAbi::EmitParallel(ParallelSpace& space) const {
  const loop::Kernel& k = space.kernel();
  const LaunchSplit split = SplitForLaunch(k);
  const size_t np = k.parallel.size();
  llvm::IRBuilder<>& b = space.builder();
  return space.Loop(
      space.launch_param(0), space.launch_param(1), b.getInt64(1),
      [&](llvm::Value* o) -> absl::Status {
        if (split.chunk > 0) return InnerDims(space, 0, np, split, o);
        // The outer index is p0..p{outer_dims-1}, flattened row-major.
        space.BindRowMajor(o, static_cast<size_t>(split.outer_dims));
        return InnerDims(space, static_cast<size_t>(split.outer_dims), np, split, o);
      },
      /*innermost=*/false);
}

}  // namespace kiln::codegen::x86
