// Pointwise ops: unary math, binary arithmetic with broadcasting and type promotion,
// comparisons, logical and bitwise ops, ternary ops (lerp, addcmul, addcdiv), activations
// and their backwards, casts and copies.

#include <cmath>
#include <limits>
#include <numbers>

#include "compiler/interp/op_registry.h"

namespace kiln::interp {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

using DoubleFn1 = double (*)(double);
using IntFn1 = int64_t (*)(int64_t);

double Sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

double GeluNone(double x) { return 0.5 * x * (1.0 + std::erf(x / std::numbers::sqrt2)); }

double GeluTanh(double x) {
  const double k = std::sqrt(2.0 / std::numbers::pi);
  return 0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * x * x * x)));
}

double GeluBackward(double g, double x, bool tanh_approx) {
  if (tanh_approx) {
    const double k = std::sqrt(2.0 / std::numbers::pi);
    const double inner = k * (x + 0.044715 * x * x * x);
    const double t = std::tanh(inner);
    const double dinner = k * (1.0 + 3.0 * 0.044715 * x * x);
    return g * (0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * dinner);
  }
  const double cdf = 0.5 * (1.0 + std::erf(x / std::numbers::sqrt2));
  const double pdf = std::exp(-0.5 * x * x) / std::sqrt(2.0 * std::numbers::pi);
  return g * (cdf + x * pdf);
}

// Python-style remainder: the result has the divisor's sign.
double RemainderF(double a, double b) {
  double m = std::fmod(a, b);
  if (m != 0 && ((b < 0) != (m < 0))) m += b;
  return m;
}

// PyTorch's div_floor_floating: floor division that agrees with remainder.
double FloorDivF(double a, double b) {
  if (b == 0) return a / b;
  const double mod = std::fmod(a, b);
  double div = (a - mod) / b;
  if (mod != 0 && ((b < 0) != (mod < 0))) div -= 1.0;
  if (div == 0) return std::copysign(0.0, a / b);
  double floordiv = std::floor(div);
  if (div - floordiv > 0.5) floordiv += 1.0;
  return floordiv;
}

