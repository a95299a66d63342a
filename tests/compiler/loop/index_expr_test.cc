// Index expressions: one normal form per value (so equal expressions compare and print
// alike), floor division and modulo that simplify exactly as far as the extents prove, floor
// semantics in evaluation with overflow reported, and a parser that reads back what ToString
// prints and refuses what the loop IR cannot represent.

#include "compiler/loop/index_expr.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace kiln::loop {
namespace {

IndexExpr C(int64_t v) { return IndexExpr::Const(v); }
IndexExpr S(int32_t id) { return IndexExpr::Sym(id); }
IndexExpr V(int32_t id) { return IndexExpr::Var(id); }

const std::vector<std::string> kNames = {"s0", "s1", "s2"};

// Extents of p0 and p1: s0 and 8.
const IndexExpr* TwoVars(int32_t var) {
  static const IndexExpr* extents = new IndexExpr[2]{S(0), C(8)};
  return var >= 0 && var < 2 ? &extents[var] : nullptr;
}

int32_t SymId(absl::string_view name) {
  for (size_t i = 0; i < kNames.size(); ++i) {
    if (kNames[i] == name) return static_cast<int32_t>(i);
  }
  return -1;
}

IndexExpr MustParse(absl::string_view text) {
  absl::StatusOr<IndexExpr> e = ParseIndexExpr(text, SymId);
  EXPECT_TRUE(e.ok()) << text << ": " << e.status();
  return e.ok() ? *e : IndexExpr();
}

int64_t Eval(const IndexExpr& e, std::vector<int64_t> syms, std::vector<int64_t> vars = {}) {
  absl::StatusOr<int64_t> v = e.Evaluate(syms, vars);
  EXPECT_TRUE(v.ok()) << e.ToString(kNames) << ": " << v.status();
  return v.ok() ? *v : -1;
}

TEST(IndexExprTest, EqualValuesHaveOneNormalForm) {
  EXPECT_EQ(S(0) + S(1), S(1) + S(0));
  EXPECT_EQ((S(0) + C(2)) * S(1), S(1) * S(0) + C(2) * S(1));
  EXPECT_EQ(S(0) * C(3) - S(0) * C(3), IndexExpr());
  EXPECT_TRUE((S(0) - S(0)).is_zero());
  EXPECT_TRUE(C(0).is_zero());
  EXPECT_TRUE(IndexExpr().is_const());
  EXPECT_EQ(IndexExpr().const_value(), 0);
  EXPECT_TRUE(C(-5).is_const());
  EXPECT_EQ((C(2) * C(-3) + C(1)).const_value(), -5);
  EXPECT_FALSE(S(0).is_const());
  EXPECT_NE(S(0), V(0)) << "a symbol is not a loop variable with the same number";
  EXPECT_EQ((S(0) + C(1)).key(), (C(1) + S(0)).key());
}

TEST(IndexExprTest, PrintsAsSympyDoes) {
  EXPECT_EQ((C(4) + S(0) * C(128)).ToString(kNames), "128*s0 + 4");
  EXPECT_EQ((C(4) - S(0)).ToString(kNames), "-s0 + 4");
  EXPECT_EQ((S(0) - C(1)).ToString(kNames), "s0 - 1");
  EXPECT_EQ((S(0) * S(1) + S(0)).ToString(kNames), "s0*s1 + s0");
  EXPECT_EQ((V(2) * C(3)).ToString(kNames), "3*p2");
  EXPECT_EQ(IndexExpr().ToString(kNames), "0");
  EXPECT_EQ(IndexExpr::FloorDiv(S(0) + C(3), C(4), nullptr).ToString(kNames),
            "FloorDiv(s0 + 3, 4)");
  EXPECT_EQ(IndexExpr::Mod(S(1), S(0), nullptr).ToString(kNames), "Mod(s1, s0)");
}

TEST(IndexExprTest, FloorDivSimplifiesWhatTheExtentsProve) {
  EXPECT_EQ(IndexExpr::FloorDiv(S(0) * C(4) + C(8), C(4), nullptr), S(0) + C(2));
  EXPECT_EQ(IndexExpr::FloorDiv(S(0), C(1), nullptr), S(0));
  // p1 < 8, so (8*p0 + p1) // 8 is p0; without the extent nothing is known about p1.
  const IndexExpr flat = V(0) * C(8) + V(1);
  EXPECT_EQ(IndexExpr::FloorDiv(flat, C(8), TwoVars), V(0));
  EXPECT_EQ(IndexExpr::Mod(flat, C(8), TwoVars), V(1));
  const IndexExpr opaque = IndexExpr::FloorDiv(flat, C(8), nullptr);
  EXPECT_NE(opaque, V(0));
  EXPECT_EQ(opaque.ToString(kNames), "FloorDiv(p1, 8) + p0");
  // Constants floor towards negative infinity, as Python does.
  EXPECT_EQ(IndexExpr::FloorDiv(C(-7), C(2), nullptr), C(-4));
  EXPECT_EQ(IndexExpr::FloorDiv(C(7), C(2), nullptr), C(3));
  EXPECT_EQ(IndexExpr::Mod(C(-7), C(2), nullptr), C(1));
  EXPECT_EQ(IndexExpr::Mod(S(0) * C(6), C(3), nullptr), IndexExpr());
  EXPECT_EQ(IndexExpr::Mod(S(0), C(1), nullptr), IndexExpr());
}

// A view's unravelling of [B*T, N] as [B, T, N] and back: (N*p0 + p1) // (T*N) with p1 < N is
// p0 // T, and N*T*(p0 // T) + N*(p0 % T) + p1 folds back to N*p0 + p1, which is what lets a
// consumer over the reshaped view share a kernel with its producer.
TEST(IndexExprTest, ACommonFactorOfDivisorAndIndexDividesOut) {
  const IndexExpr flat = V(0) * C(8) + V(1);  // p1 < 8
  EXPECT_EQ(IndexExpr::FloorDiv(flat, C(24), TwoVars), IndexExpr::FloorDiv(V(0), C(3), TwoVars));
  EXPECT_EQ(IndexExpr::Mod(flat, C(24), TwoVars),
            C(8) * IndexExpr::Mod(V(0), C(3), TwoVars) + V(1));
  const IndexExpr unravelled = C(24) * IndexExpr::FloorDiv(flat, C(24), TwoVars) +
                               C(8) * IndexExpr::Mod(V(0), C(3), TwoVars) + V(1);
  EXPECT_EQ(unravelled, flat);
  EXPECT_EQ(
      C(24) * IndexExpr::FloorDiv(flat, C(24), TwoVars) + IndexExpr::Mod(flat, C(24), TwoVars),
      flat);
  // With symbolic sizes: (s1*p0 + p1) // (s1*s2), p1 < s1.
  const auto sym_extents = [](int32_t var) -> const IndexExpr* {
    static const IndexExpr* extents = new IndexExpr[2]{S(0), S(1)};
    return var >= 0 && var < 2 ? &extents[var] : nullptr;
  };
  const IndexExpr rows = S(1) * V(0) + V(1);
  EXPECT_EQ(IndexExpr::FloorDiv(rows, S(1) * S(2), sym_extents),
            IndexExpr::FloorDiv(V(0), S(2), sym_extents));
  // Nothing divides out where the rest may reach the factor: p1 < 8 is not below 4.
  EXPECT_EQ(IndexExpr::FloorDiv(V(0) * C(4) + V(1), C(12), TwoVars).ToString(kNames),
            "FloorDiv(4*p0 + p1, 12)");
  // A lone term pair folds only when its coefficients match: 16*(p0 // 3) + 8*(p0 % 3) stays.
  EXPECT_EQ((C(16) * IndexExpr::FloorDiv(V(0), C(3), TwoVars) +
             C(8) * IndexExpr::Mod(V(0), C(3), TwoVars))
                .ToString(kNames),
            "16*FloorDiv(p0, 3) + 8*Mod(p0, 3)");
  // Every form agrees with evaluation at every point.
  const IndexExpr forms[] = {IndexExpr::FloorDiv(flat, C(24), TwoVars),
                             IndexExpr::Mod(flat, C(24), TwoVars), unravelled,
                             IndexExpr::FloorDiv(V(0) * C(12) + V(1) * C(2) + C(1), C(36), TwoVars),
                             IndexExpr::Mod(V(0) * C(12) + V(1) * C(2) + C(1), C(36), TwoVars)};
  for (int64_t p0 = 0; p0 < 20; ++p0) {
    for (int64_t p1 = 0; p1 < 8; ++p1) {
      const int64_t f = 8 * p0 + p1, g = 12 * p0 + 2 * p1 + 1;
      EXPECT_EQ(Eval(forms[0], {20}, {p0, p1}), f / 24);
      EXPECT_EQ(Eval(forms[1], {20}, {p0, p1}), f % 24);
      EXPECT_EQ(Eval(forms[2], {20}, {p0, p1}), f);
      EXPECT_EQ(Eval(forms[3], {20}, {p0, p1}), g / 36);
      EXPECT_EQ(Eval(forms[4], {20}, {p0, p1}), g % 36);
    }
  }
}

TEST(IndexExprTest, ProvablyBelowUsesExtentsAndSymbols) {
  EXPECT_TRUE(V(0).ProvablyBelow(S(0), TwoVars));
  EXPECT_TRUE((V(1) + C(1)).ProvablyBelow(C(9), TwoVars));
  EXPECT_FALSE((V(1) + C(1)).ProvablyBelow(C(8), TwoVars));
  EXPECT_FALSE(V(2).ProvablyBelow(C(100), TwoVars)) << "p2 has no known extent";
  EXPECT_TRUE(S(1).ProvablyBelow(S(1) + C(1), nullptr));
  EXPECT_FALSE((C(0) - V(0)).ProvablyBelow(C(100), TwoVars)) << "negative terms are not bounded";
}

TEST(IndexExprTest, AFloorDivisionByAConstantIsBoundedByItsDividendsBound) {
  // p1 < 8, so p1 // 2 <= 3 and (p1 // 2) % 4 is p1 // 2.
  const IndexExpr half = IndexExpr::FloorDiv(V(1), C(2), TwoVars);
  EXPECT_TRUE(half.ProvablyBelow(C(4), TwoVars));
  EXPECT_FALSE(half.ProvablyBelow(C(3), TwoVars));
  EXPECT_EQ(IndexExpr::Mod(half, C(4), TwoVars), half);
  EXPECT_EQ(IndexExpr::FloorDiv(half, C(4), TwoVars), C(0));
  // By a symbol (which may be 0) or over an unbounded dividend, nothing is known.
  EXPECT_FALSE(IndexExpr::FloorDiv(V(1), S(1), TwoVars).ProvablyBelow(C(100), TwoVars));
  EXPECT_FALSE(IndexExpr::FloorDiv(V(2), C(2), TwoVars).ProvablyBelow(C(100), TwoVars));
}

TEST(IndexExprTest, SubstitutionAndRenamingRenormalize) {
  const IndexExpr e = V(0) * C(4) + V(1) + S(0);
  const IndexExpr moved = e.SubstituteVars([](int32_t v) { return v == 0 ? V(2) : C(3); }, nullptr);
  EXPECT_EQ(moved, V(2) * C(4) + S(0) + C(3));
  // Divisions are simplified again for the new variables.
  const IndexExpr div = IndexExpr::FloorDiv(V(5) * C(8) + V(6), C(8), nullptr);
  EXPECT_EQ(div.SubstituteVars([](int32_t v) { return v == 5 ? V(0) : V(1); }, TwoVars), V(0));
  EXPECT_EQ((S(0) * C(2) + S(1)).RenameSyms([](int32_t s) { return s + 1; }), S(1) * C(2) + S(2));
}

TEST(IndexExprTest, CollectsVariablesAndSymbolsInsideDivisions) {
  const IndexExpr e = IndexExpr::Mod(V(3) + S(2), S(1), nullptr) * V(0);
  std::vector<int32_t> vars, syms;
  e.CollectVars(&vars);
  e.CollectSyms(&syms);
  std::sort(vars.begin(), vars.end());
  std::sort(syms.begin(), syms.end());
  EXPECT_EQ(vars, (std::vector<int32_t>{0, 3}));
  EXPECT_EQ(syms, (std::vector<int32_t>{1, 2}));
  EXPECT_TRUE(e.UsesVars());
  EXPECT_FALSE((S(0) * C(2)).UsesVars());
}

TEST(IndexExprTest, EvaluatesWithFloorSemanticsAndReportsOverflow) {
  EXPECT_EQ(Eval(S(0) * C(128) + C(4), {3}), 388);
  EXPECT_EQ(Eval(V(0) * S(0) + V(1), {10}, {2, 7}), 27);
  EXPECT_EQ(Eval(IndexExpr::FloorDiv(S(0) + C(3), C(4), nullptr), {13}), 4);
  EXPECT_EQ(Eval(IndexExpr::FloorDiv(S(0) - C(9), C(4), nullptr), {2}), -2);
  EXPECT_EQ(Eval(IndexExpr::Mod(S(0) - C(9), C(4), nullptr), {2}), 1);

  const IndexExpr big = S(0) * S(1);
  const int64_t max = std::numeric_limits<int64_t>::max();
  EXPECT_EQ(big.Evaluate({max, 2}, {}).status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ((S(0) + S(1)).Evaluate({max, 1}, {}).status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(IndexExpr::FloorDiv(S(0), S(1), nullptr).Evaluate({4, 0}, {}).status().code(),
            absl::StatusCode::kOutOfRange)
      << "division by zero";
  EXPECT_EQ(V(1).Evaluate({}, {5}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(S(3).Evaluate({1}, {}).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(IndexExprTest, ParsesWhatItPrints) {
  EXPECT_EQ(MustParse("128*s0 + 4"), S(0) * C(128) + C(4));
  EXPECT_EQ(MustParse("-s0 + 4"), C(4) - S(0));
  EXPECT_EQ(MustParse("2*(s0 - 1)*s1"), (S(0) - C(1)) * C(2) * S(1));
  EXPECT_EQ(MustParse("FloorDiv(s0 + 3, 4)"), IndexExpr::FloorDiv(S(0) + C(3), C(4), nullptr));
  EXPECT_EQ(MustParse("(s0 + 3) // 4"), MustParse("FloorDiv(s0 + 3, 4)"));
  EXPECT_EQ(MustParse("Mod(s1, s0)"), MustParse("s1 % s0"));
  EXPECT_EQ(MustParse("PythonMod(s1, s0)"), MustParse("Mod(s1, s0)"));
  EXPECT_EQ(MustParse("  s2\t"), S(2));
  for (const IndexExpr& e : {S(0) * C(128) + C(4), C(4) - S(0), S(0) * S(1) + S(0) - C(7),
                             IndexExpr::FloorDiv(S(0) * S(1) + C(3), C(4), nullptr) * C(2) +
                                 IndexExpr::Mod(S(2), S(0), nullptr)}) {
    EXPECT_EQ(MustParse(e.ToString(kNames)), e) << e.ToString(kNames);
  }
}

// Text that is not an expression is INVALID_ARGUMENT; sizes of other forms (Max, powers,
// ceilings) convert, see index_expr_forms_test.cc.
TEST(IndexExprTest, RefusesWhatIsNotAnExpression) {
  for (const char* text : {"s9 + 1", "s0 +", "(s0", "s0 * 2)", "99999999999999999999", ""}) {
    absl::StatusOr<IndexExpr> e = ParseIndexExpr(text, SymId);
    EXPECT_FALSE(e.ok()) << "`" << text << "`";
  }
}

}  // namespace
}  // namespace kiln::loop
