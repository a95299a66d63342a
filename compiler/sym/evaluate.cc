// Evaluate: Python's arithmetic over int64, double and bool.
//
// Nodes are evaluated bottom-up in their post-order, so evaluation never recurses. Each
// node's slot holds a value or an error; operators that Python short-circuits (`and`, `or`,
// chained comparisons, conditional expressions, And/Or/Piecewise) pick among their
// operands' slots in Python's order, so an error in an operand Python would never reach is
// ignored, and the error reported is the one Python would raise first.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <numeric>
#include <string>
#include <variant>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "compiler/sym/expr.h"
#include "compiler/sym/expr_tree.h"

namespace kiln::sym {
namespace {

constexpr double kTwo63 = 9223372036854775808.0;

// A number as arithmetic sees it: bools are the integers 0 and 1.
struct Num {
  bool is_int;
  int64_t i;
  double f;
};

Num ToNum(const Value& v) {
  if (const int64_t* i = std::get_if<int64_t>(&v)) return {true, *i, 0};
  if (const double* d = std::get_if<double>(&v)) return {false, 0, *d};
  return {true, std::get<bool>(v) ? 1 : 0, 0};
}

double AsDouble(const Num& n) { return n.is_int ? static_cast<double>(n.i) : n.f; }

const char* TypeName(const Value& v) {
  if (std::holds_alternative<int64_t>(v)) return "an int";
  if (std::holds_alternative<double>(v)) return "a float";
  return "a bool";
}

bool Truthy(const Value& v) {
  if (const int64_t* i = std::get_if<int64_t>(&v)) return *i != 0;
  if (const double* d = std::get_if<double>(&v)) return *d != 0.0;
  return std::get<bool>(v);
}

absl::Status Overflow(absl::string_view op, const Num& a, const Num& b) {
  return absl::OutOfRangeError(absl::StrCat("integer overflow: ", a.i, op, b.i));
}

absl::Status DivisionByZero(absl::string_view op, const Num& a, const Num& b) {
  return absl::OutOfRangeError(
      absl::StrCat("division by zero: ", FormatValue(a.is_int ? Value(a.i) : Value(a.f)), op,
                   FormatValue(b.is_int ? Value(b.i) : Value(b.f))));
}

// Python compares ints and floats exactly, not by rounding the int to a double.
Order Compare(const Num& a, const Num& b) {
  if (a.is_int && b.is_int) {
    return a.i < b.i ? Order::kLess : a.i > b.i ? Order::kGreater : Order::kEqual;
  }
  if (!a.is_int && !b.is_int) {
    if (std::isnan(a.f) || std::isnan(b.f)) return Order::kUnordered;
    return a.f < b.f ? Order::kLess : a.f > b.f ? Order::kGreater : Order::kEqual;
  }
  const bool flipped = !a.is_int;
  const int64_t i = flipped ? b.i : a.i;
  const double d = flipped ? a.f : b.f;
  Order o;
  if (std::isnan(d)) return Order::kUnordered;
  if (d >= kTwo63) {
    o = Order::kLess;
  } else if (d < -kTwo63) {
    o = Order::kGreater;
  } else {
    const double floor = std::floor(d);
    const auto whole = static_cast<int64_t>(floor);
    if (i != whole) {
      o = i < whole ? Order::kLess : Order::kGreater;
    } else {
      o = d > floor ? Order::kLess : Order::kEqual;
    }
  }
  if (!flipped) return o;
  return o == Order::kLess ? Order::kGreater : o == Order::kGreater ? Order::kLess : o;
}

bool Holds(ChainOp op, Order o) {
  switch (op) {
    case ChainOp::kEq:
      return o == Order::kEqual;
    case ChainOp::kNe:
      return o != Order::kEqual;
    case ChainOp::kLt:
      return o == Order::kLess;
    case ChainOp::kLe:
      return o == Order::kLess || o == Order::kEqual;
    case ChainOp::kGt:
      return o == Order::kGreater;
    case ChainOp::kGe:
      return o == Order::kGreater || o == Order::kEqual;
    default:
      return false;
  }
}

// int / int, correctly rounded as Python does it even beyond 2**53.
double IntTrueDivide(int64_t a, int64_t b) {
  const bool negative = (a < 0) != (b < 0);
  const uint64_t ua = a < 0 ? 0 - static_cast<uint64_t>(a) : static_cast<uint64_t>(a);
  const uint64_t ub = b < 0 ? 0 - static_cast<uint64_t>(b) : static_cast<uint64_t>(b);
  double q;
  constexpr uint64_t kExact = uint64_t{1} << 53;
  if (ua < kExact && ub < kExact) {
    q = static_cast<double>(ua) / static_cast<double>(ub);
  } else if (ua == 0) {
    q = 0;
  } else {
    // Scale the dividend so the integer quotient has at least 55 bits, fold the remainder
    // into a sticky bit, and let the one int->double conversion do the rounding.
    const int bits_a = 64 - __builtin_clzll(ua);
    const int bits_b = 64 - __builtin_clzll(ub);
    int shift = 55 + bits_b - bits_a;
    if (shift < 0) shift = 0;
    const unsigned __int128 n = static_cast<unsigned __int128>(ua) << shift;
    auto quotient = static_cast<uint64_t>(n / ub);
    if (n % ub != 0) quotient |= 1;
    q = std::ldexp(static_cast<double>(quotient), -shift);
  }
  return negative ? -q : q;
}

// Python's float floor division and modulo (CPython's float_divmod).
void FloatDivMod(double x, double y, double* div_out, double* mod_out) {
  double mod = std::fmod(x, y);
  double div = (x - mod) / y;
  if (mod != 0) {
    if ((y < 0) != (mod < 0)) {
      mod += y;
      div -= 1.0;
    }
  } else {
    mod = std::copysign(0.0, y);
  }
  double floordiv;
  if (div != 0) {
    floordiv = std::floor(div);
    if (div - floordiv > 0.5) floordiv += 1.0;
  } else {
    floordiv = std::copysign(0.0, x / y);
  }
  *div_out = floordiv;
  *mod_out = mod;
}

absl::StatusOr<Value> FloatPower(double x, double y) {
  if (y == 0) return Value(1.0);
  if (x == 0 && y < 0) {
    return absl::OutOfRangeError(
        absl::StrCat("division by zero: ", FormatValue(x), "**", FormatValue(y)));
  }
  if (x < 0 && std::isfinite(x) && std::isfinite(y) && std::floor(y) != y) {
    return absl::InvalidArgumentError(
        absl::StrCat("complex result: ", FormatValue(x), "**", FormatValue(y)));
  }
  const double r = std::pow(x, y);
  if (std::isinf(r) && std::isfinite(x) && std::isfinite(y)) {
    return absl::OutOfRangeError(
        absl::StrCat("float overflow: ", FormatValue(x), "**", FormatValue(y)));
  }
  return Value(r);
}

absl::StatusOr<Value> Power(const Num& a, const Num& b) {
  if (!a.is_int || !b.is_int || b.i < 0) return FloatPower(AsDouble(a), AsDouble(b));
  if (a.i == 0) return Value(int64_t{b.i == 0 ? 1 : 0});
  if (a.i == 1) return Value(int64_t{1});
  if (a.i == -1) return Value(int64_t{(b.i & 1) ? -1 : 1});
  int64_t result = 1;
  int64_t base = a.i;
  for (int64_t e = b.i; e != 0;) {
    if ((e & 1) && __builtin_mul_overflow(result, base, &result)) return Overflow("**", a, b);
    e >>= 1;
    if (e != 0 && __builtin_mul_overflow(base, base, &base)) return Overflow("**", a, b);
  }
  return Value(result);
}

absl::StatusOr<Value> Arith(ChainOp op, const Num& a, const Num& b) {
  const bool ints = a.is_int && b.is_int;
  int64_t r;
  switch (op) {
    case ChainOp::kAdd:
      if (!ints) return Value(AsDouble(a) + AsDouble(b));
      if (__builtin_add_overflow(a.i, b.i, &r)) return Overflow(" + ", a, b);
      return Value(r);
    case ChainOp::kSub:
      if (!ints) return Value(AsDouble(a) - AsDouble(b));
      if (__builtin_sub_overflow(a.i, b.i, &r)) return Overflow(" - ", a, b);
      return Value(r);
    case ChainOp::kMul:
      if (!ints) return Value(AsDouble(a) * AsDouble(b));
      if (__builtin_mul_overflow(a.i, b.i, &r)) return Overflow("*", a, b);
      return Value(r);
    case ChainOp::kTrueDiv:
      if (ints ? b.i == 0 : AsDouble(b) == 0) return DivisionByZero("/", a, b);
      if (ints) return Value(IntTrueDivide(a.i, b.i));
      return Value(AsDouble(a) / AsDouble(b));
    case ChainOp::kFloorDiv:
    case ChainOp::kMod: {
      const bool floor_div = op == ChainOp::kFloorDiv;
      const absl::string_view text = floor_div ? " // " : " % ";
      if (ints ? b.i == 0 : AsDouble(b) == 0) return DivisionByZero(text, a, b);
      if (!ints) {
        double div, mod;
        FloatDivMod(AsDouble(a), AsDouble(b), &div, &mod);
        return Value(floor_div ? div : mod);
      }
      if (b.i == -1) {
        if (!floor_div) return Value(int64_t{0});
        if (a.i == std::numeric_limits<int64_t>::min()) return Overflow(text, a, b);
        return Value(-a.i);
      }
      int64_t q = a.i / b.i;
      int64_t m = a.i % b.i;
      if (m != 0 && ((m < 0) != (b.i < 0))) {
        --q;
        m += b.i;
      }
      return Value(floor_div ? q : m);
    }
    default:
      return absl::InternalError("not an arithmetic operator");
  }
}

absl::StatusOr<Value> CeilDivide(const Num& a, const Num& b) {
  if (!a.is_int || !b.is_int) {
    if (AsDouble(b) == 0) return DivisionByZero(" ceildiv ", a, b);
    double div, mod;
    FloatDivMod(-AsDouble(a), AsDouble(b), &div, &mod);
    return Value(-div);
  }
  if (b.i == 0) return DivisionByZero(" ceildiv ", a, b);
  if (b.i == -1) {
    if (a.i == std::numeric_limits<int64_t>::min()) return Overflow(" ceildiv ", a, b);
    return Value(-a.i);
  }
  int64_t q = a.i / b.i;
  const int64_t m = a.i % b.i;
  if (m != 0 && ((m > 0) == (b.i > 0))) ++q;
  return Value(q);
}

// Python's round(x) of a float: the nearest integer, ties to even (as CPython computes it).
double RoundHalfEven(double x) {
  double r = std::round(x);
  if (std::fabs(x - r) == 0.5) r = 2.0 * std::round(x / 2.0);
  return r;
}

// math.floor / math.ceil / math.trunc / round.
absl::StatusOr<Value> ToInt(Function f, const Value& v) {
  const Num n = ToNum(v);
  if (n.is_int) return Value(n.i);
  if (std::isnan(n.f)) return absl::InvalidArgumentError("cannot convert float nan to integer");
  const double r = f == Function::kFloorToInt   ? std::floor(n.f)
                   : f == Function::kCeilToInt  ? std::ceil(n.f)
                   : f == Function::kRoundToInt ? RoundHalfEven(n.f)
                                                : std::trunc(n.f);
  if (!(r >= -kTwo63 && r < kTwo63)) {
    return absl::OutOfRangeError(
        absl::StrCat("integer overflow: ", InfoOf(f).name, "(", FormatValue(n.f), ")"));
  }
  return Value(static_cast<int64_t>(r));
}

// round(x, ndigits), which sympy's RoundDecimal applies to float(x): the decimal with
// `ndigits` digits after the point (before it when negative) nearest to x, ties to even,
// read back as a double, as CPython's float rounding computes it.
absl::StatusOr<Value> RoundDecimal(const Num& x, const Num& ndigits) {
  if (!ndigits.is_int) {
    return absl::InvalidArgumentError("RoundDecimal: the number of digits must be an int");
  }
  const double v = AsDouble(x);
  // CPython's bounds beyond which every double is already exact, or rounds to zero.
  if (!std::isfinite(v) || v == 0 || ndigits.i > 323) return Value(v);
  if (ndigits.i < -308) return Value(std::copysign(0.0, v));
  char buf[800];
  std::snprintf(buf, sizeof(buf), "%.17e", v);  // 18 digits: the exponent is never bumped
  const int64_t exponent = std::strtol(std::strchr(buf, 'e') + 1, nullptr, 10);
  const int64_t precision = exponent + ndigits.i;  // digits kept after the first one
  double r = std::copysign(0.0, v);
  if (precision >= 0) {
    // printf rounds the exact binary value, ties to even; strtod rounds the decimal back.
    std::snprintf(buf, sizeof(buf), "%.*e", static_cast<int>(precision), v);
    r = std::strtod(buf, nullptr);
  } else if (precision == -1) {
    // |x| < 10**-ndigits: it rounds to that or to zero; exactly half way goes to the even 0.
    std::snprintf(buf, sizeof(buf), "%.770e", v);  // every digit of a double
    const char* digits = buf + (buf[0] == '-');
    bool above = digits[0] > '5';
    for (const char* d = digits + 2; digits[0] == '5' && *d != 'e' && !above; ++d)
      above = *d != '0';
    if (above) {
      std::snprintf(buf, sizeof(buf), "%se%lld", v < 0 ? "-1" : "1",
                    static_cast<long long>(-ndigits.i));
      r = std::strtod(buf, nullptr);
    }
  }
  if (std::isinf(r)) {
    return absl::OutOfRangeError(absl::StrCat("rounded value too large to represent: RoundDecimal(",
                                              FormatValue(v), ", ", ndigits.i, ")"));
  }
  return Value(r);
}

// Python's & and | on ints and bools (sympy's BitwiseFn, and its printing of And and Or):
// two bools give a bool, anything with a float is a type error.
absl::StatusOr<Value> BitOp(ChainOp op, const Value& a, const Value& b) {
  const absl::string_view text = op == ChainOp::kBitAnd ? "&" : "|";
  if (std::holds_alternative<double>(a) || std::holds_alternative<double>(b)) {
    return absl::InvalidArgumentError(absl::StrCat("unsupported operand types for ", text, ": ",
                                                   TypeName(a), " and ", TypeName(b)));
  }
  const int64_t x = ToNum(a).i, y = ToNum(b).i;
  const int64_t r = op == ChainOp::kBitAnd ? (x & y) : (x | y);
  if (std::holds_alternative<bool>(a) && std::holds_alternative<bool>(b)) return Value(r != 0);
  return Value(r);
}

// Python's << and >> on ints (LShift, RShift): a negative count is an error, and so is a
// result beyond int64.
absl::StatusOr<Value> Shift(Function f, const Num& a, const Num& b) {
  const absl::string_view text = f == Function::kLShift ? " << " : " >> ";
  if (!a.is_int || !b.is_int) {
    return absl::InvalidArgumentError(
        absl::StrCat("unsupported operand types for", text, "(floats)"));
  }
  if (b.i < 0) return absl::InvalidArgumentError(absl::StrCat("negative shift count: ", b.i));
  if (f == Function::kRShift) {
    return Value(b.i >= 63 ? (a.i < 0 ? int64_t{-1} : int64_t{0}) : (a.i >> b.i));
  }
  if (a.i == 0) return Value(int64_t{0});
  int64_t r;
  if (b.i < 63 && !__builtin_mul_overflow(a.i, int64_t{1} << b.i, &r)) return Value(r);
  if (b.i == 63 && a.i == -1) return Value(std::numeric_limits<int64_t>::min());
  return Overflow(text, a, b);
}

// torch's eval_is_non_overlapping_and_dense over (sizes..., strides...): 1 when the dims,
// sorted stably by stride, lay the tensor out contiguously (size-1 dims aside), else 0; a
// rank-1 tensor needs only stride 1 or fewer than two elements.
absl::StatusOr<Value> NonOverlappingAndDense(const std::vector<Num>& args) {
  for (const Num& a : args) {
    if (!a.is_int) {
      return absl::InvalidArgumentError(
          "IsNonOverlappingAndDenseIndicator takes integer sizes and strides");
    }
  }
  const size_t rank = args.size() / 2;
  if (rank == 1) return Value(int64_t{args[1].i == 1 || args[0].i < 2});
  std::vector<size_t> order(rank);
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return args[rank + a].i < args[rank + b].i; });
  int64_t expected = 1;
  bool beyond_int64 = false;  // then no stride can equal it
  for (size_t d : order) {
    const int64_t size = args[d].i;
    if (size == 1) continue;
    if (beyond_int64 || args[rank + d].i != expected) return Value(int64_t{0});
    beyond_int64 = __builtin_mul_overflow(expected, size, &expected);
  }
  return Value(int64_t{1});
}

