#include "compiler/sym/expr.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <variant>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace kiln::sym {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

Bindings Symbols(std::initializer_list<std::pair<const std::string, Value>> values) {
  Bindings b;
  b.symbols = std::map<std::string, Value, std::less<>>(values);
  return b;
}

absl::StatusOr<Value> Eval(const std::string& text, const Bindings& b = {}) {
  absl::StatusOr<ExprPtr> e = Parse(text);
  if (!e.ok()) return e.status();
  return Evaluate(**e, b);
}

// Expects `text` to evaluate to exactly `expected`: same type, same value (bit for bit for
// floats, so -0.0 and 0.0 differ).
void ExpectValue(const std::string& text, const Value& expected, const Bindings& b = {}) {
  absl::StatusOr<Value> v = Eval(text, b);
  ASSERT_TRUE(v.ok()) << text << ": " << v.status();
  ASSERT_EQ(v->index(), expected.index())
      << text << " gave " << FormatValue(*v) << ", expected " << FormatValue(expected);
  if (const double* d = std::get_if<double>(&expected)) {
    EXPECT_EQ(std::signbit(std::get<double>(*v)), std::signbit(*d)) << text;
    EXPECT_EQ(std::get<double>(*v), *d) << text << " gave " << FormatValue(*v);
  } else {
    EXPECT_EQ(*v, expected) << text << " gave " << FormatValue(*v);
  }
}

void ExpectError(const std::string& text, absl::StatusCode code, const std::string& substring,
                 const Bindings& b = {}) {
  absl::StatusOr<Value> v = Eval(text, b);
  ASSERT_FALSE(v.ok()) << text << " gave " << FormatValue(*v);
  EXPECT_EQ(v.status().code(), code) << text << ": " << v.status();
  EXPECT_THAT(v.status().message(), HasSubstr(substring)) << text;
}

Value I(int64_t v) { return Value(v); }
Value F(double v) { return Value(v); }
Value B(bool v) { return Value(v); }

TEST(SymExprTest, RealSizeExpressions) {
  ExpectValue("256*s75", I(768), Symbols({{"s75", I(3)}}));
  ExpectValue("256*s75", I(-256), Symbols({{"s75", I(-1)}}));
  ExpectValue("s75*s95", I(21), Symbols({{"s75", I(3)}, {"s95", I(7)}}));
  ExpectValue("s75*s95", I(-21), Symbols({{"s75", I(-3)}, {"s95", I(7)}}));
  const std::string padded = "Max(1, 32*CeilToInt(IntTrueDiv(s75, 32)))";
  ExpectValue(padded, I(64), Symbols({{"s75", I(33)}}));
  ExpectValue(padded, I(32), Symbols({{"s75", I(32)}}));
  ExpectValue(padded, I(32), Symbols({{"s75", I(1)}}));
  ExpectValue(padded, I(1), Symbols({{"s75", I(0)}}));
  ExpectValue(padded, I(1), Symbols({{"s75", I(-33)}}));  // CeilToInt(-1.03125) == -1
}

TEST(SymExprTest, RealShapeEnvGuards) {
  ExpectValue("Eq(zf97, 1.0e-5)", B(true), Symbols({{"zf97", F(1e-5)}}));
  ExpectValue("Eq(zf97, 1.0e-5)", B(false), Symbols({{"zf97", F(2e-5)}}));
  ExpectValue("Eq(zf38, 2.0)", B(true), Symbols({{"zf38", F(2.0)}}));
  ExpectValue("Eq(zf38, 2.0)", B(true), Symbols({{"zf38", I(2)}}));
  ExpectValue("Eq(zf38, 2.0)", B(false), Symbols({{"zf38", F(2.0000000000000004)}}));
  ExpectValue("Ne(s0, 1)", B(true), Symbols({{"s0", I(0)}}));
  ExpectValue("Ne(s0, 1)", B(false), Symbols({{"s0", I(1)}}));
  ExpectValue("s1 >= 2", B(true), Symbols({{"s1", I(2)}}));
  ExpectValue("s1 >= 2", B(false), Symbols({{"s1", I(1)}}));
  ExpectValue("s1 >= 2", B(false), Symbols({{"s1", I(-5)}}));
  ExpectValue("Eq(Mod(s0, 8), 0)", B(true), Symbols({{"s0", I(16)}}));
  ExpectValue("Eq(Mod(s0, 8), 0)", B(true), Symbols({{"s0", I(-8)}}));
  ExpectValue("Eq(Mod(s0, 8), 0)", B(false), Symbols({{"s0", I(-7)}}));
  ExpectValue("Eq(Mod(s0, 8), 0)", B(true), Symbols({{"s0", I(0)}}));
  ExpectValue("Mod(s0, 8) == 0", B(false), Symbols({{"s0", I(12)}}));
}

TEST(SymExprTest, RealPythonGuardExpressions) {
  Bindings b;
  b.python_inputs = {"s77", "s3", "s5"};
  b.symbols = {{"s77", I(16)}, {"s3", I(4)}, {"s5", I(64)}};
  ExpectValue("2 <= L['t0'] and 2 <= L['t1']", B(true), b);
  ExpectValue("L['t2'] == L['t1']*L['t0'] and 2 <= L['t0'] and 2 <= L['t1']", B(true), b);
  ExpectValue("L['t1'] == 128*L['t0'] and 2 <= L['t0']", B(false), b);
  b.symbols["s3"] = I(2048);
  ExpectValue("L['t1'] == 128*L['t0'] and 2 <= L['t0']", B(true), b);
  b.symbols["s77"] = I(1);
  b.symbols["s3"] = I(128);
  ExpectValue("L['t1'] == 128*L['t0'] and 2 <= L['t0']", B(false), b);
  ExpectValue("2 <= L['t0'] and 2 <= L['t1']", B(false), b);

  // Without python_inputs, L['tN'] is looked up by its own text.
  Bindings direct = Symbols({{"L['t0']", I(3)}, {"L['t1']", I(1)}});
  ExpectValue("2 <= L['t0'] and 2 <= L['t1']", B(false), direct);
  direct.symbols["L['t1']"] = I(2);
  ExpectValue("2 <= L['t0'] and 2 <= L['t1']", B(true), direct);
  ExpectError("L['t2'] == 1", absl::StatusCode::kInvalidArgument, "L['t2']", direct);
  Bindings missing;
  missing.python_inputs = {"s9"};
  ExpectError("L['t0'] == 1", absl::StatusCode::kInvalidArgument, "s9", missing);
}

