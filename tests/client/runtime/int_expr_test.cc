#include "client/runtime/int_expr.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace kiln::runtime {
namespace {

const std::vector<std::string> kSymbols = {"s0", "s1", "u2"};

int64_t Eval(const std::string& text, std::vector<int64_t> values = {7, -3, 64}) {
  absl::StatusOr<IntExpr> e = IntExpr::Parse(text, kSymbols);
  EXPECT_TRUE(e.ok()) << text << ": " << e.status();
  if (!e.ok()) return -999999;
  absl::StatusOr<int64_t> v = e->Evaluate(values);
  EXPECT_TRUE(v.ok()) << text << ": " << v.status();
  return v.ok() ? *v : -999999;
}

absl::StatusCode EvalCode(const std::string& text, std::vector<int64_t> values = {7, -3, 64}) {
  absl::StatusOr<IntExpr> e = IntExpr::Parse(text, kSymbols);
  if (!e.ok()) return e.status().code();
  return e->Evaluate(values).status().code();
}

TEST(IntExprTest, Arithmetic) {
  EXPECT_EQ(Eval("42"), 42);
  EXPECT_EQ(Eval("s0"), 7);
  EXPECT_EQ(Eval("128*s0"), 896);
  EXPECT_EQ(Eval("2 + 3*s0 - s1"), 26);
  EXPECT_EQ(Eval("-s0 + 1"), -6);
  EXPECT_EQ(Eval("(s0 + 1)*(s0 - 1)"), 48);
  EXPECT_EQ(Eval("2**10"), 1024);
  EXPECT_EQ(Eval("s0**2*s1"), -147);
  EXPECT_EQ(Eval("PowByNatural(s0, 3)"), 343);
  EXPECT_EQ(Eval("-2**2"), -4);  // Python: -(2**2)
}

TEST(IntExprTest, DivisionFloorsLikePython) {
  EXPECT_EQ(Eval("s0 // 2"), 3);
  EXPECT_EQ(Eval("s1 // 2"), -2);
  EXPECT_EQ(Eval("s1 % 2"), 1);
  EXPECT_EQ(Eval("s0 % -2"), -1);
  EXPECT_EQ(Eval("FloorDiv(s1, 2)"), -2);
  EXPECT_EQ(Eval("CleanDiv(u2, 8)"), 8);
  EXPECT_EQ(Eval("CeilDiv(s0, 2)"), 4);
  EXPECT_EQ(Eval("CeilDiv(s1, 2)"), -1);
  EXPECT_EQ(Eval("Mod(s1, 5)"), 2);
  EXPECT_EQ(Eval("PythonMod(s0, 4)"), 3);
  EXPECT_EQ(Eval("CeilToInt(IntTrueDiv(s0, 2))"), 4);
  EXPECT_EQ(Eval("FloorToInt(IntTrueDiv(s1, 2))"), -2);
  EXPECT_EQ(Eval("Max(1, 32*CeilToInt(IntTrueDiv(u2, 32)))"), 64);
}

TEST(IntExprTest, Functions) {
  EXPECT_EQ(Eval("Max(s0, s1, 3)"), 7);
  EXPECT_EQ(Eval("Min(s0, s1, 3)"), -3);
  EXPECT_EQ(Eval("max(s0, 9)"), 9);
  EXPECT_EQ(Eval("min(s0)"), 7);
  EXPECT_EQ(Eval("Abs(s1)"), 3);
  EXPECT_EQ(Eval("abs(s0)"), 7);
  EXPECT_EQ(Eval("64*CeilDiv(32*s0, 64)"), 256);
}

TEST(IntExprTest, ConstantsAndText) {
  IntExpr c = IntExpr::Constant(5);
  EXPECT_TRUE(c.is_constant());
  EXPECT_EQ(*c.Evaluate({}), 5);
  absl::StatusOr<IntExpr> e = IntExpr::Parse("s0 + 1", kSymbols);
  ASSERT_TRUE(e.ok());
  EXPECT_FALSE(e->is_constant());
  EXPECT_EQ(e->text(), "s0 + 1");
}

TEST(IntExprTest, ErrorsAreNamed) {
  absl::StatusOr<IntExpr> e = IntExpr::Parse("s0 + s9", kSymbols);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(e.status().message().find("unknown symbol s9"), std::string::npos) << e.status();
  for (const char* bad : {"", "s0 +", "(s0", "s0 / 2", "1.5", "Foo(s0)", "s0 == 1", "CeilToInt(s0)",
                          "FloorDiv(s0)", "s0 s1", "99999999999999999999", "#"}) {
    EXPECT_EQ(IntExpr::Parse(bad, kSymbols).status().code(), absl::StatusCode::kInvalidArgument)
        << bad;
  }
  std::string deep(200, '(');
  deep += "1" + std::string(200, ')');
  EXPECT_EQ(IntExpr::Parse(deep, kSymbols).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(IntExprTest, OverflowAndDivisionByZeroAreOutOfRange) {
  EXPECT_EQ(EvalCode("s0 // 0"), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(EvalCode("s0 % (s0 - 7)"), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(EvalCode("CeilDiv(s0, 0)"), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(EvalCode("9223372036854775807 + s0"), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(EvalCode("u2**20"), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(EvalCode("s0**s1"), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(EvalCode("4611686018427387904*s0"), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(EvalCode("-9223372036854775807 - 1 - s0"), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(Eval("0**0"), 1);
  EXPECT_EQ(Eval("(-1)**3"), -1);
  EXPECT_EQ(Eval("(-1)**4"), 1);
}

// The evaluator agrees with a direct computation on many symbol values.
TEST(IntExprTest, AgreesWithDirectComputation) {
  absl::StatusOr<IntExpr> e =
      IntExpr::Parse("Max(1, CeilDiv(s0, 8))*8 + Mod(s1, 3) - s0 // 4 + Min(s0, s1)", kSymbols);
  ASSERT_TRUE(e.ok()) << e.status();
  auto floordiv = [](int64_t a, int64_t b) {
    int64_t q = a / b;
    return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
  };
  for (int64_t a = -20; a <= 20; ++a) {
    for (int64_t b = -7; b <= 7; ++b) {
      const int64_t ceil = -floordiv(-a, 8);
      const int64_t want = std::max<int64_t>(1, ceil) * 8 + (b - floordiv(b, 3) * 3) -
                           floordiv(a, 4) + std::min(a, b);
      EXPECT_EQ(*e->Evaluate({a, b, 0}), want) << a << ", " << b;
    }
  }
}

}  // namespace
}  // namespace kiln::runtime
