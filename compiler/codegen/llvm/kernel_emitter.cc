#include "compiler/codegen/llvm/kernel_emitter.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "compiler/codegen/llvm/scalar_ops.h"
#include "llvm/IR/Constants.h"
#include "llvm/IR/DerivedTypes.h"
#include "llvm/IR/Function.h"
#include "llvm/IR/Intrinsics.h"
#include "llvm/IR/Metadata.h"

namespace kiln::codegen {
namespace {

using loop::IndexExpr;
using loop::Inst;
using loop::Opcode;
using loop::ReduceKind;
using loop::ScalarType;

class KernelEmitter final : public ParallelSpace {
 public:
  KernelEmitter(llvm::Module& m, const loop::Program& p, const loop::Kernel& k, std::string name,
                const KernelAbi& abi)
      : m_(m),
        ctx_(m.getContext()),
        b_(ctx_),
        ops_(m, b_),
        p_(p),
        k_(k),
        name_(std::move(name)),
        abi_(abi) {}

  absl::Status Emit();

  // ParallelSpace.
  llvm::IRBuilder<>& builder() override { return b_; }
  const loop::Program& program() const override { return p_; }
  const loop::Kernel& kernel() const override { return k_; }
  llvm::Value* launch_param(size_t i) override { return launch_[i]; }
  llvm::Value* Extent(size_t d) override {
    return d == 0 && active_points_ >= 0 ? b_.getInt64(active_points_) : Index(k_.parallel[d]);
  }
  void Bind(size_t d, llvm::Value* index) override { vars_[d] = index; }
  absl::Status Loop(llvm::Value* lo, llvm::Value* hi, llvm::Value* step,
                    const std::function<absl::Status(llvm::Value* iv)>& body,
                    bool innermost) override {
    llvm::Function* f = b_.GetInsertBlock()->getParent();
    llvm::BasicBlock* pre = b_.GetInsertBlock();
    llvm::BasicBlock* header = llvm::BasicBlock::Create(ctx_, "loop", f);
    llvm::BasicBlock* bodyb = llvm::BasicBlock::Create(ctx_, "body", f);
    llvm::BasicBlock* exit = llvm::BasicBlock::Create(ctx_, "exit", f);
    b_.CreateBr(header);
    b_.SetInsertPoint(header);
    llvm::PHINode* iv = b_.CreatePHI(ops_.I64(), 2);
    iv->addIncoming(lo, pre);
    b_.CreateCondBr(b_.CreateICmpSLT(iv, hi), bodyb, exit);
    b_.SetInsertPoint(bodyb);
    if (absl::Status s = body(iv); !s.ok()) return s;
    llvm::Value* next = b_.CreateAdd(iv, step, "", true, true);
    llvm::BranchInst* back = b_.CreateBr(header);
    iv->addIncoming(next, b_.GetInsertBlock());
    if (innermost) {
      std::vector<llvm::Metadata*> loop_md = {
          nullptr, llvm::MDNode::get(ctx_, {llvm::MDString::get(ctx_, "llvm.loop.mustprogress")})};
      if (unroll_ > 0) {
        loop_md.push_back(llvm::MDNode::get(
            ctx_, {llvm::MDString::get(ctx_, "llvm.loop.unroll.count"),
                   llvm::ConstantAsMetadata::get(b_.getInt32(static_cast<uint32_t>(unroll_)))}));
      }
      llvm::MDNode* self = llvm::MDNode::getDistinct(ctx_, loop_md);
      self->replaceOperandWith(0, self);
      back->setMetadata(llvm::LLVMContext::MD_loop, self);
    }
    b_.SetInsertPoint(exit);
    return absl::OkStatus();
  }

  std::pair<llvm::Value*, llvm::Value*> Accumulate(ReduceKind kind, ScalarType t, llvm::Value* cur,
                                                   llvm::Value* cur_i, llvm::Value* x,
                                                   llvm::Value* x_i) override;
  llvm::Value* Identity(ReduceKind kind, ScalarType t) override;

  void RestrictTo(int32_t begin, int32_t end, int64_t points) override {
    active_begin_ = begin;
    active_end_ = end;
    active_points_ = k_.parallel.size() == 1 ? points : -1;
  }

  absl::Status EmitPoint() override {
    for (const loop::Stage& s : k_.stages) {
      if (absl::Status st = Stage(s); !st.ok()) return st;
    }
    return absl::OkStatus();
  }

  llvm::Value* RunsAligned(const PointRuns& runs) override;
  absl::Status EmitRun(const PointRuns& runs, llvm::Value* first) override;