// Python's math functions on float(x) (OpaqueUnaryFn_*), with CPython's errors: a nan from
// a number is a domain error; an infinity from a finite number is a range error for the
// functions that can overflow and a domain error for the others (log(0)).
absl::StatusOr<Value> MathFunction(Function f, const Num& x) {
  const double v = AsDouble(x);
  bool can_overflow = false;
  double r = 0;
  switch (f) {
    case Function::kSqrt:
      r = std::sqrt(v);
      break;
    case Function::kCos:
      r = std::cos(v);
      break;
    case Function::kCosh:
      r = std::cosh(v);
      can_overflow = true;
      break;
    case Function::kSin:
      r = std::sin(v);
      break;
    case Function::kSinh:
      r = std::sinh(v);
      can_overflow = true;
      break;
    case Function::kTan:
      r = std::tan(v);
      break;
    case Function::kTanh:
      r = std::tanh(v);
      break;
    case Function::kAsin:
      r = std::asin(v);
      break;
    case Function::kAcos:
      r = std::acos(v);
      break;
    case Function::kAtan:
      r = std::atan(v);
      break;
    case Function::kExp:
      r = std::exp(v);
      can_overflow = true;
      break;
    case Function::kLog:
      r = std::log(v);
      break;
    case Function::kAsinh:
      r = std::asinh(v);
      break;
    case Function::kLog2:
      r = std::log2(v);
      break;
    default:
      return absl::InternalError("not a math function");
  }
  const auto call = [&] { return absl::StrCat(InfoOf(f).name, "(", FormatValue(v), ")"); };
  if (std::isnan(r) && !std::isnan(v)) {
    return absl::InvalidArgumentError(absl::StrCat("math domain error: ", call()));
  }
  if (std::isinf(r) && std::isfinite(v)) {
    if (can_overflow) return absl::OutOfRangeError(absl::StrCat("math range error: ", call()));
    return absl::InvalidArgumentError(absl::StrCat("math domain error: ", call()));
  }
  return Value(r);
}

