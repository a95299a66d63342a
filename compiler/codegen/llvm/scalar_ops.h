#pragma once

// Scalar values of the loop IR as LLVM IR, with PyTorch's semantics: the SSA and storage type
// of each ScalarType, conversions between them (half types compute in f32; bf16 stores round
// to nearest even and keep NaN a quiet NaN, on NVPTX with the hardware's conversion), and
// every unary and binary opcode (maximum and minimum propagate NaN, floor division and
// remainder take Python's signs, integer division by zero never traps, float functions of
// integers compute in double). Functions LLVM has no intrinsic for become calls to their libm
// names ("expm1", "expm1f"), which the target resolves; floating-point contraction is never
// asked for. Also the Philox bits of random ops: the same streams as the reference
// interpreter.
//
// Everything is emitted at the builder's insertion point. Target-neutral but for that conversion;
// one ScalarOps per module and builder, used from one thread.

#include <cstdint>
#include <string>

#include "compiler/loop/ir.h"
#include "llvm/IR/IRBuilder.h"
#include "llvm/IR/Module.h"

namespace kiln::codegen {

class ScalarOps {
 public:
  ScalarOps(llvm::Module& module, llvm::IRBuilder<>& builder);

  llvm::Type* I64() { return b_.getInt64Ty(); }
  // The type of SSA values of type `t`.
  llvm::Type* LlvmType(loop::ScalarType t);
  // The type of `t` in memory: bool is a byte.
  llvm::Type* StorageType(loop::ScalarType t);
  static bool Unsigned(loop::ScalarType t) {
    return t == loop::ScalarType::kU8 || t == loop::ScalarType::kBool;
  }

  llvm::Value* Zero(loop::ScalarType t) { return llvm::Constant::getNullValue(LlvmType(t)); }
  // `f` for float types, `i` for the others.
  llvm::Value* ConstOf(loop::ScalarType t, double f, int64_t i);

  // A value loaded as `st` from memory, as the SSA value of ComputeType(st).
  llvm::Value* FromStorage(llvm::Value* v, loop::ScalarType st);
  // An SSA value of type `from`, converted to store as `st`.
  llvm::Value* ToStorage(llvm::Value* v, loop::ScalarType from, loop::ScalarType st);
  // An SSA value of type `from` (or its compute type) as type `to`.
  llvm::Value* Convert(llvm::Value* v, loop::ScalarType from, loop::ScalarType to);

  llvm::Value* Intrinsic(llvm::Intrinsic::ID id, llvm::Value* a, llvm::Value* b = nullptr);
  // PyTorch's maximum (`max`) or minimum of floats: NaN if either operand is NaN.
  llvm::Value* NanMax(llvm::Value* a, llvm::Value* b, bool max);
  // Unary opcode `op` of `a`, whose type is `at`, giving type `t`.
  llvm::Value* Unary(loop::Opcode op, loop::ScalarType t, loop::ScalarType at, llvm::Value* a);
  // Binary opcode `op` of operands of type `t`.
  llvm::Value* Binary(loop::Opcode op, loop::ScalarType t, llvm::Value* a, llvm::Value* b);

  // i32 kiln_philox_bits(i64 seed, i64 stream, i64 index): 32 random bits of element
  // `index` of a stream, defined in the module on first use.
  llvm::Function* Philox();

 private:
  llvm::Value* LibCall(const std::string& name, llvm::Value* a, llvm::Value* b = nullptr);
  llvm::Value* FloatUnary(loop::Opcode op, llvm::Value* a, loop::ScalarType t);

  llvm::Module& m_;
  llvm::LLVMContext& ctx_;
  llvm::IRBuilder<>& b_;
};

}  // namespace kiln::codegen