TEST(SymExprTest, FloorDivisionAndModuloFollowPython) {
  ExpectValue("FloorDiv(-7, 2)", I(-4));
  ExpectValue("FloorDiv(7, -2)", I(-4));
  ExpectValue("FloorDiv(-7, -2)", I(3));
  ExpectValue("FloorDiv(7, 2)", I(3));
  ExpectValue("-7 // 2", I(-4));
  ExpectValue("(s0//2)", I(-4), Symbols({{"s0", I(-7)}}));
  ExpectValue("Mod(-7, 3)", I(2));
  ExpectValue("Mod(7, -3)", I(-2));
  ExpectValue("Mod(-7, -3)", I(-1));
  ExpectValue("Mod(6, 3)", I(0));
  ExpectValue("PythonMod(-7, 3)", I(2));
  ExpectValue("PythonMod(7, -3)", I(-2));
  ExpectValue("-7 % 3", I(2));
  ExpectValue("-9223372036854775808 % -1", I(0));
  ExpectValue("-9223372036854775808 // 2", I(-4611686018427387904));
  // Floats: Python's float floor division and modulo.
  ExpectValue("-7.5 // 2", F(-4.0));
  ExpectValue("-7.5 % 2", F(0.5));
  ExpectValue("7.5 % -2", F(-0.5));
  ExpectValue("7.5 // -2", F(-4.0));
  ExpectValue("6.0 % -3", F(-0.0));
}

TEST(SymExprTest, CeilAndCleanDivision) {
  ExpectValue("CeilDiv(7, 2)", I(4));
  ExpectValue("CeilDiv(-7, 2)", I(-3));
  ExpectValue("CeilDiv(7, -2)", I(-3));
  ExpectValue("CeilDiv(-7, -2)", I(4));
  ExpectValue("CeilDiv(6, 3)", I(2));
  ExpectValue("CeilDiv(0, 5)", I(0));
  ExpectValue("CeilDiv(-9223372036854775808, 2)", I(-4611686018427387904));
  ExpectValue("CeilDiv(7.0, 2)", F(4.0));
  ExpectValue("CleanDiv(8, 2)", I(4));
  ExpectValue("CleanDiv(-8, 2)", I(-4));
  ExpectValue("CleanDiv(7, 2)", I(3));  // as FloorDiv, which PyTorch prints it as
}

TEST(SymExprTest, TrueDivisionGivesCorrectlyRoundedFloats) {
  ExpectValue("IntTrueDiv(7, 2)", F(3.5));
  ExpectValue("IntTrueDiv(1, 3)", F(1.0 / 3.0));
  ExpectValue("IntTrueDiv(-1, 4)", F(-0.25));
  ExpectValue("IntTrueDiv(0, -5)", F(-0.0));
  ExpectValue("IntTrueDiv(6, 3)", F(2.0));
  ExpectValue("7 / 2", F(3.5));
  // Beyond 2**53 Python rounds the exact quotient once; so must we.
  ExpectValue("IntTrueDiv(9007199254740993, 1)", F(9007199254740992.0));
  ExpectValue("IntTrueDiv(4611686018427387905, 3)", F(1.5372286728091292e+18));
  ExpectValue("IntTrueDiv(-9223372036854775807, 3)", F(-3.0744573456182584e+18));
  ExpectValue("IntTrueDiv(9223372036854775807, 9223372036854775806)", F(1.0));
  ExpectValue("FloatTrueDiv(ToFloat(7), 2.0)", F(3.5));
  ExpectValue("FloatTrueDiv(1, 4)", F(0.25));
  ExpectValue("1 + 0.5", F(1.5));
  ExpectValue("ToFloat(3)", F(3.0));
  ExpectValue("ToFloat(True)", F(1.0));
}

TEST(SymExprTest, RoundingToIntegers) {
  ExpectValue("CeilToInt(2.0)", I(2));
  ExpectValue("CeilToInt(2.5)", I(3));
  ExpectValue("CeilToInt(-2.5)", I(-2));
  ExpectValue("CeilToInt(5)", I(5));
  ExpectValue("CeilToInt(IntTrueDiv(64, 32))", I(2));
  ExpectValue("CeilToInt(IntTrueDiv(65, 32))", I(3));
  ExpectValue("FloorToInt(-2.5)", I(-3));
  ExpectValue("FloorToInt(2.5)", I(2));
  ExpectValue("TruncToInt(-2.5)", I(-2));
  ExpectValue("TruncToInt(2.5)", I(2));
  ExpectValue("math.floor(7 / 2)", I(3));
  ExpectValue("math.ceil(7 / 2)", I(4));
  ExpectValue("math.trunc(-7 / 2)", I(-3));
  ExpectValue("FloorToInt(-9223372036854775808.0)", I(INT64_MIN));
  ExpectError("CeilToInt(1e300)", absl::StatusCode::kOutOfRange, "overflow");
  ExpectError("FloorToInt(9223372036854775808.0)", absl::StatusCode::kOutOfRange, "overflow");
  ExpectError("CeilToInt(oo)", absl::StatusCode::kOutOfRange, "overflow");
  ExpectError("TruncToInt(oo - oo)", absl::StatusCode::kInvalidArgument, "nan");
}