int64_t FloorDivI(int64_t a, int64_t b) {
  Check(b != 0, "integer division by zero");
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

int64_t RemainderI(int64_t a, int64_t b) {
  Check(b != 0, "integer division by zero");
  int64_t m = a % b;
  if (m != 0 && ((b < 0) != (m < 0))) m += b;
  return m;
}

int64_t PowI(int64_t base, int64_t exp) {
  Check(exp >= 0, "integers to negative integer powers are not allowed");
  uint64_t result = 1;
  uint64_t b = static_cast<uint64_t>(base);
  while (exp > 0) {
    if (exp & 1) result *= b;
    b *= b;
    exp >>= 1;
  }
  return static_cast<int64_t>(result);
}

double MaxNaN(double a, double b) {
  return (std::isnan(a) || std::isnan(b)) ? kNaN : std::max(a, b);
}
double MinNaN(double a, double b) {
  return (std::isnan(a) || std::isnan(b)) ? kNaN : std::min(a, b);
}

double Sign(double x) {
  if (std::isnan(x)) return x;
  return static_cast<double>((x > 0) - (x < 0));
}

// ---- Unary ----

struct UnaryDef {
  const char* name;
  DoubleFn1 f;
  IntFn1 int_f;  // null: integer inputs are promoted to the default float dtype
};

void AddUnary(OpRegistry& r, const UnaryDef& def) {
  auto fn = [def](OpCall& c) {
    const Tensor self = c.GetTensor(0, "self");
    if (def.int_f != nullptr && StoresInts(self.dtype())) {
      return One(MapInts({self}, self.dtype(), [&](const int64_t* v) { return def.int_f(v[0]); }));
    }
    const DType out = FloatResultType(self.dtype());
    return One(MapDoubles({self}, out, [&](const double* v) { return def.f(v[0]); }));
  };
  r.Add(absl::StrCat("aten.", def.name, ".default"), fn);
}

// ---- Binary ----

// A binary op over promoted operands. `f` computes in double; `int_f` (if given) computes
// exactly when the result dtype is an integer or bool. `promote_ints_to_float` makes an
// integer result type float (true division).
template <typename F, typename G>
Tensor Binary(const Operand& a, const Operand& b, F f, G int_f, bool has_int_path,
              bool promote_ints_to_float = false) {
  DType dtype = ResultType({a, b});
  if (promote_ints_to_float && !IsFloating(dtype)) dtype = kDefaultFloat;
  const Tensor ta = a.AsTensor();
  const Tensor tb = b.AsTensor();
  if (has_int_path && StoresInts(dtype)) {
    return MapInts({ta, tb}, dtype, [&](const int64_t* v) { return int_f(v[0], v[1]); });
  }
  Check(!StoresInts(dtype) || !promote_ints_to_float, "unsupported integer operands");
  return MapDoubles({ta, tb}, dtype, [&](const double* v) { return f(v[0], v[1]); });
}

// Registers NAME.Tensor and NAME.Scalar (other may also be a number in .Tensor, as FX
// graphs record it).
template <typename F, typename G>
void AddBinary(OpRegistry& r, const std::string& name, F f, G int_f, bool has_int_path) {
  auto fn = [f, int_f, has_int_path](OpCall& c) {
    return One(Binary(GetOperand(c, 0, "self"), GetOperand(c, 1, "other"), f, int_f, has_int_path));
  };
  r.Add(absl::StrCat("aten.", name, ".Tensor"), fn);
  r.Add(absl::StrCat("aten.", name, ".Scalar"), fn);
}

// Comparisons compute in the promoted dtype and return bool.
template <typename F>
void AddCompare(OpRegistry& r, const std::string& name, F cmp) {
  auto fn = [cmp](OpCall& c) {
    const Operand a = GetOperand(c, 0, "self");
    const Operand b = GetOperand(c, 1, "other");
    const DType common = ResultType({a, b});
    if (StoresInts(common)) {
      return One(MapInts({a.AsTensor(), b.AsTensor()}, v1::DTYPE_BOOL,
                         [&](const int64_t* v) -> int64_t { return cmp(v[0], v[1]) ? 1 : 0; }));
    }
    return One(MapDoubles({a.AsTensor(), b.AsTensor()}, v1::DTYPE_BOOL, [&](const double* v) {
      // Operands are compared after rounding to the common dtype, as the kernel sees them.
      return cmp(RoundToDType(v[0], common), RoundToDType(v[1], common)) ? 1.0 : 0.0;
    }));
  };
  r.Add(absl::StrCat("aten.", name, ".Tensor"), fn);
  r.Add(absl::StrCat("aten.", name, ".Scalar"), fn);
}

Tensor AddSub(const OpCall& c, double sign) {
  const Operand a = GetOperand(c, 0, "self");
  const Operand b = GetOperand(c, 1, "other");
  const auto alpha = c.GetOptScalar(2, "alpha");
  const DType dtype = ResultType({a, b});
  Check(!(sign < 0 && dtype == v1::DTYPE_BOOL), "subtraction of bool tensors is not supported");
  if (alpha.has_value() && !alpha->is_int()) {
    Check(IsFloating(dtype), "a float alpha needs a floating result");
  }
  const double alpha_d = alpha.has_value() ? alpha->value : 1.0;
  const int64_t alpha_i = alpha.has_value() ? alpha->int_value : 1;
  if (dtype == v1::DTYPE_BOOL) {
    return MapInts({a.AsTensor(), b.AsTensor()}, dtype, [&](const int64_t* v) -> int64_t {
      return (v[0] != 0) || (v[1] * alpha_i != 0);
    });
  }
  return Binary(
      a, b, [&](double x, double y) { return x + sign * alpha_d * y; },
      [&](int64_t x, int64_t y) {
        const uint64_t prod = static_cast<uint64_t>(y) * static_cast<uint64_t>(alpha_i);
        return static_cast<int64_t>(sign > 0 ? static_cast<uint64_t>(x) + prod
                                             : static_cast<uint64_t>(x) - prod);
      },
      true);
}

Tensor Div(const OpCall& c) {
  const Operand a = GetOperand(c, 0, "self");
  const Operand b = GetOperand(c, 1, "other");
  const std::string mode = c.GetString(2, "rounding_mode", "");
  if (mode.empty()) {
    return Binary(
        a, b, [](double x, double y) { return x / y; }, [](int64_t, int64_t) { return int64_t{0}; },
        false, /*promote_ints_to_float=*/true);
  }
  if (mode == "trunc") {
    return Binary(
        a, b, [](double x, double y) { return std::trunc(x / y); },
        [](int64_t x, int64_t y) {
          Check(y != 0, "integer division by zero");
          return x / y;
        },
        true);
  }
  Check(mode == "floor", "unknown rounding_mode \"", mode, "\"");
  return Binary(a, b, FloorDivF, FloorDivI, true);
}

Tensor Pow(const Operand& a, const Operand& b) {
  return Binary(
      a, b, [](double x, double y) { return std::pow(x, y); }, PowI, true);
}

Tensor Where(const Tensor& cond, const Operand& a, const Operand& b) {
  const DType dtype = ResultType({a, b});
  const Tensor ta = a.AsTensor();
  const Tensor tb = b.AsTensor();
  if (StoresInts(dtype)) {
    return MapInts({cond, ta, tb}, dtype, [](const int64_t* v) { return v[0] != 0 ? v[1] : v[2]; });
  }
  return MapDoubles({cond, ta, tb}, dtype, [](const double* v) { return v[0] != 0 ? v[1] : v[2]; });
}

// clamp with optional bounds; NaN in self propagates, min > max gives max.
Tensor Clamp(const Tensor& self, const std::optional<Operand>& lo,
             const std::optional<Operand>& hi) {
  Check(lo.has_value() || hi.has_value(), "clamp needs at least one of min and max");
  std::vector<Operand> ops = {Operand{self, std::nullopt}};
  if (lo) ops.push_back(*lo);
  if (hi) ops.push_back(*hi);
  const DType dtype = ResultType(ops);
  const Tensor tlo = lo ? lo->AsTensor() : Tensor::Scalar(-INFINITY, v1::DTYPE_FLOAT64);
  const Tensor thi = hi ? hi->AsTensor() : Tensor::Scalar(INFINITY, v1::DTYPE_FLOAT64);
  if (StoresInts(dtype)) {
    const Tensor ilo = lo ? tlo : Tensor::FromInts({}, v1::DTYPE_INT64, {INT64_MIN});
    const Tensor ihi = hi ? thi : Tensor::FromInts({}, v1::DTYPE_INT64, {INT64_MAX});
    return MapInts({self, ilo, ihi}, dtype,
                   [](const int64_t* v) { return std::min(std::max(v[0], v[1]), v[2]); });
  }
  return MapDoubles({self, tlo, thi}, dtype, [](const double* v) {
    if (std::isnan(v[0]) || std::isnan(v[1]) || std::isnan(v[2])) return kNaN;
    return std::min(std::max(v[0], v[1]), v[2]);
  });
}

std::optional<Operand> OptOperand(const OpCall& c, int pos, absl::string_view name) {
  if (c.Find(pos, name) == nullptr) return std::nullopt;
  return GetOperand(c, pos, name);
}

// A copy of `self` converted to `dtype` and laid out for `format`.
Tensor CopyWithFormat(const Tensor& self, DType dtype, std::optional<v1::MemoryFormat> format) {
  if (!format.has_value() || *format == v1::MEMORY_FORMAT_PRESERVE ||
      *format == v1::MEMORY_FORMAT_UNSPECIFIED) {
    return self.ClonePreserve(dtype);
  }
  Tensor out =
      Tensor::ZerosStrided(self.sizes(), StridesForFormat(self.sizes(), *format), 0, dtype);
  out.CopyFrom(self);
  return out;
}

std::optional<v1::MemoryFormat> GetMemoryFormat(const OpCall& c, int pos) {
  const Arg* a = c.Find(pos, "memory_format");
  if (a == nullptr) return std::nullopt;
  const auto* m = std::get_if<v1::MemoryFormat>(&a->v);
  Check(m != nullptr, "memory_format must be a memory format");
  return *m;
}

// The dtype of an op ATen implements for floating tensors only (no integer promotion).
DType FloatOnly(const Tensor& t, absl::string_view op) {
  Check(IsFloating(t.dtype()), op, " is not implemented for ", DTypeName(t.dtype()));
  return t.dtype();
}

// A unary op of floating tensors only, with its scalar arguments at positions 1, 2, ...
template <typename F>
void AddFloatUnary(OpRegistry& r, const std::string& name, F f) {
  r.Add(name, [name, f](OpCall& c) {
    const Tensor self = c.GetTensor(0, "self");
    return One(
        MapDoubles({self}, FloatOnly(self, name), [&](const double* v) { return f(c, v[0]); }));
  });
}

// ATen's lerp: from whichever end is nearer, so that weights 0 and 1 give the ends exactly.
double Lerp(double self, double end, double weight) {
  return std::fabs(weight) < 0.5 ? self + weight * (end - self)
                                 : end - (end - self) * (1.0 - weight);
}

// lerp.Scalar and lerp.Tensor. `end` must have self's dtype, and so must a weight tensor
// unless it is 0-d: such a weight is cast to the common dtype first.
Tensor LerpOp(const OpCall& c) {
  const Tensor self = c.GetTensor(0, "self");
  const Tensor end = c.GetTensor(1, "end");
  const DType dtype = FloatOnly(self, "lerp");
  Check(end.dtype() == dtype, "lerp: expected dtype ", DTypeName(dtype), " for end, got ",
        DTypeName(end.dtype()));
  const Operand w = GetOperand(c, 2, "weight");
  Tensor weight = w.AsTensor();
  if (w.tensor.defined() && weight.dtype() != dtype) {
    Check(weight.dim() == 0, "lerp: expected dtype ", DTypeName(dtype), " for weight, got ",
          DTypeName(weight.dtype()));
    weight = weight.To(ResultType({Operand{self, std::nullopt}, Operand{end, std::nullopt}, w}));
  }
  return MapDoubles({self, end, weight}, dtype,
                    [](const double* v) { return Lerp(v[0], v[1], v[2]); });
}

// addcmul / addcdiv: self + value * tensor1 * tensor2 (or / tensor2), over the promoted
// dtype of the three tensors; integer results wrap, as ATen's kernels do.
Tensor AddcOp(const OpCall& c, bool div) {
  const std::vector<Tensor> ins = {c.GetTensor(0, "self"), c.GetTensor(1, "tensor1"),
                                   c.GetTensor(2, "tensor2")};
  const ScalarArg value = c.GetOptScalar(3, "value").value_or(ScalarArg{1, 1, v1::DTYPE_INT64});
  const DType dtype = ResultType({Operand{ins[0], std::nullopt}, Operand{ins[1], std::nullopt},
                                  Operand{ins[2], std::nullopt}});
  Check(!div || !StoresInts(ins[1].dtype()) || !StoresInts(ins[2].dtype()),
        "addcdiv: integer division is not supported");
  Check(dtype != v1::DTYPE_BOOL, c.target(), " is not implemented for bool");
  if (StoresInts(dtype)) {
    const uint64_t v = static_cast<uint64_t>(
        value.is_int() ? value.int_value : DoubleToInt(value.value, v1::DTYPE_INT64));
    return MapInts(ins, dtype, [&](const int64_t* x) {
      const uint64_t p = v * static_cast<uint64_t>(x[1]) * static_cast<uint64_t>(x[2]);
      return static_cast<int64_t>(static_cast<uint64_t>(x[0]) + p);
    });
  }
  return MapDoubles(ins, dtype, [&](const double* x) {
    return div ? x[0] + value.value * x[1] / x[2] : x[0] + value.value * x[1] * x[2];
  });
}

template <typename F>
void AddGradOp(OpRegistry& r, const std::string& name, F f) {
  r.Add(name, [f](OpCall& c) {
    const Tensor g = c.GetTensor(0, "grad_output");
    const Tensor x = c.GetTensor(1, "self");
    const DType dtype = PromoteTypes(g.dtype(), x.dtype());
    return One(MapDoubles({g, x}, FloatResultType(dtype),
                          [&](const double* v) { return f(c, v[0], v[1]); }));
  });
}

}  // namespace

