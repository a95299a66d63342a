// Neural-network rules: activations and their backwards, softmax and log-softmax, the nll
// loss, dropout.

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <utility>

#include "compiler/decompose/rule_registry.h"

namespace kiln::decompose {
namespace {

using graph::Arg;
using graph::ArgKind;
using loop::IndexExpr;
using loop::Opcode;
using loop::ReduceKind;
using loop::ScalarType;

constexpr double kSqrt1_2 = 0.70710678118654752440;
constexpr double kSqrt2OverPi = 0.79788456080286535588;

// softmax and log_softmax along dim; the safe form (_safe_softmax, attention with masks that
// can cover a whole row) gives 0 for a row of -inf where softmax gives NaN.
absl::Status Softmax(Builder& d, uint32_t node, bool log, bool safe = false) {
  const int32_t x = d.In(node, 0);
  const graph::Value* out = d.Out(node, 0);
  const int64_t dim = d.Int(d.A(node, 1));
  const ScalarType acc = loop::ComputeType(loop::ScalarTypeOf(out->dtype));
  Body b1 = d.ReduceBody(x, {dim});
  const std::vector<bool> red = b1.reduced();
  auto m = d.SumTemp(node, b1, b1.Cast(d.LoadB(b1, x), acc), ReduceKind::kMax, acc);
  if (!m.ok()) return m.status();
  Body b2(d.Tn(x).sizes, red);
  int32_t e2 = b2.Un(Opcode::kExp, b2.Sub(b2.Cast(d.LoadB(b2, x), acc), d.LoadB(b2, *m)));
  auto s = d.SumTemp(node, b2, e2, ReduceKind::kSum, acc);
  if (!s.ok()) return s.status();
  Body b3(d.Tn(x).sizes);
  int32_t shifted = b3.Sub(b3.Cast(d.LoadB(b3, x), acc), d.LoadB(b3, *m));
  int32_t r = log ? b3.Sub(shifted, b3.Un(Opcode::kLog, d.LoadB(b3, *s)))
                  : b3.Div(b3.Un(Opcode::kExp, shifted), d.LoadB(b3, *s));
  if (safe) {
    const int32_t masked = b3.Bin(Opcode::kEq, d.LoadB(b3, *m),
                                  b3.Const(-std::numeric_limits<double>::infinity(), acc));
    r = b3.Sel(masked, b3.Const(0, acc), r);
  }
  return d.FinishPointwise(node, b3, r, out->dtype).status();
}

absl::Status SoftmaxBackward(Builder& d, uint32_t node, bool log) {
  const int32_t g = d.In(node, 0), y = d.In(node, 1);
  const graph::Value* out = d.Out(node, 0);
  const int64_t dim = d.Int(d.A(node, 2));
  const ScalarType acc = loop::ComputeType(loop::ScalarTypeOf(out->dtype));
  Body b1 = d.ReduceBody(g, {dim});
  const std::vector<bool> red = b1.reduced();
  int32_t v = b1.Cast(d.LoadB(b1, g), acc);
  if (!log) v = b1.Mul(v, b1.Cast(d.LoadB(b1, y), acc));
  auto s = d.SumTemp(node, b1, v, ReduceKind::kSum, acc);
  if (!s.ok()) return s.status();
  Body b2(d.Tn(g).sizes);
  int32_t gv = b2.Cast(d.LoadB(b2, g), acc), yv = b2.Cast(d.LoadB(b2, y), acc);
  int32_t r = log ? b2.Sub(gv, b2.Mul(b2.Un(Opcode::kExp, yv), d.LoadB(b2, *s)))
                  : b2.Mul(yv, b2.Sub(gv, d.LoadB(b2, *s)));
  return d.FinishPointwise(node, b2, r, out->dtype).status();
}

absl::Status Dropout(Builder& d, uint32_t node) {
  const int32_t x = d.In(node, 0);
  const double p = d.Num(d.A(node, 1));
  const Arg& train = d.A(node, 2);
  // Dropout with p = 0 keeps every element: no bits to draw, so its kernel takes no Philox
  // seed and offset and a CUDA graph can replay it (its stream number stays reserved).
  const bool draws = (d.IsNone(train) || d.Int(train) != 0) && p > 0.0;
  const int64_t stream = d.rng_stream(node);
  const double scale = p >= 1.0 ? 0.0 : 1.0 / (1.0 - p);
  uint32_t threshold = 0;
  if (p >= 1.0) {
    threshold = uint32_t{1} << 24;
  } else if (p > 0.0) {
    threshold = static_cast<uint32_t>(std::ceil(std::ldexp(p, 24)));
  }
  for (int k = 0; k < 2; ++k) {
    const graph::Value* o = d.Out(node, static_cast<size_t>(k));
    if (o == nullptr) continue;
    Body b(d.Tn(x).sizes);
    int32_t keep;
    if (draws) {
      int32_t bits = b.RandBits(stream, b.Idx(b.Linear()));
      keep = b.Bin(Opcode::kGe, bits, b.IConst(threshold));
    } else {
      keep = b.Const(1, ScalarType::kBool);
    }
    int32_t r;
    if (k == 0) {
      const ScalarType ct = loop::ComputeType(d.ST(x));
      int32_t xv = b.Cast(d.LoadB(b, x), ct);
      r = draws ? b.Sel(keep, b.MulC(xv, scale), b.Const(0, ct)) : xv;
    } else {
      r = keep;
    }
    if (auto s = d.FinishPointwise(node, b, r, o->dtype, k); !s.ok()) return s.status();
  }
  return absl::OkStatus();
}

// Reductions as PyTorch numbers them (at::Reduction).
constexpr int64_t kReduceNone = 0, kReduceMean = 1, kReduceSum = 2;

// mse_loss: (self - target)^2, reduced to a mean or a sum over every element or not at all.
absl::Status MseLoss(Builder& d, uint32_t node) {
  const int32_t x = d.In(node, 0), t = d.In(node, 1);
  const int64_t reduction = d.Int(d.A(node, 2), kReduceMean);
  const graph::Value* out = d.Out(node, 0);
  const ScalarType acc = loop::ComputeType(loop::ScalarTypeOf(out->dtype));
  auto squared = [&](Body& b) {
    const int32_t diff = b.Sub(b.Cast(d.LoadB(b, x), acc), b.Cast(d.LoadB(b, t), acc));
    return b.Mul(diff, diff);
  };
  if (reduction == kReduceNone) {
    return d.Pointwise(node,
                       [&](Body& b, ScalarType) -> absl::StatusOr<int32_t> { return squared(b); });
  }
  if (reduction != kReduceMean && reduction != kReduceSum) {
    return absl::UnimplementedError(absl::StrCat("mse_loss with reduction ", reduction));
  }
  Body b = d.ReduceBody(x, {});
  const int32_t v = squared(b);
  if (reduction == kReduceSum) {
    return d.FinishReduce(node, b, v, ReduceKind::kSum, out->dtype, false, 0, false).status();
  }
  const IndexExpr n = d.NumelOf(d.Tn(x).sizes, b.reduced());
  auto s = d.FinishReduce(node, b, v, ReduceKind::kSum, loop::DTypeOf(acc), false, 0, true);
  if (!s.ok()) return s.status();
  Body e(d.Tn(*s).sizes);
  return d.FinishPointwise(node, e, e.Div(d.LoadB(e, *s), e.Cast(e.Idx(n), acc)), out->dtype)
      .status();
}

// d/dself of mse_loss: 2 (self - target) grad, over self's element count for a mean.
absl::Status MseLossBackward(Builder& d, uint32_t node) {
  const int32_t g = d.In(node, 0), x = d.In(node, 1), t = d.In(node, 2);
  const int64_t reduction = d.Int(d.A(node, 3), kReduceMean);
  return d.Pointwise(node, [&](Body& b, ScalarType ct) -> absl::StatusOr<int32_t> {
    int32_t norm = b.Const(2, ct);
    if (reduction == kReduceMean) {
      norm = b.Div(norm,
                   b.Cast(b.Idx(d.NumelOf(d.Tn(x).sizes, std::vector<bool>(d.Rank(x), true))), ct));
    }
    const int32_t diff = b.Sub(b.Cast(d.LoadB(b, x), ct), b.Cast(d.LoadB(b, t), ct));
    return b.Mul(b.Mul(norm, diff), b.Cast(d.LoadB(b, g), ct));
  });
}

absl::Status NllLoss(Builder& d, uint32_t node) {
  // (self [N, C] or [C], target [N] or [], weight?, reduction, ignore_index)
  const int32_t x = d.In(node, 0), target = d.In(node, 1), w = d.In(node, 2);
  const int64_t reduction = d.Int(d.A(node, 3), 1);
  const int64_t ignore = d.Int(d.A(node, 4), -100);
  const bool batched = d.Rank(x) == 2;
  const ScalarType acc =
      loop::ComputeType(d.ST(x)) == ScalarType::kF64 ? ScalarType::kF64 : ScalarType::kF32;
  const IndexExpr rows = batched ? d.Tn(x).sizes[0] : IndexExpr::Const(1);
  const IndexExpr classes = d.Tn(x).sizes[batched ? 1 : 0];
  // Per row i: (valid, weight, -weight * x[i, t]).
  auto row = [&](Body& b, bool want_loss) {
    std::vector<IndexExpr> tc;
    if (d.Rank(target) == 1) tc.push_back(Body::V(0));
    int32_t t = b.Cast(b.Load(target, d.ST(target), tc), ScalarType::kI64);
    int32_t valid = b.Bin(Opcode::kAnd, b.Bin(Opcode::kNe, t, b.IConst(ignore)),
                          b.Bin(Opcode::kAnd, b.Bin(Opcode::kGe, t, b.IConst(0)),
                                b.Bin(Opcode::kLt, t, b.Idx(classes))));
    int32_t wv =
        w >= 0 ? b.Cast(b.Load(w, d.ST(w), {IndexExpr()}, valid, {t}), acc) : b.Const(1, acc);
    wv = b.Sel(valid, wv, b.Const(0, acc));
    if (!want_loss) return wv;
    std::vector<IndexExpr> xc;
    std::vector<int32_t> dyn;
    if (batched) {
      xc = {Body::V(0), IndexExpr()};
      dyn = {-1, t};
    } else {
      xc = {IndexExpr()};
      dyn = {t};
    }
    int32_t xv = b.Cast(b.Load(x, d.ST(x), xc, valid, dyn), acc);
    return b.Sel(valid, b.Bin(Opcode::kSub, b.Const(0, acc), b.Mul(wv, xv)), b.Const(0, acc));
  };
  const graph::Value* out = d.Out(node, 0);
  const graph::Value* tw = d.Out(node, 1);
  if (reduction == 0 && batched) {
    if (out != nullptr) {
      Body b({rows});
      if (auto s = d.FinishPointwise(node, b, row(b, true), out->dtype, 0); !s.ok())
        return s.status();
    }
  }
  // total_weight (and the reduced loss) are sums over rows.
  int32_t total = -1;
  if (tw != nullptr || (reduction != 0 || !batched)) {
    Body b({rows}, {true});
    auto s = d.FinishReduce(node, b, row(b, false), ReduceKind::kSum, loop::DTypeOf(acc), false, 1,
                            true);
    if (!s.ok()) return s.status();
    total = *s;
    if (tw != nullptr) {
      Body e({});
      if (auto r = d.FinishPointwise(node, e, e.Load(total, acc, {}), tw->dtype, 1); !r.ok()) {
        return r.status();
      }
    }
  }
  if (out != nullptr && (reduction != 0 || !batched)) {
    Body b({rows}, {true});
    auto s =
        d.FinishReduce(node, b, row(b, true), ReduceKind::kSum, loop::DTypeOf(acc), false, 0, true);
    if (!s.ok()) return s.status();
    Body e({});
    int32_t v = e.Load(*s, acc, {});
    if (reduction == 1) v = e.Div(v, e.Load(total, acc, {}));
    if (auto r = d.FinishPointwise(node, e, v, out->dtype, 0); !r.ok()) return r.status();
  }
  return absl::OkStatus();
}

absl::Status NllLossBackward(Builder& d, uint32_t node) {
  // (grad_output, self, target, weight?, reduction, ignore_index, total_weight)
  const int32_t g = d.In(node, 0), x = d.In(node, 1), target = d.In(node, 2), w = d.In(node, 3),
                tw = d.In(node, 6);
  const int64_t reduction = d.Int(d.A(node, 4), 1);
  const int64_t ignore = d.Int(d.A(node, 5), -100);
  const bool batched = d.Rank(x) == 2;
  const ScalarType ct = loop::ComputeType(d.ST(x));
  return d.Pointwise(node, [&](Body& b, ScalarType) -> absl::StatusOr<int32_t> {
    std::vector<IndexExpr> tc;
    if (d.Rank(target) == 1) tc.push_back(Body::V(0));
    int32_t t = b.Cast(b.Load(target, d.ST(target), tc), ScalarType::kI64);
    int32_t c = b.Idx(Body::V(batched ? 1 : 0));
    int32_t hit =
        b.Bin(Opcode::kAnd, b.Bin(Opcode::kEq, c, t), b.Bin(Opcode::kNe, t, b.IConst(ignore)));
    int32_t wv =
        w >= 0 ? b.Cast(b.Load(w, d.ST(w), {Body::V(batched ? 1 : 0)}), ct) : b.Const(1, ct);
    std::vector<IndexExpr> gc;
    if (d.Rank(g) == 1) gc.push_back(Body::V(0));
    int32_t gv = b.Cast(b.Load(g, d.ST(g), gc), ct);
    if (reduction == 1) gv = b.Div(gv, b.Cast(b.Load(tw, d.ST(tw), {}), ct));
    int32_t v = b.Bin(Opcode::kSub, b.Const(0, ct), b.Mul(wv, gv));
    return b.Sel(hit, v, b.Const(0, ct));
  });
}

}  // namespace

void RegisterNnRules(RuleRegistry& r) {
  // Activations written as formulas over a loaded x.
  auto formula = [&](const std::string& target, Formula f) {
    r.Add(target, FormulaRule(std::move(f)));
  };
  formula("aten.relu.default", [](Builder&, uint32_t, Body& b, int32_t x, ScalarType ct) {
    return b.Bin(Opcode::kMax, x, b.Const(0, ct));
  });
  formula("aten.silu.default", [](Builder&, uint32_t, Body& b, int32_t x, ScalarType) {
    return b.Mul(x, b.Un(Opcode::kSigmoid, x));
  });
  formula("aten.gelu.default", [](Builder& d, uint32_t n, Body& b, int32_t x, ScalarType) {
    const Arg& a = d.A(n, 1);
    if (a.kind == ArgKind::kString && d.graph().str(a.string_id) == "tanh") {
      int32_t inner = b.MulC(b.Add(x, b.MulC(b.Mul(b.Mul(x, x), x), 0.044715)), kSqrt2OverPi);
      return b.Mul(b.MulC(x, 0.5), b.AddC(b.Un(Opcode::kTanh, inner), 1.0));
    }
    return b.Mul(b.MulC(x, 0.5), b.AddC(b.Un(Opcode::kErf, b.MulC(x, kSqrt1_2)), 1.0));
  });
  formula("aten.mish.default", [](Builder&, uint32_t, Body& b, int32_t x, ScalarType) {
    return b.Mul(x, b.Un(Opcode::kTanh, b.Un(Opcode::kLog1p, b.Un(Opcode::kExp, x))));
  });
  formula("aten.hardsigmoid.default", [](Builder&, uint32_t, Body& b, int32_t x, ScalarType ct) {
    int32_t c =
        b.Bin(Opcode::kMin, b.Bin(Opcode::kMax, b.AddC(x, 3), b.Const(0, ct)), b.Const(6, ct));
    return b.Div(c, b.Const(6, ct));
  });
  formula("aten.hardswish.default", [](Builder&, uint32_t, Body& b, int32_t x, ScalarType ct) {
    int32_t c =
        b.Bin(Opcode::kMin, b.Bin(Opcode::kMax, b.AddC(x, 3), b.Const(0, ct)), b.Const(6, ct));
    return b.Div(b.Mul(x, c), b.Const(6, ct));
  });
  formula("aten.leaky_relu.default", [](Builder& d, uint32_t n, Body& b, int32_t x, ScalarType ct) {
    return b.Sel(b.Bin(Opcode::kGt, x, b.Const(0, ct)), x, b.MulC(x, d.Num(d.A(n, 1), 0.01)));
  });
  formula("aten.hardtanh.default", [](Builder& d, uint32_t n, Body& b, int32_t x, ScalarType ct) {
    return b.Bin(Opcode::kMin, b.Bin(Opcode::kMax, x, b.Const(d.Num(d.A(n, 1), -1), ct)),
                 b.Const(d.Num(d.A(n, 2), 1), ct));
  });
  formula("aten.softplus.default", [](Builder& d, uint32_t n, Body& b, int32_t x, ScalarType ct) {
    const double beta = d.Num(d.A(n, 1), 1), th = d.Num(d.A(n, 2), 20);
    int32_t xb = b.MulC(x, beta);
    int32_t soft = b.Div(b.Un(Opcode::kLog1p, b.Un(Opcode::kExp, xb)), b.Const(beta, ct));
    return b.Sel(b.Bin(Opcode::kGt, xb, b.Const(th, ct)), x, soft);
  });
  formula("aten.elu.default", [](Builder& d, uint32_t n, Body& b, int32_t x, ScalarType ct) {
    const double alpha = d.Num(d.A(n, 1), 1), scale = d.Num(d.A(n, 2), 1),
                 input_scale = d.Num(d.A(n, 3), 1);
    int32_t neg = b.MulC(b.Un(Opcode::kExpm1, b.MulC(x, input_scale)), alpha * scale);
    return b.Sel(b.Bin(Opcode::kGt, x, b.Const(0, ct)), b.MulC(x, scale), neg);
  });

  // Backward pointwise ops: (grad, x or y, ...).
  auto backward =
      [&](const std::string& target,
          std::function<int32_t(Builder&, uint32_t, Body&, int32_t, int32_t, ScalarType)> f) {
        r.Add(target, [f](Builder& d, uint32_t n) {
          return d.Pointwise(n, [&](Body& b, ScalarType ct) -> absl::StatusOr<int32_t> {
            int32_t g = b.Cast(d.LoadB(b, d.In(n, 0)), ct);
            int32_t x = b.Cast(d.LoadB(b, d.In(n, 1)), ct);
            return f(d, n, b, g, x, ct);
          });
        });
      };
  backward("aten.gelu_backward.default",
           [](Builder& d, uint32_t n, Body& b, int32_t g, int32_t x, ScalarType) {
             const Arg& a = d.A(n, 2);
             if (a.kind == ArgKind::kString && d.graph().str(a.string_id) == "tanh") {
               const double kappa = 0.044715;
               int32_t x2 = b.Mul(x, x);
               int32_t inner = b.MulC(b.Add(x, b.MulC(b.Mul(x2, x), kappa)), kSqrt2OverPi);
               int32_t th = b.Un(Opcode::kTanh, inner);
               int32_t left = b.MulC(x, 0.5);
               int32_t right = b.AddC(th, 1.0);
               int32_t left_d = b.MulC(right, 0.5);
               int32_t tanh_d = b.Sub(b.Const(1, b.T(th)), b.Mul(th, th));
               int32_t inner_d = b.MulC(b.AddC(b.MulC(x2, 3 * kappa), 1.0), kSqrt2OverPi);
               int32_t right_d = b.Mul(b.Mul(left, tanh_d), inner_d);
               return b.Mul(g, b.Add(left_d, right_d));
             }
             constexpr double kAlpha = kSqrt1_2;
             constexpr double kBeta = 0.5 * 1.12837916709551257390 * kSqrt1_2;  // 1/sqrt(2*pi)
             int32_t cdf = b.MulC(b.AddC(b.Un(Opcode::kErf, b.MulC(x, kAlpha)), 1.0), 0.5);
             int32_t pdf = b.MulC(b.Un(Opcode::kExp, b.MulC(b.Mul(x, x), -0.5)), kBeta);
             return b.Mul(g, b.Add(cdf, b.Mul(x, pdf)));
           });
  backward("aten.silu_backward.default",
           [](Builder&, uint32_t, Body& b, int32_t g, int32_t x, ScalarType ct) {
             int32_t s = b.Un(Opcode::kSigmoid, x);
             return b.Mul(b.Mul(g, s), b.Add(b.Const(1, ct), b.Mul(x, b.Sub(b.Const(1, ct), s))));
           });
  backward("aten.tanh_backward.default",
           [](Builder&, uint32_t, Body& b, int32_t g, int32_t y, ScalarType ct) {
             return b.Mul(g, b.Sub(b.Const(1, ct), b.Mul(y, y)));
           });
  backward("aten.sigmoid_backward.default",
           [](Builder&, uint32_t, Body& b, int32_t g, int32_t y, ScalarType ct) {
             return b.Mul(b.Mul(g, b.Sub(b.Const(1, ct), y)), y);
           });
  backward("aten.threshold_backward.default",
           [](Builder& d, uint32_t n, Body& b, int32_t g, int32_t x, ScalarType ct) {
             return b.Sel(b.Bin(Opcode::kLe, x, b.Const(d.Num(d.A(n, 2)), ct)), b.Const(0, ct), g);
           });
  backward("aten.hardtanh_backward.default",
           [](Builder& d, uint32_t n, Body& b, int32_t g, int32_t x, ScalarType ct) {
             int32_t out = b.Bin(Opcode::kOr, b.Bin(Opcode::kLe, x, b.Const(d.Num(d.A(n, 2)), ct)),
                                 b.Bin(Opcode::kGe, x, b.Const(d.Num(d.A(n, 3)), ct)));
             return b.Sel(out, b.Const(0, ct), g);
           });
  backward("aten.leaky_relu_backward.default",
           [](Builder& d, uint32_t n, Body& b, int32_t g, int32_t x, ScalarType ct) {
             return b.Sel(b.Bin(Opcode::kGt, x, b.Const(0, ct)), g, b.MulC(g, d.Num(d.A(n, 2))));
           });
  backward("aten.softplus_backward.default",
           [](Builder& d, uint32_t n, Body& b, int32_t g, int32_t x, ScalarType ct) {
             const double beta = d.Num(d.A(n, 2)), th = d.Num(d.A(n, 3));
             int32_t z = b.Un(Opcode::kExp, b.MulC(x, beta));
             int32_t soft = b.Div(b.Mul(g, z), b.AddC(z, 1.0));
             return b.Sel(b.Bin(Opcode::kGt, b.MulC(x, beta), b.Const(th, ct)), g, soft);
           });
  // As PyTorch's kernels: hardswish's slope is 0 up to -3, x / 3 + 1/2 below 3, then 1;
  // hardsigmoid's 1/6 strictly between -3 and 3.
  backward("aten.hardswish_backward.default",
           [](Builder&, uint32_t, Body& b, int32_t g, int32_t x, ScalarType ct) {
             int32_t slope = b.Add(b.Div(x, b.Const(3, ct)), b.Const(0.5, ct));
             int32_t inner = b.Sel(b.Bin(Opcode::kLt, x, b.Const(3, ct)), b.Mul(g, slope), g);
             return b.Sel(b.Bin(Opcode::kLe, x, b.Const(-3, ct)), b.Const(0, ct), inner);
           });
  backward("aten.hardsigmoid_backward.default",
           [](Builder&, uint32_t, Body& b, int32_t g, int32_t x, ScalarType ct) {
             int32_t inside = b.Bin(Opcode::kAnd, b.Bin(Opcode::kGt, x, b.Const(-3, ct)),
                                    b.Bin(Opcode::kLt, x, b.Const(3, ct)));
             return b.Sel(inside, b.Div(g, b.Const(6, ct)), b.Const(0, ct));
           });
  r.Add("aten.native_dropout_backward.default", [](Builder& d, uint32_t n) {
    return d.Pointwise(n, [&](Body& b, ScalarType ct) -> absl::StatusOr<int32_t> {
      int32_t g = b.Cast(d.LoadB(b, d.In(n, 0)), ct);
      int32_t m = b.Cast(d.LoadB(b, d.In(n, 1)), ct);
      return b.MulC(b.Mul(g, m), d.Num(d.A(n, 2)));
    });
  });
  r.Add("aten._softmax.default", [](Builder& d, uint32_t n) { return Softmax(d, n, false); });
  r.Add("aten._log_softmax.default", [](Builder& d, uint32_t n) { return Softmax(d, n, true); });
  r.Add("aten.mse_loss.default", [](Builder& d, uint32_t n) { return MseLoss(d, n); });
  r.Add("aten.mse_loss_backward.default",
        [](Builder& d, uint32_t n) { return MseLossBackward(d, n); });
  r.Add("aten._safe_softmax.default",
        [](Builder& d, uint32_t n) { return Softmax(d, n, false, true); });
  r.Add("aten._softmax_backward_data.default",
        [](Builder& d, uint32_t n) { return SoftmaxBackward(d, n, false); });
  r.Add("aten._log_softmax_backward_data.default",
        [](Builder& d, uint32_t n) { return SoftmaxBackward(d, n, true); });

  r.Add("aten.native_dropout.default", [](Builder& d, uint32_t n) { return Dropout(d, n); });
  r.Add("aten.nll_loss_forward.default", [](Builder& d, uint32_t n) { return NllLoss(d, n); });
  r.Add("aten.nll_loss_backward.default",
        [](Builder& d, uint32_t n) { return NllLossBackward(d, n); });
}

}  // namespace kiln::decompose
