#include "compiler/codegen/nvptx/kernel_abi.h"

#include <tuple>
#include <utility>

#include "compiler/codegen/llvm/point_runs.h"
#include "compiler/codegen/nvptx/launch.h"
#include "llvm/IR/Constants.h"
#include "llvm/IR/DerivedTypes.h"
#include "llvm/IR/Function.h"
#include "llvm/IR/GlobalVariable.h"
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

constexpr int kWarp = 32;

// The block's scratch for combining partials: one 64-bit slot per warp, for values and for
// arg positions.
llvm::Value* SharedSlots(llvm::Module& m, const char* name) {
  llvm::Type* ty = llvm::ArrayType::get(llvm::Type::getInt64Ty(m.getContext()), kWarp);
  if (llvm::GlobalVariable* g = m.getGlobalVariable(name, true)) return g;
  auto* g = new llvm::GlobalVariable(m, ty, false, llvm::GlobalValue::InternalLinkage,
                                     llvm::UndefValue::get(ty), name, nullptr,
                                     llvm::GlobalValue::NotThreadLocal, /*AddressSpace=*/3);
  g->setAlignment(llvm::Align(8));
  return g;
}

// A reduction value as 64 bits and back, for shuffles and shared memory.
llvm::Value* ToBits(llvm::IRBuilder<>& b, llvm::Value* v) {
  llvm::Type* t = v->getType();
  if (t->isDoubleTy()) return b.CreateBitCast(v, b.getInt64Ty());
  if (t->isFloatTy()) return b.CreateZExt(b.CreateBitCast(v, b.getInt32Ty()), b.getInt64Ty());
  if (t->isHalfTy() || t->isBFloatTy()) {
    return b.CreateZExt(b.CreateBitCast(v, b.getInt16Ty()), b.getInt64Ty());
  }
  return t->getIntegerBitWidth() == 64 ? v : b.CreateZExt(v, b.getInt64Ty());
}

llvm::Value* FromBits(llvm::IRBuilder<>& b, llvm::Value* bits, llvm::Type* t) {
  if (t->isDoubleTy()) return b.CreateBitCast(bits, t);
  if (t->isFloatTy()) return b.CreateBitCast(b.CreateTrunc(bits, b.getInt32Ty()), t);
  if (t->isHalfTy() || t->isBFloatTy()) {
    return b.CreateBitCast(b.CreateTrunc(bits, b.getInt16Ty()), t);
  }
  return t->getIntegerBitWidth() == 64 ? bits : b.CreateTrunc(bits, t);
}

// The 64 bits of lane (this lane ^ mask) of the warp.
llvm::Value* ShuffleXor(llvm::IRBuilder<>& b, llvm::Value* bits, int mask) {
  llvm::Module* m = b.GetInsertBlock()->getModule();
  llvm::Function* shfl =
      llvm::Intrinsic::getDeclaration(m, llvm::Intrinsic::nvvm_shfl_sync_bfly_i32);
  llvm::Value* all = b.getInt32(0xffffffffu);
  llvm::Value* lo = b.CreateTrunc(bits, b.getInt32Ty());
  llvm::Value* hi = b.CreateTrunc(b.CreateLShr(bits, 32), b.getInt32Ty());
  llvm::Value* slo = b.CreateCall(shfl, {all, lo, b.getInt32(mask), b.getInt32(kWarp - 1)});
  llvm::Value* shi = b.CreateCall(shfl, {all, hi, b.getInt32(mask), b.getInt32(kWarp - 1)});
  return b.CreateOr(b.CreateZExt(slo, b.getInt64Ty()),
                    b.CreateShl(b.CreateZExt(shi, b.getInt64Ty()), 32));
}

void Barrier(llvm::IRBuilder<>& b) {
  llvm::Module* m = b.GetInsertBlock()->getModule();
  b.CreateCall(llvm::Intrinsic::getDeclaration(m, llvm::Intrinsic::nvvm_barrier0));
}

}  // namespace

bool GpuKernelAbi::SplitsReductions(const loop::Kernel& kernel) const {
  return ReductionThreads(kernel) > 0;
}

std::pair<llvm::Value*, llvm::Value*> GpuKernelAbi::ReductionStart(ParallelSpace& space) const {
  llvm::IRBuilder<>& b = space.builder();
  return {Sreg(b, llvm::Intrinsic::nvvm_read_ptx_sreg_tid_x),
          Sreg(b, llvm::Intrinsic::nvvm_read_ptx_sreg_ntid_x)};
}

