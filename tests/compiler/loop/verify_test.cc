// The loop IR's typing check (loop::VerifyTypes): well-typed kernels pass, and each rule's
// violation is an INTERNAL error naming the kernel, its nodes and the instruction.

#include "compiler/loop/verify.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>
#include <utility>

namespace kiln::loop {
namespace {

using ::testing::HasSubstr;

// A kernel over 16 points built one instruction at a time; operands are SSA ids.
class KernelBuilder {
 public:
  KernelBuilder() {
    kernel_.parallel.push_back(IndexExpr::Const(16));
    kernel_.nodes = {"%3", "%4"};
  }
  int32_t Add(Opcode op, ScalarType type, int32_t a = -1, int32_t b = -1, int32_t c = -1) {
    Inst in;
    in.op = op;
    in.type = type;
    in.a = a;
    in.b = b;
    in.c = c;
    if (op == Opcode::kLoad || op == Opcode::kStore) {
      in.buffer = 0;
      in.index = IndexExpr::Var(0);
    }
    kernel_.insts.push_back(std::move(in));
    return static_cast<int32_t>(kernel_.insts.size() - 1);
  }
  Inst& Last() { return kernel_.insts.back(); }
  Program Build() {
    kernel_.stages.push_back({false, 0, static_cast<int32_t>(kernel_.insts.size())});
    Program p;
    p.buffers.emplace_back();
    p.kernels.push_back(kernel_);
    return p;
  }

 private:
  Kernel kernel_;
};

TEST(VerifyTypesTest, AWellTypedKernelPasses) {
  KernelBuilder k;
  const int32_t x = k.Add(Opcode::kLoad, ScalarType::kF32);
  const int32_t zero = k.Add(Opcode::kConst, ScalarType::kF32);
  const int32_t negative = k.Add(Opcode::kLt, ScalarType::kBool, x, zero);
  const int32_t e = k.Add(Opcode::kExp, ScalarType::kF32, x);
  const int32_t nan = k.Add(Opcode::kIsNan, ScalarType::kBool, e);
  const int32_t keep = k.Add(Opcode::kOr, ScalarType::kBool, negative, nan);
  const int32_t y = k.Add(Opcode::kSelect, ScalarType::kF32, keep, zero, e);
  const int32_t i = k.Add(Opcode::kCast, ScalarType::kI64, y);
  k.Add(Opcode::kStore, ScalarType::kF32, y);
  k.Last().mask = negative;
  k.Add(Opcode::kLoad, ScalarType::kF32);
  k.Last().dyn.push_back({i, IndexExpr::Const(1)});
  EXPECT_TRUE(VerifyTypes(k.Build()).ok());
}

TEST(VerifyTypesTest, ABinaryOpOnABoolAndAFloatIsNamed) {
  // bernoulli's comparison fused into the division that read it as a float tensor.
  KernelBuilder k;
  const int32_t u = k.Add(Opcode::kLoad, ScalarType::kF32);
  const int32_t p = k.Add(Opcode::kConst, ScalarType::kF32);
  const int32_t keep = k.Add(Opcode::kLt, ScalarType::kBool, u, p);
  k.Add(Opcode::kDiv, ScalarType::kF32, keep, p);
  const absl::Status s = VerifyTypes(k.Build());
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(s.message(), HasSubstr("kernel 0 (nodes %3,%4): %3 = f32 div is ill typed: its "
                                     "operands differ: %2 is bool, %1 is f32"));
}

TEST(VerifyTypesTest, EachRuleIsChecked) {
  struct Case {
    const char* words;
    std::function<void(KernelBuilder&)> build;
  };
  const Case cases[] = {
      {"yields f32, not bool",
       [](KernelBuilder& k) {
         const int32_t x = k.Add(Opcode::kLoad, ScalarType::kF32);
         k.Add(Opcode::kEq, ScalarType::kF32, x, x);
       }},
      {"yields i64, not f32",
       [](KernelBuilder& k) {
         const int32_t x = k.Add(Opcode::kLoad, ScalarType::kF32);
         k.Add(Opcode::kNeg, ScalarType::kI64, x);
       }},
      {"its condition %0 is f32, not bool",
       [](KernelBuilder& k) {
         const int32_t x = k.Add(Opcode::kLoad, ScalarType::kF32);
         k.Add(Opcode::kSelect, ScalarType::kF32, x, x, x);
       }},
      {"chooses between i64 and f32 for a f32",
       [](KernelBuilder& k) {
         const int32_t x = k.Add(Opcode::kLoad, ScalarType::kF32);
         const int32_t c = k.Add(Opcode::kIsNan, ScalarType::kBool, x);
         const int32_t i = k.Add(Opcode::kConst, ScalarType::kI64);
         k.Add(Opcode::kSelect, ScalarType::kF32, c, i, x);
       }},
      {"stores %0, a bool, as f32",
       [](KernelBuilder& k) {
         k.Add(Opcode::kConst, ScalarType::kBool);
         k.Add(Opcode::kStore, ScalarType::kF32, 0);
       }},
      {"its mask %0 is f32, not bool",
       [](KernelBuilder& k) {
         k.Add(Opcode::kLoad, ScalarType::kF32);
         k.Add(Opcode::kLoad, ScalarType::kF32);
         k.Last().mask = 0;
       }},
      {"its index term %0 is f32, not i64",
       [](KernelBuilder& k) {
         k.Add(Opcode::kLoad, ScalarType::kF32);
         k.Add(Opcode::kLoad, ScalarType::kF32);
         k.Last().dyn.push_back({0, IndexExpr::Const(4)});
       }},
      {"uses %1, which is not before it",
       [](KernelBuilder& k) { k.Add(Opcode::kExp, ScalarType::kF32, 1); }},
  };
  for (const Case& c : cases) {
    KernelBuilder k;
    c.build(k);
    const absl::Status s = VerifyTypes(k.Build());
    EXPECT_EQ(s.code(), absl::StatusCode::kInternal) << c.words;
    EXPECT_THAT(s.message(), HasSubstr(c.words));
  }
}

}  // namespace
}  // namespace kiln::loop
