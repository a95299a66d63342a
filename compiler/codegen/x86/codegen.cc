#include "compiler/codegen/x86/codegen.h"

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <memory>
#include <mutex>
#include <sstream>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "compiler/plan/plan.h"
#include "lld/Common/CommonLinkerContext.h"
#include "lld/Common/Driver.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/Analysis/TargetLibraryInfo.h"
#include "llvm/IR/IRBuilder.h"
#include "llvm/IR/Intrinsics.h"
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
#include "proto/base/sync.h"

namespace kiln::codegen::x86 {
namespace {

using loop::IndexExpr;
using loop::Inst;
using loop::Opcode;
using loop::ReduceKind;
using loop::ScalarType;

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

class KernelEmitter {
 public:
  KernelEmitter(llvm::Module& m, const loop::Program& p, const loop::Kernel& k, std::string name)
      : m_(m), ctx_(m.getContext()), b_(ctx_), p_(p), k_(k), name_(std::move(name)) {}

  absl::Status Emit();

 private:
  llvm::Type* I64() { return b_.getInt64Ty(); }
  llvm::Type* LlvmType(ScalarType t) {
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
  llvm::Type* StorageType(ScalarType t) {
    return t == ScalarType::kBool ? b_.getInt8Ty() : LlvmType(t);
  }
  static bool Unsigned(ScalarType t) { return t == ScalarType::kU8 || t == ScalarType::kBool; }

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
            v = b_.CreateAdd(b_.CreateSDiv(x, d), b_.CreateZExt(up, I64()));
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
    return b_.CreateInBoundsGEP(StorageType(st), buffers_[static_cast<size_t>(in.buffer)], idx);
  }

  llvm::Value* Zero(ScalarType t) { return llvm::Constant::getNullValue(LlvmType(t)); }
  llvm::Value* ConstOf(ScalarType t, double f, int64_t i) {
    if (loop::IsFloat(t)) return llvm::ConstantFP::get(LlvmType(t), f);
    return llvm::ConstantInt::get(LlvmType(t), static_cast<uint64_t>(i), true);
  }

  llvm::Value* Load(const Inst& in) {
    const ScalarType st = loop::ScalarTypeOf(p_.buffers[static_cast<size_t>(in.buffer)].dtype);
    llvm::Value* mask = in.mask >= 0 ? vals_[static_cast<size_t>(in.mask)] : nullptr;
    llvm::Value* addr = Address(in, mask);
    llvm::LoadInst* raw = b_.CreateLoad(StorageType(st), addr);
    raw->setAlignment(llvm::Align(loop::ByteSize(st)));
    llvm::Value* v = raw;
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
    if (mask != nullptr) v = b_.CreateSelect(mask, v, Zero(loop::ComputeType(st)));
    return v;
  }

