// Property: for random expression trees, written out fully parenthesized, parsing then
// printing is a fixed point (print, parse, print gives the same text and an equal tree),
// equal prints mean equal trees, and the reprinted tree evaluates exactly as the original.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <variant>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "compiler/sym/expr.h"

namespace kiln::sym {
namespace {

class TreeWriter {
 public:
  explicit TreeWriter(uint32_t seed) : rng_(seed) {}

  std::string Write(int depth) {
    if (depth <= 0 || Pick(5) == 0) return Leaf();
    switch (Pick(12)) {
      case 0:
        return absl::StrCat("(-", Write(depth - 1), ")");
      case 1:
        return absl::StrCat(Pick(2) ? "(not " : "(~", Write(depth - 1), ")");
      case 2:
        return absl::StrCat("(", Write(depth - 1), ")**(", Small(), ")");
      case 3:
      case 4: {
        static const char* kOps[] = {" + ", " - ", "*", "/", " // ", " % ", " & ", " | "};
        std::string out = absl::StrCat("(", Write(depth - 1));
        for (int i = 1 + Pick(3); i > 0; --i)
          absl::StrAppend(&out, kOps[Pick(8)], Write(depth - 1));
        return out + ")";
      }
      case 5: {
        static const char* kOps[] = {" == ", " != ", " < ", " <= ", " > ", " >= "};
        std::string out = absl::StrCat("(", Write(depth - 1));
        for (int i = 1 + Pick(2); i > 0; --i)
          absl::StrAppend(&out, kOps[Pick(6)], Write(depth - 1));
        return out + ")";
      }
      case 6:
        return absl::StrCat("(", Write(depth - 1), Pick(2) ? " and " : " or ", Write(depth - 1),
                            ")");
      case 7:
        return absl::StrCat("(", Write(depth - 1), " if ", Write(depth - 1), " else ",
                            Write(depth - 1), ")");
      case 8:
        return absl::StrCat("Piecewise((", Write(depth - 1), ", ", Write(depth - 1), "), (",
                            Write(depth - 1), ", True))");
      default: {
        static const std::pair<const char*, int> kFunctions[] = {
            {"Eq", 2},
            {"Ne", 2},
            {"Lt", 2},
            {"Le", 2},
            {"Gt", 2},
            {"Ge", 2},
            {"And", 3},
            {"Or", 2},
            {"Not", 1},
            {"Max", 3},
            {"Min", 2},
            {"Abs", 1},
            {"FloorDiv", 2},
            {"CeilDiv", 2},
            {"Mod", 2},
            {"PythonMod", 2},
            {"CleanDiv", 2},
            {"IntTrueDiv", 2},
            {"FloatTrueDiv", 2},
            {"CeilToInt", 1},
            {"FloorToInt", 1},
            {"TruncToInt", 1},
            {"ToFloat", 1},
            {"PowByNatural", 2},
            {"FloatPow", 2},
            {"max", 2},
            {"math.floor", 1},
            {"torch.sym_float", 1},
            {"RoundToInt", 1},
            {"RoundDecimal", 2},
            {"TruncToFloat", 1},
            {"Identity", 1},
            {"LShift", 2},
            {"RShift", 2},
            {"BitwiseFn_bitwise_and", 2},
            {"BitwiseFn_bitwise_or", 2},
            {"IsNonOverlappingAndDenseIndicator", 4},
            {"OpaqueUnaryFn_exp", 1},
            {"math.sqrt", 1},
            {"round", 2},
        };
        const auto& [name, arity] = kFunctions[Pick(sizeof(kFunctions) / sizeof(kFunctions[0]))];
        std::string out = absl::StrCat(name, "(");
        for (int i = 0; i < arity; ++i) absl::StrAppend(&out, i ? ", " : "", Write(depth - 1));
        return out + ")";
      }
    }
  }

 private:
  int Pick(size_t n) { return static_cast<int>(rng_() % n); }

  std::string Small() { return absl::StrCat(Pick(7) - 2); }

  std::string Leaf() {
    switch (Pick(9)) {
      case 0:
        return Small();
      case 1: {
        std::uniform_int_distribution<int64_t> any(INT64_MIN, INT64_MAX);
        const int64_t v = any(rng_);
        return v < 0 ? absl::StrCat("(", v, ")") : absl::StrCat(v);
      }
      case 2: {
        std::uniform_real_distribution<double> d(-1e6, 1e6);
        std::string s = absl::StrFormat("%.17g", Pick(4) == 0 ? std::ldexp(d(rng_), 900) : d(rng_));
        if (s.find_first_of(".e") == std::string::npos) s += ".0";
        return s[0] == '-' ? absl::StrCat("(", s, ")") : s;
      }
      case 3:
        return Pick(2) ? "True" : "False";
      case 4:
        return Pick(2) ? "oo" : "int_oo";
      case 5:
        return Pick(2) ? "s0" : "s1";
      case 6:
        return "zf0";
      case 7:
        return "L['t0']";
      default:
        return "u2";
    }
  }

  std::mt19937 rng_;
};

bool SameOutcome(const absl::StatusOr<Value>& a, const absl::StatusOr<Value>& b) {
  if (a.ok() != b.ok()) return false;
  if (!a.ok()) return a.status() == b.status();
  if (a->index() != b->index()) return false;
  if (const double* x = std::get_if<double>(&*a)) {
    const double y = std::get<double>(*b);
    return std::memcmp(x, &y, sizeof(double)) == 0 || (std::isnan(*x) && std::isnan(y));
  }
  return *a == *b;
}

TEST(SymExprPropertyTest, PrintParsePrintIsAFixedPoint) {
  std::map<std::string, ExprPtr> by_print;
  int evaluated_ok = 0;
  for (uint32_t seed = 0; seed < 4000; ++seed) {
    TreeWriter writer(seed);
    const std::string text = writer.Write(1 + static_cast<int>(seed % 6));
    absl::StatusOr<ExprPtr> first = Parse(text);
    ASSERT_TRUE(first.ok()) << text << ": " << first.status();
    const std::string printed = Print(**first);
    absl::StatusOr<ExprPtr> second = Parse(printed);
    ASSERT_TRUE(second.ok()) << text << " printed as " << printed << ": " << second.status();
    ASSERT_EQ(Print(**second), printed) << text;
    ASSERT_TRUE(Equal(**first, **second)) << text << " printed as " << printed;

    auto [it, inserted] = by_print.emplace(printed, *first);
    if (!inserted) EXPECT_TRUE(Equal(*it->second, **first)) << printed;

    for (int64_t s0 : {int64_t{-3}, int64_t{0}, int64_t{7}, INT64_MAX}) {
      Bindings b;
      b.symbols = {{"s0", Value(s0)},
                   {"s1", Value(int64_t{2})},
                   {"zf0", Value(-0.5)},
                   {"u2", Value(true)},
                   {"L['t0']", Value(int64_t{12})}};
      absl::StatusOr<Value> a = Evaluate(**first, b);
      absl::StatusOr<Value> c = Evaluate(**second, b);
      ASSERT_TRUE(SameOutcome(a, c)) << printed;
      evaluated_ok += a.ok();
    }
  }
  // The trees are meant to exercise evaluation, not only errors.
  EXPECT_GT(evaluated_ok, 4000);
}

}  // namespace
}  // namespace kiln::sym