 private:
  llvm::Value* Index(const IndexExpr& e) {
    llvm::Value* sum = nullptr;
    for (const loop::Term& t : e.terms()) {
      llvm::Value* prod = nullptr;
      for (const loop::Atom& a : t.factors) {
        llvm::Value* v = nullptr;
        switch (a.kind) {
          case loop::Atom::Kind::kVar:
            v = vars_[static_cast<size_t>(a.id)];
            break;
          case loop::Atom::Kind::kSym:
            v = syms_[static_cast<size_t>(a.id)];
            break;
          case loop::Atom::Kind::kDiv:
            v = b_.CreateUDiv(Index(a.operands->first), Index(a.operands->second));
            break;
          case loop::Atom::Kind::kMod:
            v = b_.CreateURem(Index(a.operands->first), Index(a.operands->second));
            break;
          case loop::Atom::Kind::kCeilDiv: {
            // Exact for either sign: the truncated quotient, plus one when the remainder is
            // non-zero and has the divisor's sign.
            llvm::Value* x = Index(a.operands->first);
            llvm::Value* d = Index(a.operands->second);
            llvm::Value* up = b_.CreateAnd(b_.CreateICmpNE(b_.CreateSRem(x, d), b_.getInt64(0)),
                                           b_.CreateICmpSGE(b_.CreateXor(x, d), b_.getInt64(0)));
            v = b_.CreateAdd(b_.CreateSDiv(x, d), b_.CreateZExt(up, ops_.I64()));
            break;
          }
          case loop::Atom::Kind::kMax:
          case loop::Atom::Kind::kMin:
            v = b_.CreateBinaryIntrinsic(
                a.kind == loop::Atom::Kind::kMax ? llvm::Intrinsic::smax : llvm::Intrinsic::smin,
                Index(a.operands->first), Index(a.operands->second));
            break;
          case loop::Atom::Kind::kOpaque:
            // Never in a kernel: decompose makes a node that would need one fall back.
            break;
        }
        if (v == nullptr) v = b_.getInt64(0);
        prod = prod ? b_.CreateMul(prod, v) : v;
      }
      llvm::Value* term = b_.getInt64(static_cast<uint64_t>(t.coef));
      if (prod != nullptr) term = t.coef == 1 ? prod : b_.CreateMul(prod, term);
      sum = sum ? b_.CreateAdd(sum, term) : term;
    }
    return sum ? sum : b_.getInt64(0);
  }

  llvm::Value* Address(const Inst& in, llvm::Value* mask) {
    llvm::Value* idx = Index(in.index);
    for (const loop::DynIndex& d : in.dyn) {
      idx = b_.CreateAdd(idx, b_.CreateMul(vals_[static_cast<size_t>(d.value)], Index(d.stride)));
    }
    if (mask != nullptr) idx = b_.CreateSelect(mask, idx, b_.getInt64(0));
    const ScalarType st = loop::ScalarTypeOf(p_.buffers[static_cast<size_t>(in.buffer)].dtype);
    return b_.CreateInBoundsGEP(ops_.StorageType(st), buffers_[static_cast<size_t>(in.buffer)],
                                idx);
  }

  // A buffer the kernel never stores to holds the same values for the whole launch
  // (`noalias`: nothing else in it writes them), which lets a load be reused past the
  // barriers between the stages of a split reduction, which otherwise clobber all memory.
  void MarkInvariant(llvm::LoadInst* load, int32_t buffer) {
    if (stored_[static_cast<size_t>(buffer)]) return;
    load->setMetadata(llvm::LLVMContext::MD_invariant_load, llvm::MDNode::get(ctx_, {}));
  }

  llvm::Value* Load(const Inst& in) {
    const ScalarType st = loop::ScalarTypeOf(p_.buffers[static_cast<size_t>(in.buffer)].dtype);
    llvm::Value* mask = in.mask >= 0 ? vals_[static_cast<size_t>(in.mask)] : nullptr;
    llvm::Value* addr = Address(in, mask);
    llvm::LoadInst* raw = b_.CreateLoad(ops_.StorageType(st), addr);
    raw->setAlignment(llvm::Align(loop::ByteSize(st)));
    MarkInvariant(raw, in.buffer);
    llvm::Value* v = ops_.FromStorage(raw, st);
    if (mask != nullptr) v = b_.CreateSelect(mask, v, ops_.Zero(loop::ComputeType(st)));
    return v;
  }

  // The type a vector access of `lanes` elements of `st` moves: elements of four bytes or
  // more as a vector of them, narrower ones packed into 32-bit words (one narrower integer
  // when all of them take less), which targets move whole where a vector of 8- or 16-bit
  // elements may be split into narrow accesses.
  llvm::Type* VectorMemoryType(ScalarType st, int32_t lanes);
  // The run's values of the load `in` (one per lane), read with one access.
  std::vector<llvm::Value*> VectorLoad(const Inst& in, const VectorAccess& access, int32_t lanes);
  // Stores `values` (one per lane, of the stored instruction's type) with one access.
  void VectorStore(const Inst& in, const VectorAccess& access,
                   const std::vector<llvm::Value*>& values);
  // Which instructions compute something that varies along loop variable `var`.
  std::vector<bool> VariesAlong(int32_t var) const;

  // Emits instruction `i` at the current point; its value, or null for those without one.
  absl::StatusOr<llvm::Value*> Instruction(int32_t i, bool loops);
  // Emits the instructions [begin, end) of a stage at the current point.
  absl::Status Body(int32_t begin, int32_t end, bool loops);
  absl::Status Stage(const loop::Stage& s);
  absl::Status ReductionLoops(size_t d, const loop::Stage& s);
  // The stage's reduction space flattened and split among the point's threads as the ABI
  // says, then every accumulator combined across them.
  absl::Status SplitReductionLoop(const loop::Stage& s);
  // The stage's reduction space as rows of its innermost dimension (constant, `row` long, at
  // least `threads`): for each row in turn, the point's `threads` threads take every
  // threads-th element from `first` on.
  absl::Status RowWalk(const loop::Stage& s, llvm::Value* first, int64_t threads, int64_t row);