  llvm::Value* ToStorage(llvm::Value* v, ScalarType from, ScalarType st) {
    switch (st) {
      case ScalarType::kBool:
        return b_.CreateZExt(Convert(v, from, ScalarType::kBool), b_.getInt8Ty());
      case ScalarType::kF16:
        return b_.CreateFPTrunc(Convert(v, from, ScalarType::kF32), b_.getHalfTy());
      case ScalarType::kBF16: {
        // Round to nearest even; NaN stays a quiet NaN.
        llvm::Value* f = Convert(v, from, ScalarType::kF32);
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

  llvm::Value* Convert(llvm::Value* v, ScalarType from, ScalarType to) {
    from = loop::ComputeType(from);
    if (from == to) return v;
    llvm::Type* tt = LlvmType(to);
    const bool ff = loop::IsFloat(from), tf = loop::IsFloat(to);
    if (ff && tf) {
      return loop::ByteSize(to) > loop::ByteSize(from) ? b_.CreateFPExt(v, tt)
                                                       : b_.CreateFPTrunc(v, tt);
    }
    if (ff) {
      if (to == ScalarType::kBool)
        return b_.CreateFCmpUNE(v, llvm::ConstantFP::get(v->getType(), 0));
      return b_.CreateTrunc(b_.CreateFPToSI(v, I64()), tt);
    }
    if (tf) return Unsigned(from) ? b_.CreateUIToFP(v, tt) : b_.CreateSIToFP(v, tt);
    if (to == ScalarType::kBool) return b_.CreateICmpNE(v, llvm::ConstantInt::get(v->getType(), 0));
    const int fb = v->getType()->getIntegerBitWidth(), tb = tt->getIntegerBitWidth();
    if (tb < fb) return b_.CreateTrunc(v, tt);
    if (tb > fb) return Unsigned(from) ? b_.CreateZExt(v, tt) : b_.CreateSExt(v, tt);
    return v;
  }

  llvm::Value* Intrinsic(llvm::Intrinsic::ID id, llvm::Value* a, llvm::Value* b = nullptr) {
    if (b == nullptr) return b_.CreateUnaryIntrinsic(id, a);
    return b_.CreateBinaryIntrinsic(id, a, b);
  }
  llvm::Value* LibCall(const std::string& name, llvm::Value* a, llvm::Value* b = nullptr) {
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

  // PyTorch's maximum/minimum: NaN if either operand is NaN. (llvm.maximum does not select
  // on x86 vectors in LLVM 16.)
  llvm::Value* NanMax(llvm::Value* a, llvm::Value* b, bool max) {
    llvm::Value* pick = max ? b_.CreateFCmpOGT(a, b) : b_.CreateFCmpOLT(a, b);
    llvm::Value* r = b_.CreateSelect(pick, a, b);
    r = b_.CreateSelect(b_.CreateFCmpUNO(b, b), b, r);
    return b_.CreateSelect(b_.CreateFCmpUNO(a, a), a, r);
  }

  llvm::Value* Unary(const Inst& in, llvm::Value* a) {
    const ScalarType t = in.type;
    const ScalarType at = k_.insts[static_cast<size_t>(in.a)].type;
    if (!loop::IsFloat(at)) {
      switch (in.op) {
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
          llvm::Value* r = FloatUnary(in.op, d, ScalarType::kF64);
          return Convert(r, ScalarType::kF64, t);
        }
      }
    }
    if (in.op == Opcode::kIsNan) return b_.CreateFCmpUNO(a, a);
    if (in.op == Opcode::kIsInf) {
      return b_.CreateFCmpOEQ(Intrinsic(llvm::Intrinsic::fabs, a),
                              llvm::ConstantFP::getInfinity(a->getType()));
    }
    if (in.op == Opcode::kNot) return b_.CreateNot(a);
    return FloatUnary(in.op, a, t);
  }

  llvm::Value* FloatUnary(Opcode op, llvm::Value* a, ScalarType t) {
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
        return b_.CreateFDiv(
            one(), b_.CreateFAdd(one(), Intrinsic(llvm::Intrinsic::exp, b_.CreateFNeg(a))));
      case Opcode::kSign: {
        llvm::Value* pos = b_.CreateFCmpOGT(a, llvm::ConstantFP::get(ty, 0.0));
        llvm::Value* neg = b_.CreateFCmpOLT(a, llvm::ConstantFP::get(ty, 0.0));
        return b_.CreateSelect(pos, one(),
                               b_.CreateSelect(neg, llvm::ConstantFP::get(ty, -1.0), a));
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

  llvm::Value* Binary(const Inst& in, llvm::Value* a, llvm::Value* b) {
    const ScalarType t = k_.insts[static_cast<size_t>(in.a)].type;
    if (loop::IsFloat(t)) {
      switch (in.op) {
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
    switch (in.op) {
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
        if (u)
          return in.op == Opcode::kFloorDiv ? b_.CreateUDiv(a, safe(b)) : b_.CreateURem(a, safe(b));
        llvm::Value* d = safe(b);
        llvm::Value* q = b_.CreateSDiv(a, d);
        llvm::Value* r = b_.CreateSRem(a, d);
        llvm::Value* fix =
            b_.CreateAnd(b_.CreateICmpNE(r, Zero(t)),
                         b_.CreateXor(b_.CreateICmpSLT(r, Zero(t)), b_.CreateICmpSLT(d, Zero(t))));
        if (in.op == Opcode::kFloorDiv)
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

  llvm::Function* Philox() {
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

  // Emits `for (iv = lo; iv < hi; ++iv) body(iv)` and leaves the builder after the loop.
  template <typename Body>
  absl::Status Loop(llvm::Value* lo, llvm::Value* hi, Body body, bool innermost = false) {
    llvm::Function* f = b_.GetInsertBlock()->getParent();
    llvm::BasicBlock* pre = b_.GetInsertBlock();
    llvm::BasicBlock* header = llvm::BasicBlock::Create(ctx_, "loop", f);
    llvm::BasicBlock* bodyb = llvm::BasicBlock::Create(ctx_, "body", f);
    llvm::BasicBlock* exit = llvm::BasicBlock::Create(ctx_, "exit", f);
    b_.CreateBr(header);
    b_.SetInsertPoint(header);
    llvm::PHINode* iv = b_.CreatePHI(I64(), 2);
    iv->addIncoming(lo, pre);
    b_.CreateCondBr(b_.CreateICmpSLT(iv, hi), bodyb, exit);
    b_.SetInsertPoint(bodyb);
    if (absl::Status s = body(iv); !s.ok()) return s;
    llvm::Value* next = b_.CreateAdd(iv, b_.getInt64(1), "", true, true);
    llvm::BranchInst* back = b_.CreateBr(header);
    iv->addIncoming(next, b_.GetInsertBlock());
    if (innermost) {
      llvm::MDNode* enable =
          llvm::MDNode::get(ctx_, {llvm::MDString::get(ctx_, "llvm.loop.mustprogress")});
      llvm::MDNode* self = llvm::MDNode::getDistinct(ctx_, {nullptr, enable});
      self->replaceOperandWith(0, self);
      back->setMetadata(llvm::LLVMContext::MD_loop, self);
    }
    b_.SetInsertPoint(exit);
    return absl::OkStatus();
  }

  // Emits the instructions [begin, end) of a stage at the current point.
  absl::Status Body(int32_t begin, int32_t end, bool loops);
  absl::Status Stage(const loop::Stage& s);
  absl::Status ReductionLoops(size_t d, const loop::Stage& s);
  absl::Status ParallelInner(size_t d, size_t np, const loop::LaunchSplit& split,
                             llvm::Value* outer);

  llvm::Module& m_;
  llvm::LLVMContext& ctx_;
  llvm::IRBuilder<> b_;
  const loop::Program& p_;
  const loop::Kernel& k_;
  std::string name_;
  std::vector<llvm::Value*> buffers_;  // by buffer index (only those the kernel touches)
  std::vector<llvm::Value*> syms_;     // by symbol id
  llvm::Value* seed_ = nullptr;
  llvm::Value* offset_ = nullptr;
  std::vector<llvm::Value*> vars_;
  std::vector<llvm::Value*> vals_;
  std::vector<llvm::AllocaInst*> acc_, acc_index_;
  llvm::BasicBlock* entry_ = nullptr;
};

absl::Status KernelEmitter::Body(int32_t begin, int32_t end, bool loops) {
  for (int32_t i = begin; i < end; ++i) {
    const Inst& in = k_.insts[static_cast<size_t>(i)];
    auto v = [&](int32_t id) { return vals_[static_cast<size_t>(id)]; };
    llvm::Value* out = nullptr;
    switch (in.op) {
      case Opcode::kConst:
        out = ConstOf(in.type, in.fimm, in.iimm);
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
        llvm::Value* value = ToStorage(v(in.a), k_.insts[static_cast<size_t>(in.a)].type, st);
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
        llvm::Value* bits = b_.CreateCall(Philox(), {seed_, stream, v(in.a)});
        out = b_.CreateZExt(b_.CreateLShr(bits, 8), I64());
        break;
      }
      case Opcode::kReduce: {
        if (!loops) return absl::InternalError("reduce outside a reduction loop");
        llvm::AllocaInst* acc = acc_[static_cast<size_t>(i)];
        llvm::Value* cur = b_.CreateLoad(acc->getAllocatedType(), acc);
        llvm::Value* x = v(in.a);
        const ScalarType t = k_.insts[static_cast<size_t>(in.a)].type;
        const bool fl = loop::IsFloat(t);
        llvm::Value* next = nullptr;
        llvm::FastMathFlags reassoc;
        reassoc.setAllowReassoc();
        switch (in.reduce) {
          case ReduceKind::kSum:
            if (fl) {
              next = b_.CreateFAdd(cur, x);
              llvm::cast<llvm::Instruction>(next)->setFastMathFlags(reassoc);
            } else {
              next = b_.CreateAdd(cur, x);
            }
            break;
          case ReduceKind::kProd:
            if (fl) {
              next = b_.CreateFMul(cur, x);
              llvm::cast<llvm::Instruction>(next)->setFastMathFlags(reassoc);
            } else {
              next = b_.CreateMul(cur, x);
            }
            break;
          case ReduceKind::kMax:
          case ReduceKind::kMin: {
            const bool mx = in.reduce == ReduceKind::kMax;
            if (fl) {
              next = NanMax(cur, x, mx);
            } else {
              const bool u = Unsigned(t);
              next = Intrinsic(mx ? (u ? llvm::Intrinsic::umax : llvm::Intrinsic::smax)
                                  : (u ? llvm::Intrinsic::umin : llvm::Intrinsic::smin),
                               cur, x);
            }
            break;
          }
          case ReduceKind::kAny:
            next = b_.CreateOr(cur, x);
            break;
          case ReduceKind::kAll:
            next = b_.CreateAnd(cur, x);
            break;
          case ReduceKind::kArgMax:
          case ReduceKind::kArgMin: {
            const bool mx = in.reduce == ReduceKind::kArgMax;
            llvm::Value* better;
            if (fl) {
              better = mx ? b_.CreateFCmpOGT(x, cur) : b_.CreateFCmpOLT(x, cur);
              llvm::Value* nan_new =
                  b_.CreateAnd(b_.CreateFCmpUNO(x, x), b_.CreateFCmpORD(cur, cur));
              better = b_.CreateOr(better, nan_new);
            } else {
              const bool u = Unsigned(t);
              better = mx ? (u ? b_.CreateICmpUGT(x, cur) : b_.CreateICmpSGT(x, cur))
                          : (u ? b_.CreateICmpULT(x, cur) : b_.CreateICmpSLT(x, cur));
            }
            // The first position wins ties: the first element always replaces the initial value.
            llvm::AllocaInst* ai = acc_index_[static_cast<size_t>(i)];
            llvm::Value* cur_i = b_.CreateLoad(I64(), ai);
            llvm::Value* first = b_.CreateICmpSLT(cur_i, b_.getInt64(0));
            better = b_.CreateOr(better, first);
            next = b_.CreateSelect(better, x, cur);
            b_.CreateStore(b_.CreateSelect(better, v(in.b), cur_i), ai);
            break;
          }
        }
        b_.CreateStore(next, acc);
        out = nullptr;
        break;
      }
      case Opcode::kCast:
        out = Convert(v(in.a), k_.insts[static_cast<size_t>(in.a)].type, in.type);
        break;
      case Opcode::kSelect:
        out = b_.CreateSelect(v(in.a), v(in.b), v(in.c));
        break;
      default:
        if (loop::IsUnary(in.op)) {
          out = Unary(in, v(in.a));
        } else if (loop::IsBinary(in.op)) {
          out = Binary(in, v(in.a), v(in.b));
        } else {
          return absl::InternalError(absl::StrCat("codegen: unhandled ", loop::OpcodeName(in.op)));
        }
    }
    vals_[static_cast<size_t>(i)] = out;
  }
  return absl::OkStatus();
}

absl::Status KernelEmitter::ReductionLoops(size_t d, const loop::Stage& s) {
  const size_t np = k_.parallel.size();
  if (d == k_.reduction.size()) return Body(s.begin, s.end, true);
  return Loop(
      b_.getInt64(0), Index(k_.reduction[d]),
      [&](llvm::Value* iv) -> absl::Status {
        vars_[np + d] = iv;
        return ReductionLoops(d + 1, s);
      },
      d + 1 == k_.reduction.size());
}

absl::Status KernelEmitter::Stage(const loop::Stage& s) {
  if (!s.loops) return Body(s.begin, s.end, false);
  // Accumulators start at the reduction's identity.
  for (int32_t i = s.begin; i < s.end; ++i) {
    const Inst& in = k_.insts[static_cast<size_t>(i)];
    if (in.op != Opcode::kReduce) continue;
    const ScalarType t = k_.insts[static_cast<size_t>(in.a)].type;
    llvm::Type* ty = LlvmType(t);
    llvm::IRBuilder<> eb(entry_, entry_->begin());
    llvm::AllocaInst* acc = eb.CreateAlloca(ty);
    acc_[static_cast<size_t>(i)] = acc;
    llvm::Value* init = nullptr;
    const bool fl = loop::IsFloat(t);
    const bool u = Unsigned(t);
    const int bits = fl ? 0 : ty->getIntegerBitWidth();
    switch (in.reduce) {
      case ReduceKind::kSum:
        init = Zero(t);
        break;
      case ReduceKind::kProd:
        init = ConstOf(t, 1, 1);
        break;
      case ReduceKind::kMax:
      case ReduceKind::kArgMax:
        init = fl ? llvm::ConstantFP::getInfinity(ty, true)
                  : llvm::ConstantInt::get(ty, u ? llvm::APInt::getMinValue(bits)
                                                 : llvm::APInt::getSignedMinValue(bits));
        break;
      case ReduceKind::kMin:
      case ReduceKind::kArgMin:
        init = fl ? llvm::ConstantFP::getInfinity(ty, false)
                  : llvm::ConstantInt::get(ty, u ? llvm::APInt::getMaxValue(bits)
                                                 : llvm::APInt::getSignedMaxValue(bits));
        break;
      case ReduceKind::kAny:
        init = b_.getFalse();
        break;
      case ReduceKind::kAll:
        init = b_.getTrue();
        break;
    }
    b_.CreateStore(init, acc);
    if (in.reduce == ReduceKind::kArgMax || in.reduce == ReduceKind::kArgMin) {
      llvm::AllocaInst* ai = eb.CreateAlloca(I64());
      acc_index_[static_cast<size_t>(i)] = ai;
      b_.CreateStore(b_.getInt64(-1), ai);
    }
  }
  if (absl::Status st = ReductionLoops(0, s); !st.ok()) return st;
  for (int32_t i = s.begin; i < s.end; ++i) {
    const Inst& in = k_.insts[static_cast<size_t>(i)];
    if (in.op != Opcode::kReduce) continue;
    if ((in.reduce == ReduceKind::kArgMax || in.reduce == ReduceKind::kArgMin) && in.iimm == 1) {
      llvm::Value* idx = b_.CreateLoad(I64(), acc_index_[static_cast<size_t>(i)]);
      vals_[static_cast<size_t>(i)] =
          b_.CreateSelect(b_.CreateICmpSLT(idx, b_.getInt64(0)), b_.getInt64(0), idx);
    } else {
      llvm::AllocaInst* acc = acc_[static_cast<size_t>(i)];
      vals_[static_cast<size_t>(i)] = b_.CreateLoad(acc->getAllocatedType(), acc);
    }
  }
  return absl::OkStatus();
}

absl::Status KernelEmitter::ParallelInner(size_t d, size_t np, const loop::LaunchSplit& split,
                                          llvm::Value* outer) {
  if (d == np) {
    for (const loop::Stage& s : k_.stages) {
      if (absl::Status st = Stage(s); !st.ok()) return st;
    }
    return absl::OkStatus();
  }
  llvm::Value* lo = b_.getInt64(0);
  llvm::Value* hi = Index(k_.parallel[d]);
  if (split.chunk > 0) {
    lo = b_.CreateMul(outer, b_.getInt64(static_cast<uint64_t>(split.chunk)));
    llvm::Value* lim = b_.CreateAdd(lo, b_.getInt64(static_cast<uint64_t>(split.chunk)));
    hi = b_.CreateSelect(b_.CreateICmpSLT(lim, hi), lim, hi);
  }
  return Loop(
      lo, hi,
      [&](llvm::Value* iv) -> absl::Status {
        vars_[d] = iv;
        return ParallelInner(d + 1, np, split, outer);
      },
      d + 1 == np);
}

absl::Status KernelEmitter::Emit() {
  // The exported entry reads the parameter array and calls the body, whose buffer pointers
  // are `noalias`: kernels only write buffers nothing else in the launch reads or writes.
  const plan::KernelParams params = plan::ParamsOf(k_);
  llvm::Type* ptr = b_.getPtrTy();
  std::vector<llvm::Type*> body_params;
  for (size_t i = 0; i < params.buffers.size(); ++i) body_params.push_back(ptr);
  for (size_t i = 0; i < params.symbols.size(); ++i) body_params.push_back(I64());
  if (params.rng) {
    body_params.push_back(I64());
    body_params.push_back(I64());
  }
  body_params.push_back(I64());
  body_params.push_back(I64());
  auto* body_ty = llvm::FunctionType::get(b_.getVoidTy(), body_params, false);
  auto* body =
      llvm::Function::Create(body_ty, llvm::Function::InternalLinkage, name_ + "_body", m_);
  body->addFnAttr(llvm::Attribute::AlwaysInline);
  body->addFnAttr(llvm::Attribute::NoUnwind);
  for (size_t i = 0; i < params.buffers.size(); ++i) {
    body->addParamAttr(static_cast<unsigned>(i), llvm::Attribute::NoAlias);
  }

  auto* entry_ty = llvm::FunctionType::get(b_.getVoidTy(), {ptr, I64(), I64()}, false);
  auto* entry = llvm::Function::Create(entry_ty, llvm::Function::ExternalLinkage, name_, m_);
  entry->addFnAttr(llvm::Attribute::NoUnwind);
  {
    llvm::IRBuilder<> eb(llvm::BasicBlock::Create(ctx_, "entry", entry));
    std::vector<llvm::Value*> args;
    unsigned slot = 0;
    auto param_ptr = [&]() {
      llvm::Value* p =
          eb.CreateLoad(ptr, eb.CreateConstInBoundsGEP1_64(ptr, entry->getArg(0), slot++));
      return p;
    };
    for (size_t i = 0; i < params.buffers.size(); ++i) args.push_back(param_ptr());
    for (size_t i = 0; i < params.symbols.size(); ++i)
      args.push_back(eb.CreateLoad(I64(), param_ptr()));
    if (params.rng) {
      args.push_back(eb.CreateLoad(I64(), param_ptr()));
      args.push_back(eb.CreateLoad(I64(), param_ptr()));
    }
    args.push_back(entry->getArg(1));
    args.push_back(entry->getArg(2));
    eb.CreateCall(body, args);
    eb.CreateRetVoid();
  }

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
  llvm::Value* begin = body->getArg(arg++);
  llvm::Value* end = body->getArg(arg++);
  vars_.assign(static_cast<size_t>(k_.num_vars()), nullptr);
  vals_.assign(k_.insts.size(), nullptr);
  acc_.assign(k_.insts.size(), nullptr);
  acc_index_.assign(k_.insts.size(), nullptr);

  const loop::LaunchSplit split = loop::SplitForLaunch(k_);
  const size_t np = k_.parallel.size();
  absl::Status status = Loop(begin, end, [&](llvm::Value* o) -> absl::Status {
    if (split.chunk > 0) return ParallelInner(0, np, split, o);
    // Unflatten the outer index into p0..p{outer_dims-1}, row-major.
    llvm::Value* rest = o;
    for (int32_t d = split.outer_dims; d-- > 0;) {
      if (d == 0) {
        vars_[0] = rest;
        break;
      }
      llvm::Value* ext = Index(k_.parallel[static_cast<size_t>(d)]);
      vars_[static_cast<size_t>(d)] = b_.CreateURem(rest, ext);
      rest = b_.CreateUDiv(rest, ext);
    }
    return ParallelInner(static_cast<size_t>(split.outer_dims), np, split, o);
  });
  if (!status.ok()) return status;
  b_.CreateRetVoid();
  return absl::OkStatus();
}

// Serializes the in-process linker: LLD keeps global state.
kiln::Mutex& LinkerMutex() {
  static auto* mu = new kiln::Mutex();
  return *mu;
}

// Links the kernels' objects, in order, into one shared object.
absl::StatusOr<std::string> LinkSharedObject(const std::vector<std::string>& objects) {
  const char* tmp = getenv("TMPDIR");
  std::string dir = absl::StrCat(tmp && *tmp ? tmp : "/tmp", "/kiln-link-XXXXXX");
  if (mkdtemp(dir.data()) == nullptr)
    return absl::InternalError("codegen: cannot create a temporary directory");
  const std::string so_path = dir + "/kernels.so";
  std::vector<std::string> obj_paths;
  auto cleanup = [&] {
    for (const std::string& path : obj_paths) unlink(path.c_str());
    unlink(so_path.c_str());
    rmdir(dir.c_str());
  };
  for (size_t i = 0; i < objects.size(); ++i) {
    obj_paths.push_back(absl::StrCat(dir, "/k", i, ".o"));
    std::ofstream f(obj_paths.back(), std::ios::binary);
    f.write(objects[i].data(), static_cast<std::streamsize>(objects[i].size()));
    if (!f) {
      cleanup();
      return absl::InternalError("codegen: cannot write an object file");
    }
  }
  std::string errors;
  bool ok;
  {
    kiln::MutexLock lock(&LinkerMutex());
    std::vector<const char*> args = {
        "ld.lld",           "-shared", "--build-id=none",    "-z", "noexecstack",  "-z", "now",
        "--hash-style=gnu", "-soname", "libkiln_kernels.so", "-o", so_path.c_str()};
    for (const std::string& path : obj_paths) args.push_back(path.c_str());
    llvm::raw_string_ostream out(errors), err(errors);
    ok = lld::elf::link(args, out, err, /*exitEarly=*/false, /*disableOutput=*/false);
    lld::CommonLinkerContext::destroy();
  }
  if (!ok) {
    cleanup();
    return absl::InternalError(absl::StrCat("codegen: linking failed: ", errors));
  }
  std::ifstream in(so_path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  cleanup();
  return ss.str();
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
  KernelEmitter e(*module, program, program.kernels[index], name);
  if (absl::Status s = e.Emit(); !s.ok()) return s;
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
