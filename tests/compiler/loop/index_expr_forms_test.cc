// Index expressions: the sizes real graphs carry convert into the loop IR's forms, simplify
// to one canonical form, and print text that compiler/sym and the shared IntExpr (proto/base,
// which runtimes evaluate artifacts with) both read back to the same values.

#include "compiler/loop/index_expr.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "compiler/sym/expr.h"
#include "proto/base/int_expr.h"

namespace kiln::loop {
namespace {

using ::testing::HasSubstr;

const std::vector<std::string> kNames = {"s0", "s1", "s2"};

int32_t SymId(absl::string_view name) {
  for (size_t i = 0; i < kNames.size(); ++i) {
    if (kNames[i] == name) return static_cast<int32_t>(i);
  }
  return -1;
}

IndexExpr Convert(const std::string& text) {
  absl::StatusOr<IndexExpr> e = ParseIndexExpr(text, SymId);
  EXPECT_TRUE(e.ok()) << text << ": " << e.status();
  return e.ok() ? *e : IndexExpr();
}

IndexExpr S(int32_t id) { return IndexExpr::Sym(id); }
IndexExpr C(int64_t v) { return IndexExpr::Const(v); }

// Checks at many symbol values that `e` (converted from `source`) evaluates as the source
// does, and that its printing evaluates the same through compiler/sym and through the
// runtime's IntExpr.
void ExpectSameValues(const std::string& source, const IndexExpr& e) {
  const std::string printed = e.ToString(kNames);
  auto src = sym::Parse(source);
  ASSERT_TRUE(src.ok()) << source;
  auto reparsed = sym::Parse(printed);
  ASSERT_TRUE(reparsed.ok()) << printed << ": " << reparsed.status();
  auto runtime = IntExpr::Parse(printed, kNames);
  ASSERT_TRUE(runtime.ok()) << printed << ": " << runtime.status();
  for (int64_t a : {0, 1, 2, 7, 8, 9, 31, 32, 33, 64, 100, 1000}) {
    for (int64_t b : {1, 3, 8, 33}) {
      const std::vector<int64_t> values = {a, b, a + b};
      sym::Bindings bindings;
      for (size_t i = 0; i < kNames.size(); ++i) bindings.symbols[kNames[i]] = values[i];
      auto want = sym::EvaluateInt(**src, bindings);
      ASSERT_TRUE(want.ok()) << source << ": " << want.status();
      auto got = e.Evaluate(values, {});
      ASSERT_TRUE(got.ok()) << printed << ": " << got.status();
      EXPECT_EQ(*got, *want) << source << " as " << printed << " at s0=" << a << " s1=" << b;
      auto sym_value = sym::EvaluateInt(**reparsed, bindings);
      ASSERT_TRUE(sym_value.ok()) << printed << ": " << sym_value.status();
      EXPECT_EQ(*sym_value, *want) << printed;
      auto runtime_value = runtime->Evaluate(values);
      ASSERT_TRUE(runtime_value.ok()) << printed << ": " << runtime_value.status();
      EXPECT_EQ(*runtime_value, *want) << printed << " in the runtime";
    }
  }
}

// What the corpus's dynamic graphs carry (nanoGPT's and Llama's attention statistics padded
// to 32, Llama's causal mask padded to 8), and every other form the IR takes.
TEST(IndexExprTest, SizesConvertAndPrintForTheRuntime) {
  const std::pair<const char*, const char*> cases[] = {
      {"32*CeilToInt(IntTrueDiv(s0, 32))", "32*CeilDiv(s0, 32)"},
      {"Max(1, 32*CeilToInt(IntTrueDiv(s0, 32)))", "Max(1, 32*CeilDiv(s0, 32))"},
      {"4*Max(1, 32*CeilToInt(IntTrueDiv(s0, 32)))", "4*Max(1, 32*CeilDiv(s0, 32))"},
      {"s0 - (Mod(s0, 8)) + 8", "-Mod(s0, 8) + s0 + 8"},
      {"8 - (Mod(s0, 8))", "-Mod(s0, 8) + 8"},
      // Max(1, x) is x: x = s0 - Mod(s0, 8) + 8 >= 1 for every s0 >= 0.
      {"Max(1, s0 - (Mod(s0, 8)) + 8)", "-Mod(s0, 8) + s0 + 8"},
      {"s0*Max(1, s0 - (Mod(s0, 8)) + 8)", "-s0*Mod(s0, 8) + s0*s0 + 8*s0"},
      {"s0**2", "s0*s0"},
      {"PowByNatural(s0, 3)", "s0*s0*s0"},
      {"(s0//2)", "FloorDiv(s0, 2)"},
      {"FloorToInt(IntTrueDiv(s0, 4))", "FloorDiv(s0, 4)"},
      {"math.floor(s0 / 4)", "FloorDiv(s0, 4)"},
      {"CleanDiv(8*s0, 8)", "s0"},
      {"CeilToInt(s0/s1)", "CeilDiv(s0, s1)"},
      {"CeilDiv(s0 + 2*s1, s1)", "CeilDiv(s0, s1) + 2"},
      {"FloorDiv(s0, s1)", "FloorDiv(s0, s1)"},
      {"PythonMod(s0, s1)", "Mod(s0, s1)"},
      {"s0 % 8", "Mod(s0, 8)"},
      {"Min(s0, 4)", "Min(s0, 4)"},
      {"Min(4, s1, s0)", "Min(s0, s1, 4)"},
      {"Max(s1, Max(s0, 4))", "Max(s0, s1, 4)"},
      {"Max(s0, s0 + 1)", "s0 + 1"},
      {"Max(0, s0)", "s0"},
      {"Max(3, 5)", "5"},
      {"Min(8, Mod(s0, 8))", "Mod(s0, 8)"},
      {"Identity(2*s0)", "2*s0"},
      {"LShift(s0, 3)", "8*s0"},
      {"RShift(s0, 1)", "FloorDiv(s0, 2)"},
      {"TruncToInt(s0)", "s0"},
      {"CeilToInt(s0 + 1)", "s0 + 1"},
      {"s0*s1 - s2", "s0*s1 - s2"},
      {"3*s1 - s0", "-s0 + 3*s1"},
  };
  for (const auto& [text, expected] : cases) {
    const IndexExpr e = Convert(text);
    EXPECT_EQ(e.ToString(kNames), expected) << text;
    EXPECT_TRUE(e.Computable()) << text;
    ExpectSameValues(text, e);
  }
}

TEST(IndexExprTest, FormsOutsideTheIrAreUnimplemented) {
  for (const char* text :
       {"Abs(s0 - 4)", "Piecewise((s0, s0 > 4), (4, True))", "TruncToInt(IntTrueDiv(s0, 2))",
        "RoundToInt(s0/2)", "s0/2", "2.0*s0", "s0**s1", "s0**100", "u9 + 1", "s0 > 2",
        "L['t0'] + 1", "CeilToInt(s0/2 + 1)", "1 if s0 else 2"}) {
    absl::StatusOr<IndexExpr> e = ParseIndexExpr(text, SymId);
    ASSERT_FALSE(e.ok()) << text << " became " << e->ToString(kNames);
    EXPECT_EQ(e.status().code(), absl::StatusCode::kUnimplemented) << text;
    EXPECT_THAT(e.status().message(), HasSubstr("outside what the loop IR represents")) << text;
  }
  EXPECT_EQ(ParseIndexExpr("s0 +", SymId).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(IndexExprTest, CeilingDivisionSimplifies) {
  EXPECT_EQ(IndexExpr::CeilDiv(C(32) * S(0), C(32), nullptr), S(0));
  EXPECT_EQ(IndexExpr::CeilDiv(C(32) * S(0) + C(5), C(32), nullptr), S(0) + C(1));
  EXPECT_EQ(IndexExpr::CeilDiv(S(0) + C(32), C(32), nullptr),
            IndexExpr::CeilDiv(S(0), C(32), nullptr) + C(1));
  EXPECT_EQ(IndexExpr::CeilDiv(C(7), C(2), nullptr), C(4));
  EXPECT_EQ(IndexExpr::CeilDiv(C(-7), C(2), nullptr), C(-3));
  EXPECT_EQ(IndexExpr::CeilDiv(S(0), C(1), nullptr), S(0));
  EXPECT_EQ(IndexExpr::CeilDiv(IndexExpr(), S(1), nullptr), IndexExpr());
  EXPECT_EQ(IndexExpr::CeilDiv(S(0) * S(1), S(1), nullptr), S(0));
  // With a loop variable's extent: p0 + 1 in [1, 8] divides by 8 to 1.
  const IndexExpr eight = C(8);
  const VarExtents extents = [&](int32_t v) { return v == 0 ? &eight : nullptr; };
  EXPECT_EQ(IndexExpr::CeilDiv(IndexExpr::Var(0) + C(1), C(8), extents), C(1));
  EXPECT_EQ(IndexExpr::CeilDiv(IndexExpr::Var(0), C(8), extents).ToString(kNames),
            "CeilDiv(p0, 8)");
}

TEST(IndexExprTest, MaxAndMinAreCanonical) {
  const IndexExpr a = IndexExpr::Max({S(0), S(1), S(2)}, nullptr);
  const IndexExpr b = IndexExpr::Max({S(2), IndexExpr::Max({S(1), S(0)}, nullptr)}, nullptr);
  EXPECT_EQ(a, b);
  EXPECT_EQ(a.key(), b.key());
  EXPECT_EQ(a.ToString(kNames), "Max(s0, s1, s2)");
  EXPECT_EQ(IndexExpr::Max({S(0), S(0)}, nullptr), S(0));
  EXPECT_EQ(IndexExpr::Max({S(0)}, nullptr), S(0));
  EXPECT_EQ(IndexExpr::Min({S(0), S(0) + C(1), C(3)}, nullptr).ToString(kNames), "Min(s0, 3)");
  EXPECT_EQ(IndexExpr::Min({C(0), S(0)}, nullptr), C(0));
  // A Max of a Min stays: neither side decides for every s0.
  const IndexExpr clamp = IndexExpr::Max({C(1), IndexExpr::Min({S(0), C(16)}, nullptr)}, nullptr);
  EXPECT_EQ(clamp.ToString(kNames), "Max(1, Min(s0, 16))");
  ExpectSameValues("Max(1, Min(16, s0))", clamp);
  // Renaming symbols re-sorts the arguments.
  const IndexExpr swapped = a.RenameSyms([](int32_t id) { return 2 - id; });
  EXPECT_EQ(swapped, a);
  // Substituting a variable re-simplifies with the new extents.
  const IndexExpr four = C(4);
  const VarExtents extents = [&](int32_t v) { return v == 0 ? &four : nullptr; };
  const IndexExpr m = IndexExpr::Max({IndexExpr::Var(0), S(0)}, nullptr);
  EXPECT_EQ(m.SubstituteVars([](int32_t) { return C(2); }, extents).ToString(kNames), "Max(s0, 2)");
  // p0 lies in [0, 4).
  EXPECT_EQ(IndexExpr::Max({IndexExpr::Var(0), C(2)}, extents).ToString(kNames), "Max(p0, 2)");
  EXPECT_EQ(IndexExpr::Max({IndexExpr::Var(0), C(3)}, extents), C(3));
  EXPECT_EQ(IndexExpr::Min({IndexExpr::Var(0), C(3)}, extents), IndexExpr::Var(0));
}

TEST(IndexExprTest, OpaqueSizesPrintAndEvaluateButDoNotCompute) {
  auto abs = sym::Parse("Abs(s1 - 4)");
  ASSERT_TRUE(abs.ok());
  absl::StatusOr<IndexExpr> o = IndexExpr::Opaque(**abs, SymId);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_FALSE(o->Computable());
  const IndexExpr e = C(2) * *o + S(0);
  EXPECT_FALSE(e.Computable());
  EXPECT_TRUE((S(0) * C(3)).Computable());
  EXPECT_EQ(e.ToString(kNames), "2*Abs(s1 - 4) + s0");
  ExpectSameValues("2*Abs(s1 - 4) + s0", e);
  auto sum = sym::Parse("s0 + Abs(s1)");
  ASSERT_TRUE(sum.ok());
  absl::StatusOr<IndexExpr> so = IndexExpr::Opaque(**sum, SymId);
  ASSERT_TRUE(so.ok());
  EXPECT_EQ((C(3) * *so).ToString(kNames), "3*(s0 + Abs(s1))");
  std::vector<int32_t> syms;
  e.CollectSyms(&syms);
  EXPECT_THAT(syms, ::testing::UnorderedElementsAre(0, 1));
  // Symbols inside follow renaming.
  EXPECT_EQ(o->RenameSyms([](int32_t id) { return id == 1 ? 2 : id; }).ToString(kNames),
            "Abs(s2 - 4)");
  auto unknown = sym::Parse("Abs(u3)");
  ASSERT_TRUE(unknown.ok());
  EXPECT_EQ(IndexExpr::Opaque(**unknown, SymId).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto input = sym::Parse("Abs(L['t0'])");
  ASSERT_TRUE(input.ok());
  EXPECT_EQ(IndexExpr::Opaque(**input, SymId).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(IndexExprTest, EvaluationOverflowIsAnError) {
  const int64_t min = INT64_MIN;
  auto floordiv = IndexExpr::FloorDiv(S(0), C(-1), nullptr).Evaluate({min}, {});
  EXPECT_EQ(floordiv.status().code(), absl::StatusCode::kOutOfRange);
  auto ceildiv = IndexExpr::CeilDiv(S(0), S(1), nullptr).Evaluate({min, -1}, {});
  EXPECT_EQ(ceildiv.status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(*IndexExpr::Mod(S(0), S(1), nullptr).Evaluate({min, -1}, {}), 0);
  auto by_zero = IndexExpr::CeilDiv(S(0), S(1), nullptr).Evaluate({5, 0}, {});
  EXPECT_EQ(by_zero.status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(*IndexExpr::CeilDiv(S(0), S(1), nullptr).Evaluate({-7, 2}, {}), -3);
  EXPECT_EQ(*IndexExpr::CeilDiv(S(0), S(1), nullptr).Evaluate({7, -2}, {}), -3);
  EXPECT_EQ(*IndexExpr::CeilDiv(S(0), S(1), nullptr).Evaluate({-7, -2}, {}), 4);
}

}  // namespace
}  // namespace kiln::loop