  llvm::Module& m_;
  llvm::LLVMContext& ctx_;
  llvm::IRBuilder<> b_;
  ScalarOps ops_;
  const loop::Program& p_;
  const loop::Kernel& k_;
  std::string name_;
  const KernelAbi& abi_;
  std::vector<llvm::Value*> buffers_;  // by buffer index (only those the kernel touches)
  std::vector<bool> stored_;           // by buffer index: whether the kernel stores to it
  // The unroll count asked of the next innermost loop (0: the optimizer's choice).
  int unroll_ = 0;
  // Elements of a split reduction loop in flight at once: about kSplitLoopLoads loads a
  // thread (a sum down columns needs 16 per thread to keep the memory system busy), fewer
  // elements where each loads more, so that registers do not spill.
  static constexpr int kSplitLoopLoads = 32;
  static constexpr int kMaxSplitLoopUnroll = 16;
  static constexpr int kMinSplitLoopUnroll = 4;
  // A row walk of up to this many elements a thread is unrolled whole.
  static constexpr int64_t kMaxFullUnroll = 32;
  int SplitLoopUnroll(const loop::Stage& s) const;
  std::vector<llvm::Value*> syms_;  // by symbol id
  llvm::Value* seed_ = nullptr;
  llvm::Value* offset_ = nullptr;
  std::vector<llvm::Value*> launch_;  // the ABI's launch parameters
  std::vector<llvm::Value*> vars_;
  // The instructions' values at the point being emitted. A run keeps one such array per point
  // and swaps it in while it emits an instruction at that point.
  std::vector<llvm::Value*> vals_;
  std::vector<llvm::AllocaInst*> acc_, acc_index_;
  llvm::BasicBlock* entry_ = nullptr;
  // The instructions EmitPoint and EmitRun emit (RestrictTo).
  int32_t active_begin_ = 0;
  int32_t active_end_ = std::numeric_limits<int32_t>::max();
  int64_t active_points_ = -1;  // the first parallel extent's narrowing, or -1
};

absl::Status KernelEmitter::Body(int32_t begin, int32_t end, bool loops) {
  for (int32_t i = begin; i < end; ++i) {
    absl::StatusOr<llvm::Value*> out = Instruction(i, loops);
    if (!out.ok()) return out.status();
    vals_[static_cast<size_t>(i)] = *out;
  }
  return absl::OkStatus();
}

absl::StatusOr<llvm::Value*> KernelEmitter::Instruction(int32_t i, bool loops) {
  const Inst& in = k_.insts[static_cast<size_t>(i)];
  auto v = [&](int32_t id) { return vals_[static_cast<size_t>(id)]; };
  llvm::Value* out = nullptr;
  switch (in.op) {
    case Opcode::kConst:
      out = ops_.ConstOf(in.type, in.fimm, in.iimm);
      break;
    case Opcode::kIndex:
      out = Index(in.index);
      break;
    case Opcode::kLoad:
      out = Load(in);
      break;
    case Opcode::kStore: {
      const ScalarType st = loop::ScalarTypeOf(p_.buffers[static_cast<size_t>(in.buffer)].dtype);
      llvm::Value* mask = in.mask >= 0 ? v(in.mask) : nullptr;
      llvm::BasicBlock* after = nullptr;
      if (mask != nullptr) {
        llvm::Function* f = b_.GetInsertBlock()->getParent();
        llvm::BasicBlock* then = llvm::BasicBlock::Create(ctx_, "store", f);
        after = llvm::BasicBlock::Create(ctx_, "stored", f);
        b_.CreateCondBr(mask, then, after);
        b_.SetInsertPoint(then);
      }
      llvm::Value* value = ops_.ToStorage(v(in.a), k_.insts[static_cast<size_t>(in.a)].type, st);
      llvm::StoreInst* s = b_.CreateStore(value, Address(in, nullptr));
      s->setAlignment(llvm::Align(loop::ByteSize(st)));
      if (after != nullptr) {
        b_.CreateBr(after);
        b_.SetInsertPoint(after);
      }
      break;
    }
    case Opcode::kRandBits: {
      llvm::Value* stream = b_.CreateAdd(offset_, b_.getInt64(static_cast<uint64_t>(in.iimm)));
      llvm::Value* bits = b_.CreateCall(ops_.Philox(), {seed_, stream, v(in.a)});
      out = b_.CreateZExt(b_.CreateLShr(bits, 8), ops_.I64());
      break;
    }
    case Opcode::kReduce: {
      if (!loops) return absl::InternalError("reduce outside a reduction loop");
      llvm::AllocaInst* acc = acc_[static_cast<size_t>(i)];
      llvm::AllocaInst* ai = acc_index_[static_cast<size_t>(i)];
      llvm::Value* cur = b_.CreateLoad(acc->getAllocatedType(), acc);
      llvm::Value* cur_i = ai != nullptr ? b_.CreateLoad(ops_.I64(), ai) : nullptr;
      auto [next, next_i] = Accumulate(in.reduce, k_.insts[static_cast<size_t>(in.a)].type, cur,
                                       cur_i, v(in.a), ai != nullptr ? v(in.b) : nullptr);
      b_.CreateStore(next, acc);
      if (ai != nullptr) b_.CreateStore(next_i, ai);
      out = nullptr;
      break;
    }
    case Opcode::kCast:
      out = ops_.Convert(v(in.a), k_.insts[static_cast<size_t>(in.a)].type, in.type);
      break;
    case Opcode::kSelect:
      out = b_.CreateSelect(v(in.a), v(in.b), v(in.c));
      break;
    default:
      if (loop::IsUnary(in.op)) {
        out = ops_.Unary(in.op, in.type, k_.insts[static_cast<size_t>(in.a)].type, v(in.a));
      } else if (loop::IsBinary(in.op)) {
        out = ops_.Binary(in.op, k_.insts[static_cast<size_t>(in.a)].type, v(in.a), v(in.b));
      } else {
        return absl::InternalError(absl::StrCat("codegen: unhandled ", loop::OpcodeName(in.op)));
      }
  }
  return out;
}

absl::Status KernelEmitter::ReductionLoops(size_t d, const loop::Stage& s) {
  const size_t np = k_.parallel.size();
  if (d == k_.reduction.size()) return Body(s.begin, s.end, true);
  return Loop(
      b_.getInt64(0), Index(k_.reduction[d]), b_.getInt64(1),
      [&](llvm::Value* iv) -> absl::Status {
        vars_[np + d] = iv;
        return ReductionLoops(d + 1, s);
      },
      d + 1 == k_.reduction.size());
}

int KernelEmitter::SplitLoopUnroll(const loop::Stage& s) const {
  int loads = 0;
  for (int32_t i = s.begin; i < s.end; ++i) {
    if (k_.insts[static_cast<size_t>(i)].op == Opcode::kLoad) ++loads;
  }
  int unroll = kMaxSplitLoopUnroll;
  while (unroll > kMinSplitLoopUnroll && unroll * loads > kSplitLoopLoads) unroll /= 2;
  return unroll;
}

absl::Status KernelEmitter::RowWalk(const loop::Stage& s, llvm::Value* first, int64_t threads,
                                    int64_t row) {
  const size_t np = k_.parallel.size();
  const size_t nr = k_.reduction.size();
  llvm::Value* rows = b_.getInt64(1);
  for (size_t d = 0; d + 1 < nr; ++d) {
    rows = b_.CreateMul(rows, Index(k_.reduction[d]), "", true, true);
  }
  auto element = [&](llvm::Value* i) -> absl::Status {
    vars_[np + nr - 1] = i;
    return Body(s.begin, s.end, true);
  };
  const int64_t full = row / threads;
  return Loop(
      b_.getInt64(0), rows, b_.getInt64(1),
      [&](llvm::Value* outer) -> absl::Status {
        for (size_t d = nr - 1; d-- > 1;) {
          llvm::Value* extent = Index(k_.reduction[d]);
          vars_[np + d] = b_.CreateURem(outer, extent);
          outer = b_.CreateUDiv(outer, extent);
        }
        vars_[np] = outer;
        // Every thread takes `full` elements of the row: a loop of constant trips without a
        // bound check between its loads, which may all be in flight at once.
        unroll_ = full <= kMaxFullUnroll ? static_cast<int>(full) : SplitLoopUnroll(s);
        absl::Status st = Loop(
            b_.getInt64(0), b_.getInt64(full), b_.getInt64(1),
            [&](llvm::Value* j) {
              return element(
                  b_.CreateAdd(first, b_.CreateMul(j, b_.getInt64(threads)), "", true, true));
            },
            /*innermost=*/true);
        unroll_ = 0;
        if (!st.ok() || row % threads == 0) return st;
        // The first row % threads threads take one more.
        llvm::Value* last = b_.CreateAdd(first, b_.getInt64(full * threads), "", true, true);
        llvm::Function* f = b_.GetInsertBlock()->getParent();
        llvm::BasicBlock* then = llvm::BasicBlock::Create(ctx_, "row.rest", f);
        llvm::BasicBlock* after = llvm::BasicBlock::Create(ctx_, "row.done", f);
        b_.CreateCondBr(b_.CreateICmpULT(last, b_.getInt64(row)), then, after);
        b_.SetInsertPoint(then);
        if (absl::Status rest = element(last); !rest.ok()) return rest;
        b_.CreateBr(after);
        b_.SetInsertPoint(after);
        return absl::OkStatus();
      },
      /*innermost=*/false);
}

absl::Status KernelEmitter::SplitReductionLoop(const loop::Stage& s) {
  const size_t np = k_.parallel.size();
  const size_t nr = k_.reduction.size();
  llvm::Value* total = b_.getInt64(1);
  for (const IndexExpr& e : k_.reduction) total = b_.CreateMul(total, Index(e), "", true, true);
  auto [first, step] = abi_.ReductionStart(*this);
  auto element = [&](llvm::Value* flat) -> absl::Status {
    for (size_t d = nr; d-- > 1;) {
      llvm::Value* extent = Index(k_.reduction[d]);
      vars_[np + d] = b_.CreateURem(flat, extent);
      flat = b_.CreateUDiv(flat, extent);
    }
    if (nr > 0) vars_[np] = flat;
    return Body(s.begin, s.end, true);
  };
  // A row of the innermost dimension at least as long as the threads that share the
  // reduction: they walk each row together (RowWalk), rather than the flattened space with a
  // division and a remainder per element for each outer dimension.
  const auto* threads = llvm::dyn_cast<llvm::ConstantInt>(step);
  const int64_t row =
      nr >= 2 && k_.reduction.back().is_const() ? k_.reduction.back().const_value() : 0;
  if (threads != nullptr && row >= static_cast<int64_t>(threads->getZExtValue())) {
    if (absl::Status st = RowWalk(s, first, static_cast<int64_t>(threads->getZExtValue()), row);
        !st.ok()) {
      return st;
    }
  } else if (const int64_t trips = abi_.SplitTrips(k_); trips > 0) {
    for (int64_t j = 0; j < trips; ++j) {
      llvm::Value* flat = b_.CreateAdd(first, b_.CreateMul(step, b_.getInt64(j)), "", true, true);
      if (absl::Status st = element(flat); !st.ok()) return st;
    }
  } else {
    // Several elements' loads in flight at once: a thread waits on one load at a time when
    // each element's load feeds the accumulator before the next is issued.
    unroll_ = SplitLoopUnroll(s);
    absl::Status st = Loop(first, total, step, element, /*innermost=*/true);
    unroll_ = 0;
    if (!st.ok()) return st;
  }
  for (int32_t i = s.begin; i < s.end; ++i) {
    const Inst& in = k_.insts[static_cast<size_t>(i)];
    if (in.op != Opcode::kReduce) continue;
    llvm::AllocaInst* acc = acc_[static_cast<size_t>(i)];
    llvm::AllocaInst* ai = acc_index_[static_cast<size_t>(i)];
    llvm::Value* value = b_.CreateLoad(acc->getAllocatedType(), acc);
    llvm::Value* index = ai != nullptr ? b_.CreateLoad(ops_.I64(), ai) : nullptr;
    if (absl::Status c =
            abi_.CombinePartials(*this, in.reduce, k_.insts[static_cast<size_t>(in.a)].type, &value,
                                 ai != nullptr ? &index : nullptr);
        !c.ok()) {
      return c;
    }
    b_.CreateStore(value, acc);
    if (ai != nullptr) b_.CreateStore(index, ai);
  }
  return absl::OkStatus();
}

llvm::Value* KernelEmitter::Identity(ReduceKind kind, ScalarType t) {
  llvm::Type* ty = ops_.LlvmType(t);
  const bool fl = loop::IsFloat(t);
  const bool u = ops_.Unsigned(t);
  const int bits = fl ? 0 : static_cast<int>(ty->getIntegerBitWidth());
  switch (kind) {
    case ReduceKind::kSum:
      return ops_.Zero(t);
    case ReduceKind::kProd:
      return ops_.ConstOf(t, 1, 1);
    case ReduceKind::kMax:
    case ReduceKind::kArgMax:
      return fl ? llvm::ConstantFP::getInfinity(ty, true)
                : llvm::ConstantInt::get(ty, u ? llvm::APInt::getMinValue(bits)
                                               : llvm::APInt::getSignedMinValue(bits));
    case ReduceKind::kMin:
    case ReduceKind::kArgMin:
      return fl ? llvm::ConstantFP::getInfinity(ty, false)
                : llvm::ConstantInt::get(ty, u ? llvm::APInt::getMaxValue(bits)
                                               : llvm::APInt::getSignedMaxValue(bits));
    case ReduceKind::kAny:
      return b_.getFalse();
    case ReduceKind::kAll:
      return b_.getTrue();
  }
  return ops_.Zero(t);
}

std::pair<llvm::Value*, llvm::Value*> KernelEmitter::Accumulate(ReduceKind kind, ScalarType t,
                                                                llvm::Value* cur,
                                                                llvm::Value* cur_i, llvm::Value* x,
                                                                llvm::Value* x_i) {
  const bool fl = loop::IsFloat(t);
  llvm::FastMathFlags reassoc;
  reassoc.setAllowReassoc();
  switch (kind) {
    case ReduceKind::kSum:
    case ReduceKind::kProd: {
      const bool sum = kind == ReduceKind::kSum;
      if (!fl) return {sum ? b_.CreateAdd(cur, x) : b_.CreateMul(cur, x), nullptr};
      llvm::Value* next = sum ? b_.CreateFAdd(cur, x) : b_.CreateFMul(cur, x);
      llvm::cast<llvm::Instruction>(next)->setFastMathFlags(reassoc);
      return {next, nullptr};
    }
    case ReduceKind::kMax:
    case ReduceKind::kMin: {
      const bool mx = kind == ReduceKind::kMax;
      if (fl) return {ops_.NanMax(cur, x, mx), nullptr};
      const bool u = ops_.Unsigned(t);
      return {ops_.Intrinsic(mx ? (u ? llvm::Intrinsic::umax : llvm::Intrinsic::smax)
                                : (u ? llvm::Intrinsic::umin : llvm::Intrinsic::smin),
                             cur, x),
              nullptr};
    }
    case ReduceKind::kAny:
      return {b_.CreateOr(cur, x), nullptr};
    case ReduceKind::kAll:
      return {b_.CreateAnd(cur, x), nullptr};
    case ReduceKind::kArgMax:
    case ReduceKind::kArgMin: {
      const bool mx = kind == ReduceKind::kArgMax;
      llvm::Value* better;
      llvm::Value* equal;
      if (fl) {
        better = mx ? b_.CreateFCmpOGT(x, cur) : b_.CreateFCmpOLT(x, cur);
        llvm::Value* nan_new = b_.CreateAnd(b_.CreateFCmpUNO(x, x), b_.CreateFCmpORD(cur, cur));
        better = b_.CreateOr(better, nan_new);
        // Equal, or both NaN (a NaN beats every number, and the earliest NaN wins).
        equal = b_.CreateOr(b_.CreateFCmpOEQ(x, cur),
                            b_.CreateAnd(b_.CreateFCmpUNO(x, x), b_.CreateFCmpUNO(cur, cur)));
      } else {
        const bool u = ops_.Unsigned(t);
        better = mx ? (u ? b_.CreateICmpUGT(x, cur) : b_.CreateICmpSGT(x, cur))
                    : (u ? b_.CreateICmpULT(x, cur) : b_.CreateICmpSLT(x, cur));
        equal = b_.CreateICmpEQ(x, cur);
      }
      // An empty partial (position < 0) loses to anything and beats nothing; among equal
      // values the earliest position wins (walking in order, the one found first).
      llvm::Value* cur_empty = b_.CreateICmpSLT(cur_i, b_.getInt64(0));
      llvm::Value* x_valid = b_.CreateICmpSGE(x_i, b_.getInt64(0));
      llvm::Value* earlier = b_.CreateAnd(equal, b_.CreateICmpSLT(x_i, cur_i));
      better = b_.CreateAnd(b_.CreateOr(b_.CreateOr(better, cur_empty), earlier), x_valid);
      return {b_.CreateSelect(better, x, cur), b_.CreateSelect(better, x_i, cur_i)};
    }
  }
  return {cur, cur_i};
}

absl::Status KernelEmitter::Stage(const loop::Stage& s) {
  if (!s.loops) {
    return Body(std::max(s.begin, active_begin_), std::min(s.end, active_end_), false);
  }
  // Accumulators start at the reduction's identity.
  for (int32_t i = s.begin; i < s.end; ++i) {
    const Inst& in = k_.insts[static_cast<size_t>(i)];
    if (in.op != Opcode::kReduce) continue;
    const ScalarType t = k_.insts[static_cast<size_t>(in.a)].type;
    llvm::IRBuilder<> eb(entry_, entry_->begin());
    llvm::AllocaInst* acc = eb.CreateAlloca(ops_.LlvmType(t));
    acc_[static_cast<size_t>(i)] = acc;
    llvm::Value* init = Identity(in.reduce, t);
    b_.CreateStore(init, acc);
    if (in.reduce == ReduceKind::kArgMax || in.reduce == ReduceKind::kArgMin) {
      llvm::AllocaInst* ai = eb.CreateAlloca(ops_.I64());
      acc_index_[static_cast<size_t>(i)] = ai;
      b_.CreateStore(b_.getInt64(-1), ai);
    }
  }
  if (abi_.SplitsReductions(k_)) {
    if (absl::Status st = SplitReductionLoop(s); !st.ok()) return st;
  } else if (absl::Status st = ReductionLoops(0, s); !st.ok()) {
    return st;
  }
  for (int32_t i = s.begin; i < s.end; ++i) {
    const Inst& in = k_.insts[static_cast<size_t>(i)];
    if (in.op != Opcode::kReduce) continue;
    if ((in.reduce == ReduceKind::kArgMax || in.reduce == ReduceKind::kArgMin) && in.iimm == 1) {
      llvm::Value* idx = b_.CreateLoad(ops_.I64(), acc_index_[static_cast<size_t>(i)]);
      vals_[static_cast<size_t>(i)] =
          b_.CreateSelect(b_.CreateICmpSLT(idx, b_.getInt64(0)), b_.getInt64(0), idx);
    } else {
      llvm::AllocaInst* acc = acc_[static_cast<size_t>(i)];
      vals_[static_cast<size_t>(i)] = b_.CreateLoad(acc->getAllocatedType(), acc);
    }
  }
  return absl::OkStatus();
}

llvm::Type* KernelEmitter::VectorMemoryType(ScalarType st, int32_t lanes) {
  const int32_t size = loop::ByteSize(st);
  if (size >= 4) return llvm::FixedVectorType::get(ops_.StorageType(st), lanes);
  const int32_t bits = size * 8 * lanes;
  if (bits <= 32) return b_.getIntNTy(static_cast<unsigned>(bits));
  return llvm::FixedVectorType::get(b_.getInt32Ty(), bits / 32);
}

std::vector<llvm::Value*> KernelEmitter::VectorLoad(const Inst& in, const VectorAccess& access,
                                                    int32_t lanes) {
  const ScalarType st = loop::ScalarTypeOf(p_.buffers[static_cast<size_t>(in.buffer)].dtype);
  const int32_t size = loop::ByteSize(st);
  llvm::Type* memory = VectorMemoryType(st, lanes);
  llvm::LoadInst* raw = b_.CreateLoad(memory, Address(in, nullptr));
  raw->setAlignment(llvm::Align(access.align));
  MarkInvariant(raw, in.buffer);
  std::vector<llvm::Value*> out;
  for (int32_t l = 0; l < lanes; ++l) {
    llvm::Value* element;
    if (size >= 4) {
      element = b_.CreateExtractElement(raw, static_cast<uint64_t>(l));
    } else {
      // Little-endian: lane l's bits start at bit 8 * size * l of the run.
      const int32_t bit = 8 * size * l;
      llvm::Value* word = raw;
      if (memory->isVectorTy())
        word = b_.CreateExtractElement(raw, static_cast<uint64_t>(bit / 32));
      if (bit % 32 != 0) word = b_.CreateLShr(word, static_cast<uint64_t>(bit % 32));
      element =
          b_.CreateBitCast(b_.CreateTrunc(word, b_.getIntNTy(8 * size)), ops_.StorageType(st));
    }
    out.push_back(ops_.FromStorage(element, st));
  }
  return out;
}

void KernelEmitter::VectorStore(const Inst& in, const VectorAccess& access,
                                const std::vector<llvm::Value*>& values) {
  const ScalarType st = loop::ScalarTypeOf(p_.buffers[static_cast<size_t>(in.buffer)].dtype);
  const ScalarType from = k_.insts[static_cast<size_t>(in.a)].type;
  const int32_t size = loop::ByteSize(st);
  const int32_t lanes = static_cast<int32_t>(values.size());
  llvm::Type* memory = VectorMemoryType(st, lanes);
  llvm::Value* packed = llvm::PoisonValue::get(memory);
  llvm::Type* word_type = memory->isVectorTy() ? b_.getInt32Ty() : memory;
  llvm::Value* word = nullptr;
  for (int32_t l = 0; l < lanes; ++l) {
    llvm::Value* element = ops_.ToStorage(values[static_cast<size_t>(l)], from, st);
    if (size >= 4) {
      packed = b_.CreateInsertElement(packed, element, static_cast<uint64_t>(l));
      continue;
    }
    const int32_t bit = 8 * size * l;
    llvm::Value* part = b_.CreateZExt(b_.CreateBitCast(element, b_.getIntNTy(8 * size)), word_type);
    if (bit % 32 != 0) part = b_.CreateShl(part, static_cast<uint64_t>(bit % 32));
    word = word == nullptr ? part : b_.CreateOr(word, part);
    const bool word_done = (bit + 8 * size) % 32 == 0 || l + 1 == lanes;
    if (!word_done) continue;
    packed = memory->isVectorTy()
                 ? b_.CreateInsertElement(packed, word, static_cast<uint64_t>(bit / 32))
                 : word;
    word = nullptr;
  }
  llvm::StoreInst* s = b_.CreateStore(packed, Address(in, nullptr));
  s->setAlignment(llvm::Align(access.align));
}

std::vector<bool> KernelEmitter::VariesAlong(int32_t var) const {
  auto uses = [&](const IndexExpr& e) {
    std::vector<int32_t> vars;
    e.CollectVars(&vars);
    return std::find(vars.begin(), vars.end(), var) != vars.end();
  };
  std::vector<bool> varies(k_.insts.size(), false);
  for (size_t i = 0; i < k_.insts.size(); ++i) {
    const Inst& in = k_.insts[i];
    bool v = false;
    for (int32_t operand : {in.a, in.b, in.c, in.mask}) {
      v = v || (operand >= 0 && varies[static_cast<size_t>(operand)]);
    }
    for (const loop::DynIndex& d : in.dyn) {
      v = v || varies[static_cast<size_t>(d.value)] || uses(d.stride);
    }
    if (in.op == Opcode::kIndex || in.op == Opcode::kLoad || in.op == Opcode::kStore) {
      v = v || uses(in.index);
    }
    varies[i] = v;
  }
  return varies;
}

llvm::Value* KernelEmitter::RunsAligned(const PointRuns& runs) {
  llvm::Value* low_bits = b_.getInt64(0);
  for (const VectorAccess& access : runs.vectors) {
    // Only the accesses emitted (RestrictTo): a segment checks its own buffers, so that its
    // code keeps no other segment's addresses live.
    if (access.inst < active_begin_ || access.inst >= active_end_) continue;
    llvm::Value* address =
        b_.CreatePtrToInt(buffers_[static_cast<size_t>(access.buffer)], ops_.I64());
    low_bits = b_.CreateOr(low_bits, b_.CreateAnd(address, b_.getInt64(access.align - 1)));
    for (const IndexExpr& multiple : access.multiples) {
      low_bits =
          b_.CreateOr(low_bits, b_.CreateAnd(Index(multiple), b_.getInt64(access.elements - 1)));
    }
  }
  return b_.CreateICmpEQ(low_bits, b_.getInt64(0));
}

absl::Status KernelEmitter::EmitRun(const PointRuns& runs, llvm::Value* first) {
  if (loop::HasLoopStage(k_)) {
    return absl::InternalError("codegen: runs of points in a kernel that loops over a reduction");
  }
  const size_t dim = static_cast<size_t>(runs.dim);
  const size_t lanes = static_cast<size_t>(runs.lanes);
  const std::vector<bool> varies = VariesAlong(runs.dim);
  std::vector<const VectorAccess*> vector_of(k_.insts.size(), nullptr);
  for (const VectorAccess& access : runs.vectors) {
    vector_of[static_cast<size_t>(access.inst)] = &access;
  }
  std::vector<llvm::Value*> points = {first};
  for (size_t l = 1; l < lanes; ++l) {
    points.push_back(b_.CreateAdd(first, b_.getInt64(l), "", true, true));
  }
  std::vector<std::vector<llvm::Value*>> lane_vals(lanes,
                                                   std::vector<llvm::Value*>(k_.insts.size()));
  for (const loop::Stage& s : k_.stages) {
    for (int32_t i = std::max(s.begin, active_begin_); i < std::min(s.end, active_end_); ++i) {
      const size_t at = static_cast<size_t>(i);
      const Inst& in = k_.insts[at];
      if (const VectorAccess* access = vector_of[at]) {
        vars_[dim] = first;
        if (in.op == Opcode::kLoad) {
          std::vector<llvm::Value*> values = VectorLoad(in, *access, runs.lanes);
          for (size_t l = 0; l < lanes; ++l) lane_vals[l][at] = values[l];
        } else {
          std::vector<llvm::Value*> values;
          for (size_t l = 0; l < lanes; ++l) {
            values.push_back(lane_vals[l][static_cast<size_t>(in.a)]);
          }
          VectorStore(in, *access, values);
        }
        continue;
      }
      const size_t emitted = varies[at] ? lanes : 1;
      for (size_t l = 0; l < emitted; ++l) {
        vars_[dim] = points[l];
        vals_.swap(lane_vals[l]);
        absl::StatusOr<llvm::Value*> out = Instruction(i, /*loops=*/false);
        vals_.swap(lane_vals[l]);
        if (!out.ok()) return out.status();
        lane_vals[l][at] = *out;
      }
      for (size_t l = emitted; l < lanes; ++l) lane_vals[l][at] = lane_vals[0][at];
    }
  }
  return absl::OkStatus();
}

absl::Status KernelEmitter::Emit() {
  // The body's buffer pointers are `noalias`: kernels only write buffers nothing else in the
  // launch reads or writes. Those it never stores to are `readonly` as well, stated rather
  // than left to inference, which gives up on a pointer whose address the code inspects
  // (RunsAligned).
  const plan::KernelParams params = plan::ParamsOf(k_);
  std::vector<bool>& stored = stored_;
  stored.assign(p_.buffers.size(), false);
  for (const Inst& in : k_.insts) {
    if (in.op == Opcode::kStore) stored[static_cast<size_t>(in.buffer)] = true;
  }
  llvm::Type* ptr = b_.getPtrTy();
  std::vector<llvm::Type*> body_params;
  for (size_t i = 0; i < params.buffers.size(); ++i) body_params.push_back(ptr);
  for (size_t i = 0; i < params.symbols.size(); ++i) body_params.push_back(ops_.I64());
  if (params.rng) {
    body_params.push_back(ops_.I64());
    body_params.push_back(ops_.I64());
  }
  const std::vector<llvm::Type*> launch = abi_.LaunchParams(ctx_);
  body_params.insert(body_params.end(), launch.begin(), launch.end());
  auto* body_ty = llvm::FunctionType::get(b_.getVoidTy(), body_params, false);
  auto* body =
      llvm::Function::Create(body_ty, llvm::Function::InternalLinkage, name_ + "_body", m_);
  body->addFnAttr(llvm::Attribute::AlwaysInline);
  body->addFnAttr(llvm::Attribute::NoUnwind);
  for (size_t i = 0; i < params.buffers.size(); ++i) {
    body->addParamAttr(static_cast<unsigned>(i), llvm::Attribute::NoAlias);
    if (!stored[static_cast<size_t>(params.buffers[i])]) {
      body->addParamAttr(static_cast<unsigned>(i), llvm::Attribute::ReadOnly);
    }
  }
  abi_.EmitEntry(m_, name_, params, body);

  entry_ = llvm::BasicBlock::Create(ctx_, "entry", body);
  b_.SetInsertPoint(entry_);
  buffers_.assign(p_.buffers.size(), nullptr);
  syms_.assign(p_.symbols.size(), nullptr);
  unsigned arg = 0;
  for (int32_t b : params.buffers) buffers_[static_cast<size_t>(b)] = body->getArg(arg++);
  for (int32_t s : params.symbols) syms_[static_cast<size_t>(s)] = body->getArg(arg++);
  if (params.rng) {
    seed_ = body->getArg(arg++);
    offset_ = body->getArg(arg++);
  }
  for (size_t i = 0; i < launch.size(); ++i) launch_.push_back(body->getArg(arg++));
  vars_.assign(static_cast<size_t>(k_.num_vars()), nullptr);
  vals_.assign(k_.insts.size(), nullptr);
  acc_.assign(k_.insts.size(), nullptr);
  acc_index_.assign(k_.insts.size(), nullptr);

  if (absl::Status status = abi_.EmitParallel(*this); !status.ok()) return status;
  b_.CreateRetVoid();
  return absl::OkStatus();
}

}  // namespace

void ParallelSpace::BindRowMajor(llvm::Value* flat, size_t dims) {
  if (dims == 0) return;
  llvm::IRBuilder<>& b = builder();
  for (size_t d = dims - 1; d > 0; --d) {
    llvm::Value* extent = Extent(d);
    Bind(d, b.CreateURem(flat, extent));
    flat = b.CreateUDiv(flat, extent);
  }
  Bind(0, flat);
}

absl::Status EmitKernel(llvm::Module& module, const loop::Program& program,
                        const loop::Kernel& kernel, const std::string& name, const KernelAbi& abi) {
  return KernelEmitter(module, program, kernel, name, abi).Emit();
}

}  // namespace kiln::codegen