absl::Status GpuKernelAbi::CombinePartials(ParallelSpace& space, loop::ReduceKind kind,
                                           loop::ScalarType type, llvm::Value** value,
                                           llvm::Value** index) const {
  llvm::IRBuilder<>& b = space.builder();
  llvm::Module& m = *b.GetInsertBlock()->getModule();
  llvm::Type* ty = (*value)->getType();
  // Every lane of the warp ends with the warp's result.
  auto warp_reduce = [&](llvm::Value* v, llvm::Value* i) -> std::pair<llvm::Value*, llvm::Value*> {
    for (int mask = kWarp / 2; mask > 0; mask /= 2) {
      llvm::Value* other = FromBits(b, ShuffleXor(b, ToBits(b, v), mask), ty);
      llvm::Value* other_i = i != nullptr ? ShuffleXor(b, i, mask) : nullptr;
      std::tie(v, i) = space.Accumulate(kind, type, v, i, other, other_i);
    }
    return {v, i};
  };
  auto [v, i] = warp_reduce(*value, index != nullptr ? *index : nullptr);

  llvm::Value* tid = Sreg(b, llvm::Intrinsic::nvvm_read_ptx_sreg_tid_x);
  llvm::Value* ntid = Sreg(b, llvm::Intrinsic::nvvm_read_ptx_sreg_ntid_x);
  llvm::Value* lane = b.CreateAnd(tid, b.getInt64(kWarp - 1));
  llvm::Value* warp = b.CreateLShr(tid, 5);
  llvm::Value* warps = b.CreateLShr(b.CreateAdd(ntid, b.getInt64(kWarp - 1)), 5);
  llvm::Value* slots = SharedSlots(m, "kiln_reduce_values");
  llvm::Value* index_slots = index != nullptr ? SharedSlots(m, "kiln_reduce_positions") : nullptr;
  llvm::Type* slot_array = llvm::ArrayType::get(b.getInt64Ty(), kWarp);
  auto slot = [&](llvm::Value* base, llvm::Value* at) {
    return b.CreateInBoundsGEP(slot_array, base, {b.getInt64(0), at});
  };

  // Lane 0 of each warp leaves the warp's result in its slot.
  llvm::Function* f = b.GetInsertBlock()->getParent();
  llvm::LLVMContext& ctx = b.getContext();
  llvm::BasicBlock* write = llvm::BasicBlock::Create(ctx, "combine.write", f);
  llvm::BasicBlock* written = llvm::BasicBlock::Create(ctx, "combine.written", f);
  b.CreateCondBr(b.CreateICmpEQ(lane, b.getInt64(0)), write, written);
  b.SetInsertPoint(write);
  b.CreateStore(ToBits(b, v), slot(slots, warp));
  if (index_slots != nullptr) b.CreateStore(i, slot(index_slots, warp));
  b.CreateBr(written);
  b.SetInsertPoint(written);
  Barrier(b);

  // Every warp combines the warps' results (lanes past the last warp bring the identity).
  llvm::Value* has = b.CreateICmpULT(lane, warps);
  llvm::Value* safe_lane = b.CreateSelect(has, lane, b.getInt64(0));
  llvm::Value* w = FromBits(b, b.CreateLoad(b.getInt64Ty(), slot(slots, safe_lane)), ty);
  w = b.CreateSelect(has, w, space.Identity(kind, type));
  llvm::Value* wi = nullptr;
  if (index_slots != nullptr) {
    wi = b.CreateSelect(has, b.CreateLoad(b.getInt64Ty(), slot(index_slots, safe_lane)),
                        b.getInt64(-1));
  }
  std::tie(v, i) = warp_reduce(w, wi);
  // The slots are free again only when every warp has read them.
  Barrier(b);
  *value = v;
  if (index != nullptr) *index = i;
  return absl::OkStatus();
}

std::vector<llvm::Type*> GpuKernelAbi::LaunchParams(llvm::LLVMContext&) const { return {}; }