void RegisterPointwiseOps(OpRegistry& r) {
  const UnaryDef unary[] = {
      {"abs", [](double x) { return std::fabs(x); }, [](int64_t x) { return x < 0 ? -x : x; }},
      {"neg", [](double x) { return -x; }, [](int64_t x) { return -x; }},
      {"cos", [](double x) { return std::cos(x); }, nullptr},
      {"sin", [](double x) { return std::sin(x); }, nullptr},
      {"tan", [](double x) { return std::tan(x); }, nullptr},
      {"acos", [](double x) { return std::acos(x); }, nullptr},
      {"asin", [](double x) { return std::asin(x); }, nullptr},
      {"atan", [](double x) { return std::atan(x); }, nullptr},
      {"cosh", [](double x) { return std::cosh(x); }, nullptr},
      {"sinh", [](double x) { return std::sinh(x); }, nullptr},
      {"tanh", [](double x) { return std::tanh(x); }, nullptr},
      {"exp", [](double x) { return std::exp(x); }, nullptr},
      {"exp2", [](double x) { return std::exp2(x); }, nullptr},
      {"expm1", [](double x) { return std::expm1(x); }, nullptr},
      {"log", [](double x) { return std::log(x); }, nullptr},
      {"log2", [](double x) { return std::log2(x); }, nullptr},
      {"log10", [](double x) { return std::log10(x); }, nullptr},
      {"log1p", [](double x) { return std::log1p(x); }, nullptr},
      {"sqrt", [](double x) { return std::sqrt(x); }, nullptr},
      {"rsqrt", [](double x) { return 1.0 / std::sqrt(x); }, nullptr},
      {"reciprocal", [](double x) { return 1.0 / x; }, nullptr},
      {"sigmoid", Sigmoid, nullptr},
      {"erf", [](double x) { return std::erf(x); }, nullptr},
      {"erfc", [](double x) { return std::erfc(x); }, nullptr},
      {"relu", [](double x) { return std::isnan(x) ? x : std::max(x, 0.0); },
       [](int64_t x) { return std::max<int64_t>(x, 0); }},
      {"silu", [](double x) { return x * Sigmoid(x); }, nullptr},
      {"floor", [](double x) { return std::floor(x); }, [](int64_t x) { return x; }},
      {"ceil", [](double x) { return std::ceil(x); }, [](int64_t x) { return x; }},
      {"trunc", [](double x) { return std::trunc(x); }, [](int64_t x) { return x; }},
      {"round", [](double x) { return std::nearbyint(x); }, [](int64_t x) { return x; }},
      {"sign", Sign, [](int64_t x) { return static_cast<int64_t>((x > 0) - (x < 0)); }},
      {"square", [](double x) { return x * x; }, [](int64_t x) { return x * x; }},
      {"lgamma", [](double x) { return std::lgamma(x); }, nullptr},
  };
  for (const UnaryDef& d : unary) AddUnary(r, d);

  r.Add("aten.round.decimals", [](OpCall& c) {
    const Tensor self = c.GetTensor(0, "self");
    const double scale = std::pow(10.0, static_cast<double>(c.GetInt(1, "decimals", 0)));
    return One(MapDoubles({self}, FloatResultType(self.dtype()),
                          [&](const double* v) { return std::nearbyint(v[0] * scale) / scale; }));
  });
  r.Add("aten.gelu.default", [](OpCall& c) {
    const Tensor self = c.GetTensor(0, "self");
    const std::string approx = c.GetString(1, "approximate", "none");
    Check(approx == "none" || approx == "tanh", "unknown approximate \"", approx, "\"");
    const bool tanh_approx = approx == "tanh";
    return One(MapDoubles({self}, FloatResultType(self.dtype()), [&](const double* v) {
      return tanh_approx ? GeluTanh(v[0]) : GeluNone(v[0]);
    }));
  });
  r.Add("aten.leaky_relu.default", [](OpCall& c) {
    const Tensor self = c.GetTensor(0, "self");
    const double slope = c.GetDouble(1, "negative_slope", 0.01);
    return One(MapDoubles({self}, FloatResultType(self.dtype()),
                          [&](const double* v) { return v[0] > 0 ? v[0] : v[0] * slope; }));
  });
  r.Add("aten.hardtanh.default", [](OpCall& c) {
    const Tensor self = c.GetTensor(0, "self");
    const double lo = c.GetDouble(1, "min_val", -1.0);
    const double hi = c.GetDouble(2, "max_val", 1.0);
    return One(MapDoubles({self}, self.dtype(), [&](const double* v) {
      return std::isnan(v[0]) ? v[0] : std::min(std::max(v[0], lo), hi);
    }));
  });
  r.Add("aten.threshold.default", [](OpCall& c) {
    const Tensor self = c.GetTensor(0, "self");
    const double threshold = c.GetDouble(1, "threshold");
    const double value = c.GetDouble(2, "value");
    return One(MapDoubles({self}, self.dtype(),
                          [&](const double* v) { return v[0] <= threshold ? value : v[0]; }));
  });
  AddFloatUnary(r, "aten.frac.default", [](const OpCall&, double x) { return x - std::trunc(x); });
  AddFloatUnary(r, "aten.hardsigmoid.default", [](const OpCall&, double x) {
    return std::min(std::max(x + 3.0, 0.0), 6.0) / 6.0;
  });
  AddFloatUnary(r, "aten.hardswish.default", [](const OpCall&, double x) {
    return x * std::min(std::max(x + 3.0, 0.0), 6.0) / 6.0;
  });
  AddFloatUnary(r, "aten.mish.default",
                [](const OpCall&, double x) { return x * std::tanh(std::log1p(std::exp(x))); });
  AddFloatUnary(r, "aten.elu.default", [](const OpCall& c, double x) {
    const double alpha = c.GetDouble(1, "alpha", 1.0);
    const double scale = c.GetDouble(2, "scale", 1.0);
    const double input_scale = c.GetDouble(3, "input_scale", 1.0);
    return x <= 0 ? std::expm1(x * input_scale) * alpha * scale : x * scale;
  });
  AddFloatUnary(r, "aten.softplus.default", [](const OpCall& c, double x) {
    const double beta = c.GetDouble(1, "beta", 1.0);
    const double threshold = c.GetDouble(2, "threshold", 20.0);
    return x * beta > threshold ? x : std::log1p(std::exp(x * beta)) / beta;
  });
  for (const char* name : {"isnan", "isinf", "isfinite"}) {
    const std::string n = name;
    r.Add(absl::StrCat("aten.", n, ".default"), [n](OpCall& c) {
      const Tensor self = c.GetTensor(0, "self");
      return One(MapDoubles({self}, v1::DTYPE_BOOL, [&](const double* v) {
        if (n == "isnan") return std::isnan(v[0]) ? 1.0 : 0.0;
        if (n == "isinf") return std::isinf(v[0]) ? 1.0 : 0.0;
        return std::isfinite(v[0]) ? 1.0 : 0.0;
      }));
    });
  }
  r.Add("aten.logical_not.default", [](OpCall& c) {
    const Tensor self = c.GetTensor(0, "self");
    return One(
        MapDoubles({self}, v1::DTYPE_BOOL, [](const double* v) { return v[0] == 0 ? 1.0 : 0.0; }));
  });
  r.Add("aten.bitwise_not.default", [](OpCall& c) {
    const Tensor self = c.GetTensor(0, "self");
    Check(StoresInts(self.dtype()), "bitwise_not needs an integer or bool tensor");
    const bool is_bool = self.dtype() == v1::DTYPE_BOOL;
    return One(MapInts({self}, self.dtype(),
                       [&](const int64_t* v) { return is_bool ? int64_t{v[0] == 0} : ~v[0]; }));
  });

  // Arithmetic.
  r.Add("aten.add.Tensor", [](OpCall& c) { return One(AddSub(c, 1.0)); });
  r.Add("aten.add.Scalar", [](OpCall& c) { return One(AddSub(c, 1.0)); });
  r.Add("aten.sub.Tensor", [](OpCall& c) { return One(AddSub(c, -1.0)); });
  r.Add("aten.sub.Scalar", [](OpCall& c) { return One(AddSub(c, -1.0)); });
  r.Add("aten.rsub.Tensor", [](OpCall& c) {
    const Operand a = GetOperand(c, 0, "self");
    const Operand b = GetOperand(c, 1, "other");
    const double alpha = c.GetDouble(2, "alpha", 1.0);
    return One(Binary(
        b, a, [&](double x, double y) { return x - alpha * y; },
        [&](int64_t x, int64_t y) { return x - static_cast<int64_t>(alpha) * y; }, true));
  });
  r.Add("aten.rsub.Scalar", r.Find("aten.rsub.Tensor")->fn);
  AddBinary(
      r, "mul", [](double x, double y) { return x * y; },
      [](int64_t x, int64_t y) {
        return static_cast<int64_t>(static_cast<uint64_t>(x) * static_cast<uint64_t>(y));
      },
      true);
  r.Add("aten.div.Tensor", [](OpCall& c) { return One(Div(c)); });
  r.Add("aten.div.Scalar", [](OpCall& c) { return One(Div(c)); });
  r.Add("aten.div.Tensor_mode", [](OpCall& c) { return One(Div(c)); });
  r.Add("aten.div.Scalar_mode", [](OpCall& c) { return One(Div(c)); });
  r.Add("aten.floor_divide.default", [](OpCall& c) {
    return One(
        Binary(GetOperand(c, 0, "self"), GetOperand(c, 1, "other"), FloorDivF, FloorDivI, true));
  });
  r.Add("aten.floor_divide.Scalar", r.Find("aten.floor_divide.default")->fn);
  AddBinary(r, "remainder", RemainderF, RemainderI, true);
  AddBinary(
      r, "fmod", [](double x, double y) { return std::fmod(x, y); },
      [](int64_t x, int64_t y) {
        Check(y != 0, "integer division by zero");
        return x % y;
      },
      true);
  r.Add("aten.pow.Tensor_Scalar",
        [](OpCall& c) { return One(Pow(GetOperand(c, 0, "self"), GetOperand(c, 1, "exponent"))); });
  r.Add("aten.pow.Tensor_Tensor", r.Find("aten.pow.Tensor_Scalar")->fn);
  r.Add("aten.pow.Scalar", r.Find("aten.pow.Tensor_Scalar")->fn);
  AddBinary(
      r, "maximum", MaxNaN, [](int64_t x, int64_t y) { return std::max(x, y); }, true);
  AddBinary(
      r, "minimum", MinNaN, [](int64_t x, int64_t y) { return std::min(x, y); }, true);
  r.Add("aten.maximum.default", r.Find("aten.maximum.Tensor")->fn);
  r.Add("aten.minimum.default", r.Find("aten.minimum.Tensor")->fn);
  r.Add("aten.atan2.default", [](OpCall& c) {
    return One(Binary(
        GetOperand(c, 0, "self"), GetOperand(c, 1, "other"),
        [](double x, double y) { return std::atan2(x, y); },
        [](int64_t, int64_t) { return int64_t{0}; }, false, true));
  });

  // Comparisons.
  AddCompare(r, "eq", [](auto x, auto y) { return x == y; });
  AddCompare(r, "ne", [](auto x, auto y) { return x != y; });
  AddCompare(r, "lt", [](auto x, auto y) { return x < y; });
  AddCompare(r, "le", [](auto x, auto y) { return x <= y; });
  AddCompare(r, "gt", [](auto x, auto y) { return x > y; });
  AddCompare(r, "ge", [](auto x, auto y) { return x >= y; });

  // Logical ops: any operands, bool results.
  for (const char* name : {"logical_and", "logical_or", "logical_xor"}) {
    const std::string n = name;
    r.Add(absl::StrCat("aten.", n, ".default"), [n](OpCall& c) {
      const Tensor a = GetOperand(c, 0, "self").AsTensor();
      const Tensor b = GetOperand(c, 1, "other").AsTensor();
      return One(MapDoubles({a, b}, v1::DTYPE_BOOL, [&](const double* v) {
        const bool x = v[0] != 0;
        const bool y = v[1] != 0;
        if (n == "logical_and") return (x && y) ? 1.0 : 0.0;
        if (n == "logical_or") return (x || y) ? 1.0 : 0.0;
        return (x != y) ? 1.0 : 0.0;
      }));
    });
  }
  // Bitwise ops: integer and bool only.
  for (const char* name : {"bitwise_and", "bitwise_or", "bitwise_xor"}) {
    const std::string n = name;
    auto fn = [n](OpCall& c) {
      const Operand a = GetOperand(c, 0, "self");
      const Operand b = GetOperand(c, 1, "other");
      const DType dtype = ResultType({a, b});
      Check(StoresInts(dtype), n, " needs integer or bool operands");
      return One(MapInts({a.AsTensor(), b.AsTensor()}, dtype, [&](const int64_t* v) {
        if (n == "bitwise_and") return v[0] & v[1];
        if (n == "bitwise_or") return v[0] | v[1];
        return v[0] ^ v[1];
      }));
    };
    r.Add(absl::StrCat("aten.", n, ".Tensor"), fn);
    r.Add(absl::StrCat("aten.", n, ".Scalar"), fn);
  }

  // Selection.
  r.Add("aten.where.self", [](OpCall& c) {
    return One(
        Where(c.GetTensor(0, "condition"), GetOperand(c, 1, "self"), GetOperand(c, 2, "other")));
  });
  r.Add("aten.where.ScalarSelf", r.Find("aten.where.self")->fn);
  r.Add("aten.where.ScalarOther", r.Find("aten.where.self")->fn);
  r.Add("aten.where.Scalar", r.Find("aten.where.self")->fn);
  r.Add("aten.clamp.default", [](OpCall& c) {
    return One(Clamp(c.GetTensor(0, "self"), OptOperand(c, 1, "min"), OptOperand(c, 2, "max")));
  });
  r.Add("aten.clamp.Tensor", r.Find("aten.clamp.default")->fn);
  r.Add("aten.clamp_min.default", [](OpCall& c) {
    return One(Clamp(c.GetTensor(0, "self"), OptOperand(c, 1, "min"), std::nullopt));
  });
  r.Add("aten.clamp_min.Tensor", r.Find("aten.clamp_min.default")->fn);
  r.Add("aten.clamp_max.default", [](OpCall& c) {
    return One(Clamp(c.GetTensor(0, "self"), std::nullopt, OptOperand(c, 1, "max")));
  });
  r.Add("aten.clamp_max.Tensor", r.Find("aten.clamp_max.default")->fn);
  auto masked_fill = [](OpCall& c) {
    const Tensor self = c.GetTensor(0, "self");
    const Tensor mask = c.GetTensor(1, "mask");
    const Tensor value = GetOperand(c, 2, "value").AsTensor();
    Check(value.dim() == 0, "masked_fill takes a 0-d value");
    if (StoresInts(self.dtype())) {
      return One(MapInts({mask, self, value}, self.dtype(),
                         [](const int64_t* v) { return v[0] != 0 ? v[2] : v[1]; }));
    }
    return One(MapDoubles({mask, self, value}, self.dtype(),
                          [](const double* v) { return v[0] != 0 ? v[2] : v[1]; }));
  };
  r.Add("aten.masked_fill.Scalar", masked_fill);
  r.Add("aten.masked_fill.Tensor", masked_fill);

  // Ternary ops.
  r.Add("aten.lerp.Scalar", [](OpCall& c) { return One(LerpOp(c)); });
  r.Add("aten.lerp.Tensor", [](OpCall& c) { return One(LerpOp(c)); });
  r.Add("aten.addcmul.default", [](OpCall& c) { return One(AddcOp(c, false)); });
  r.Add("aten.addcdiv.default", [](OpCall& c) { return One(AddcOp(c, true)); });

  // Activation backwards.
  AddGradOp(r, "aten.gelu_backward.default", [](const OpCall& c, double g, double x) {
    const std::string approx = c.GetString(2, "approximate", "none");
    Check(approx == "none" || approx == "tanh", "unknown approximate \"", approx, "\"");
    return GeluBackward(g, x, approx == "tanh");
  });
  AddGradOp(r, "aten.silu_backward.default", [](const OpCall&, double g, double x) {
    const double s = Sigmoid(x);
    return g * s * (1.0 + x * (1.0 - s));
  });
  r.Add("aten.tanh_backward.default", [](OpCall& c) {
    const Tensor g = c.GetTensor(0, "grad_output");
    const Tensor y = c.GetTensor(1, "output");
    return One(MapDoubles({g, y}, FloatResultType(PromoteTypes(g.dtype(), y.dtype())),
                          [](const double* v) { return v[0] * (1.0 - v[1] * v[1]); }));
  });
  r.Add("aten.sigmoid_backward.default", [](OpCall& c) {
    const Tensor g = c.GetTensor(0, "grad_output");
    const Tensor y = c.GetTensor(1, "output");
    return One(MapDoubles({g, y}, FloatResultType(PromoteTypes(g.dtype(), y.dtype())),
                          [](const double* v) { return v[0] * v[1] * (1.0 - v[1]); }));
  });
  r.Add("aten.threshold_backward.default", [](OpCall& c) {
    const Tensor g = c.GetTensor(0, "grad_output");
    const Tensor x = c.GetTensor(1, "self");
    const double threshold = c.GetDouble(2, "threshold");
    return One(MapDoubles({g, x}, PromoteTypes(g.dtype(), x.dtype()),
                          [&](const double* v) { return v[1] <= threshold ? 0.0 : v[0]; }));
  });
  AddGradOp(r, "aten.leaky_relu_backward.default", [](const OpCall& c, double g, double x) {
    const double slope = c.GetDouble(2, "negative_slope");
    return x > 0 ? g : g * slope;
  });
  AddGradOp(r, "aten.softplus_backward.default", [](const OpCall& c, double g, double x) {
    const double beta = c.GetDouble(2, "beta");
    const double threshold = c.GetDouble(3, "threshold");
    const double z = std::exp(x * beta);
    return x * beta > threshold ? g : g * z / (z + 1.0);
  });
  // As PyTorch's CUDA kernel: 0 up to -3, then x / 3 + 1/2 below 3.
  AddGradOp(r, "aten.hardswish_backward.default", [](const OpCall&, double g, double x) {
    if (x <= -3.0) return 0.0;
    return x < 3.0 ? g * (x / 3.0 + 0.5) : g;
  });
  AddGradOp(r, "aten.hardsigmoid_backward.default", [](const OpCall&, double g, double x) {
    return (x > -3.0 && x < 3.0) ? g / 6.0 : 0.0;
  });
  AddGradOp(r, "aten.hardtanh_backward.default", [](const OpCall& c, double g, double x) {
    const double lo = c.GetDouble(2, "min_val");
    const double hi = c.GetDouble(3, "max_val");
    return (x <= lo || x >= hi) ? 0.0 : g;
  });

  // Casts and copies.
  r.Add("aten._to_copy.default", [](OpCall& c) {
    const Tensor self = c.GetTensor(0, "self");
    const DType dtype = c.GetOptDType(1, "dtype").value_or(self.dtype());
    return One(CopyWithFormat(self, dtype, GetMemoryFormat(c, 6)));
  });
  // The prims cast PyTorch's decompositions leave behind: a copy in another dtype.
  r.Add("prims.convert_element_type.default", [](OpCall& c) {
    const Tensor self = c.GetTensor(0, "a");
    const std::optional<DType> dtype = c.GetOptDType(1, "dtype");
    Check(dtype.has_value(), "convert_element_type needs a dtype");
    return One(self.ClonePreserve(*dtype));
  });
  r.Add("aten.clone.default", [](OpCall& c) {
    const Tensor self = c.GetTensor(0, "self");
    return One(CopyWithFormat(self, self.dtype(), GetMemoryFormat(c, 1)));
  });
  r.Add("aten.lift_fresh_copy.default", [](OpCall& c) {
    const Tensor self = c.GetTensor(0, "self");
    return One(self.ClonePreserve(self.dtype()));
  });
  r.Add("aten.contiguous.default",
        [](OpCall& c) { return One(c.GetTensor(0, "self").Contiguous()); });
  r.Add("aten.copy.default", [](OpCall& c) {
    const Tensor self = c.GetTensor(0, "self");
    const Tensor src = c.GetTensor(1, "src");
    BroadcastShapes(std::vector<std::vector<int64_t>>{self.sizes(), src.sizes()});
    Tensor out = self.ClonePreserve(self.dtype());
    out.CopyFrom(ExpandTo(src, self.sizes()));
    return One(out);
  });
  r.AddView("aten.copy_.default", [](OpCall& c) {
    Tensor self = c.GetTensor(0, "self");
    self.CopyFrom(ExpandTo(c.GetTensor(1, "src"), self.sizes()));
    return One(self);
  });
  auto fill = [](OpCall& c) {
    const Tensor self = c.GetTensor(0, "self");
    const Tensor value = GetOperand(c, 1, "value").AsTensor();
    Check(value.dim() == 0, "fill takes a 0-d value");
    Tensor out = self.ClonePreserve(self.dtype());
    out.CopyFrom(value);
    return One(out);
  };
  r.Add("aten.fill.Scalar", fill);
  r.Add("aten.fill.Tensor", fill);
  auto fill_ = [](OpCall& c) {
    Tensor self = c.GetTensor(0, "self");
    const Tensor value = GetOperand(c, 1, "value").AsTensor();
    self.CopyFrom(value);
    return One(self);
  };
  r.AddView("aten.fill_.Scalar", fill_);
  r.AddView("aten.fill_.Tensor", fill_);
  r.AddView("aten.zero_.default", [](OpCall& c) {
    Tensor self = c.GetTensor(0, "self");
    self.CopyFrom(Tensor::FromInts({}, v1::DTYPE_INT64, {0}));
    return One(self);
  });
}

}  // namespace kiln::interp
