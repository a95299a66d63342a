// Normalization: layer norm, group norm (forward) and batch norm (training and inference), and
// their backwards.

#include <vector>

#include "compiler/decompose/rule_registry.h"

namespace kiln::decompose {
namespace {

using loop::IndexExpr;
using loop::Opcode;
using loop::ReduceKind;
using loop::ScalarType;

absl::Status LayerNorm(Builder& d, uint32_t node) {
  const int32_t x = d.In(node, 0);
  const size_t k = d.Ints(d.A(node, 1)).size();
  const int32_t w = d.In(node, 2), bias = d.In(node, 3);
  const double eps = d.Num(d.A(node, 4));
  const size_t r = d.Rank(x);
  std::vector<int64_t> dims;
  for (size_t i = r - k; i < r; ++i) dims.push_back(static_cast<int64_t>(i));
  const ScalarType acc =
      loop::ComputeType(d.ST(x)) == ScalarType::kF64 ? ScalarType::kF64 : ScalarType::kF32;
  Body b1 = d.ReduceBody(x, dims);
  const std::vector<bool> red = b1.reduced();
  const IndexExpr n = d.NumelOf(d.Tn(x).sizes, red);
  auto s1 = d.SumTemp(node, b1, b1.Cast(d.LoadB(b1, x), acc), ReduceKind::kSum, acc);
  if (!s1.ok()) return s1.status();
  // mean: output 1 when the graph uses it (its metadata has the keepdim shape).
  Body bm(d.Tn(*s1).sizes);
  auto mean = d.FinishPointwise(node, bm, bm.Div(d.LoadB(bm, *s1), bm.Cast(bm.Idx(n), acc)),
                                loop::DTypeOf(acc), 1, d.Out(node, 1) == nullptr);
  if (!mean.ok()) return mean.status();
  Body b2(d.Tn(x).sizes, red);
  int32_t diff = b2.Sub(b2.Cast(d.LoadB(b2, x), acc), b2.Cast(d.LoadB(b2, *mean), acc));
  auto s2 = d.SumTemp(node, b2, b2.Mul(diff, diff), ReduceKind::kSum, acc);
  if (!s2.ok()) return s2.status();
  Body br(d.Tn(*s2).sizes);
  int32_t var = br.Div(d.LoadB(br, *s2), br.Cast(br.Idx(n), acc));
  auto rstd = d.FinishPointwise(node, br, br.Un(Opcode::kRsqrt, br.AddC(var, eps)),
                                loop::DTypeOf(acc), 2, d.Out(node, 2) == nullptr);
  if (!rstd.ok()) return rstd.status();
  if (d.Out(node, 0) == nullptr) return absl::OkStatus();
  Body b3(d.Tn(x).sizes);
  int32_t y = b3.Mul(b3.Sub(b3.Cast(d.LoadB(b3, x), acc), b3.Cast(d.LoadB(b3, *mean), acc)),
                     b3.Cast(d.LoadB(b3, *rstd), acc));
  if (w >= 0) y = b3.Mul(y, b3.Cast(d.LoadB(b3, w), acc));
  if (bias >= 0) y = b3.Add(y, b3.Cast(d.LoadB(b3, bias), acc));
  return d.FinishPointwise(node, b3, y, d.Tn(x).dtype, 0).status();
}

// Group norm over input [N, C, spatial...] in `group` groups of C / group channels: the
// statistics of each (sample, group) over its channels and positions, computed over the
// iteration space [N, group, C / group, spatial...] that reads channel g * (C / group) + c.
absl::Status GroupNorm(Builder& d, uint32_t node) {
  const int32_t x = d.In(node, 0), w = d.In(node, 1), bias = d.In(node, 2);
  const int64_t groups = d.Int(d.A(node, 6));
  const double eps = d.Num(d.A(node, 7));
  const Tensor xt = d.Tn(x);  // a copy: references into the tensors do not survive additions
  const size_t r = xt.sizes.size();
  if (r < 2 || groups <= 0 || !xt.sizes[1].is_const() || xt.sizes[1].const_value() % groups != 0) {
    return absl::UnimplementedError(
        "group norm over channels that are not a constant multiple "
        "of the groups");
  }
  const int64_t per_group = xt.sizes[1].const_value() / groups;
  const ScalarType acc =
      loop::ComputeType(d.ST(x)) == ScalarType::kF64 ? ScalarType::kF64 : ScalarType::kF32;
  std::vector<IndexExpr> dims = {xt.sizes[0], IndexExpr::Const(groups),
                                 IndexExpr::Const(per_group)};
  std::vector<bool> red = {false, false, true};
  for (size_t i = 2; i < r; ++i) {
    dims.push_back(xt.sizes[i]);
    red.push_back(true);
  }
  const IndexExpr n = d.NumelOf(dims, red);
  // x at a point of the grouped space.
  auto load_x = [&](Body& b) {
    std::vector<IndexExpr> c = {Body::V(0), Body::V(1) * IndexExpr::Const(per_group) + Body::V(2)};
    for (size_t i = 2; i < r; ++i) c.push_back(Body::V(i + 1));
    return b.Cast(b.Load(x, d.ST(x), c), acc);
  };
  // A per-(sample, group) value of `t` (keepdim over the grouped space) at sample v0, group g.
  auto at_group = [&](Body& b, int32_t t, IndexExpr g) {
    std::vector<IndexExpr> c = {Body::V(0), std::move(g)};
    for (size_t i = 2; i < d.Rank(t); ++i) c.push_back(IndexExpr::Const(0));
    return b.Cast(b.Load(t, d.ST(t), c), acc);
  };
  const std::vector<IndexExpr> stat_sizes = {xt.sizes[0], IndexExpr::Const(groups)};
  Body b1(dims, red);
  auto s1 = d.SumTemp(node, b1, load_x(b1), ReduceKind::kSum, acc);
  if (!s1.ok()) return s1.status();
  Body bm(stat_sizes);
  auto mean =
      d.FinishPointwise(node, bm, bm.Div(at_group(bm, *s1, Body::V(1)), bm.Cast(bm.Idx(n), acc)),
                        loop::DTypeOf(acc), 1, true);
  if (!mean.ok()) return mean.status();
  Body b2(dims, red);
  const int32_t diff = b2.Sub(load_x(b2), at_group(b2, *mean, Body::V(1)));
  auto s2 = d.SumTemp(node, b2, b2.Mul(diff, diff), ReduceKind::kSum, acc);
  if (!s2.ok()) return s2.status();
  Body br(stat_sizes);
  const int32_t var = br.Div(at_group(br, *s2, Body::V(1)), br.Cast(br.Idx(n), acc));
  auto rstd = d.FinishPointwise(node, br, br.Un(Opcode::kRsqrt, br.AddC(var, eps)),
                                loop::DTypeOf(acc), 2, true);
  if (!rstd.ok()) return rstd.status();
  if (absl::Status st = d.Alias(node, 1, *mean); !st.ok()) return st;
  if (absl::Status st = d.Alias(node, 2, *rstd); !st.ok()) return st;
  if (d.Out(node, 0) == nullptr) return absl::OkStatus();
  Body b3(xt.sizes);
  const IndexExpr g = IndexExpr::FloorDiv(Body::V(1), IndexExpr::Const(per_group), nullptr);
  int32_t y =
      b3.Mul(b3.Sub(b3.Cast(d.LoadB(b3, x), acc), at_group(b3, *mean, g)), at_group(b3, *rstd, g));
  if (w >= 0) y = b3.Mul(y, b3.Cast(b3.Load(w, d.ST(w), {Body::V(1)}), acc));
  if (bias >= 0) y = b3.Add(y, b3.Cast(b3.Load(bias, d.ST(bias), {Body::V(1)}), acc));
  return d.FinishPointwise(node, b3, y, xt.dtype, 0).status();
}

absl::Status LayerNormBackward(Builder& d, uint32_t node) {
  const int32_t g = d.In(node, 0), x = d.In(node, 1);
  const size_t k = d.Ints(d.A(node, 2)).size();
  const int32_t mean = d.In(node, 3), rstd = d.In(node, 4), w = d.In(node, 5);
  const size_t r = d.Rank(x);
  const ScalarType acc =
      loop::ComputeType(d.ST(x)) == ScalarType::kF64 ? ScalarType::kF64 : ScalarType::kF32;
  std::vector<int64_t> inner, outer;
  for (size_t i = 0; i < r; ++i) (i >= r - k ? inner : outer).push_back(static_cast<int64_t>(i));
  auto xhat = [&](Body& b) {
    return b.Mul(b.Sub(b.Cast(d.LoadB(b, x), acc), b.Cast(d.LoadB(b, mean), acc)),
                 b.Cast(d.LoadB(b, rstd), acc));
  };
  auto gw = [&](Body& b) {
    int32_t v = b.Cast(d.LoadB(b, g), acc);
    return w >= 0 ? b.Mul(v, b.Cast(d.LoadB(b, w), acc)) : v;
  };
  if (d.Out(node, 0) != nullptr) {
    Body b1 = d.ReduceBody(x, inner);
    const std::vector<bool> red = b1.reduced();
    const IndexExpr n = d.NumelOf(d.Tn(x).sizes, red);
    auto s1 = d.SumTemp(node, b1, gw(b1), ReduceKind::kSum, acc);
    if (!s1.ok()) return s1.status();
    Body b2(d.Tn(x).sizes, red);
    auto s2 = d.SumTemp(node, b2, b2.Mul(gw(b2), xhat(b2)), ReduceKind::kSum, acc);
    if (!s2.ok()) return s2.status();
    Body b3(d.Tn(x).sizes);
    int32_t nn = b3.Cast(b3.Idx(n), acc);
    int32_t t =
        b3.Sub(b3.Sub(b3.Mul(nn, gw(b3)), d.LoadB(b3, *s1)), b3.Mul(xhat(b3), d.LoadB(b3, *s2)));
    int32_t gi = b3.Mul(b3.Div(b3.Cast(d.LoadB(b3, rstd), acc), nn), t);
    if (auto s = d.FinishPointwise(node, b3, gi, d.Tn(x).dtype, 0); !s.ok()) return s.status();
  }
  for (int out = 1; out <= 2; ++out) {
    const graph::Value* o = d.Out(node, static_cast<size_t>(out));
    if (o == nullptr) continue;
    Body b = d.ReduceBody(x, outer);
    int32_t v = b.Cast(d.LoadB(b, g), acc);
    if (out == 1) v = b.Mul(v, xhat(b));
    if (auto s = d.FinishReduce(node, b, v, ReduceKind::kSum, o->dtype, false, out, false);
        !s.ok()) {
      return s.status();
    }
  }
  return absl::OkStatus();
}

// What batch norm's forward and backward share over x [N, C, ...]: the accumulation type,
// the dims reduced per channel (all but dim 1), and per-channel [C] tensors loaded broadcast
// over x as [C, 1, 1, ...].
struct ChannelFrame {
  ScalarType acc = ScalarType::kF32;
  std::vector<int64_t> dims;

