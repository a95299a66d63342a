// Pointwise rules: math functions, arithmetic, comparisons, logic, selection, copies and casts.
// One Compute over the output's sizes, operands broadcast into it.

#include <algorithm>
#include <string>
#include <utility>

#include "compiler/decompose/rule_registry.h"

namespace kiln::decompose {
namespace {

using graph::Arg;
using graph::ArgKind;
using loop::Opcode;
using loop::ScalarType;

absl::Status Unary(Builder& d, uint32_t node, Opcode op) {
  return d.Pointwise(node, [&](Body& b, ScalarType ct) -> absl::StatusOr<int32_t> {
    int32_t x = d.LoadB(b, d.In(node, 0));
    if (op == Opcode::kIsNan || op == Opcode::kIsInf) {
      if (!loop::IsFloat(b.T(x))) return b.Const(0, ScalarType::kBool);
      return b.Un(op, x);
    }
    if (op == Opcode::kNot) return b.Un(Opcode::kNot, b.ToBool(x));
    if (!loop::IsFloat(ct) && (op == Opcode::kFloor || op == Opcode::kCeil ||
                               op == Opcode::kRound || op == Opcode::kTrunc)) {
      return b.Cast(x, ct);
    }
    return b.Un(op, b.Cast(x, ct));
  });
}

absl::Status Binary(Builder& d, uint32_t node, Opcode op) {
  return d.Pointwise(node, [&](Body& b, ScalarType ct) -> absl::StatusOr<int32_t> {
    auto x = d.Operand(b, d.A(node, 0), ct);
    if (!x.ok()) return x;
    auto y = d.Operand(b, d.A(node, 1), ct);
    if (!y.ok()) return y;
    return b.Bin(op, b.Cast(*x, ct), b.Cast(*y, ct));
  });
}

absl::Status Compare(Builder& d, uint32_t node, Opcode op) {
  // Compare in the promoted type of the operands (tensors with dims first, then 0-dim
  // tensors and Python scalars when they raise the category).
  ScalarType dimmed = ScalarType::kBool, zero_dim = ScalarType::kBool;
  bool has_dimmed = false, has_zero = false;
  int scalar_cat = -1;
  for (size_t i = 0; i < 2; ++i) {
    const int32_t t = d.In(node, i);
    if (t >= 0) {
      if (d.Rank(t) > 0) {
        dimmed = has_dimmed ? PromoteScalarTypes(dimmed, d.ST(t)) : d.ST(t);
        has_dimmed = true;
      } else {
        zero_dim = has_zero ? PromoteScalarTypes(zero_dim, d.ST(t)) : d.ST(t);
        has_zero = true;
      }
    } else {
      scalar_cat = std::max(scalar_cat, d.IsFloatScalar(d.A(node, i))         ? 2
                                        : d.A(node, i).kind == ArgKind::kBool ? 0
                                                                              : 1);
    }
  }
  ScalarType ct = has_dimmed ? dimmed : zero_dim;
  if (has_dimmed && has_zero && Category(zero_dim) > Category(ct)) ct = zero_dim;
  if (!has_dimmed && !has_zero) ct = ScalarType::kF64;
  if (scalar_cat > Category(ct)) ct = scalar_cat == 2 ? ScalarType::kF32 : ScalarType::kI64;
  ct = loop::ComputeType(ct);
  return d.Pointwise(node, [&](Body& b, ScalarType) -> absl::StatusOr<int32_t> {
    auto x = d.Operand(b, d.A(node, 0), ct);
    if (!x.ok()) return x;
    auto y = d.Operand(b, d.A(node, 1), ct);
    if (!y.ok()) return y;
    return b.Bin(op, b.Cast(*x, ct), b.Cast(*y, ct));
  });
}

absl::Status Copy(Builder& d, uint32_t node, int src_arg) {
  const int32_t src = d.In(node, static_cast<size_t>(src_arg));
  return d.Pointwise(node, [&](Body& b, ScalarType ct) -> absl::StatusOr<int32_t> {
    return b.Cast(d.LoadB(b, src), ct);
  });
}

absl::Status CopyInPlace(Builder& d, uint32_t node) {
  // copy_(self, src): the functional graph's way to mutate an input. The new value is written
  // back to the input after the plan.
  const int32_t self = d.In(node, 0);
  const Tensor& s = d.Tn(self);
  const Node& owner = d.node(d.Tn(s.storage).producer);
  if (owner.kind != Node::Kind::kInput || s.storage != self) {
    return d.Fallback(node, "copy_ into something other than a whole graph input");
  }
  const int32_t input_index = owner.input_index;  // Copy below may move the node array
  if (auto st = Copy(d, node, 1); !st.ok()) return st;
  const graph::Value* o = d.Out(node, 0);
  if (o == nullptr) return absl::OkStatus();
  d.AddWriteBack(input_index, d.TensorOf(*o));
  return absl::OkStatus();
}

}  // namespace

void RegisterPointwiseRules(RuleRegistry& r) {
  auto unary = [&](const std::string& name, Opcode op) {
    r.Add("aten." + name + ".default", [op](Builder& d, uint32_t n) { return Unary(d, n, op); });
  };
  unary("abs", Opcode::kAbs);
  unary("neg", Opcode::kNeg);
  unary("exp", Opcode::kExp);
  unary("exp2", Opcode::kExp2);
  unary("expm1", Opcode::kExpm1);
  unary("log", Opcode::kLog);
  unary("log2", Opcode::kLog2);
  unary("log10", Opcode::kLog10);
  unary("log1p", Opcode::kLog1p);
  unary("sqrt", Opcode::kSqrt);
  unary("rsqrt", Opcode::kRsqrt);
  unary("reciprocal", Opcode::kRecip);
  unary("sin", Opcode::kSin);
  unary("cos", Opcode::kCos);
  unary("tan", Opcode::kTan);
  unary("asin", Opcode::kAsin);
  unary("acos", Opcode::kAcos);
  unary("atan", Opcode::kAtan);
  unary("sinh", Opcode::kSinh);
  unary("cosh", Opcode::kCosh);
  unary("tanh", Opcode::kTanh);
  unary("sigmoid", Opcode::kSigmoid);
  unary("erf", Opcode::kErf);
  unary("erfc", Opcode::kErfc);
  unary("floor", Opcode::kFloor);
  unary("ceil", Opcode::kCeil);
  unary("round", Opcode::kRound);
  unary("trunc", Opcode::kTrunc);
  unary("sign", Opcode::kSign);
  unary("isnan", Opcode::kIsNan);
  unary("isinf", Opcode::kIsInf);
  unary("logical_not", Opcode::kNot);
  unary("bitwise_not", Opcode::kBitNot);
  unary("lgamma", Opcode::kLgamma);

  // Pointwise ops written as formulas over a loaded x.
  auto formula = [&](const std::string& target, Formula f) {
    r.Add(target, FormulaRule(std::move(f)));
  };
  auto clamp = [](Builder& d, uint32_t n, Body& b, int32_t x, ScalarType ct, bool tensors) {
    for (size_t i = 1; i <= 2; ++i) {
      const Arg& a = d.A(n, i);
      if (d.IsNone(a)) continue;
      int32_t bound;
      if (tensors) {
        bound = b.Cast(d.LoadB(b, d.TensorArg(a)), ct);
      } else {
        bound = b.Const(d.Num(a), ct);
      }
      x = b.Bin(i == 1 ? Opcode::kMax : Opcode::kMin, x, bound);
    }
    return x;
  };
  formula("aten.clamp.default", [clamp](Builder& d, uint32_t n, Body& b, int32_t x, ScalarType ct) {
    return clamp(d, n, b, x, ct, false);
  });
  formula("aten.clamp.Tensor", [clamp](Builder& d, uint32_t n, Body& b, int32_t x, ScalarType ct) {
    return clamp(d, n, b, x, ct, true);
  });
  formula("aten.clamp_min.default", [](Builder& d, uint32_t n, Body& b, int32_t x, ScalarType ct) {
    return b.Bin(Opcode::kMax, x, b.Const(d.Num(d.A(n, 1)), ct));
  });
  formula("aten.clamp_max.default", [](Builder& d, uint32_t n, Body& b, int32_t x, ScalarType ct) {
    return b.Bin(Opcode::kMin, x, b.Const(d.Num(d.A(n, 1)), ct));
  });
  formula("aten.frac.default", [](Builder&, uint32_t, Body& b, int32_t x, ScalarType) {
    return b.Sub(x, b.Un(Opcode::kTrunc, x));
  });

  // Binary arithmetic with alpha.
  auto add_sub = [&](const std::string& target, double sign, bool reversed) {
    r.Add(target, [sign, reversed](Builder& d, uint32_t n) {
      return d.Pointwise(n, [&](Body& b, ScalarType ct) -> absl::StatusOr<int32_t> {
        auto x = d.Operand(b, d.A(n, 0), ct);
        if (!x.ok()) return x;
        auto y = d.Operand(b, d.A(n, 1), ct);
        if (!y.ok()) return y;
        int32_t xv = b.Cast(*x, ct), yv = b.Cast(*y, ct);
        if (reversed) std::swap(xv, yv);
        const double alpha = d.Num(d.A(n, 2), 1);
        if (alpha != 1) yv = b.Mul(yv, b.Const(alpha, ct));
        if (ct == ScalarType::kBool) return b.Bin(Opcode::kOr, xv, yv);
        return b.Bin(sign > 0 ? Opcode::kAdd : Opcode::kSub, xv, yv);
      });
    });
  };
  add_sub("aten.add.Tensor", 1, false);
  add_sub("aten.add.Scalar", 1, false);
  add_sub("aten.sub.Tensor", -1, false);
  add_sub("aten.sub.Scalar", -1, false);
  add_sub("aten.rsub.Tensor", -1, true);
  add_sub("aten.rsub.Scalar", -1, true);
  auto binary = [&](const std::string& target, Opcode op) {
    r.Add(target, [op](Builder& d, uint32_t n) { return Binary(d, n, op); });
  };
  const Rule mul = [](Builder& d, uint32_t n) {
    return d.Pointwise(n, [&](Body& b, ScalarType ct) -> absl::StatusOr<int32_t> {
      auto x = d.Operand(b, d.A(n, 0), ct);
      if (!x.ok()) return x;
      auto y = d.Operand(b, d.A(n, 1), ct);
      if (!y.ok()) return y;
      if (ct == ScalarType::kBool) return b.Bin(Opcode::kAnd, b.Cast(*x, ct), b.Cast(*y, ct));
      return b.Mul(b.Cast(*x, ct), b.Cast(*y, ct));
    });
  };
  r.Add("aten.mul.Tensor", mul);
  r.Add("aten.mul.Scalar", mul);
  binary("aten.div.Tensor", Opcode::kDiv);
  binary("aten.div.Scalar", Opcode::kDiv);
  auto div_mode = [](Builder& d, uint32_t n) {
    return d.Pointwise(n, [&](Body& b, ScalarType ct) -> absl::StatusOr<int32_t> {
      const Arg& mode = d.A(n, 2);
      const std::string m = mode.kind == ArgKind::kString ? d.graph().str(mode.string_id) : "";
      const ScalarType work = m.empty() ? ct : (loop::IsFloat(ct) ? ct : ScalarType::kI64);
      auto x = d.Operand(b, d.A(n, 0), work);
      if (!x.ok()) return x;
      auto y = d.Operand(b, d.A(n, 1), work);
      if (!y.ok()) return y;
      int32_t xv = b.Cast(*x, work), yv = b.Cast(*y, work);
      if (m == "floor") return b.Bin(Opcode::kFloorDiv, xv, yv);
      if (m == "trunc") {
        if (loop::IsFloat(work)) return b.Un(Opcode::kTrunc, b.Div(xv, yv));
        return b.Bin(Opcode::kDiv, xv, yv);
      }
      return b.Div(b.Cast(xv, ct), b.Cast(yv, ct));
    });
  };
  r.Add("aten.div.Tensor_mode", div_mode);
  r.Add("aten.div.Scalar_mode", div_mode);
  binary("aten.floor_divide.default", Opcode::kFloorDiv);
  binary("aten.remainder.Tensor", Opcode::kRemainder);
  binary("aten.remainder.Scalar", Opcode::kRemainder);
  binary("aten.fmod.Tensor", Opcode::kFmod);
  binary("aten.fmod.Scalar", Opcode::kFmod);
  binary("aten.atan2.default", Opcode::kAtan2);
  binary("aten.maximum.default", Opcode::kMax);
  binary("aten.minimum.default", Opcode::kMin);
  binary("aten.bitwise_and.Tensor", Opcode::kAnd);
  binary("aten.bitwise_or.Tensor", Opcode::kOr);
  binary("aten.bitwise_xor.Tensor", Opcode::kXor);
  binary("aten.pow.Tensor_Tensor", Opcode::kPow);
  binary("aten.pow.Scalar", Opcode::kPow);
  r.Add("aten.pow.Tensor_Scalar", [](Builder& d, uint32_t n) {
    return d.Pointwise(n, [&](Body& b, ScalarType ct) -> absl::StatusOr<int32_t> {
      int32_t x = b.Cast(d.LoadB(b, d.In(n, 0)), ct);
      const double e = d.Num(d.A(n, 1));
      if (e == 1) return x;
      if (e == 2) return b.Mul(x, x);
      if (e == 3) return b.Mul(b.Mul(x, x), x);
      if (loop::IsFloat(ct)) {
        if (e == 0.5) return b.Un(Opcode::kSqrt, x);
        if (e == -0.5) return b.Un(Opcode::kRsqrt, x);
        if (e == -1) return b.Un(Opcode::kRecip, x);
        if (e == -2) return b.Un(Opcode::kRecip, b.Mul(x, x));
      }
      return b.Bin(Opcode::kPow, x, b.Const(e, ct));
    });
  });
  auto compare = [&](const std::string& name, Opcode op) {
    r.Add("aten." + name + ".Tensor", [op](Builder& d, uint32_t n) { return Compare(d, n, op); });
    r.Add("aten." + name + ".Scalar", [op](Builder& d, uint32_t n) { return Compare(d, n, op); });
  };
  compare("eq", Opcode::kEq);
  compare("ne", Opcode::kNe);
  compare("lt", Opcode::kLt);
  compare("le", Opcode::kLe);
  compare("gt", Opcode::kGt);
  compare("ge", Opcode::kGe);
  auto logical = [&](const std::string& target, Opcode op) {
    r.Add(target, [op](Builder& d, uint32_t n) {
      return d.Pointwise(n, [&](Body& b, ScalarType) -> absl::StatusOr<int32_t> {
        return b.Bin(op, b.ToBool(d.LoadB(b, d.In(n, 0))), b.ToBool(d.LoadB(b, d.In(n, 1))));
      });
    });
  };
  logical("aten.logical_and.default", Opcode::kAnd);
  logical("aten.logical_or.default", Opcode::kOr);
  logical("aten.logical_xor.default", Opcode::kXor);
  auto where = [](Builder& d, uint32_t n) {
    return d.Pointwise(n, [&](Body& b, ScalarType ct) -> absl::StatusOr<int32_t> {
      int32_t c = b.ToBool(d.LoadB(b, d.In(n, 0)));
      auto x = d.Operand(b, d.A(n, 1), ct);
      if (!x.ok()) return x;
      auto y = d.Operand(b, d.A(n, 2), ct);
      if (!y.ok()) return y;
      return b.Sel(c, b.Cast(*x, ct), b.Cast(*y, ct));
    });
  };
  r.Add("aten.where.self", where);
  r.Add("aten.where.ScalarSelf", where);
  r.Add("aten.where.ScalarOther", where);
  auto masked_fill = [](Builder& d, uint32_t n) {
    return d.Pointwise(n, [&](Body& b, ScalarType ct) -> absl::StatusOr<int32_t> {
      int32_t x = b.Cast(d.LoadB(b, d.In(n, 0)), ct);
      int32_t m = b.ToBool(d.LoadB(b, d.In(n, 1)));
      auto v = d.Operand(b, d.A(n, 2), ct);
      if (!v.ok()) return v;
      return b.Sel(m, b.Cast(*v, ct), x);
    });
  };
  r.Add("aten.masked_fill.Scalar", masked_fill);
  r.Add("aten.masked_fill.Tensor", masked_fill);
  auto lerp = [](Builder& d, uint32_t n) {
    return d.Pointwise(n, [&](Body& b, ScalarType ct) -> absl::StatusOr<int32_t> {
      int32_t x = b.Cast(d.LoadB(b, d.In(n, 0)), ct);
      int32_t y = b.Cast(d.LoadB(b, d.In(n, 1)), ct);
      auto w = d.Operand(b, d.A(n, 2), ct);
      if (!w.ok()) return w;
      int32_t wv = b.Cast(*w, ct);
      int32_t diff = b.Sub(y, x);
      int32_t lo = b.Add(x, b.Mul(wv, diff));
      int32_t hi = b.Sub(y, b.Mul(diff, b.Sub(b.Const(1, ct), wv)));
      return b.Sel(b.Bin(Opcode::kLt, b.Un(Opcode::kAbs, wv), b.Const(0.5, ct)), lo, hi);
    });
  };
  r.Add("aten.lerp.Scalar", lerp);
  r.Add("aten.lerp.Tensor", lerp);
  auto addc = [](bool div) {
    return [div](Builder& d, uint32_t n) {
      return d.Pointwise(n, [&](Body& b, ScalarType ct) -> absl::StatusOr<int32_t> {
        int32_t x = b.Cast(d.LoadB(b, d.In(n, 0)), ct);
        int32_t t1 = b.Cast(d.LoadB(b, d.In(n, 1)), ct);
        int32_t t2 = b.Cast(d.LoadB(b, d.In(n, 2)), ct);
        int32_t p = div ? b.Div(t1, t2) : b.Mul(t1, t2);
        return b.Add(x, b.MulC(p, d.Num(d.A(n, 3), 1)));
      });
    };
  };
  r.Add("aten.addcmul.default", addc(false));
  r.Add("aten.addcdiv.default", addc(true));

  // Copies and casts.
  for (const char* t :
       {"aten.clone.default", "aten._to_copy.default", "aten.lift_fresh_copy.default",
        "aten.contiguous.default", "prims.convert_element_type.default"}) {
    r.Add(t, [](Builder& d, uint32_t n) { return Copy(d, n, 0); });
  }
  r.Add("aten.copy.default", [](Builder& d, uint32_t n) { return Copy(d, n, 1); });
  r.Add("aten.copy_.default", [](Builder& d, uint32_t n) { return CopyInPlace(d, n); });
}

}  // namespace kiln::decompose