TEST(SymExprTest, ArithmeticAndPowers) {
  ExpectValue("2**10", I(1024));
  ExpectValue("2**3**2", I(512));
  ExpectValue("-2**2", I(-4));
  ExpectValue("(-2)**2", I(4));
  ExpectValue("(-2)**3", I(-8));
  ExpectValue("2**-1", F(0.5));
  ExpectValue("2**62", I(int64_t{1} << 62));
  ExpectValue("(-2)**63", I(INT64_MIN));
  ExpectValue("0**0", I(1));
  ExpectValue("(-1)**1000000000001", I(-1));
  ExpectValue("4.0**0.5", F(2.0));
  ExpectValue("PowByNatural(3, 4)", I(81));
  ExpectValue("FloatPow(2, 0.5)", F(1.4142135623730951));
  ExpectValue("FloatPow(2, 2)", F(4.0));
  ExpectValue("s0 - 3*s1 + 2", I(-11), Symbols({{"s0", I(2)}, {"s1", I(5)}}));
  ExpectValue("-s0", I(-2), Symbols({{"s0", I(2)}}));
  ExpectValue("--s0", I(2), Symbols({{"s0", I(2)}}));
  ExpectValue("Abs(-5)", I(5));
  ExpectValue("Abs(-2.5)", F(2.5));
  ExpectValue("Max(1, 2.0)", F(2.0));
  ExpectValue("Max(2, 2.0)", I(2));  // the first of equals, as Python's max
  ExpectValue("Min(3, s0, 7)", I(-1), Symbols({{"s0", I(-1)}}));
  ExpectValue("max(s0, 4)", I(4), Symbols({{"s0", I(-1)}}));
  ExpectValue("min(s0, 4)", I(-1), Symbols({{"s0", I(-1)}}));
  ExpectValue("abs(s0)", I(1), Symbols({{"s0", I(-1)}}));
  ExpectValue("torch.sym_float(s0)", F(-1.0), Symbols({{"s0", I(-1)}}));
  ExpectValue("True + True", I(2));
  ExpectValue("-9223372036854775808", I(INT64_MIN));
  ExpectError("(-8.0)**0.5", absl::StatusCode::kInvalidArgument, "complex");
  ExpectError("10.0**400", absl::StatusCode::kOutOfRange, "overflow");
}

TEST(SymExprTest, RoundingLikePython) {
  ExpectValue("RoundToInt(2.5)", I(2));  // ties to even
  ExpectValue("RoundToInt(3.5)", I(4));
  ExpectValue("RoundToInt(-2.5)", I(-2));
  ExpectValue("RoundToInt(2.4999)", I(2));
  ExpectValue("RoundToInt(7)", I(7));
  ExpectValue("round(0.5)", I(0));
  ExpectValue("round(-0.5)", I(0));
  ExpectError("RoundToInt(oo)", absl::StatusCode::kOutOfRange, "overflow");
  ExpectError("RoundToInt(oo - oo)", absl::StatusCode::kInvalidArgument, "nan");
  // round(x, n): the nearest decimal to the binary value, ties to even, as CPython.
  ExpectValue("RoundDecimal(2.675, 2)", F(2.67));  // 2.675 is just below 2.675
  ExpectValue("RoundDecimal(0.125, 2)", F(0.12));  // an exact tie
  ExpectValue("RoundDecimal(0.375, 2)", F(0.38));
  ExpectValue("RoundDecimal(123.456, 1)", F(123.5));
  ExpectValue("RoundDecimal(0.3, 20)", F(0.3));
  ExpectValue("RoundDecimal(1234.5, -2)", F(1200.0));
  ExpectValue("RoundDecimal(1250.0, -2)", F(1200.0));
  ExpectValue("RoundDecimal(1350.0, -2)", F(1400.0));
  ExpectValue("RoundDecimal(50.0, -2)", F(0.0));
  ExpectValue("RoundDecimal(51.0, -2)", F(100.0));
  ExpectValue("RoundDecimal(-51.0, -2)", F(-100.0));
  ExpectValue("RoundDecimal(-0.001, 2)", F(-0.0));
  ExpectValue("RoundDecimal(5e-324, 323)", F(0.0));
  ExpectValue("RoundDecimal(1e300, -400)", F(0.0));
  ExpectValue("RoundDecimal(1.5, 400)", F(1.5));
  ExpectValue("RoundDecimal(5, 1)", F(5.0));  // sympy rounds float(x)
  ExpectValue("round(2.5, 0)", F(2.0));
  ExpectValue("round(0.5, 0)", F(0.0));
  ExpectValue("round(1.5, 0)", F(2.0));
  ExpectError("RoundDecimal(1.7976931348623157e308, -308)", absl::StatusCode::kOutOfRange,
              "too large");
  ExpectError("RoundDecimal(1.5, 0.5)", absl::StatusCode::kInvalidArgument, "must be an int");
  ExpectValue("TruncToFloat(-2.5)", F(-2.0));
  ExpectValue("TruncToFloat(3)", F(3.0));
  ExpectValue("floor(2.5)", I(2));
  ExpectValue("ceiling(2.5)", I(3));
}

