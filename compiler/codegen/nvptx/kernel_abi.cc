#include "compiler/codegen/nvptx/kernel_abi.h"

#include <tuple>
#include <utility>

#include "compiler/codegen/llvm/point_runs.h"
#include "compiler/codegen/nvptx/launch.h"
#include "llvm/IR/Constants.h"
#include "llvm/IR/DerivedTypes.h"
#include "llvm/IR/Function.h"
#include "llvm/IR/GlobalVariable.h"
#include "llvm/IR/Instructions.h"
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

// The block's scratch for combining partials: one 64-bit slot per warp and point of the warp
// (ReductionSplit), for values and for arg positions.
constexpr int64_t kSlots = kColumnThreads / kWarp * kColumnPoints;

llvm::Type* SlotArray(llvm::LLVMContext& ctx) {
  return llvm::ArrayType::get(llvm::Type::getInt64Ty(ctx), kSlots);
}

llvm::Value* SharedSlots(llvm::Module& m, const char* name) {
  llvm::Type* ty = SlotArray(m.getContext());
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

namespace {

// The thread's point within its block's group and its slice of the point's reduction
// (launch.h ReductionSplit).
std::pair<llvm::Value*, llvm::Value*> PointAndSlice(llvm::IRBuilder<>& b,
                                                    const ReductionSplit& split) {
  llvm::Value* tid = Sreg(b, llvm::Intrinsic::nvvm_read_ptx_sreg_tid_x);
  if (split.points == 1) return {b.getInt64(0), tid};
  llvm::Value* points = b.getInt64(split.points);
  llvm::Value* slices = b.getInt64(split.slices());
  if (split.column) return {b.CreateURem(tid, points), b.CreateUDiv(tid, points)};
  return {b.CreateUDiv(tid, slices), b.CreateURem(tid, slices)};
}

// Marks the kernel whose body is being emitted to be launched with at most `threads`
// threads a block (nvvm.annotations "maxntidx"), so that ptxas keeps its registers within
// what a block of that many threads may have.
void LimitThreads(llvm::IRBuilder<>& b, int64_t threads) {
  llvm::Function* body = b.GetInsertBlock()->getParent();
  llvm::Module& m = *body->getParent();
  llvm::LLVMContext& ctx = m.getContext();
  for (llvm::User* user : body->users()) {
    auto* call = llvm::dyn_cast<llvm::CallInst>(user);
    if (call == nullptr) continue;
    llvm::Metadata* limit[] = {llvm::ValueAsMetadata::get(call->getFunction()),
                               llvm::MDString::get(ctx, "maxntidx"),
                               llvm::ValueAsMetadata::get(llvm::ConstantInt::get(
                                   llvm::Type::getInt32Ty(ctx), static_cast<uint64_t>(threads)))};
    m.getOrInsertNamedMetadata("nvvm.annotations")->addOperand(llvm::MDNode::get(ctx, limit));
  }
}

}  // namespace

bool GpuKernelAbi::SplitsReductions(const loop::Kernel& kernel) const {
  return SplitOf(kernel).threads > 0;
}

std::pair<llvm::Value*, llvm::Value*> GpuKernelAbi::ReductionStart(ParallelSpace& space) const {
  const ReductionSplit split = SplitOf(space.kernel());
  llvm::IRBuilder<>& b = space.builder();
  return {PointAndSlice(b, split).second, b.getInt64(split.slices())};
}

int64_t GpuKernelAbi::SplitTrips(const loop::Kernel& kernel) const {
  const ReductionSplit split = SplitOf(kernel);
  if (split.threads == 0) return 0;
  int64_t total = 1;
  for (const loop::IndexExpr& e : kernel.reduction) {
    if (!e.is_const()) return 0;
    total *= e.const_value();
  }
  if (total % split.slices() != 0 || total / split.slices() > kMaxUnrolledTrips) return 0;
  return total / split.slices();
}

absl::Status GpuKernelAbi::CombinePartials(ParallelSpace& space, loop::ReduceKind kind,
                                           loop::ScalarType type, llvm::Value** value,
                                           llvm::Value** index) const {
  const ReductionSplit split = SplitOf(space.kernel());
  llvm::IRBuilder<>& b = space.builder();
  llvm::Module& m = *b.GetInsertBlock()->getModule();
  llvm::Type* ty = (*value)->getType();
  // The lanes of a warp that hold slices of one point sit `lane_step` apart: neighbours in a
  // row split, kColumnPoints apart in a column split. Butterfly shuffles over the masks from
  // lane_step up combine them, so each of them ends with the warp's share of its point.
  const int lane_step = split.column ? static_cast<int>(split.points) : 1;
  const int lanes_per_point =
      split.column ? kWarp / lane_step : static_cast<int>(std::min<int64_t>(split.slices(), kWarp));
  auto warp_reduce = [&](llvm::Value* v, llvm::Value* i) -> std::pair<llvm::Value*, llvm::Value*> {
    for (int mask = lane_step * lanes_per_point / 2; mask >= lane_step; mask /= 2) {
      llvm::Value* other = FromBits(b, ShuffleXor(b, ToBits(b, v), mask), ty);
      llvm::Value* other_i = i != nullptr ? ShuffleXor(b, i, mask) : nullptr;
      std::tie(v, i) = space.Accumulate(kind, type, v, i, other, other_i);
    }
    return {v, i};
  };
  auto [v, i] = warp_reduce(*value, index != nullptr ? *index : nullptr);
  if (!split.column && split.slices() <= kWarp) {
    // A warp per point: the shuffles were the whole combination.
    *value = v;
    if (index != nullptr) *index = i;
    return absl::OkStatus();
  }

  llvm::Value* tid = Sreg(b, llvm::Intrinsic::nvvm_read_ptx_sreg_tid_x);
  llvm::Value* lane = b.CreateAnd(tid, b.getInt64(kWarp - 1));
  llvm::Value* warp = b.CreateLShr(tid, 5);
  llvm::Value* slots = SharedSlots(m, "kiln_reduce_values");
  llvm::Value* index_slots = index != nullptr ? SharedSlots(m, "kiln_reduce_positions") : nullptr;
  llvm::Type* slot_array = SlotArray(b.getContext());
  auto slot = [&](llvm::Value* base, llvm::Value* at) {
    return b.CreateInBoundsGEP(slot_array, base, {b.getInt64(0), at});
  };
  llvm::Function* f = b.GetInsertBlock()->getParent();
  llvm::LLVMContext& ctx = b.getContext();
  const int64_t warps = split.threads / kWarp;

  if (split.column) {
    // The first kColumnPoints lanes of each warp leave the warp's share of their points in
    // slot warp * points + point; then every thread combines its point's slots, warp 0 first.
    llvm::Value* point = b.CreateURem(tid, b.getInt64(split.points));
    llvm::BasicBlock* write = llvm::BasicBlock::Create(ctx, "combine.write", f);
    llvm::BasicBlock* written = llvm::BasicBlock::Create(ctx, "combine.written", f);
    b.CreateCondBr(b.CreateICmpULT(lane, b.getInt64(split.points)), write, written);
    b.SetInsertPoint(write);
    llvm::Value* mine = b.CreateAdd(b.CreateMul(warp, b.getInt64(split.points)), point);
    b.CreateStore(ToBits(b, v), slot(slots, mine));
    if (index_slots != nullptr) b.CreateStore(i, slot(index_slots, mine));
    b.CreateBr(written);
    b.SetInsertPoint(written);
    Barrier(b);
    llvm::Value* acc = nullptr;
    llvm::Value* acc_i = nullptr;
    for (int64_t w = 0; w < warps; ++w) {
      llvm::Value* at = b.CreateAdd(point, b.getInt64(w * split.points));
      llvm::Value* x = FromBits(b, b.CreateLoad(b.getInt64Ty(), slot(slots, at)), ty);
      llvm::Value* x_i =
          index_slots != nullptr ? b.CreateLoad(b.getInt64Ty(), slot(index_slots, at)) : nullptr;
      if (acc == nullptr) {
        acc = x;
        acc_i = x_i;
      } else {
        std::tie(acc, acc_i) = space.Accumulate(kind, type, acc, acc_i, x, x_i);
      }
    }
    // The slots are free again only when every thread has read them.
    Barrier(b);
    *value = acc;
    if (index != nullptr) *index = acc_i;
    return absl::OkStatus();
  }

  // A block per point. Lane 0 of each warp leaves the warp's result in its slot.
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
  llvm::Value* has = b.CreateICmpULT(lane, b.getInt64(warps));
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
  if (const ReductionSplit split = SplitOf(k); split.threads > 0) {
    if (split.threads > kBlockThreads) LimitThreads(b, split.threads);
    // A group of split.points points per block: every thread of the block walks the same
    // groups, so that all of them reach every barrier. A thread whose point lies past the
    // last computes the last point again (its stores write what the point's own threads
    // write), rather than skip the barriers.
    llvm::Value* points = b.getInt64(1);
    for (size_t d = 0; d < np; ++d) points = b.CreateMul(points, space.Extent(d), "", true, true);
    llvm::Value* per_block = b.getInt64(split.points);
    llvm::Value* groups =
        split.points == 1
            ? points
            : b.CreateUDiv(b.CreateAdd(points, b.getInt64(split.points - 1), "", true, true),
                           per_block);
    llvm::Value* mine = PointAndSlice(b, split).first;
    llvm::Value* block = Sreg(b, llvm::Intrinsic::nvvm_read_ptx_sreg_ctaid_x);
    llvm::Value* blocks = Sreg(b, llvm::Intrinsic::nvvm_read_ptx_sreg_nctaid_x);
    return space.Loop(
        block, groups, blocks,
        [&](llvm::Value* g) -> absl::Status {
          llvm::Value* point = g;
          if (split.points > 1) {
            point = b.CreateAdd(b.CreateMul(g, per_block, "", true, true), mine, "", true, true);
            llvm::Value* last = b.CreateSub(points, b.getInt64(1));
            point = b.CreateSelect(b.CreateICmpULT(point, points), point, last);
          }
          space.BindRowMajor(point, np);
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
  if (SegmentsOf(space.kernel()) > 1) return EmitSegments(space, block, thread);
  llvm::Value* blocks = Sreg(b, llvm::Intrinsic::nvvm_read_ptx_sreg_nctaid_x);
  llvm::Value* first =
      b.CreateAdd(b.CreateMul(block, threads, "", true, true), thread, "", true, true);
  llvm::Value* stride = b.CreateMul(blocks, threads, "", true, true);
  return EmitThreadWalk(space, first, stride);
}

absl::Status EmitSegments(ParallelSpace& space, llvm::Value* block, llvm::Value* thread) {
  const loop::Kernel& k = space.kernel();
  llvm::IRBuilder<>& b = space.builder();
  llvm::LLVMContext& ctx = b.getContext();
  llvm::Function* f = b.GetInsertBlock()->getParent();
  const std::vector<int64_t> blocks = SegmentBlocks(space.program(), k);
  const bool narrowed = k.segment_points.size() == k.segments.size();
  llvm::BasicBlock* done = llvm::BasicBlock::Create(ctx, "segments.done", f);
  // Segment s has blocks [start, start + blocks[s]) of the grid: a chain of compares finds it.
  int64_t start = 0;
  for (size_t s = 0; s < k.segments.size(); ++s) {
    llvm::BasicBlock* body = llvm::BasicBlock::Create(ctx, "segment", f);
    llvm::BasicBlock* next = llvm::BasicBlock::Create(ctx, "segment.next", f);
    const int64_t end = start + blocks[s];
    b.CreateCondBr(b.CreateICmpULT(block, b.getInt64(end)), body, next);
    b.SetInsertPoint(body);
    llvm::Value* first = b.CreateAdd(b.CreateMul(b.CreateSub(block, b.getInt64(start)),
                                                 b.getInt64(kBlockThreads), "", true, true),
                                     thread, "", true, true);
    space.RestrictTo(k.segments[s], k.SegmentEnd(s), narrowed ? k.segment_points[s] : -1);
    if (absl::Status status = EmitThreadWalk(space, first, b.getInt64(blocks[s] * kBlockThreads));
        !status.ok()) {
      return status;
    }
    b.CreateBr(done);
    b.SetInsertPoint(next);
    start = end;
  }
  b.CreateBr(done);
  space.RestrictTo(0, static_cast<int32_t>(k.insts.size()));
  b.SetInsertPoint(done);
  return absl::OkStatus();
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