class Evaluator {
 public:
  Evaluator(const Expr& expr, const Bindings& bindings)
      : expr_(expr), bindings_(bindings), slots_(expr.nodes().size()) {}

  absl::StatusOr<Value> Run() {
    const auto& nodes = expr_.nodes();
    for (uint32_t i = 0; i < nodes.size(); ++i) slots_[i] = Eval(nodes[i]);
    const Slot& root = slots_[expr_.root()];
    if (root.error >= 0) return errors_[static_cast<size_t>(root.error)];
    return root.value;
  }

 private:
  struct Slot {
    Value value;
    int32_t error = -1;  // index into errors_
  };

  Slot Error(absl::Status status) {
    errors_.push_back(std::move(status));
    return Slot{Value(false), static_cast<int32_t>(errors_.size() - 1)};
  }
  Slot From(absl::StatusOr<Value> v) {
    if (!v.ok()) return Error(v.status());
    return Slot{*v};
  }
  const Slot& ChildSlot(const Expr::Node& n, uint32_t k) const { return slots_[expr_.child(n, k)]; }

  Slot Lookup(absl::string_view name) {
    auto it = bindings_.symbols.find(name);
    if (it == bindings_.symbols.end()) {
      return Error(absl::InvalidArgumentError(absl::StrCat("unbound symbol ", name)));
    }
    return Slot{it->second};
  }