TEST(SymExprTest, BitwiseAndShifts) {
  ExpectValue("BitwiseFn_bitwise_and(12, 10)", I(8));
  ExpectValue("BitwiseFn_bitwise_or(12, 10)", I(14));
  ExpectValue("12 & 10", I(8));
  ExpectValue("12 | 10", I(14));
  ExpectValue("-8 & 7", I(0));
  ExpectValue("True & False", B(false));  // two bools give a bool, as in Python
  ExpectValue("True | 2", I(3));
  ExpectValue("1 | 2 & 3", I(3));                                // & binds tighter than |
  ExpectValue("2 + 1 & 1", I(1));                                // and + tighter than &
  ExpectValue("s0 & 1 == 1", B(true), Symbols({{"s0", I(5)}}));  // comparisons bind last
  ExpectError("1.5 & 1", absl::StatusCode::kInvalidArgument, "unsupported operand");
  ExpectValue("LShift(3, 4)", I(48));
  ExpectValue("LShift(1, 62)", I(int64_t{1} << 62));
  ExpectValue("LShift(-1, 63)", I(INT64_MIN));
  ExpectValue("LShift(0, 1000)", I(0));
  ExpectValue("RShift(-7, 1)", I(-4));
  ExpectValue("RShift(5, 100)", I(0));
  ExpectValue("RShift(-5, 100)", I(-1));
  ExpectError("LShift(1, 63)", absl::StatusCode::kOutOfRange, "overflow");
  ExpectError("LShift(3, 62)", absl::StatusCode::kOutOfRange, "overflow");
  ExpectError("LShift(1, -1)", absl::StatusCode::kInvalidArgument, "negative shift");
  ExpectError("RShift(1.0, 1)", absl::StatusCode::kInvalidArgument, "unsupported operand");
}

// sympy prints And, Or and Not of relations as &, | and ~.
TEST(SymExprTest, SympyLogicPrinting) {
  const Bindings b = Symbols({{"s0", I(3)}, {"s1", I(1)}});
  ExpectValue("(s0 > 2) & (s1 < 3)", B(true), b);
  ExpectValue("(s0 > 5) & (s1 < 3)", B(false), b);
  ExpectValue("Eq(s0, 1) | Eq(s1, 1)", B(true), b);
  ExpectValue("Eq(s0, 1) | Eq(s1, 2)", B(false), b);
  ExpectValue("~(s0 > 2)", B(false), b);
  ExpectValue("~Eq(s1, 2)", B(true), b);
  ExpectValue("~True", B(false));  // sympy's Not, not Python's bitwise inversion
  ExpectValue("(s0 >= 2) & ~Eq(s1, 0) | Eq(s0, 0)", B(true), b);
}

TEST(SymExprTest, IdentityAndNonOverlappingAndDense) {
  ExpectValue("Identity(s0)", I(3), Symbols({{"s0", I(3)}}));
  ExpectValue("2*Identity(s0 + 1)", I(8), Symbols({{"s0", I(3)}}));
  ExpectValue("IsNonOverlappingAndDenseIndicator(2, 3, 3, 1)", I(1));    // contiguous
  ExpectValue("IsNonOverlappingAndDenseIndicator(2, 3, 1, 2)", I(1));    // transposed
  ExpectValue("IsNonOverlappingAndDenseIndicator(2, 3, 4, 1)", I(0));    // a gap
  ExpectValue("IsNonOverlappingAndDenseIndicator(2, 2, 1, 1)", I(0));    // overlapping
  ExpectValue("IsNonOverlappingAndDenseIndicator(1, 3, 100, 1)", I(1));  // size 1: any stride
  ExpectValue("IsNonOverlappingAndDenseIndicator(5, 2)", I(0));
  ExpectValue("IsNonOverlappingAndDenseIndicator(1, 2)", I(1));
  ExpectValue("IsNonOverlappingAndDenseIndicator(5, 1)", I(1));
  ExpectValue("IsNonOverlappingAndDenseIndicator(s0, 4, 4, 1)", I(1), Symbols({{"s0", I(7)}}));
  // The running stride passes int64 only after the last comparison that needs it.
  ExpectValue("IsNonOverlappingAndDenseIndicator(4294967296, 4294967296, 4294967296, 1)", I(1));
  ExpectValue("IsNonOverlappingAndDenseIndicator(4294967296, 4294967296, 4, 4294967296, 1, 0)",
              I(0));
  ExpectError("IsNonOverlappingAndDenseIndicator(2.0, 1)", absl::StatusCode::kInvalidArgument,
              "integer");
}

TEST(SymExprTest, MathFunctionsWithPythonErrors) {
  ExpectValue("OpaqueUnaryFn_sqrt(4)", F(2.0));
  ExpectValue("math.sqrt(2.0)", F(1.4142135623730951));
  ExpectValue("OpaqueUnaryFn_cos(1)", F(std::cos(1.0)));
  ExpectValue("OpaqueUnaryFn_cosh(1)", F(std::cosh(1.0)));
  ExpectValue("OpaqueUnaryFn_sin(0)", F(0.0));
  ExpectValue("OpaqueUnaryFn_sinh(1)", F(std::sinh(1.0)));
  ExpectValue("OpaqueUnaryFn_tan(1)", F(std::tan(1.0)));
  ExpectValue("OpaqueUnaryFn_tanh(0.5)", F(std::tanh(0.5)));
  ExpectValue("OpaqueUnaryFn_asin(1)", F(std::asin(1.0)));
  ExpectValue("OpaqueUnaryFn_acos(1)", F(0.0));
  ExpectValue("OpaqueUnaryFn_atan(1.0)", F(0.7853981633974483));
  ExpectValue("OpaqueUnaryFn_exp(0)", F(1.0));
  ExpectValue("OpaqueUnaryFn_exp(-oo)", F(0.0));
  ExpectValue("OpaqueUnaryFn_log(1)", F(0.0));
  ExpectValue("OpaqueUnaryFn_asinh(1.0)", F(std::asinh(1.0)));
  ExpectValue("math.log2(8)", F(3.0));
  ExpectValue("math.exp(oo)", F(INFINITY));
  ExpectError("OpaqueUnaryFn_sqrt(-1)", absl::StatusCode::kInvalidArgument, "math domain error");
  ExpectError("OpaqueUnaryFn_log(0)", absl::StatusCode::kInvalidArgument, "math domain error");
  ExpectError("OpaqueUnaryFn_asin(2)", absl::StatusCode::kInvalidArgument, "math domain error");
  ExpectError("OpaqueUnaryFn_sin(oo)", absl::StatusCode::kInvalidArgument, "math domain error");
  ExpectError("OpaqueUnaryFn_exp(1000)", absl::StatusCode::kOutOfRange, "math range error");
  ExpectError("OpaqueUnaryFn_cosh(1000)", absl::StatusCode::kOutOfRange, "math range error");
}