void GpuKernelAbi::EmitEntry(llvm::Module& module, const std::string& name,
                             const plan::KernelParams& params, llvm::Function* body) const {
  llvm::LLVMContext& ctx = module.getContext();
  auto* entry = llvm::Function::Create(body->getFunctionType(), llvm::Function::ExternalLinkage,
                                       name, module);
  entry->addFnAttr(llvm::Attribute::NoUnwind);
  // The body's facts about its buffers hold for the entry's: the body is inlined into it,
  // and the backend reads buffers that are `noalias` and `readonly` through the read-only
  // data cache (ld.global.nc).
  for (size_t i = 0; i < params.buffers.size(); ++i) {
    const unsigned arg = static_cast<unsigned>(i);
    entry->addParamAttr(arg, llvm::Attribute::NoAlias);
    if (body->hasParamAttribute(arg, llvm::Attribute::ReadOnly)) {
      entry->addParamAttr(arg, llvm::Attribute::ReadOnly);
    }
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
  if (SplitsReductions(k)) {
    // A block per point: every thread of the block walks the same points.
    llvm::Value* points = b.getInt64(1);
    for (size_t d = 0; d < np; ++d) points = b.CreateMul(points, space.Extent(d), "", true, true);
    llvm::Value* block = Sreg(b, llvm::Intrinsic::nvvm_read_ptx_sreg_ctaid_x);
    llvm::Value* blocks = Sreg(b, llvm::Intrinsic::nvvm_read_ptx_sreg_nctaid_x);
    return space.Loop(
        block, points, blocks,
        [&](llvm::Value* i) -> absl::Status {
          space.BindRowMajor(i, np);
          return space.EmitPoint();
        },
        /*innermost=*/false);
  }
  // The block size is the schedule's, a constant rather than %ntid.x: with a product as the
  // grid's stride, LLVM 16's loop strength reduction can give a row of two runs a 1-bit
  // induction variable stepped by the product's low bit, a `mul i1` that NVPTX cannot select.
  llvm::Value* block = Sreg(b, llvm::Intrinsic::nvvm_read_ptx_sreg_ctaid_x);
  llvm::Value* threads = b.getInt64(kBlockThreads);
  llvm::Value* thread = Sreg(b, llvm::Intrinsic::nvvm_read_ptx_sreg_tid_x);
  llvm::Value* blocks = Sreg(b, llvm::Intrinsic::nvvm_read_ptx_sreg_nctaid_x);
  llvm::Value* first =
      b.CreateAdd(b.CreateMul(block, threads, "", true, true), thread, "", true, true);
  llvm::Value* stride = b.CreateMul(blocks, threads, "", true, true);
  return EmitThreadWalk(space, first, stride);
}

absl::Status EmitThreadWalk(ParallelSpace& space, llvm::Value* first, llvm::Value* stride) {
  const loop::Kernel& k = space.kernel();
  llvm::IRBuilder<>& b = space.builder();
  const size_t np = k.parallel.size();
  const int32_t lanes = VectorLanes(space.program(), k);
  if (lanes == 1) {
    // The grid-stride loop over the flattened range, p0 outermost.
    llvm::Value* points = b.getInt64(1);
    for (size_t d = 0; d < np; ++d) points = b.CreateMul(points, space.Extent(d), "", true, true);
    return space.Loop(
        first, points, stride,
        [&](llvm::Value* i) -> absl::Status {
          space.BindRowMajor(i, np);
          return space.EmitPoint();
        },
        /*innermost=*/false);
  }

  const size_t inner = np - 1;
  const PointRuns runs =
      PlanPointRuns(space.program(), k, static_cast<int32_t>(inner), lanes, kVectorBytes);
  llvm::Value* aligned = space.RunsAligned(runs);
  llvm::Value* extent = space.Extent(inner);
  llvm::Value* runs_per_row =
      b.CreateUDiv(b.CreateAdd(extent, b.getInt64(lanes - 1), "", true, true), b.getInt64(lanes));
  llvm::Value* points = runs_per_row;
  for (size_t d = 0; d < inner; ++d) points = b.CreateMul(points, space.Extent(d), "", true, true);
  llvm::Function* f = b.GetInsertBlock()->getParent();
  llvm::LLVMContext& ctx = b.getContext();

  // The grid-stride loop over the runs, p0 outermost; a run is whole when it ends inside
  // its row.
  return space.Loop(
      first, points, stride,
      [&](llvm::Value* i) -> absl::Status {
        llvm::Value* run = i;
        if (inner > 0) {
          space.BindRowMajor(b.CreateUDiv(i, runs_per_row), inner);
          run = b.CreateURem(i, runs_per_row);
        }
        llvm::Value* start = b.CreateMul(run, b.getInt64(lanes), "", true, true);
        llvm::Value* end = b.CreateAdd(start, b.getInt64(lanes), "", true, true);
        llvm::Value* whole = b.CreateAnd(aligned, b.CreateICmpSLE(end, extent));
        llvm::BasicBlock* vector = llvm::BasicBlock::Create(ctx, "run.vector", f);
        llvm::BasicBlock* scalar = llvm::BasicBlock::Create(ctx, "run.scalar", f);
        llvm::BasicBlock* done = llvm::BasicBlock::Create(ctx, "run.done", f);
        b.CreateCondBr(whole, vector, scalar);

        b.SetInsertPoint(vector);
        if (absl::Status s = space.EmitRun(runs, start); !s.ok()) return s;
        b.CreateBr(done);

        b.SetInsertPoint(scalar);
        llvm::Value* last = b.CreateSelect(b.CreateICmpSLT(end, extent), end, extent);
        absl::Status s = space.Loop(
            start, last, b.getInt64(1),
            [&](llvm::Value* element) -> absl::Status {
              space.Bind(inner, element);
              return space.EmitPoint();
            },
            /*innermost=*/false);
        if (!s.ok()) return s;
        b.CreateBr(done);

        b.SetInsertPoint(done);
        return absl::OkStatus();
      },
      /*innermost=*/false);
}

}  // namespace kiln::codegen::nvptx