  Slot Eval(const Expr::Node& n) {
    switch (n.kind) {
      case NodeKind::kInt:
        return Slot{Value(n.int_value)};
      case NodeKind::kFloat:
        return Slot{Value(n.float_value)};
      case NodeKind::kBool:
        return Slot{Value(n.int_value != 0)};
      case NodeKind::kInfinity:
        return Slot{Value(std::numeric_limits<double>::infinity())};
      case NodeKind::kSymbol:
        return Lookup(expr_.name(n));
      case NodeKind::kInput: {
        const auto index = static_cast<size_t>(n.int_value);
        if (index < bindings_.python_inputs.size() && !bindings_.python_inputs[index].empty()) {
          const std::string& symbol = bindings_.python_inputs[index];
          auto it = bindings_.symbols.find(symbol);
          if (it == bindings_.symbols.end()) {
            return Error(absl::InvalidArgumentError(
                absl::StrCat("unbound symbol ", symbol, " (for ", expr_.name(n), ")")));
          }
          return Slot{it->second};
        }
        return Lookup(expr_.name(n));
      }
      case NodeKind::kNeg: {
        const Slot& a = ChildSlot(n, 0);
        if (a.error >= 0) return a;
        const Num x = ToNum(a.value);
        if (!x.is_int) return Slot{Value(-x.f)};
        if (x.i == std::numeric_limits<int64_t>::min()) {
          return Error(absl::OutOfRangeError(absl::StrCat("integer overflow: -(", x.i, ")")));
        }
        return Slot{Value(-x.i)};
      }
      case NodeKind::kNot: {
        const Slot& a = ChildSlot(n, 0);
        if (a.error >= 0) return a;
        return Slot{Value(!Truthy(a.value))};
      }
      case NodeKind::kPow: {
        const Slot& a = ChildSlot(n, 0);
        if (a.error >= 0) return a;
        const Slot& b = ChildSlot(n, 1);
        if (b.error >= 0) return b;
        return From(Power(ToNum(a.value), ToNum(b.value)));
      }
      case NodeKind::kChain:
        return Chain(n);
      case NodeKind::kIfElse: {
        const Slot& cond = ChildSlot(n, 1);
        if (cond.error >= 0) return cond;
        return ChildSlot(n, Truthy(cond.value) ? 0 : 2);
      }
      case NodeKind::kCall:
        return Call(n);
    }
    return Error(absl::InternalError("unknown node kind"));
  }