TEST(SymExprTest, OverflowIsAnError) {
  ExpectError("9223372036854775807 + 1", absl::StatusCode::kOutOfRange, "overflow");
  ExpectError("-9223372036854775807 - 2", absl::StatusCode::kOutOfRange, "overflow");
  ExpectError("s0*s0", absl::StatusCode::kOutOfRange, "overflow",
              Symbols({{"s0", I(int64_t{1} << 32)}}));
  ExpectError("2**63", absl::StatusCode::kOutOfRange, "overflow");
  ExpectError("3**40", absl::StatusCode::kOutOfRange, "overflow");
  ExpectError("-s0", absl::StatusCode::kOutOfRange, "overflow", Symbols({{"s0", I(INT64_MIN)}}));
  ExpectError("-9223372036854775808 // -1", absl::StatusCode::kOutOfRange, "overflow");
  ExpectError("CeilDiv(-9223372036854775808, -1)", absl::StatusCode::kOutOfRange, "overflow");
  ExpectError("Abs(-9223372036854775808)", absl::StatusCode::kOutOfRange, "overflow");
}

TEST(SymExprTest, DivisionByZeroIsAnError) {
  for (const char* text :
       {"1 // 0", "1 % 0", "1 / 0", "1.0 / 0.0", "1.5 // 0", "2.5 % 0.0", "Mod(s0, 0)",
        "PythonMod(3, 0)", "FloorDiv(3, 0)", "CleanDiv(3, 0)", "CeilDiv(1, 0)", "IntTrueDiv(1, 0)",
        "FloatTrueDiv(1.0, 0)", "0**-1", "0.0**-2.0"}) {
    ExpectError(text, absl::StatusCode::kOutOfRange, "division by zero", Symbols({{"s0", I(5)}}));
  }
}

TEST(SymExprTest, ComparisonsAndLogic) {
  const Bindings x2 = Symbols({{"x", I(0)}, {"s0", I(2)}});
  ExpectValue("2 <= s0 < 5", B(true), x2);
  ExpectValue("2 <= s0 < 5", B(false), Symbols({{"s0", I(5)}}));
  ExpectValue("2 <= s0 < 5", B(false), Symbols({{"s0", I(1)}}));
  ExpectValue("1 < 2 > 0 != 3 == 3", B(true));
  ExpectValue("2 == 2.0", B(true));
  ExpectValue("9007199254740993 == 9007199254740992.0", B(false));  // exact, as Python
  ExpectValue("9007199254740993 > 9007199254740992.0", B(true));
  ExpectValue("s0 < oo", B(true), x2);
  ExpectValue("s0 < int_oo", B(true), x2);
  ExpectValue("-oo < s0", B(true), x2);
  ExpectValue("s0 < math.inf", B(true), x2);
  ExpectValue("0 or 5", I(5));
  ExpectValue("2 and 3", I(3));
  ExpectValue("0 and 1 // 0", I(0));  // short-circuit: the division never happens
  ExpectValue("s0 != 0 and 10 // s0 > 1", B(false), Symbols({{"s0", I(0)}}));
  ExpectValue("s0 == 0 or 10 // s0 > 1", B(true), Symbols({{"s0", I(0)}}));
  ExpectValue("1 > 2 < 1 // 0", B(false));  // the chain stops before the division
  ExpectValue("not s0 == 1", B(true), x2);
  ExpectValue("not not 0", B(false));
  ExpectValue("And(s0 > 1, s0 < 3)", B(true), x2);
  ExpectValue("And(s0 > 3, 1 // 0)", B(false), x2);
  ExpectValue("Or(s0 > 3, s0 < 3)", B(true), x2);
  ExpectValue("Or(0, 0.0)", B(false));
  ExpectValue("Not(s0 > 1)", B(false), x2);
  ExpectValue("Lt(1, 2)", B(true));
  ExpectValue("Le(2, 2)", B(true));
  ExpectValue("Gt(1, 2)", B(false));
  ExpectValue("Ge(2.5, 2)", B(true));
  ExpectValue("1 if s0 > 0 else 2", I(1), x2);
  ExpectValue("1 if s0 > 5 else 2", I(2), x2);
  ExpectValue("1 // 0 if False else 7", I(7));
  ExpectError("s0 == 1 and s9 == 2", absl::StatusCode::kInvalidArgument, "s9",
              Symbols({{"s0", I(1)}}));
}