  int32_t Load(Builder& d, Body& b, int32_t t) const {
    return b.Cast(b.Load(t, d.ST(t), {Body::V(1)}), acc);
  }
};

ChannelFrame ChannelFrameOf(const Builder& d, int32_t x) {
  ChannelFrame f;
  f.acc = loop::ComputeType(d.ST(x)) == ScalarType::kF64 ? ScalarType::kF64 : ScalarType::kF32;
  for (size_t i = 0; i < d.Rank(x); ++i) {
    if (i != 1) f.dims.push_back(static_cast<int64_t>(i));
  }
  return f;
}

absl::Status BatchNorm(Builder& d, uint32_t node, bool training_arg) {
  // _native_batch_norm_legit_functional(input, weight, bias, running_mean, running_var,
  // training, momentum, eps) -> (out, save_mean, save_rstd, new_running_mean, new_running_var)
  // _native_batch_norm_legit_no_training(input, weight, bias, rm, rv, momentum, eps)
  const int32_t x = d.In(node, 0), w = d.In(node, 1), bias = d.In(node, 2), rm = d.In(node, 3),
                rv = d.In(node, 4);
  const bool training = training_arg ? d.Int(d.A(node, 5)) != 0 : false;
  const double momentum = d.Num(d.A(node, training_arg ? 6 : 5));
  const double eps = d.Num(d.A(node, training_arg ? 7 : 6));
  const ChannelFrame frame = ChannelFrameOf(d, x);
  const ScalarType acc = frame.acc;
  const std::vector<int64_t>& dims = frame.dims;
  auto channel = [&](Body& b, int32_t t) { return frame.Load(d, b, t); };
  int32_t mean_t = -1, rstd_t = -1;
  if (training) {
    Body b1 = d.ReduceBody(x, dims);
    const std::vector<bool> red = b1.reduced();
    const IndexExpr n = d.NumelOf(d.Tn(x).sizes, red);
    auto s1 = d.FinishReduce(node, b1, b1.Cast(d.LoadB(b1, x), acc), ReduceKind::kSum,
                             loop::DTypeOf(acc), false, 0, true);
    if (!s1.ok()) return s1.status();
    Body bm({d.Tn(x).sizes[1]});
    auto mean = d.FinishPointwise(node, bm, bm.Div(d.LoadB(bm, *s1), bm.Cast(bm.Idx(n), acc)),
                                  loop::DTypeOf(acc), 1, d.Out(node, 1) == nullptr);
    if (!mean.ok()) return mean.status();
    Body b2(d.Tn(x).sizes, red);
    int32_t diff = b2.Sub(b2.Cast(d.LoadB(b2, x), acc), channel(b2, *mean));
    auto s2 = d.FinishReduce(node, b2, b2.Mul(diff, diff), ReduceKind::kSum, loop::DTypeOf(acc),
                             false, 0, true);
    if (!s2.ok()) return s2.status();
    Body br({d.Tn(x).sizes[1]});
    int32_t var = br.Div(d.LoadB(br, *s2), br.Cast(br.Idx(n), acc));
    auto rstd = d.FinishPointwise(node, br, br.Un(Opcode::kRsqrt, br.AddC(var, eps)),
                                  loop::DTypeOf(acc), 2, d.Out(node, 2) == nullptr);
    if (!rstd.ok()) return rstd.status();
    mean_t = *mean;
    rstd_t = *rstd;
    if (training_arg) {
      // New running statistics: (1 - m) * old + m * batch (unbiased variance).
      for (int out = 3; out <= 4; ++out) {
        const graph::Value* o = d.Out(node, static_cast<size_t>(out));
        if (o == nullptr) continue;
        Body bu({d.Tn(x).sizes[1]});
        int32_t old = bu.Cast(d.LoadB(bu, out == 3 ? rm : rv), acc);
        int32_t batch;
        if (out == 3) {
          batch = d.LoadB(bu, mean_t);
        } else {
          int32_t nn = bu.Cast(bu.Idx(n), acc);
          batch = bu.Div(d.LoadB(bu, *s2), bu.Sub(nn, bu.Const(1, acc)));
        }
        int32_t v = bu.Add(bu.MulC(old, 1 - momentum), bu.MulC(batch, momentum));
        if (auto s = d.FinishPointwise(node, bu, v, o->dtype, out); !s.ok()) return s.status();
      }
    }
  } else {
    Body bm({d.Tn(x).sizes[1]});
    auto mean = d.FinishPointwise(node, bm, bm.Cast(d.LoadB(bm, rm), acc), loop::DTypeOf(acc), 1,
                                  d.Out(node, 1) == nullptr);
    if (!mean.ok()) return mean.status();
    Body br({d.Tn(x).sizes[1]});
    auto rstd = d.FinishPointwise(
        node, br, br.Un(Opcode::kRsqrt, br.AddC(br.Cast(d.LoadB(br, rv), acc), eps)),
        loop::DTypeOf(acc), 2, d.Out(node, 2) == nullptr);
    if (!rstd.ok()) return rstd.status();
    mean_t = *mean;
    rstd_t = *rstd;
    if (training_arg) {
      for (int out = 3; out <= 4; ++out) {
        if (d.Out(node, static_cast<size_t>(out)) == nullptr) continue;
        if (auto s = d.Alias(node, static_cast<size_t>(out), out == 3 ? rm : rv); !s.ok()) return s;
      }
    }
  }
  if (d.Out(node, 0) == nullptr) return absl::OkStatus();
  Body b3(d.Tn(x).sizes);
  int32_t y =
      b3.Mul(b3.Sub(b3.Cast(d.LoadB(b3, x), acc), channel(b3, mean_t)), channel(b3, rstd_t));
  if (w >= 0) y = b3.Mul(y, channel(b3, w));
  if (bias >= 0) y = b3.Add(y, channel(b3, bias));
  return d.FinishPointwise(node, b3, y, d.Tn(x).dtype, 0).status();
}

absl::Status BatchNormBackward(Builder& d, uint32_t node) {
  // (grad_out, input, weight, running_mean, running_var, save_mean, save_invstd, train, eps,
  // output_mask)
  const int32_t g = d.In(node, 0), x = d.In(node, 1), w = d.In(node, 2), rm = d.In(node, 3),
                rv = d.In(node, 4), sm = d.In(node, 5), si = d.In(node, 6);
  const bool train = d.Int(d.A(node, 7)) != 0;
  const double eps = d.Num(d.A(node, 8));
  const ChannelFrame frame = ChannelFrameOf(d, x);
  const ScalarType acc = frame.acc;
  const std::vector<int64_t>& dims = frame.dims;
  auto channel = [&](Body& b, int32_t t) { return frame.Load(d, b, t); };
  auto mean_of = [&](Body& b) { return channel(b, train ? sm : rm); };
  auto invstd_of = [&](Body& b) {
    if (train) return channel(b, si);
    return b.Un(Opcode::kRsqrt, b.AddC(channel(b, rv), eps));
  };
  Body b1 = d.ReduceBody(x, dims);
  const std::vector<bool> red = b1.reduced();
  const IndexExpr n = d.NumelOf(d.Tn(x).sizes, red);
  auto sg = d.FinishReduce(node, b1, b1.Cast(d.LoadB(b1, g), acc), ReduceKind::kSum,
                           loop::DTypeOf(acc), false, 0, true);
  if (!sg.ok()) return sg.status();
  Body b2(d.Tn(x).sizes, red);
  int32_t xmu = b2.Sub(b2.Cast(d.LoadB(b2, x), acc), mean_of(b2));
  auto sgx = d.FinishReduce(node, b2, b2.Mul(b2.Cast(d.LoadB(b2, g), acc), xmu), ReduceKind::kSum,
                            loop::DTypeOf(acc), false, 0, true);
  if (!sgx.ok()) return sgx.status();
  if (d.Out(node, 0) != nullptr) {
    Body b3(d.Tn(x).sizes);
    int32_t invstd = invstd_of(b3);
    int32_t wv = w >= 0 ? channel(b3, w) : b3.Const(1, acc);
    int32_t gv = b3.Cast(d.LoadB(b3, g), acc);
    int32_t gi;
    if (train) {
      int32_t nn = b3.Cast(b3.Idx(n), acc);
      int32_t xm = b3.Sub(b3.Cast(d.LoadB(b3, x), acc), mean_of(b3));
      int32_t proj = b3.Mul(b3.Mul(b3.Div(channel(b3, *sgx), nn), invstd), invstd);
      int32_t gmean = b3.Div(channel(b3, *sg), nn);
      gi = b3.Mul(b3.Mul(b3.Sub(b3.Sub(gv, b3.Mul(xm, proj)), gmean), invstd), wv);
    } else {
      gi = b3.Mul(b3.Mul(gv, invstd), wv);
    }
    if (auto s = d.FinishPointwise(node, b3, gi, d.Tn(x).dtype, 0); !s.ok()) return s.status();
  }
  if (const graph::Value* o = d.Out(node, 1)) {
    Body b({d.Tn(x).sizes[1]});
    std::vector<IndexExpr> c = {Body::V(0)};
    int32_t v =
        b.Mul(b.Load(*sgx, acc, c), b.Cast(b.Load(train ? si : rv, d.ST(train ? si : rv), c), acc));
    if (!train)
      v = b.Div(b.Load(*sgx, acc, c),
                b.Un(Opcode::kSqrt, b.AddC(b.Cast(b.Load(rv, d.ST(rv), c), acc), eps)));
    if (auto s = d.FinishPointwise(node, b, v, o->dtype, 1); !s.ok()) return s.status();
  }
  if (const graph::Value* o = d.Out(node, 2)) {
    Body b({d.Tn(x).sizes[1]});
    if (auto s = d.FinishPointwise(node, b, b.Load(*sg, acc, {Body::V(0)}), o->dtype, 2); !s.ok()) {
      return s.status();
    }
  }
  return absl::OkStatus();
}

}  // namespace

void RegisterNormRules(RuleRegistry& r) {
  r.Add("aten.native_layer_norm.default", [](Builder& d, uint32_t n) { return LayerNorm(d, n); });
  r.Add("aten.native_group_norm.default", [](Builder& d, uint32_t n) { return GroupNorm(d, n); });
  r.Add("aten.native_layer_norm_backward.default",
        [](Builder& d, uint32_t n) { return LayerNormBackward(d, n); });
  r.Add("aten._native_batch_norm_legit_functional.default",
        [](Builder& d, uint32_t n) { return BatchNorm(d, n, true); });
  r.Add("aten._native_batch_norm_legit_no_training.default",
        [](Builder& d, uint32_t n) { return BatchNorm(d, n, false); });
  r.Add("aten.native_batch_norm_backward.default",
        [](Builder& d, uint32_t n) { return BatchNormBackward(d, n); });
}

}  // namespace kiln::decompose
