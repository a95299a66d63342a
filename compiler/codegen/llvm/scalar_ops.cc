#include "compiler/codegen/llvm/scalar_ops.h"

#include <string>
#include <vector>

#include "llvm/IR/Constants.h"
#include "llvm/IR/DerivedTypes.h"
#include "llvm/IR/Function.h"
#include "llvm/IR/Intrinsics.h"
#include "llvm/IR/IntrinsicsNVPTX.h"
#include "llvm/TargetParser/Triple.h"

namespace kiln::codegen {

using loop::Opcode;
using loop::ScalarType;

ScalarOps::ScalarOps(llvm::Module& module, llvm::IRBuilder<>& builder)
    : m_(module), ctx_(module.getContext()), b_(builder) {}

llvm::Type* ScalarOps::LlvmType(ScalarType t) {
  switch (t) {
    case ScalarType::kBool:
      return b_.getInt1Ty();
    case ScalarType::kI8:
    case ScalarType::kU8:
      return b_.getInt8Ty();
    case ScalarType::kI16:
      return b_.getInt16Ty();
    case ScalarType::kI32:
      return b_.getInt32Ty();
    case ScalarType::kI64:
      return b_.getInt64Ty();
    case ScalarType::kF16:
      return b_.getHalfTy();
    case ScalarType::kBF16:
      return b_.getInt16Ty();
    case ScalarType::kF32:
      return b_.getFloatTy();
    case ScalarType::kF64:
      return b_.getDoubleTy();
  }
  return b_.getFloatTy();
}

llvm::Type* ScalarOps::StorageType(ScalarType t) {
  return t == ScalarType::kBool ? b_.getInt8Ty() : LlvmType(t);
}

llvm::Value* ScalarOps::ConstOf(ScalarType t, double f, int64_t i) {
  if (loop::IsFloat(t)) return llvm::ConstantFP::get(LlvmType(t), f);
  return llvm::ConstantInt::get(LlvmType(t), static_cast<uint64_t>(i), true);
}

llvm::Value* ScalarOps::FromStorage(llvm::Value* v, ScalarType st) {
  switch (st) {
    case ScalarType::kBool:
      v = b_.CreateICmpNE(v, b_.getInt8(0));
      break;
    case ScalarType::kF16:
      v = b_.CreateFPExt(v, b_.getFloatTy());
      break;
    case ScalarType::kBF16:
      v = b_.CreateBitCast(b_.CreateShl(b_.CreateZExt(v, b_.getInt32Ty()), 16), b_.getFloatTy());
      break;
    default:
      break;
  }
  return v;
}

llvm::Value* ScalarOps::ToStorage(llvm::Value* v, ScalarType from, ScalarType st) {
  switch (st) {
    case ScalarType::kBool:
      return b_.CreateZExt(Convert(v, from, ScalarType::kBool), b_.getInt8Ty());
    case ScalarType::kF16:
      return b_.CreateFPTrunc(Convert(v, from, ScalarType::kF32), b_.getHalfTy());
    case ScalarType::kBF16: {
      // Round to nearest even; NaN stays a quiet NaN.
      llvm::Value* f = Convert(v, from, ScalarType::kF32);
      if (llvm::Triple(m_.getTargetTriple()).isNVPTX()) {
        // One instruction (cvt.rn.bf16.f32), as PyTorch's CUDA kernels round; a NaN becomes
        // the canonical 0x7FFF.
        llvm::Value* r = b_.CreateCall(
            llvm::Intrinsic::getDeclaration(&m_, llvm::Intrinsic::nvvm_f2bf16_rn), {f});
        return r->getType() == b_.getInt16Ty() ? r : b_.CreateBitCast(r, b_.getInt16Ty());
      }
      llvm::Value* bits = b_.CreateBitCast(f, b_.getInt32Ty());
      llvm::Value* lsb = b_.CreateAnd(b_.CreateLShr(bits, 16), b_.getInt32(1));
      llvm::Value* rounded = b_.CreateAdd(bits, b_.CreateAdd(lsb, b_.getInt32(0x7FFF)));
      llvm::Value* out = b_.CreateTrunc(b_.CreateLShr(rounded, 16), b_.getInt16Ty());
      llvm::Value* nan = b_.CreateFCmpUNO(f, f);
      return b_.CreateSelect(nan, b_.getInt16(0x7FC0), out);
    }
    default:
      return Convert(v, from, st);
  }
}

llvm::Value* ScalarOps::Convert(llvm::Value* v, ScalarType from, ScalarType to) {
  from = loop::ComputeType(from);
  if (from == to) return v;
  llvm::Type* tt = LlvmType(to);
  const bool ff = loop::IsFloat(from), tf = loop::IsFloat(to);
  if (ff && tf) {
    return loop::ByteSize(to) > loop::ByteSize(from) ? b_.CreateFPExt(v, tt)
                                                     : b_.CreateFPTrunc(v, tt);
  }
  if (ff) {
    if (to == ScalarType::kBool) return b_.CreateFCmpUNE(v, llvm::ConstantFP::get(v->getType(), 0));
    return b_.CreateTrunc(b_.CreateFPToSI(v, I64()), tt);
  }
  if (tf) return Unsigned(from) ? b_.CreateUIToFP(v, tt) : b_.CreateSIToFP(v, tt);
  if (to == ScalarType::kBool) return b_.CreateICmpNE(v, llvm::ConstantInt::get(v->getType(), 0));
  const int fb = v->getType()->getIntegerBitWidth(), tb = tt->getIntegerBitWidth();
  if (tb < fb) return b_.CreateTrunc(v, tt);
  if (tb > fb) return Unsigned(from) ? b_.CreateZExt(v, tt) : b_.CreateSExt(v, tt);
  return v;
}

llvm::Value* ScalarOps::Intrinsic(llvm::Intrinsic::ID id, llvm::Value* a, llvm::Value* b) {
  if (b == nullptr) return b_.CreateUnaryIntrinsic(id, a);
  return b_.CreateBinaryIntrinsic(id, a, b);
}

llvm::Value* ScalarOps::LibCall(const std::string& name, llvm::Value* a, llvm::Value* b) {
  const bool is_float = a->getType()->isFloatTy();
  const std::string fn = is_float ? name + "f" : name;
  std::vector<llvm::Type*> params(b ? 2 : 1, a->getType());
  llvm::FunctionCallee callee =
      m_.getOrInsertFunction(fn, llvm::FunctionType::get(a->getType(), params, false));
  if (auto* f = llvm::dyn_cast<llvm::Function>(callee.getCallee())) {
    f->setDoesNotThrow();
    f->setOnlyAccessesInaccessibleMemory();
    f->setWillReturn();
  }
  llvm::CallInst* call = b ? b_.CreateCall(callee, {a, b}) : b_.CreateCall(callee, {a});
  call->setDoesNotThrow();
  return call;
}

// Selects rather than llvm.maximum/minimum, which do not select on x86 vectors in LLVM 16.
llvm::Value* ScalarOps::NanMax(llvm::Value* a, llvm::Value* b, bool max) {
  llvm::Value* pick = max ? b_.CreateFCmpOGT(a, b) : b_.CreateFCmpOLT(a, b);
  llvm::Value* r = b_.CreateSelect(pick, a, b);
  r = b_.CreateSelect(b_.CreateFCmpUNO(b, b), b, r);
  return b_.CreateSelect(b_.CreateFCmpUNO(a, a), a, r);
}

llvm::Value* ScalarOps::Unary(Opcode op, ScalarType t, ScalarType at, llvm::Value* a) {
  if (!loop::IsFloat(at)) {
    switch (op) {
      case Opcode::kNeg:
        return b_.CreateNeg(a);
      case Opcode::kAbs:
        return Intrinsic(llvm::Intrinsic::abs, a, b_.getFalse());
      case Opcode::kNot:
        return b_.CreateNot(a);
      case Opcode::kBitNot:
        return b_.CreateNot(a);
      case Opcode::kSign: {
        llvm::Value* pos = b_.CreateZExt(b_.CreateICmpSGT(a, Zero(at)), a->getType());
        llvm::Value* neg = b_.CreateZExt(b_.CreateICmpSLT(a, Zero(at)), a->getType());
        return b_.CreateSub(pos, neg);
      }
      case Opcode::kIsNan:
      case Opcode::kIsInf:
        return b_.getFalse();
      case Opcode::kFloor:
      case Opcode::kCeil:
      case Opcode::kRound:
      case Opcode::kTrunc:
        return a;
      default: {
        // Float functions of integers compute in double.
        llvm::Value* d = Convert(a, at, ScalarType::kF64);
        llvm::Value* r = FloatUnary(op, d, ScalarType::kF64);
        return Convert(r, ScalarType::kF64, t);
      }
    }
  }
  if (op == Opcode::kIsNan) return b_.CreateFCmpUNO(a, a);
  if (op == Opcode::kIsInf) {
    return b_.CreateFCmpOEQ(Intrinsic(llvm::Intrinsic::fabs, a),
                            llvm::ConstantFP::getInfinity(a->getType()));
  }
  if (op == Opcode::kNot) return b_.CreateNot(a);
  return FloatUnary(op, a, t);
}

llvm::Value* ScalarOps::FloatUnary(Opcode op, llvm::Value* a, ScalarType t) {
  llvm::Type* ty = a->getType();
  auto one = [&] { return llvm::ConstantFP::get(ty, 1.0); };
  switch (op) {
    case Opcode::kNeg:
      return b_.CreateFNeg(a);
    case Opcode::kAbs:
      return Intrinsic(llvm::Intrinsic::fabs, a);
    case Opcode::kExp:
      return Intrinsic(llvm::Intrinsic::exp, a);
    case Opcode::kExp2:
      return Intrinsic(llvm::Intrinsic::exp2, a);
    case Opcode::kLog:
      return Intrinsic(llvm::Intrinsic::log, a);
    case Opcode::kLog2:
      return Intrinsic(llvm::Intrinsic::log2, a);
    case Opcode::kLog10:
      return Intrinsic(llvm::Intrinsic::log10, a);
    case Opcode::kSqrt:
      return Intrinsic(llvm::Intrinsic::sqrt, a);
    case Opcode::kRsqrt:
      return b_.CreateFDiv(one(), Intrinsic(llvm::Intrinsic::sqrt, a));
    case Opcode::kRecip:
      return b_.CreateFDiv(one(), a);
    case Opcode::kSin:
      return Intrinsic(llvm::Intrinsic::sin, a);
    case Opcode::kCos:
      return Intrinsic(llvm::Intrinsic::cos, a);
    case Opcode::kFloor:
      return Intrinsic(llvm::Intrinsic::floor, a);
    case Opcode::kCeil:
      return Intrinsic(llvm::Intrinsic::ceil, a);
    case Opcode::kRound:
      return Intrinsic(llvm::Intrinsic::roundeven, a);
    case Opcode::kTrunc:
      return Intrinsic(llvm::Intrinsic::trunc, a);
    case Opcode::kSigmoid:
      return b_.CreateFDiv(one(),
                           b_.CreateFAdd(one(), Intrinsic(llvm::Intrinsic::exp, b_.CreateFNeg(a))));
    case Opcode::kSign: {
      llvm::Value* pos = b_.CreateFCmpOGT(a, llvm::ConstantFP::get(ty, 0.0));
      llvm::Value* neg = b_.CreateFCmpOLT(a, llvm::ConstantFP::get(ty, 0.0));
      return b_.CreateSelect(pos, one(), b_.CreateSelect(neg, llvm::ConstantFP::get(ty, -1.0), a));
    }
    case Opcode::kExpm1:
      return LibCall("expm1", a);
    case Opcode::kLog1p:
      return LibCall("log1p", a);
    case Opcode::kTan:
      return LibCall("tan", a);
    case Opcode::kAsin:
      return LibCall("asin", a);
    case Opcode::kAcos:
      return LibCall("acos", a);
    case Opcode::kAtan:
      return LibCall("atan", a);
    case Opcode::kSinh:
      return LibCall("sinh", a);
    case Opcode::kCosh:
      return LibCall("cosh", a);
    case Opcode::kTanh:
      return LibCall("tanh", a);
    case Opcode::kErf:
      return LibCall("erf", a);
    case Opcode::kErfc:
      return LibCall("erfc", a);
    case Opcode::kLgamma:
      return LibCall("lgamma", a);
    default:
      break;
  }
  (void)t;
  return a;
}

llvm::Value* ScalarOps::Binary(Opcode op, ScalarType t, llvm::Value* a, llvm::Value* b) {
  if (loop::IsFloat(t)) {
    switch (op) {
      case Opcode::kAdd:
        return b_.CreateFAdd(a, b);
      case Opcode::kSub:
        return b_.CreateFSub(a, b);
      case Opcode::kMul:
        return b_.CreateFMul(a, b);
      case Opcode::kDiv:
        return b_.CreateFDiv(a, b);
      case Opcode::kFloorDiv:
        return Intrinsic(llvm::Intrinsic::floor, b_.CreateFDiv(a, b));
      case Opcode::kFmod:
        return b_.CreateFRem(a, b);
      case Opcode::kRemainder: {
        llvm::Value* r = b_.CreateFRem(a, b);
        llvm::Value* zero = llvm::ConstantFP::get(a->getType(), 0.0);
        llvm::Value* fix =
            b_.CreateAnd(b_.CreateFCmpONE(r, zero),
                         b_.CreateXor(b_.CreateFCmpOLT(r, zero), b_.CreateFCmpOLT(b, zero)));
        return b_.CreateSelect(fix, b_.CreateFAdd(r, b), r);
      }
      case Opcode::kPow:
        return Intrinsic(llvm::Intrinsic::pow, a, b);
      case Opcode::kAtan2:
        return LibCall("atan2", a, b);
      case Opcode::kMax:
        return NanMax(a, b, true);
      case Opcode::kMin:
        return NanMax(a, b, false);
      case Opcode::kEq:
        return b_.CreateFCmpOEQ(a, b);
      case Opcode::kNe:
        return b_.CreateFCmpUNE(a, b);
      case Opcode::kLt:
        return b_.CreateFCmpOLT(a, b);
      case Opcode::kLe:
        return b_.CreateFCmpOLE(a, b);
      case Opcode::kGt:
        return b_.CreateFCmpOGT(a, b);
      case Opcode::kGe:
        return b_.CreateFCmpOGE(a, b);
      default:
        break;
    }
    return a;
  }
  const bool u = Unsigned(t);
  auto safe = [&](llvm::Value* d) {
    // Integer division by zero is an error in PyTorch; never trap here.
    return b_.CreateSelect(b_.CreateICmpEQ(d, Zero(t)), ConstOf(t, 1, 1), d);
  };
  switch (op) {
    case Opcode::kAdd:
      return b_.CreateAdd(a, b);
    case Opcode::kSub:
      return b_.CreateSub(a, b);
    case Opcode::kMul:
      return b_.CreateMul(a, b);
    case Opcode::kDiv:
      return u ? b_.CreateUDiv(a, safe(b)) : b_.CreateSDiv(a, safe(b));
    case Opcode::kFmod:
      return u ? b_.CreateURem(a, safe(b)) : b_.CreateSRem(a, safe(b));
    case Opcode::kFloorDiv:
    case Opcode::kRemainder: {
      if (u) return op == Opcode::kFloorDiv ? b_.CreateUDiv(a, safe(b)) : b_.CreateURem(a, safe(b));
      llvm::Value* d = safe(b);
      llvm::Value* q = b_.CreateSDiv(a, d);
      llvm::Value* r = b_.CreateSRem(a, d);
      llvm::Value* fix =
          b_.CreateAnd(b_.CreateICmpNE(r, Zero(t)),
                       b_.CreateXor(b_.CreateICmpSLT(r, Zero(t)), b_.CreateICmpSLT(d, Zero(t))));
      if (op == Opcode::kFloorDiv)
        return b_.CreateSelect(fix, b_.CreateSub(q, ConstOf(t, 1, 1)), q);
      return b_.CreateSelect(fix, b_.CreateAdd(r, d), r);
    }
    case Opcode::kPow: {
      llvm::Value* r = Intrinsic(llvm::Intrinsic::pow, Convert(a, t, ScalarType::kF64),
                                 Convert(b, t, ScalarType::kF64));
      return Convert(r, ScalarType::kF64, t);
    }
    case Opcode::kAtan2: {
      llvm::Value* r =
          LibCall("atan2", Convert(a, t, ScalarType::kF64), Convert(b, t, ScalarType::kF64));
      return Convert(r, ScalarType::kF64, t);
    }
    case Opcode::kMax:
      return Intrinsic(u ? llvm::Intrinsic::umax : llvm::Intrinsic::smax, a, b);
    case Opcode::kMin:
      return Intrinsic(u ? llvm::Intrinsic::umin : llvm::Intrinsic::smin, a, b);
    case Opcode::kAnd:
      return b_.CreateAnd(a, b);
    case Opcode::kOr:
      return b_.CreateOr(a, b);
    case Opcode::kXor:
      return b_.CreateXor(a, b);
    case Opcode::kEq:
      return b_.CreateICmpEQ(a, b);
    case Opcode::kNe:
      return b_.CreateICmpNE(a, b);
    case Opcode::kLt:
      return u ? b_.CreateICmpULT(a, b) : b_.CreateICmpSLT(a, b);
    case Opcode::kLe:
      return u ? b_.CreateICmpULE(a, b) : b_.CreateICmpSLE(a, b);
    case Opcode::kGt:
      return u ? b_.CreateICmpUGT(a, b) : b_.CreateICmpSGT(a, b);
    case Opcode::kGe:
      return u ? b_.CreateICmpUGE(a, b) : b_.CreateICmpSGE(a, b);
    default:
      break;
  }
  return a;
}

llvm::Function* ScalarOps::Philox() {
  if (llvm::Function* f = m_.getFunction("kiln_philox_bits")) return f;
  llvm::Type* i32 = b_.getInt32Ty();
  auto* fty = llvm::FunctionType::get(i32, {I64(), I64(), I64()}, false);
  auto* f = llvm::Function::Create(fty, llvm::Function::InternalLinkage, "kiln_philox_bits", m_);
  f->addFnAttr(llvm::Attribute::AlwaysInline);
  f->addFnAttr(llvm::Attribute::NoUnwind);
  llvm::IRBuilder<> b(llvm::BasicBlock::Create(ctx_, "entry", f));
  llvm::Value* seed = f->getArg(0);
  llvm::Value* stream = f->getArg(1);
  llvm::Value* index = f->getArg(2);
  llvm::Value* block = b.CreateLShr(index, 2);
  auto lo = [&](llvm::Value* v) { return b.CreateTrunc(v, i32); };
  auto hi = [&](llvm::Value* v) { return b.CreateTrunc(b.CreateLShr(v, 32), i32); };
  llvm::Value* c[4] = {lo(block), hi(block), lo(stream), hi(stream)};
  llvm::Value* k0 = lo(seed);
  llvm::Value* k1 = hi(seed);
  for (int r = 0; r < 10; ++r) {
    if (r > 0) {
      k0 = b.CreateAdd(k0, b.getInt32(0x9E3779B9));
      k1 = b.CreateAdd(k1, b.getInt32(0xBB67AE85));
    }
    llvm::Value* p0 = b.CreateMul(b.CreateZExt(c[0], I64()), b.getInt64(0xD2511F53));
    llvm::Value* p1 = b.CreateMul(b.CreateZExt(c[2], I64()), b.getInt64(0xCD9E8D57));
    llvm::Value* n0 = b.CreateXor(b.CreateXor(hi(p1), c[1]), k0);
    llvm::Value* n1 = lo(p1);
    llvm::Value* n2 = b.CreateXor(b.CreateXor(hi(p0), c[3]), k1);
    llvm::Value* n3 = lo(p0);
    c[0] = n0;
    c[1] = n1;
    c[2] = n2;
    c[3] = n3;
  }
  llvm::Value* lane = b.CreateTrunc(b.CreateAnd(index, 3), i32);
  llvm::Value* v = b.CreateSelect(
      b.CreateICmpEQ(lane, b.getInt32(0)), c[0],
      b.CreateSelect(b.CreateICmpEQ(lane, b.getInt32(1)), c[1],
                     b.CreateSelect(b.CreateICmpEQ(lane, b.getInt32(2)), c[2], c[3])));
  b.CreateRet(v);
  return f;
}

}  // namespace kiln::codegen