TEST(SymExprTest, Piecewise) {
  const std::string relu = "Piecewise((s0, s0 > 0), (0, True))";
  ExpectValue(relu, I(5), Symbols({{"s0", I(5)}}));
  ExpectValue(relu, I(0), Symbols({{"s0", I(-5)}}));
  ExpectValue("Piecewise((1 // 0, False), (2, True))", I(2));
  ExpectValue("Piecewise((1, s0 > 0), (2.5, s0 < 0), (3, True))", F(2.5), Symbols({{"s0", I(-1)}}));
  ExpectError("Piecewise((1, False))", absl::StatusCode::kInvalidArgument, "Piecewise");
  ExpectError("Piecewise((1, 1 // 0), (2, True))", absl::StatusCode::kOutOfRange, "division");
}

TEST(SymExprTest, EvaluateIntAndBool) {
  auto e = Parse("256*s75");
  ASSERT_TRUE(e.ok());
  auto v = EvaluateInt(**e, Symbols({{"s75", I(4)}}));
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(*v, 1024);
  auto f = Parse("IntTrueDiv(s75, 2)");
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(EvaluateInt(**f, Symbols({{"s75", I(4)}})).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto g = Parse("s0 % 8");
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(*EvaluateBool(**g, Symbols({{"s0", I(9)}})), true);
  EXPECT_EQ(*EvaluateBool(**g, Symbols({{"s0", I(16)}})), false);
  auto unbound = Evaluate(**e, Bindings{});
  EXPECT_EQ(unbound.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(unbound.status().message(), HasSubstr("s75"));
}

// A parse error names the position and the token at fault.
void ExpectParseError(const std::string& text, const std::string& substring) {
  absl::StatusOr<ExprPtr> e = Parse(text);
  ASSERT_FALSE(e.ok()) << text << " parsed as " << Print(**e);
  EXPECT_EQ(e.status().code(), absl::StatusCode::kInvalidArgument) << text;
  EXPECT_THAT(e.status().message(), HasSubstr(substring)) << text;
}

TEST(SymExprTest, ParseErrorsNameTokenAndPosition) {
  ExpectParseError("", "position 0: unexpected end of input");
  ExpectParseError("s0 +", "position 4: unexpected end of input; expected an expression");
  ExpectParseError("Eq(s0, 1", "position 8: unexpected end of input; expected ',' or ')'");
  ExpectParseError("s0 $ 1", "position 3: no token starts with this character: '$'");
  ExpectParseError("s0 = 1", "position 3: no token starts with this character: '='");
  ExpectParseError("Foo(s0)", "position 0: unknown name at 'Foo'");
  ExpectParseError("x0 + 1", "position 0: unknown name at 'x0'");
  ExpectParseError("s01", "unknown name at 's01'");
  ExpectParseError("ps0", "unknown name at 'ps0'");
  ExpectParseError("sympy.Max(1, 2)", "unknown name at 'sympy.Max'");
  ExpectParseError("L['x0']", "position 0: malformed input reference");
  ExpectParseError("L[\"t0\"]", "malformed input reference");
  ExpectParseError("L['t01']", "malformed input reference");
  ExpectParseError("2s0", "position 0: malformed number: '2s0'");
  ExpectParseError("1.5.2", "malformed number");
  ExpectParseError("1e", "malformed number");
  ExpectParseError("007", "leading zeros");
  ExpectParseError("Eq(s0)", "Eq takes 2 arguments, got 1");
  ExpectParseError("Abs(1, 2)", "Abs takes 1 argument, got 2");
  ExpectParseError("Max()", "position 4: unexpected ')'; expected an expression");
  ExpectParseError("Max", "expected '(' after Max");
  ExpectParseError("9223372036854775808", "integer literal out of range");
  ExpectParseError("-(9223372036854775808)", "integer literal out of range");
  ExpectParseError("1e400", "float literal out of range");
  ExpectParseError("s0 s1", "position 3: unexpected 's1'; expected end of input");
  ExpectParseError("Piecewise(s0, True)", "expected '(' starting a (value, condition) pair");
  ExpectParseError("Piecewise((s0 True))", "expected ',' in a (value, condition) pair");
  ExpectParseError("1 if s0", "expected 'else'");
  ExpectParseError("s0 and", "unexpected end of input");
  ExpectParseError("and s0", "position 0: unexpected 'and'");
  ExpectParseError("(s0", "expected ')'");
  ExpectParseError("s0)", "position 2: unexpected ')'");
  ExpectParseError("s0\n", "position 2: no token starts with this character: '\\n'");
  ExpectParseError("+s0", "position 0: unexpected '+'");
  ExpectParseError("s0 ^ s1", "'^'");
  ExpectParseError("IsNonOverlappingAndDenseIndicator(2, 3, 1)", "an even number of arguments");
  ExpectParseError("round(1, 2, 3)", "RoundToInt takes 1 argument, got 3");
  ExpectParseError("ModularIndexing(s0, 1, 2)", "unknown name");
  ExpectParseError("None", "unknown name at 'None'");
  ExpectParseError("s0 ** ", "unexpected end of input");
  ExpectParseError("Max(1, 2,)", "position 9: unexpected ')'");
}

TEST(SymExprTest, DeepNestingIsAnErrorNotACrash) {
  for (const std::string& deep :
       {std::string(100000, '(') + "s0" + std::string(100000, ')'), std::string(100000, '-') + "s0",
        [] {
          std::string s;
          for (int i = 0; i < 20000; ++i) s += "not ";
          return s + "s0";
        }(),
        [] {
          std::string s = "s0";
          for (int i = 0; i < 20000; ++i) s += "**s0";
          return s;
        }(),
        [] {
          std::string s;
          for (int i = 0; i < 20000; ++i) s += "Max(";
          return s + "1" + std::string(20000, ')');
        }(),
        [] {
          std::string s;
          for (int i = 0; i < 20000; ++i) s += "1 if True else ";
          return s + "2";
        }()}) {
    absl::StatusOr<ExprPtr> e = Parse(deep);
    ASSERT_FALSE(e.ok());
    EXPECT_THAT(e.status().message(), HasSubstr("nests deeper than 128 levels"));
  }
  // Right up to the limit is fine, and long flat chains do not nest at all.
  std::string ok = std::string(kMaxDepth - 1, '(') + "s0" + std::string(kMaxDepth - 1, ')');
  EXPECT_TRUE(Parse(ok).ok()) << Parse(ok).status();
  std::string sum = "s0";
  for (int i = 0; i < 100000; ++i) sum += " + 1";
  auto long_sum = Parse(sum);
  ASSERT_TRUE(long_sum.ok());
  EXPECT_EQ(*EvaluateInt(**long_sum, Symbols({{"s0", I(5)}})), 100005);
  EXPECT_EQ(Print(**long_sum), sum);
}

// Printing is canonical: known texts print as expected, and printing round-trips.
TEST(SymExprTest, CanonicalPrint) {
  const std::pair<const char*, const char*> cases[] = {
      {"256*s75", "256*s75"},
      {"s75*s95", "s75*s95"},
      {"Max(1, 32*CeilToInt(IntTrueDiv(s75, 32)))", "Max(1, 32*CeilToInt(IntTrueDiv(s75, 32)))"},
      {"Eq(zf97, 1.0e-5)", "Eq(zf97, 1e-05)"},
      {"Eq(zf38, 2.0)", "Eq(zf38, 2.0)"},
      {"Ne(s0, 1)", "Ne(s0, 1)"},
      {"s1 >= 2", "s1 >= 2"},
      {"Eq(Mod(s0, 8), 0)", "Eq(Mod(s0, 8), 0)"},
      {"2 <= L['t0'] and 2 <= L['t1']", "2 <= L['t0'] and 2 <= L['t1']"},
      {"L['t2'] == L['t1']*L['t0'] and 2 <= L['t0'] and 2 <= L['t1']",
       "L['t2'] == L['t1']*L['t0'] and 2 <= L['t0'] and 2 <= L['t1']"},
      {"L['t1'] == 128*L['t0'] and 2 <= L['t0']", "L['t1'] == 128*L['t0'] and 2 <= L['t0']"},
      {"(s0//2)", "s0 // 2"},
      {"s0  %  3", "s0 % 3"},
      {"s0/s1", "s0/s1"},
      {"max(s0, 2)", "Max(s0, 2)"},
      {"math.floor(s0 / 2)", "FloorToInt(s0/2)"},
      {"torch.sym_float(s0)", "ToFloat(s0)"},
      {"math.inf", "oo"},
      {"-int_oo", "-int_oo"},
      {"-5", "-5"},
      {"- 5", "-5"},
      {"-(5)", "-(5)"},
      {"-(-5)", "--5"},
      {"(-5)**2", "(-5)**2"},
      {"-5**2", "-5**2"},
      {"2**-1", "2**-1"},
      {"2**(3**2)", "2**3**2"},
      {"(2**3)**2", "(2**3)**2"},
      {"(s0 + s1) + s2", "(s0 + s1) + s2"},
      {"s0 + (s1 + s2)", "s0 + (s1 + s2)"},
      {"(s0 + s1)*s2", "(s0 + s1)*s2"},
      {"s0 - -5", "s0 - -5"},
      {"s0*-1", "s0*-1"},
      {"-s0*s1", "-s0*s1"},
      {"-(s0*s1)", "-(s0*s1)"},
      {"(2 <= s0) < 5", "(2 <= s0) < 5"},
      {"2<=s0<5", "2 <= s0 < 5"},
      {"not (s0 == 1)", "not s0 == 1"},
      {"(not s0) == 1", "(not s0) == 1"},
      {"s0 or s1 and s2", "s0 or s1 and s2"},
      {"(s0 or s1) and s2", "(s0 or s1) and s2"},
      {"(1 if s0 else 2) if s1 else 3", "(1 if s0 else 2) if s1 else 3"},
      {"1 if s0 else 2 if s1 else 3", "1 if s0 else 2 if s1 else 3"},
      {"Max(1 if s0 else 2, 3)", "Max(1 if s0 else 2, 3)"},
      {"Piecewise((s0, s0 > 0), (0, True))", "Piecewise((s0, s0 > 0), (0, True))"},
      {"1e16", "1e+16"},
      {"1.0e16", "1e+16"},
      {"1e15", "1000000000000000.0"},
      {"0.0001", "0.0001"},
      {"0.00001", "1e-05"},
      {"123456789012345678.0", "1.2345678901234568e+17"},
      {"1.5", "1.5"},
      {".5", "0.5"},
      {"5.", "5.0"},
      {"-0.0", "-0.0"},
      {"0.0", "0.0"},
      {"100.0", "100.0"},
      {"2.5e-300", "2.5e-300"},
      {"True", "True"},
      {"u3 + zuf2 + zf1 + s10", "u3 + zuf2 + zf1 + s10"},
      {"\t s0 ", "s0"},
      {"-9223372036854775808", "-9223372036854775808"},
      {"round(s0)", "RoundToInt(s0)"},
      {"round(zf0, 2)", "RoundDecimal(zf0, 2)"},
      {"math.sqrt(zf0)", "OpaqueUnaryFn_sqrt(zf0)"},
      {"floor(zf0) + ceiling(zf0)", "FloorToInt(zf0) + CeilToInt(zf0)"},
      {"~(s0 > 2)", "Not(s0 > 2)"},
      {"~~Eq(s0, 1)", "Not(Not(Eq(s0, 1)))"},
      {"(s0 > 2) & (s1 < 3)", "(s0 > 2) & (s1 < 3)"},
      {"Eq(s0, 1) | Eq(s1, 1)", "Eq(s0, 1) | Eq(s1, 1)"},
      {"s0 | s1 & s2", "s0 | s1 & s2"},
      {"(s0 | s1) & s2", "(s0 | s1) & s2"},
      {"(s0 & 1) + 2", "(s0 & 1) + 2"},
      {"s0 & 1 == 1", "s0 & 1 == 1"},
      {"-s0 & -1", "-s0 & -1"},
      {"IsNonOverlappingAndDenseIndicator(s0, 4, 4, 1)",
       "IsNonOverlappingAndDenseIndicator(s0, 4, 4, 1)"},
      {"Identity(2*s0)", "Identity(2*s0)"},
  };
  for (const auto& [text, expected] : cases) {
    absl::StatusOr<ExprPtr> e = Parse(text);
    ASSERT_TRUE(e.ok()) << text << ": " << e.status();
    const std::string printed = Print(**e);
    EXPECT_EQ(printed, expected) << text;
    absl::StatusOr<ExprPtr> again = Parse(printed);
    ASSERT_TRUE(again.ok()) << printed << ": " << again.status();
    EXPECT_TRUE(Equal(**e, **again)) << text << " -> " << printed;
    EXPECT_EQ(Print(**again), printed);
  }
}

TEST(SymExprTest, DifferentTreesPrintDifferently) {
  const std::pair<const char*, const char*> pairs[] = {
      {"(s0 + s1) + s2", "s0 + s1 + s2"},
      {"-(5)", "-5"},
      {"(2 <= s0) < 5", "2 <= s0 < 5"},
      {"Mod(s0, 2)", "PythonMod(s0, 2)"},
      {"s0 % 2", "Mod(s0, 2)"},
      {"oo", "int_oo"},
      {"0.0", "-0.0"},
      {"1", "1.0"},
      {"FloorDiv(s0, 2)", "s0 // 2"},
      {"Eq(s0, 1)", "s0 == 1"},
      {"s0 and s1", "And(s0, s1)"},
      {"s0 & s1", "BitwiseFn_bitwise_and(s0, s1)"},
      {"(s0 | s1) | s2", "s0 | s1 | s2"},
      {"~s0", "not s0"},
      {"round(zf0)", "round(zf0, 0)"},
  };
  for (const auto& [a, b] : pairs) {
    auto ea = Parse(a);
    auto eb = Parse(b);
    ASSERT_TRUE(ea.ok() && eb.ok()) << a << " / " << b;
    EXPECT_FALSE(Equal(**ea, **eb)) << a << " / " << b;
    EXPECT_NE(Print(**ea), Print(**eb)) << a << " / " << b;
  }
}

TEST(SymExprTest, FreeSymbolsInOrderOfAppearance) {
  auto e = Parse("Eq(s1, s0) and L['t0'] > s1 + zf2*s0");
  ASSERT_TRUE(e.ok());
  EXPECT_THAT(FreeSymbols(**e), ElementsAre("s1", "s0", "L['t0']", "zf2"));
  auto c = Parse("Max(1, 2)");
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(FreeSymbols(**c).empty());
  auto cond = Parse("s2 if s1 else s0");
  ASSERT_TRUE(cond.ok());
  EXPECT_THAT(FreeSymbols(**cond), ElementsAre("s2", "s1", "s0"));
}

TEST(SymExprTest, RenameSymbols) {
  auto e = Parse("128*s77 + Max(s3, s77) == L['t0']");
  ASSERT_TRUE(e.ok());
  ExprPtr renamed = RenameSymbols(**e, {{"s77", "s0"}, {"s3", "s1"}, {"L['t0']", "s9"}});
  EXPECT_EQ(Print(*renamed), "128*s0 + Max(s1, s0) == L['t0']");
  EXPECT_EQ(Print(**e), "128*s77 + Max(s3, s77) == L['t0']");  // the original is untouched
  EXPECT_THAT(FreeSymbols(*renamed), ElementsAre("s0", "s1", "L['t0']"));
  auto reparsed = Parse(Print(*renamed));
  ASSERT_TRUE(reparsed.ok());
  EXPECT_TRUE(Equal(**reparsed, *renamed));
  Bindings b;
  b.symbols = {{"s0", I(2)}, {"s1", I(5)}, {"L['t0']", I(261)}};
  EXPECT_EQ(*EvaluateBool(*renamed, b), true);
  // Renaming is a permutation-safe simultaneous substitution.
  ExprPtr swapped = RenameSymbols(**e, {{"s77", "s3"}, {"s3", "s77"}});
  EXPECT_EQ(Print(*swapped), "128*s3 + Max(s77, s3) == L['t0']");
}

TEST(SymExprTest, FormatValue) {
  EXPECT_EQ(FormatValue(I(64)), "64");
  EXPECT_EQ(FormatValue(I(-3)), "-3");
  EXPECT_EQ(FormatValue(F(1e-5)), "1e-05");
  EXPECT_EQ(FormatValue(F(2.0)), "2.0");
  EXPECT_EQ(FormatValue(F(0.1)), "0.1");
  EXPECT_EQ(FormatValue(F(1e22)), "1e+22");
  EXPECT_EQ(FormatValue(F(5e-324)), "5e-324");
  EXPECT_EQ(FormatValue(F(INFINITY)), "inf");
  EXPECT_EQ(FormatValue(F(-INFINITY)), "-inf");
  EXPECT_EQ(FormatValue(F(NAN)), "nan");
  EXPECT_EQ(FormatValue(B(true)), "True");
}

}  // namespace
}  // namespace kiln::sym