  Slot Chain(const Expr::Node& n) {
    const auto kind = static_cast<ChainKind>(n.op);
    if (kind == ChainKind::kAnd || kind == ChainKind::kOr) {
      // Python returns the first operand that decides, else the last one.
      const bool stop_on = kind == ChainKind::kOr;
      for (uint32_t k = 0; k + 1 < n.count; ++k) {
        const Slot& s = ChildSlot(n, k);
        if (s.error >= 0 || Truthy(s.value) == stop_on) return s;
      }
      return ChildSlot(n, n.count - 1);
    }
    const Slot& first = ChildSlot(n, 0);
    if (first.error >= 0) return first;
    if (kind == ChainKind::kCompare) {
      for (uint32_t k = 0; k + 1 < n.count; ++k) {
        const Slot& right = ChildSlot(n, k + 1);
        if (right.error >= 0) return right;
        const Order o = Compare(ToNum(ChildSlot(n, k).value), ToNum(right.value));
        if (!Holds(expr_.chain_op(n, k), o)) return Slot{Value(false)};
      }
      return Slot{Value(true)};
    }
    Value acc = first.value;
    for (uint32_t k = 0; k + 1 < n.count; ++k) {
      const Slot& right = ChildSlot(n, k + 1);
      if (right.error >= 0) return right;
      const ChainOp op = expr_.chain_op(n, k);
      absl::StatusOr<Value> r = op == ChainOp::kBitAnd || op == ChainOp::kBitOr
                                    ? BitOp(op, acc, right.value)
                                    : Arith(op, ToNum(acc), ToNum(right.value));
      if (!r.ok()) return Error(r.status());
      acc = *r;
    }
    return Slot{acc};
  }

