#include "compiler/codegen/nvptx/kernel_abi.h"

#include "llvm/IR/Constants.h"
#include "llvm/IR/DerivedTypes.h"
#include "llvm/IR/Function.h"
#include "llvm/IR/Intrinsics.h"
#include "llvm/IR/IntrinsicsNVPTX.h"
#include "llvm/IR/Metadata.h"

namespace kiln::codegen::nvptx {
namespace {

// A special register (ctaid.x, ntid.x, ...) widened to int64, so that no index product of a
// large range wraps at 32 bits.
llvm::Value* Sreg(llvm::IRBuilder<>& b, llvm::Intrinsic::ID id) {
  llvm::Module* m = b.GetInsertBlock()->getModule();
  llvm::Value* v = b.CreateCall(llvm::Intrinsic::getDeclaration(m, id));
  return b.CreateZExt(v, b.getInt64Ty());
}

}  // namespace

std::vector<llvm::Type*> GpuKernelAbi::LaunchParams(llvm::LLVMContext&) const { return {}; }

void GpuKernelAbi::EmitEntry(llvm::Module& module, const std::string& name,
                             const plan::KernelParams& params, llvm::Function* body) const {
  llvm::LLVMContext& ctx = module.getContext();
  auto* entry = llvm::Function::Create(body->getFunctionType(), llvm::Function::ExternalLinkage,
                                       name, module);
  entry->addFnAttr(llvm::Attribute::NoUnwind);
  for (size_t i = 0; i < params.buffers.size(); ++i) {
    entry->addParamAttr(static_cast<unsigned>(i), llvm::Attribute::NoAlias);
  }
  llvm::IRBuilder<> eb(llvm::BasicBlock::Create(ctx, "entry", entry));
  std::vector<llvm::Value*> args;
  for (llvm::Argument& a : entry->args()) args.push_back(&a);
  eb.CreateCall(body, args);
  eb.CreateRetVoid();
  llvm::Metadata* kernel[] = {
      llvm::ValueAsMetadata::get(entry), llvm::MDString::get(ctx, "kernel"),
      llvm::ValueAsMetadata::get(llvm::ConstantInt::get(llvm::Type::getInt32Ty(ctx), 1))};
  module.getOrInsertNamedMetadata("nvvm.annotations")->addOperand(llvm::MDNode::get(ctx, kernel));
}

absl::Status GpuKernelAbi::EmitParallel(ParallelSpace& space) const {
  const loop::Kernel& k = space.kernel();
  llvm::IRBuilder<>& b = space.builder();
  const size_t np = k.parallel.size();
  llvm::Value* points = b.getInt64(1);
  for (size_t d = 0; d < np; ++d) points = b.CreateMul(points, space.Extent(d), "", true, true);
  llvm::Value* block = Sreg(b, llvm::Intrinsic::nvvm_read_ptx_sreg_ctaid_x);
  llvm::Value* threads = Sreg(b, llvm::Intrinsic::nvvm_read_ptx_sreg_ntid_x);
  llvm::Value* thread = Sreg(b, llvm::Intrinsic::nvvm_read_ptx_sreg_tid_x);
  llvm::Value* blocks = Sreg(b, llvm::Intrinsic::nvvm_read_ptx_sreg_nctaid_x);
  llvm::Value* first =
      b.CreateAdd(b.CreateMul(block, threads, "", true, true), thread, "", true, true);
  llvm::Value* stride = b.CreateMul(blocks, threads, "", true, true);

  // The grid-stride loop over the flattened range, p0 outermost.
  return space.Loop(
      first, points, stride,
      [&](llvm::Value* i) -> absl::Status {
        space.BindRowMajor(i, np);
        return space.EmitPoint();
      },
      /*innermost=*/false);
}

}  // namespace kiln::codegen::nvptx
