#include "proto/base/int_expr.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace kiln {
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
}

std::string Repeat(const std::string& s, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

// Each construct that nests: parentheses, function calls, unary minus, `**` (right
// associative). kMaxNesting levels parse; one more is INVALID_ARGUMENT naming the nesting.
TEST(IntExprTest, NestingIsLimited) {
  const int n = IntExpr::kMaxNesting;
  auto parens = [](int k) { return Repeat("(", k) + "s0" + Repeat(")", k); };
  auto calls = [](int k) { return Repeat("Max(1, ", k) + "s0" + Repeat(")", k); };
  auto minus = [](int k) { return Repeat("-", k) + "s0"; };
  auto powers = [](int k) { return Repeat("1**", k) + "s0"; };
  EXPECT_EQ(Eval(parens(n)), 7);
  EXPECT_EQ(Eval(calls(n)), 7);
  EXPECT_EQ(Eval(minus(n)), 7);
  EXPECT_EQ(Eval(powers(n)), 1);
  for (const std::string& deep : {parens(n + 1), calls(n + 1), minus(n + 1), powers(n + 1)}) {
    absl::StatusOr<IntExpr> e = IntExpr::Parse(deep, kSymbols);
    ASSERT_FALSE(e.ok()) << deep;
    EXPECT_EQ(e.status().code(), absl::StatusCode::kInvalidArgument) << deep;
    EXPECT_NE(e.status().message().find("nesting too deep"), std::string::npos) << e.status();
  }
}

// Far deeper than any stack could recurse: refused, not a crash.
TEST(IntExprTest, HostileNestingDoesNotExhaustTheStack) {
  for (const std::string& deep :
       {Repeat("(", 1000000) + "1" + Repeat(")", 1000000), Repeat("-", 1000000) + "1",
        Repeat("Max(", 1000000) + "1" + Repeat(")", 1000000), Repeat("2**", 1000000) + "1"}) {
    EXPECT_EQ(IntExpr::Parse(deep, kSymbols).status().code(), absl::StatusCode::kInvalidArgument);
  }
  // A long flat expression is not nested: it parses and evaluates.
  EXPECT_EQ(Eval(Repeat("s0 + ", 100000) + "0"), 700000);
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
  // Every operation that can leave int64 says so, at the edges of the range.
  EXPECT_EQ(EvalCode("-9223372036854775807 - 1 - 1"), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(Eval("-9223372036854775807 - 1"), INT64_MIN);
  EXPECT_EQ(EvalCode("-(-9223372036854775807 - 1)"), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(EvalCode("Abs(-9223372036854775807 - 1)"), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(EvalCode("(-9223372036854775807 - 1) // -1"), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(EvalCode("CeilDiv(-9223372036854775807 - 1, -1)"), absl::StatusCode::kOutOfRange);
  // Results that fit are exact, even from INT64_MIN.
  EXPECT_EQ(Eval("CeilDiv(-9223372036854775807 - 1, 3)"), -3074457345618258602);
  EXPECT_EQ(Eval("CeilDiv(-9223372036854775807 - 1, -3)"), 3074457345618258603);
  EXPECT_EQ(Eval("CeilDiv(-9223372036854775807 - 1, 2)"), INT64_MIN / 2);
  EXPECT_EQ(Eval("CeilDiv(9223372036854775807, 2)"), int64_t{1} << 62);
  EXPECT_EQ(EvalCode("3037000500*3037000500"), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(Eval("3037000499*3037000499"), 9223372030926249001);
  EXPECT_EQ(EvalCode("2**63"), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(Eval("2**62"), int64_t{1} << 62);
  EXPECT_EQ(EvalCode("9223372036854775807 + 1"), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(Eval("9223372036854775807 + 0"), INT64_MAX);
  EXPECT_EQ(Eval("0**0"), 1);
  EXPECT_EQ(Eval("(-1)**3"), -1);
  EXPECT_EQ(Eval("(-1)**4"), 1);
}

TEST(IntExprTest, EvaluateByName) {
  const std::map<std::string, int64_t, std::less<>> symbols = {{"s77", 5}, {"u0", -2}};
  EXPECT_EQ(*EvaluateIntExpr("128*s77 + u0", symbols), 638);
  EXPECT_EQ(*EvaluateIntExpr("12", {}), 12);
  absl::StatusOr<int64_t> missing = EvaluateIntExpr("s1 + 1", symbols);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(missing.status().message().find("unknown symbol s1"), std::string::npos)
      << missing.status();
  EXPECT_EQ(EvaluateIntExpr("s77 * 4611686018427387904", symbols).status().code(),
            absl::StatusCode::kOutOfRange);
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

TEST(IntExprTest, CeilDivIsMinusFloorDivOfTheNegation) {
  absl::StatusOr<IntExpr> ceil = IntExpr::Parse("CeilDiv(s0, s1)", kSymbols);
  absl::StatusOr<IntExpr> floor = IntExpr::Parse("-((-s0) // s1)", kSymbols);
  ASSERT_TRUE(ceil.ok() && floor.ok());
  for (int64_t a = -20; a <= 20; ++a) {
    for (int64_t b = -7; b <= 7; ++b) {
      if (b == 0) continue;
      EXPECT_EQ(*ceil->Evaluate({a, b, 0}), *floor->Evaluate({a, b, 0})) << a << ", " << b;
    }
  }
}

}  // namespace
}  // namespace kiln