  Slot Call(const Expr::Node& n) {
    const auto f = static_cast<Function>(n.op);
    if (f == Function::kPiecewise) {
      for (uint32_t k = 0; k + 1 < n.count; k += 2) {
        const Slot& cond = ChildSlot(n, k + 1);
        if (cond.error >= 0) return cond;
        if (Truthy(cond.value)) return ChildSlot(n, k);
      }
      return Error(absl::InvalidArgumentError("no Piecewise condition holds"));
    }
    if (f == Function::kAnd || f == Function::kOr) {
      const bool stop_on = f == Function::kOr;
      for (uint32_t k = 0; k < n.count; ++k) {
        const Slot& s = ChildSlot(n, k);
        if (s.error >= 0) return s;
        if (Truthy(s.value) == stop_on) return Slot{Value(stop_on)};
      }
      return Slot{Value(!stop_on)};
    }
    // Every other function evaluates all its arguments, left to right.
    for (uint32_t k = 0; k < n.count; ++k) {
      const Slot& s = ChildSlot(n, k);
      if (s.error >= 0) return s;
    }
    const Value& a = ChildSlot(n, 0).value;
    const Num x = ToNum(a);
    const Num y = n.count > 1 ? ToNum(ChildSlot(n, 1).value) : Num{true, 0, 0};
    switch (f) {
      case Function::kEq:
        return Slot{Value(Holds(ChainOp::kEq, Compare(x, y)))};
      case Function::kNe:
        return Slot{Value(Holds(ChainOp::kNe, Compare(x, y)))};
      case Function::kLt:
        return Slot{Value(Holds(ChainOp::kLt, Compare(x, y)))};
      case Function::kLe:
        return Slot{Value(Holds(ChainOp::kLe, Compare(x, y)))};
      case Function::kGt:
        return Slot{Value(Holds(ChainOp::kGt, Compare(x, y)))};
      case Function::kGe:
        return Slot{Value(Holds(ChainOp::kGe, Compare(x, y)))};
      case Function::kNot:
        return Slot{Value(!Truthy(a))};
      case Function::kMax:
      case Function::kMin: {
        const Order better = f == Function::kMax ? Order::kGreater : Order::kLess;
        uint32_t best = 0;
        for (uint32_t k = 1; k < n.count; ++k) {
          if (Compare(ToNum(ChildSlot(n, k).value), ToNum(ChildSlot(n, best).value)) == better) {
            best = k;
          }
        }
        return ChildSlot(n, best);
      }
      case Function::kAbs:
        if (!x.is_int) return Slot{Value(std::fabs(x.f))};
        if (x.i == std::numeric_limits<int64_t>::min()) {
          return Error(absl::OutOfRangeError(absl::StrCat("integer overflow: Abs(", x.i, ")")));
        }
        return Slot{Value(x.i < 0 ? -x.i : x.i)};
      case Function::kFloorDiv:
      case Function::kCleanDiv:
        return From(Arith(ChainOp::kFloorDiv, x, y));
      case Function::kMod:
      case Function::kPythonMod:
        return From(Arith(ChainOp::kMod, x, y));
      case Function::kCeilDiv:
        return From(CeilDivide(x, y));
      case Function::kIntTrueDiv:
      case Function::kFloatTrueDiv:
        return From(Arith(ChainOp::kTrueDiv, x, y));
      case Function::kCeilToInt:
      case Function::kFloorToInt:
      case Function::kTruncToInt:
      case Function::kRoundToInt:
        return From(ToInt(f, a));
      case Function::kRoundDecimal:
        return From(RoundDecimal(x, y));
      case Function::kTruncToFloat:
        return Slot{Value(x.is_int ? static_cast<double>(x.i) : std::trunc(x.f))};
      case Function::kIdentity:
        return ChildSlot(n, 0);
      case Function::kLShift:
      case Function::kRShift:
        return From(Shift(f, x, y));
      case Function::kBitwiseAnd:
        return From(BitOp(ChainOp::kBitAnd, a, ChildSlot(n, 1).value));
      case Function::kBitwiseOr:
        return From(BitOp(ChainOp::kBitOr, a, ChildSlot(n, 1).value));
      case Function::kIsNonOverlappingAndDenseIndicator: {
        std::vector<Num> args;
        for (uint32_t k = 0; k < n.count; ++k) args.push_back(ToNum(ChildSlot(n, k).value));
        return From(NonOverlappingAndDense(args));
      }
      case Function::kSqrt:
      case Function::kCos:
      case Function::kCosh:
      case Function::kSin:
      case Function::kSinh:
      case Function::kTan:
      case Function::kTanh:
      case Function::kAsin:
      case Function::kAcos:
      case Function::kAtan:
      case Function::kExp:
      case Function::kLog:
      case Function::kAsinh:
      case Function::kLog2:
        return From(MathFunction(f, x));
      case Function::kToFloat:
        return Slot{Value(AsDouble(x))};
      case Function::kPowByNatural:
        return From(Power(x, y));
      case Function::kFloatPow:
        return From(FloatPower(AsDouble(x), AsDouble(y)));
      default:
        return Error(absl::InternalError("unknown function"));
    }
  }

  const Expr& expr_;
  const Bindings& bindings_;
  absl::InlinedVector<Slot, 32> slots_;
  std::vector<absl::Status> errors_;
};

}  // namespace

Order CompareValues(const Value& a, const Value& b) { return Compare(ToNum(a), ToNum(b)); }

absl::StatusOr<Value> Evaluate(const Expr& expr, const Bindings& bindings) {
  return Evaluator(expr, bindings).Run();
}

absl::StatusOr<bool> EvaluateBool(const Expr& expr, const Bindings& bindings) {
  absl::StatusOr<Value> v = Evaluate(expr, bindings);
  if (!v.ok()) return v.status();
  return Truthy(*v);
}

absl::StatusOr<int64_t> EvaluateInt(const Expr& expr, const Bindings& bindings) {
  absl::StatusOr<Value> v = Evaluate(expr, bindings);
  if (!v.ok()) return v.status();
  if (const int64_t* i = std::get_if<int64_t>(&*v)) return *i;
  return absl::InvalidArgumentError(
      absl::StrCat("expected an int, got ", TypeName(*v), " (", FormatValue(*v), ")"));
}

}  // namespace kiln::sym
