#include "compiler/decompose/decompose.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "compiler/decompose/builder.h"

namespace kiln::decompose {
namespace {

using graph::Arg;
using graph::ArgKind;
using graph::DType;
using loop::IndexExpr;
using loop::Opcode;
using loop::ReduceKind;
using loop::ScalarType;

// The ops that draw random numbers, numbered in node order (see compiler/interp/philox.h).
const absl::flat_hash_set<std::string>& RngOps() {
  static const auto* ops = new absl::flat_hash_set<std::string>{
      "aten.native_dropout.default",
      "aten.rand_like.default",
      "aten.rand.default",
      "aten.bernoulli.p",
      "aten._scaled_dot_product_efficient_attention.default",
      "aten._scaled_dot_product_cudnn_attention.default",
  };
  return *ops;
}

// Ops the runtime runs with a library.
const absl::flat_hash_set<std::string>& ExternOps() {
  static const auto* ops = new absl::flat_hash_set<std::string>{
      "aten.mm.default",
      "aten.bmm.default",
      "aten.convolution.default",
      "aten.convolution_backward.default",
      "aten._scaled_dot_product_efficient_attention.default",
      "aten._scaled_dot_product_efficient_attention_backward.default",
      "aten._scaled_dot_product_cudnn_attention.default",
      "aten._scaled_dot_product_cudnn_attention_backward.default",
  };
  return *ops;
}

// Ops whose result is a view of their first argument with the metadata's layout.
const absl::flat_hash_set<std::string>& ViewOps() {
  static const auto* ops = new absl::flat_hash_set<std::string>{
      "aten.view.default",       "aten._unsafe_view.default", "aten.t.default",
      "aten.transpose.int",      "aten.permute.default",      "aten.expand.default",
      "aten.slice.Tensor",       "aten.select.int",           "aten.narrow.default",
      "aten.squeeze.default",    "aten.squeeze.dim",          "aten.squeeze.dims",
      "aten.unsqueeze.default",  "aten.split.Tensor",         "aten.split_with_sizes.default",
      "aten.unbind.int",         "aten.chunk.default",        "aten.alias.default",
      "aten.detach.default",     "aten.diagonal.default",     "aten.unfold.default",
      "aten.as_strided.default",
  };
  return *ops;
}

constexpr double kSqrt1_2 = 0.70710678118654752440;
constexpr double kSqrt2OverPi = 0.79788456080286535588;

// max_pool2d's window, from the op's kernel_size, stride, padding and dilation arguments.
struct PoolWindow {
  int64_t kh = 1, kw = 1, sh = 1, sw = 1, ph = 0, pw = 0, dh = 1, dw = 1;
};

// ---------------------------------------------------------------------------------------------
// Pointwise rules.

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

// ---------------------------------------------------------------------------------------------
// Reductions.

absl::Status Reduction(Builder& d, uint32_t node, ReduceKind kind, std::vector<int64_t> dims,
                       bool keepdim, bool mean) {
  const int32_t x = d.In(node, 0);
  const graph::Value* out = d.Out(node, 0);
  if (out == nullptr) return absl::InternalError("reduction without a tensor output");
  Body b = d.ReduceBody(x, dims);
  ScalarType acc = loop::ComputeType(loop::ScalarTypeOf(out->dtype));
  if (kind == ReduceKind::kAny || kind == ReduceKind::kAll) acc = ScalarType::kBool;
  int32_t v = b.Load(x, d.ST(x), d.BroadcastCoords(b, x));
  if (kind == ReduceKind::kAny || kind == ReduceKind::kAll) {
    v = b.ToBool(v);
  } else {
    v = b.Cast(v, acc);
  }
  if (!mean) {
    return d.FinishReduce(node, b, v, kind, out->dtype, keepdim, 0, false).status();
  }
  const std::vector<bool> red = b.reduced();
  const IndexExpr n = d.NumelOf(d.Tn(x).sizes, red);
  auto s = d.FinishReduce(node, b, v, kind, loop::DTypeOf(acc), keepdim, 0, true);
  if (!s.ok()) return s.status();
  Body e(d.Tn(*s).sizes);
  int32_t r = e.Div(d.LoadB(e, *s), e.Cast(e.Idx(n), acc));
  return d.FinishPointwise(node, e, r, out->dtype).status();
}

absl::Status ArgReduction(Builder& d, uint32_t node, bool is_max, std::vector<int64_t> dims,
                          bool keepdim, int value_output, int index_output) {
  const int32_t x = d.In(node, 0);
  const std::vector<bool> red = d.ReduceBody(x, dims).reduced();
  // The flat index over the reduced dims, row-major.
  auto make = [&](bool want_index, int k) -> absl::Status {
    Body b(d.Tn(x).sizes, red);
    int32_t v = b.Load(x, d.ST(x), d.BroadcastCoords(b, x));
    IndexExpr lin, stride = IndexExpr::Const(1);
    for (size_t i = b.rank(); i-- > 0;) {
      if (!red[i]) continue;
      lin = lin + Body::V(i) * stride;
      stride = stride * b.dim(i);
    }
    int32_t idx = b.Idx(lin);
    ReduceKind kind = is_max ? ReduceKind::kArgMax : ReduceKind::kArgMin;
    const graph::Value* o = d.Out(node, static_cast<size_t>(k));
    if (o == nullptr) return absl::OkStatus();
    // The reduce yields the value for value outputs and the index for index outputs.
    b.SetReduce(kind, idx, want_index);
    std::vector<int32_t> out_dims;
    std::vector<IndexExpr> sizes;
    for (size_t i = 0; i < b.rank(); ++i) {
      if (!red[i]) {
        out_dims.push_back(static_cast<int32_t>(i));
        sizes.push_back(b.dim(i));
      } else if (keepdim) {
        out_dims.push_back(-1);
        sizes.push_back(IndexExpr::Const(1));
      }
    }
    return d.Finish(node, b, v, o->dtype, o, std::move(out_dims), std::move(sizes)).status();
  };
  if (value_output >= 0) {
    if (auto s = make(false, value_output); !s.ok()) return s;
  }
  if (index_output >= 0) {
    if (auto s = make(true, index_output); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status Variance(Builder& d, uint32_t node, std::vector<int64_t> dims, double correction,
                      bool keepdim, int var_out, int mean_out, bool std_dev) {
  const int32_t x = d.In(node, 0);
  const ScalarType acc = loop::ComputeType(d.ST(x));
  Body b1 = d.ReduceBody(x, dims);
  const std::vector<bool> red = b1.reduced();
  const IndexExpr n = d.NumelOf(d.Tn(x).sizes, red);
  auto s1 =
      d.SumTemp(node, b1, b1.Load(x, d.ST(x), d.BroadcastCoords(b1, x)), ReduceKind::kSum, acc);
  if (!s1.ok()) return s1.status();
  Body bm(d.Tn(*s1).sizes);
  auto mean = d.FinishPointwise(node, bm, bm.Div(d.LoadB(bm, *s1), bm.Cast(bm.Idx(n), acc)),
                                loop::DTypeOf(acc), 0, true);
  if (!mean.ok()) return mean.status();
  Body b2(d.Tn(x).sizes, red);
  int32_t diff = b2.Sub(b2.Cast(d.LoadB(b2, x), acc), d.LoadB(b2, *mean));
  auto s2 = d.SumTemp(node, b2, b2.Mul(diff, diff), ReduceKind::kSum, acc);
  if (!s2.ok()) return s2.status();
  // Outputs drop or keep the reduced dims.
  std::vector<IndexExpr> out_sizes;
  std::vector<IndexExpr> coords;
  for (size_t i = 0; i < red.size(); ++i) {
    if (!red[i] || keepdim) out_sizes.push_back(red[i] ? IndexExpr::Const(1) : d.Tn(x).sizes[i]);
  }
  auto emit = [&](int k, bool is_var) -> absl::Status {
    const graph::Value* o = d.Out(node, static_cast<size_t>(k));
    if (o == nullptr) return absl::OkStatus();
    Body e(out_sizes);
    // Read the keepdim temporaries at the output's coordinates.
    std::vector<IndexExpr> c;
    size_t od = 0;
    for (size_t i = 0; i < red.size(); ++i) {
      if (red[i]) {
        c.push_back(IndexExpr());
        if (keepdim) ++od;
      } else {
        c.push_back(Body::V(od++));
      }
    }
    int32_t r;
    if (is_var) {
      int32_t denom = e.Sub(e.Cast(e.Idx(n), acc), e.Const(correction, acc));
      r = e.Div(e.Load(*s2, acc, c), denom);
      if (std_dev) r = e.Un(Opcode::kSqrt, r);
    } else {
      r = e.Load(*mean, acc, c);
    }
    return d.FinishPointwise(node, e, r, o->dtype, k).status();
  };
  if (var_out >= 0) {
    if (auto s = emit(var_out, true); !s.ok()) return s;
  }
  if (mean_out >= 0) return emit(mean_out, false);
  return absl::OkStatus();
}

absl::Status Softmax(Builder& d, uint32_t node, bool log) {
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

// ---------------------------------------------------------------------------------------------
// Normalization.

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

absl::Status BatchNorm(Builder& d, uint32_t node, bool training_arg) {
  // _native_batch_norm_legit_functional(input, weight, bias, running_mean, running_var,
  // training, momentum, eps) -> (out, save_mean, save_rstd, new_running_mean, new_running_var)
  // _native_batch_norm_legit_no_training(input, weight, bias, rm, rv, momentum, eps)
  const int32_t x = d.In(node, 0), w = d.In(node, 1), bias = d.In(node, 2), rm = d.In(node, 3),
                rv = d.In(node, 4);
  const bool training = training_arg ? d.Int(d.A(node, 5)) != 0 : false;
  const double momentum = d.Num(d.A(node, training_arg ? 6 : 5));
  const double eps = d.Num(d.A(node, training_arg ? 7 : 6));
  const size_t r = d.Rank(x);
  const ScalarType acc =
      loop::ComputeType(d.ST(x)) == ScalarType::kF64 ? ScalarType::kF64 : ScalarType::kF32;
  std::vector<int64_t> dims;
  for (size_t i = 0; i < r; ++i) {
    if (i != 1) dims.push_back(static_cast<int64_t>(i));
  }
  // Per-channel [C] tensors broadcast over x as [C, 1, 1, ...].
  auto channel = [&](Body& b, int32_t t) {
    std::vector<IndexExpr> c = {Body::V(1)};
    return b.Cast(b.Load(t, d.ST(t), c), acc);
  };
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
  const size_t r = d.Rank(x);
  const ScalarType acc =
      loop::ComputeType(d.ST(x)) == ScalarType::kF64 ? ScalarType::kF64 : ScalarType::kF32;
  std::vector<int64_t> dims;
  for (size_t i = 0; i < r; ++i) {
    if (i != 1) dims.push_back(static_cast<int64_t>(i));
  }
  auto channel = [&](Body& b, int32_t t) {
    std::vector<IndexExpr> c = {Body::V(1)};
    return b.Cast(b.Load(t, d.ST(t), c), acc);
  };
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

// ---------------------------------------------------------------------------------------------
// Random numbers, losses, embeddings, shapes.

absl::Status Dropout(Builder& d, uint32_t node) {
  const int32_t x = d.In(node, 0);
  const double p = d.Num(d.A(node, 1));
  const Arg& train = d.A(node, 2);
  const bool draws = d.IsNone(train) || d.Int(train) != 0;
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

absl::Status Random(Builder& d, uint32_t node) {
  const std::string& target = d.graph().target(d.N(node));
  const graph::Value* o = d.Out(node, 0);
  auto sizes = d.Syms(d.graph().sizes(*o));
  if (!sizes.ok()) return sizes.status();
  Body b(*sizes);
  int32_t bits = b.RandBits(d.rng_stream(node), b.Idx(b.Linear()));
  int32_t u = b.MulC(b.Cast(bits, ScalarType::kF64), std::ldexp(1.0, -24));
  int32_t r = u;
  if (target == "aten.bernoulli.p") {
    r = b.Bin(Opcode::kLt, u, b.Const(d.Num(d.A(node, 1), 0.5), ScalarType::kF64));
  }
  return d.FinishPointwise(node, b, r, o->dtype).status();
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

absl::Status Embedding(Builder& d, uint32_t node) {
  const int32_t w = d.In(node, 0), idx = d.In(node, 1);
  return d.Pointwise(node, [&](Body& b, ScalarType) -> absl::StatusOr<int32_t> {
    std::vector<IndexExpr> ic;
    for (size_t i = 0; i + 1 < b.rank(); ++i) ic.push_back(Body::V(i));
    int32_t i = b.Cast(b.Load(idx, d.ST(idx), ic), ScalarType::kI64);
    int32_t valid = b.Bin(Opcode::kAnd, b.Bin(Opcode::kGe, i, b.IConst(0)),
                          b.Bin(Opcode::kLt, i, b.Idx(d.Tn(w).sizes[0])));
    return b.Load(w, d.ST(w), {IndexExpr(), Body::V(b.rank() - 1)}, valid, {i, -1});
  });
}

absl::Status EmbeddingBackward(Builder& d, uint32_t node) {
  // (grad_output [..., D], indices [...], num_weights, padding_idx, scale_grad_by_freq)
  if (d.Int(d.A(node, 4)) != 0) return d.Fallback(node, "scale_grad_by_freq has no lowering");
  const int32_t g = d.In(node, 0), idx = d.In(node, 1);
  const graph::Value* o = d.Out(node, 0);
  IndexExpr rows = IndexExpr::Const(1);
  for (const IndexExpr& s : d.Tn(idx).sizes) rows = rows * s;
  const IndexExpr cols = d.Tn(g).sizes.back();
  // Flattened views of the operands when they are not already 1-d/2-d.
  auto flat = [&](int32_t t, std::vector<IndexExpr> sizes) {
    Body b(sizes);
    // Unravel the flat row index into t's leading dims.
    const Tensor& tt = d.Tn(t);
    const size_t lead = sizes.size() == 2 ? tt.sizes.size() - 1 : tt.sizes.size();
    std::vector<IndexExpr> c(tt.sizes.size());
    IndexExpr stride = IndexExpr::Const(1);
    std::vector<IndexExpr> strides(lead);
    for (size_t i = lead; i-- > 0;) {
      strides[i] = stride;
      stride = stride * tt.sizes[i];
    }
    for (size_t i = 0; i < lead; ++i) {
      IndexExpr q = IndexExpr::FloorDiv(Body::V(0), strides[i], nullptr);
      c[i] = i == 0 ? q : IndexExpr::Mod(q, tt.sizes[i], nullptr);
    }
    if (sizes.size() == 2) c[lead] = Body::V(1);
    return d.FinishPointwise(node, b, b.Load(t, d.ST(t), c), tt.dtype, 0, true);
  };
  auto fi = flat(idx, {rows});
  if (!fi.ok()) return fi.status();
  auto fg = flat(g, {rows, cols});
  if (!fg.ok()) return fg.status();
  const ScalarType acc = loop::ComputeType(loop::ScalarTypeOf(o->dtype));
  const bool direct = acc == loop::ScalarTypeOf(o->dtype);
  Node n;
  n.kind = Node::Kind::kScatterAdd;
  n.name = d.NodeName(node);
  n.scatter.indices = *fi;
  n.scatter.src = *fg;
  n.scatter.rows = rows;
  n.scatter.cols = cols;
  n.scatter.skip_index = d.Int(d.A(node, 3), -1);
  int32_t t;
  if (direct) {
    auto tv = d.TensorOfValue(*o);
    if (!tv.ok()) return tv.status();
    t = *tv;
    d.Bind(*o, t);
  } else {
    auto sizes = d.Syms(d.graph().sizes(*o));
    if (!sizes.ok()) return sizes.status();
    t = d.TempTensor(node, loop::DTypeOf(acc), *sizes);
  }
  n.outputs = {t};
  d.AddNode(std::move(n));
  if (!direct) {
    Body b(d.Tn(t).sizes);
    return d.FinishPointwise(node, b, d.LoadB(b, t), o->dtype, 0).status();
  }
  return absl::OkStatus();
}

absl::Status Cat(Builder& d, uint32_t node, bool stack) {
  const Arg& list = d.A(node, 0);
  const graph::Value* o = d.Out(node, 0);
  auto sizes = d.Syms(d.graph().sizes(*o));
  if (!sizes.ok()) return sizes.status();
  const int64_t dim = WrapDim(d.Int(d.A(node, 1)), stack ? sizes->size() : sizes->size());
  std::vector<int32_t> parts;
  for (const Arg& a : d.graph().items(list)) parts.push_back(d.TensorArg(a));
  Body b(*sizes);
  const ScalarType ct = loop::ComputeType(loop::ScalarTypeOf(o->dtype));
  // Skip empty parts (including legacy 1-d empty tensors).
  struct Part {
    int32_t t;
    IndexExpr begin, size;
  };
  std::vector<Part> live;
  IndexExpr offset;
  for (int32_t t : parts) {
    if (t < 0) continue;
    const Tensor& x = d.Tn(t);
    IndexExpr size = stack ? IndexExpr::Const(1) : x.sizes[static_cast<size_t>(dim)];
    if (!stack && x.sizes.size() != sizes->size()) continue;
    if (size.is_zero()) continue;
    live.push_back({t, offset, size});
    offset = offset + size;
  }
  if (live.empty()) {
    return d.FinishPointwise(node, b, b.Const(0, ct), o->dtype).status();
  }
  const int32_t pos = b.Idx(Body::V(static_cast<size_t>(dim)));
  int32_t value = -1;
  for (size_t k = live.size(); k-- > 0;) {
    const Part& p = live[k];
    std::vector<IndexExpr> coords;
    for (size_t i = 0; i < sizes->size(); ++i) {
      if (static_cast<int64_t>(i) == dim) {
        if (!stack) coords.push_back(Body::V(i) - p.begin);
      } else {
        coords.push_back(Body::V(i));
      }
    }
    if (k == 0) {
      int32_t mask = live.size() == 1 ? -1 : b.Bin(Opcode::kLt, pos, b.Idx(p.begin + p.size));
      int32_t v = b.Cast(b.Load(p.t, d.ST(p.t), coords, mask), ct);
      value = value < 0 ? v : b.Sel(mask, v, value);
    } else {
      int32_t in = b.Bin(Opcode::kAnd, b.Bin(Opcode::kGe, pos, b.Idx(p.begin)),
                         b.Bin(Opcode::kLt, pos, b.Idx(p.begin + p.size)));
      int32_t v = b.Cast(b.Load(p.t, d.ST(p.t), coords, in), ct);
      value = value < 0 ? v : b.Sel(in, v, value);
    }
  }
  return d.FinishPointwise(node, b, value, o->dtype).status();
}

absl::Status SliceBackward(Builder& d, uint32_t node) {
  // (grad_output, input_sizes, dim, start, end, step)
  const int32_t g = d.In(node, 0);
  const graph::Value* o = d.Out(node, 0);
  auto sizes = d.Syms(d.graph().sizes(*o));
  if (!sizes.ok()) return sizes.status();
  const int64_t dim = WrapDim(d.Int(d.A(node, 2)), sizes->size());
  if (d.A(node, 3).kind != ArgKind::kInt || d.A(node, 4).kind != ArgKind::kInt ||
      d.A(node, 5).kind != ArgKind::kInt || !(*sizes)[static_cast<size_t>(dim)].is_const()) {
    return d.Fallback(node, "slice_backward with symbolic bounds has no lowering");
  }
  const int64_t n = (*sizes)[static_cast<size_t>(dim)].const_value();
  int64_t start = d.Int(d.A(node, 3)), end = d.Int(d.A(node, 4)), step = d.Int(d.A(node, 5));
  if (start < 0) start += n;
  if (end < 0) end += n;
  start = std::clamp<int64_t>(start, 0, n);
  end = std::clamp<int64_t>(end, start, n);
  return d.Pointwise(node, [&](Body& b, ScalarType ct) -> absl::StatusOr<int32_t> {
    int32_t pos = b.Idx(Body::V(static_cast<size_t>(dim)));
    int32_t rel = b.Sub(pos, b.IConst(start));
    int32_t in = b.Bin(Opcode::kAnd, b.Bin(Opcode::kGe, rel, b.IConst(0)),
                       b.Bin(Opcode::kLt, pos, b.IConst(end)));
    std::vector<IndexExpr> coords;
    std::vector<int32_t> dyn;
    for (size_t i = 0; i < b.rank(); ++i) {
      coords.push_back(static_cast<int64_t>(i) == dim ? IndexExpr() : Body::V(i));
      dyn.push_back(-1);
    }
    if (step != 1) {
      in = b.Bin(Opcode::kAnd, in,
                 b.Bin(Opcode::kEq, b.Bin(Opcode::kRemainder, rel, b.IConst(step)), b.IConst(0)));
      rel = b.Bin(Opcode::kFloorDiv, rel, b.IConst(step));
    }
    dyn[static_cast<size_t>(dim)] = rel;
    return b.Sel(in, b.Cast(b.Load(g, d.ST(g), coords, in, dyn), ct), b.Const(0, ct));
  });
}

absl::Status SelectBackward(Builder& d, uint32_t node) {
  const int32_t g = d.In(node, 0);
  const graph::Value* o = d.Out(node, 0);
  const int64_t dim = WrapDim(d.Int(d.A(node, 2)), d.graph().sizes(*o).size());
  auto index =
      d.Sym(d.A(node, 3).kind == ArgKind::kSymbolic ? d.A(node, 3).sym
                                                    : graph::SymInt::Constant(d.Int(d.A(node, 3))));
  if (!index.ok()) return index.status();
  return d.Pointwise(node, [&](Body& b, ScalarType ct) -> absl::StatusOr<int32_t> {
    IndexExpr idx = *index;
    if (idx.is_const() && idx.const_value() < 0) idx = b.dim(static_cast<size_t>(dim)) + idx;
    int32_t hit = b.Bin(Opcode::kEq, b.Idx(Body::V(static_cast<size_t>(dim))), b.Idx(idx));
    std::vector<IndexExpr> coords;
    for (size_t i = 0; i < b.rank(); ++i) {
      if (static_cast<int64_t>(i) != dim) coords.push_back(Body::V(i));
    }
    return b.Sel(hit, b.Cast(b.Load(g, d.ST(g), coords, hit), ct), b.Const(0, ct));
  });
}

absl::Status Addmm(Builder& d, uint32_t node, bool batched) {
  // addmm(bias, a, b, beta, alpha) = beta * bias + alpha * mm(a, b): the product is an extern,
  // the bias an epilogue that fusion folds into a neighbouring kernel.
  const graph::Value* o = d.Out(node, 0);
  const int32_t bias = d.In(node, 0);
  auto sizes = d.Syms(d.graph().sizes(*o));
  if (!sizes.ok()) return sizes.status();
  const int32_t prod = d.TempTensor(node, o->dtype, *sizes);
  Node n;
  n.kind = Node::Kind::kExtern;
  n.name = d.NodeName(node);
  n.stack_trace = d.graph().str(d.N(node).stack_trace);
  n.op = batched ? "aten.bmm.default" : "aten.mm.default";
  for (size_t i = 1; i <= 2; ++i) {
    auto a = d.ConvertArg(d.A(node, i));
    if (!a.ok()) return a.status();
    n.args.push_back(*std::move(a));
  }
  n.outputs = {prod};
  d.AddNode(std::move(n));
  const double beta = d.Num(d.A(node, 3), 1), alpha = d.Num(d.A(node, 4), 1);
  Body b(*sizes);
  const ScalarType ct = loop::ComputeType(loop::ScalarTypeOf(o->dtype));
  int32_t p = d.LoadB(b, prod);
  if (alpha != 1) p = b.MulC(p, alpha);
  int32_t bv = b.Cast(d.LoadB(b, bias), ct);
  if (beta != 1) bv = beta == 0 ? b.Const(0, ct) : b.MulC(bv, beta);
  return d.FinishPointwise(node, b, b.Add(bv, p), o->dtype).status();
}

absl::Status Arange(Builder& d, uint32_t node) {
  const std::string& t = d.graph().target(d.N(node));
  // The output's metadata gives the length: only start and step matter.
  double start = 0, step = 1;
  if (t != "aten.arange.default") {
    start = d.Num(d.A(node, 0));
    if (t == "aten.arange.start_step") step = d.Num(d.A(node, 2), 1);
  }
  return d.Pointwise(node, [&](Body& b, ScalarType ct) -> absl::StatusOr<int32_t> {
    int32_t i = b.Idx(Body::V(0));
    if (!loop::IsFloat(ct) && start == std::floor(start) && step == std::floor(step)) {
      return b.Add(b.IConst(static_cast<int64_t>(start), ct),
                   b.Mul(b.Cast(i, ct), b.IConst(static_cast<int64_t>(step), ct)));
    }
    int32_t v = b.Add(b.Const(start, ScalarType::kF64),
                      b.Mul(b.Cast(i, ScalarType::kF64), b.Const(step, ScalarType::kF64)));
    return b.Cast(v, ct);
  });
}

absl::Status IndexSelect(Builder& d, uint32_t node, bool gather) {
  const int32_t x = d.In(node, 0), index = d.In(node, 2);
  const int64_t dim = WrapDim(d.Int(d.A(node, 1)), d.Rank(x));
  // A 0-d self is read as one element along `dim`, as PyTorch does.
  const bool scalar = d.Rank(x) == 0;
  return d.Pointwise(node, [&](Body& b, ScalarType ct) -> absl::StatusOr<int32_t> {
    std::vector<IndexExpr> ic;
    if (gather) {
      for (size_t i = 0; i < b.rank(); ++i) ic.push_back(Body::V(i));
    } else if (d.Rank(index) == 1) {
      ic.push_back(scalar ? IndexExpr::Const(0) : Body::V(static_cast<size_t>(dim)));
    }
    int32_t i = b.Cast(b.Load(index, d.ST(index), ic), ScalarType::kI64);
    const IndexExpr extent = scalar ? IndexExpr::Const(1) : d.Tn(x).sizes[static_cast<size_t>(dim)];
    int32_t valid = b.Bin(Opcode::kAnd, b.Bin(Opcode::kGe, i, b.IConst(0)),
                          b.Bin(Opcode::kLt, i, b.Idx(extent)));
    std::vector<IndexExpr> coords;
    std::vector<int32_t> dyn;
    for (size_t k = 0; k < d.Rank(x); ++k) {
      coords.push_back(static_cast<int64_t>(k) == dim ? IndexExpr() : Body::V(k));
      dyn.push_back(static_cast<int64_t>(k) == dim ? i : -1);
    }
    return b.Cast(b.Load(x, d.ST(x), coords, valid, dyn), ct);
  });
}

// Arguments from `first` on: kernel_size, stride (empty: the kernel), padding, dilation; a
// one-element list repeats, as ATen's do.
absl::StatusOr<PoolWindow> Window(const Builder& d, uint32_t node, size_t first, int32_t x) {
  if (d.Rank(x) != 3 && d.Rank(x) != 4) {
    return absl::UnimplementedError("max_pool2d of a tensor not 3-d or 4-d");
  }
  auto pair = [&](size_t i, std::vector<int64_t> dflt) -> std::vector<int64_t> {
    std::vector<int64_t> v = i < d.NumArgs(node) ? d.Ints(d.A(node, i)) : std::vector<int64_t>();
    if (v.empty()) v = std::move(dflt);
    if (v.size() == 1) v.push_back(v[0]);
    return v;
  };
  const std::vector<int64_t> k = pair(first, {});
  if (k.size() != 2) return absl::UnimplementedError("max_pool2d without a 2-d kernel_size");
  const std::vector<int64_t> s = pair(first + 1, k), p = pair(first + 2, {0}),
                             dil = pair(first + 3, {1});
  if (s.size() != 2 || p.size() != 2 || dil.size() != 2) {
    return absl::UnimplementedError("max_pool2d with window arguments that are not pairs");
  }
  PoolWindow w{k[0], k[1], s[0], s[1], p[0], p[1], dil[0], dil[1]};
  if (w.kh <= 0 || w.kw <= 0 || w.sh <= 0 || w.sw <= 0 || w.dh <= 0 || w.dw <= 0 || w.ph < 0 ||
      w.pw < 0) {
    return absl::UnimplementedError("max_pool2d with a non-positive window size");
  }
  return w;
}

// The iteration space of a pooling kernel: `lead` (an output's or input's sizes) followed by
// the window's two offsets, which are reduced.
Body PoolBody(std::vector<IndexExpr> lead, const PoolWindow& w) {
  std::vector<bool> red(lead.size() + 2, false);
  red[lead.size()] = red[lead.size() + 1] = true;
  lead.push_back(IndexExpr::Const(w.kh));
  lead.push_back(IndexExpr::Const(w.kw));
  return Body(std::move(lead), red);
}

// Element (.., row, col) of the 3-d or 4-d tensor `t`: its leading dims at the body's, its
// last two at computed positions, read only where `mask` holds.
int32_t LoadPlane(const Builder& d, Body& b, int32_t t, int32_t row, int32_t col, int32_t mask) {
  const size_t r = d.Rank(t);
  std::vector<IndexExpr> coords;
  for (size_t i = 0; i + 2 < r; ++i) coords.push_back(Body::V(i));
  coords.resize(r);
  std::vector<int32_t> dyn(r, -1);
  dyn[r - 2] = row;
  dyn[r - 1] = col;
  return b.Load(t, d.ST(t), coords, mask, dyn);
}

absl::Status MaxPool2d(Builder& d, uint32_t node) {
  // out[.., i, j] = max over the window (a, b) of x[.., i*sh + a*dh - ph, j*sw + b*dw - pw],
  // positions outside x counting as -inf; indices are the winner's h * W + w, the first
  // maximum in window order winning and a NaN taking over, as ATen's kernel does.
  const int32_t x = d.In(node, 0);
  const size_t r = d.Rank(x);
  auto win = Window(d, node, 1, x);
  if (!win.ok()) return win.status();
  const PoolWindow w = *win;
  const graph::Value* out = d.Out(node, 0);
  if (out == nullptr) return absl::InternalError("max_pool2d without a tensor output");
  auto out_sizes = d.Syms(d.graph().sizes(*out));
  if (!out_sizes.ok()) return out_sizes.status();
  const IndexExpr height = d.Tn(x).sizes[r - 2], width = d.Tn(x).sizes[r - 1];
  const ScalarType acc = loop::ComputeType(d.ST(x));
  for (int k : {0, 1}) {
    const graph::Value* o = d.Out(node, static_cast<size_t>(k));
    if (o == nullptr) continue;
    Body b = PoolBody(*out_sizes, w);
    const IndexExpr ih = Body::V(r - 2) * IndexExpr::Const(w.sh) +
                         Body::V(r) * IndexExpr::Const(w.dh) - IndexExpr::Const(w.ph);
    const IndexExpr iw = Body::V(r - 1) * IndexExpr::Const(w.sw) +
                         Body::V(r + 1) * IndexExpr::Const(w.dw) - IndexExpr::Const(w.pw);
    const int32_t ph = b.Idx(ih), pw = b.Idx(iw);
    const int32_t inside = b.Bin(Opcode::kAnd,
                                 b.Bin(Opcode::kAnd, b.Bin(Opcode::kGe, ph, b.IConst(0)),
                                       b.Bin(Opcode::kLt, ph, b.Idx(height))),
                                 b.Bin(Opcode::kAnd, b.Bin(Opcode::kGe, pw, b.IConst(0)),
                                       b.Bin(Opcode::kLt, pw, b.Idx(width))));
    const int32_t v = b.Sel(inside, b.Cast(LoadPlane(d, b, x, ph, pw, inside), acc),
                            b.Const(-std::numeric_limits<double>::infinity(), acc));
    b.SetReduce(ReduceKind::kArgMax, b.Idx(ih * width + iw), /*store_index=*/k == 1);
    std::vector<int32_t> out_dims;
    for (size_t i = 0; i < r; ++i) out_dims.push_back(static_cast<int32_t>(i));
    auto t = d.Finish(node, b, v, o->dtype, o, std::move(out_dims), *out_sizes);
    if (!t.ok()) return t.status();
  }
  return absl::OkStatus();
}

absl::Status MaxPool2dBackward(Builder& d, uint32_t node) {
  // grad_x[.., h, w] = sum over the window offsets (a, b) whose output position
  // (i, j) = ((h + ph - a*dh) / sh, (w + pw - b*dw) / sw) divides evenly and lies inside
  // grad_output, of grad_output[.., i, j] where indices[.., i, j] == h * W + w. A gather, so
  // the sum runs in a fixed order and fuses like any reduction.
  const int32_t g = d.In(node, 0), x = d.In(node, 1), indices = d.In(node, 7);
  const size_t r = d.Rank(x);
  auto win = Window(d, node, 2, x);
  if (!win.ok()) return win.status();
  const PoolWindow w = *win;
  const graph::Value* out = d.Out(node, 0);
  if (out == nullptr) return absl::InternalError("max_pool2d backward without a tensor output");
  const IndexExpr width = d.Tn(x).sizes[r - 1];
  const IndexExpr oh = d.Tn(g).sizes[r - 2], ow = d.Tn(g).sizes[r - 1];
  const ScalarType acc = loop::ComputeType(d.ST(g));
  Body b = PoolBody(d.Tn(x).sizes, w);
  // Shifted by whole strides so the dividend is never negative.
  auto position = [&](size_t dim, size_t off, int64_t s, int64_t p, int64_t dil, int64_t k,
                      const IndexExpr& extent, int32_t* ok) {
    const int64_t shift = s * ((k - 1) * dil / s + 1);
    const IndexExpr num =
        Body::V(dim) + IndexExpr::Const(p + shift) - Body::V(off) * IndexExpr::Const(dil);
    const IndexExpr q =
        IndexExpr::FloorDiv(num, IndexExpr::Const(s), nullptr) - IndexExpr::Const(shift / s);
    const int32_t qi = b.Idx(q);
    *ok = b.Bin(
        Opcode::kAnd,
        b.Bin(Opcode::kEq, b.Idx(IndexExpr::Mod(num, IndexExpr::Const(s), nullptr)), b.IConst(0)),
        b.Bin(Opcode::kAnd, b.Bin(Opcode::kGe, qi, b.IConst(0)),
              b.Bin(Opcode::kLt, qi, b.Idx(extent))));
    return qi;
  };
  int32_t ok_h, ok_w;
  const int32_t qi = position(r - 2, r, w.sh, w.ph, w.dh, w.kh, oh, &ok_h);
  const int32_t qj = position(r - 1, r + 1, w.sw, w.pw, w.dw, w.kw, ow, &ok_w);
  const int32_t inside = b.Bin(Opcode::kAnd, ok_h, ok_w);
  const int32_t winner = b.Cast(LoadPlane(d, b, indices, qi, qj, inside), ScalarType::kI64);
  const int32_t here = b.Idx(Body::V(r - 2) * width + Body::V(r - 1));
  const int32_t take = b.Bin(Opcode::kAnd, inside, b.Bin(Opcode::kEq, winner, here));
  const int32_t v = b.Sel(take, b.Cast(LoadPlane(d, b, g, qi, qj, inside), acc), b.Const(0.0, acc));
  return d.FinishReduce(node, b, v, ReduceKind::kSum, out->dtype, false, 0, false).status();
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

absl::Status ConstantPad(Builder& d, uint32_t node) {
  const int32_t x = d.In(node, 0);
  const std::vector<int64_t> pad = d.Ints(d.A(node, 1));
  const double value = d.Num(d.A(node, 2));
  return d.Pointwise(node, [&](Body& b, ScalarType ct) -> absl::StatusOr<int32_t> {
    std::vector<IndexExpr> coords;
    int32_t mask = -1;
    const size_t r = b.rank();
    for (size_t i = 0; i < r; ++i) coords.push_back(Body::V(i));
    for (size_t p = 0; p * 2 < pad.size(); ++p) {
      const size_t dim = r - 1 - p;
      const int64_t lo = pad[2 * p];
      coords[dim] = Body::V(dim) - IndexExpr::Const(lo);
      int32_t pos = b.Idx(coords[dim]);
      int32_t in = b.Bin(Opcode::kAnd, b.Bin(Opcode::kGe, pos, b.IConst(0)),
                         b.Bin(Opcode::kLt, pos, b.Idx(d.Tn(x).sizes[dim])));
      mask = mask < 0 ? in : b.Bin(Opcode::kAnd, mask, in);
    }
    // A negative index expression is only ever read under its mask: clamp to keep the index
    // expressions non-negative.
    std::vector<int32_t> dyn(r, -1);
    for (size_t p = 0; p * 2 < pad.size(); ++p) {
      const size_t dim = r - 1 - p;
      dyn[dim] = b.Idx(coords[dim]);
      coords[dim] = IndexExpr();
    }
    int32_t v = b.Cast(b.Load(x, d.ST(x), coords, mask, dyn), ct);
    return mask < 0 ? v : b.Sel(mask, v, b.Const(value, ct));
  });
}

absl::Status Flip(Builder& d, uint32_t node) {
  const int32_t x = d.In(node, 0);
  std::vector<int64_t> dims = d.Ints(d.A(node, 1));
  // Flipping a 0-d tensor (dims 0 or -1) copies it.
  if (d.Rank(x) == 0) dims.clear();
  return d.Pointwise(node, [&](Body& b, ScalarType ct) -> absl::StatusOr<int32_t> {
    std::vector<IndexExpr> coords;
    for (size_t i = 0; i < b.rank(); ++i) coords.push_back(Body::V(i));
    for (int64_t dim : dims) {
      const size_t di = static_cast<size_t>(WrapDim(dim, b.rank()));
      coords[di] = b.dim(di) - IndexExpr::Const(1) - Body::V(di);
    }
    return b.Cast(b.Load(x, d.ST(x), coords), ct);
  });
}

absl::Status TriangleMask(Builder& d, uint32_t node, bool lower) {
  const int32_t x = d.In(node, 0);
  const int64_t diagonal = d.Int(d.A(node, 1));
  return d.Pointwise(node, [&](Body& b, ScalarType ct) -> absl::StatusOr<int32_t> {
    const size_t r = b.rank();
    int32_t i = b.Idx(Body::V(r - 2)), j = b.Idx(Body::V(r - 1));
    int32_t diff = b.Sub(j, i);
    int32_t keep = lower ? b.Bin(Opcode::kLe, diff, b.IConst(diagonal))
                         : b.Bin(Opcode::kGe, diff, b.IConst(diagonal));
    return b.Sel(keep, b.Cast(d.LoadB(b, x), ct), b.Const(0, ct));
  });
}

// ---------------------------------------------------------------------------------------------
// The rule table.

using Rule = std::function<absl::Status(Builder&, uint32_t)>;

const absl::flat_hash_map<std::string, Rule>& Rules() {
  static const auto* rules = [] {
    auto* r = new absl::flat_hash_map<std::string, Rule>();
    auto unary = [&](const std::string& name, Opcode op) {
      (*r)["aten." + name + ".default"] = [op](Builder& d, uint32_t n) { return Unary(d, n, op); };
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
    auto formula = [&](const std::string& target,
                       std::function<int32_t(Builder&, uint32_t, Body&, int32_t, ScalarType)> f) {
      (*r)[target] = [f](Builder& d, uint32_t n) {
        return d.Pointwise(n, [&](Body& b, ScalarType ct) -> absl::StatusOr<int32_t> {
          return f(d, n, b, b.Cast(d.LoadB(b, d.In(n, 0)), ct), ct);
        });
      };
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
    formula(
        "aten.leaky_relu.default", [](Builder& d, uint32_t n, Body& b, int32_t x, ScalarType ct) {
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
    formula("aten.clamp.default", [clamp](Builder& d, uint32_t n, Body& b, int32_t x,
                                          ScalarType ct) { return clamp(d, n, b, x, ct, false); });
    formula("aten.clamp.Tensor", [clamp](Builder& d, uint32_t n, Body& b, int32_t x,
                                         ScalarType ct) { return clamp(d, n, b, x, ct, true); });
    formula("aten.clamp_min.default",
            [](Builder& d, uint32_t n, Body& b, int32_t x, ScalarType ct) {
              return b.Bin(Opcode::kMax, x, b.Const(d.Num(d.A(n, 1)), ct));
            });
    formula("aten.clamp_max.default",
            [](Builder& d, uint32_t n, Body& b, int32_t x, ScalarType ct) {
              return b.Bin(Opcode::kMin, x, b.Const(d.Num(d.A(n, 1)), ct));
            });
    formula("aten.frac.default", [](Builder&, uint32_t, Body& b, int32_t x, ScalarType) {
      return b.Sub(x, b.Un(Opcode::kTrunc, x));
    });

    // Backward pointwise ops: (grad, x or y, ...).
    auto backward =
        [&](const std::string& target,
            std::function<int32_t(Builder&, uint32_t, Body&, int32_t, int32_t, ScalarType)> f) {
          (*r)[target] = [f](Builder& d, uint32_t n) {
            return d.Pointwise(n, [&](Body& b, ScalarType ct) -> absl::StatusOr<int32_t> {
              int32_t g = b.Cast(d.LoadB(b, d.In(n, 0)), ct);
              int32_t x = b.Cast(d.LoadB(b, d.In(n, 1)), ct);
              return f(d, n, b, g, x, ct);
            });
          };
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
               const double kAlpha = kSqrt1_2;
               const double kBeta = 0.5 * 1.12837916709551257390 * kSqrt1_2;  // 1/sqrt(2*pi)
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
    backward("aten.threshold_backward.default", [](Builder& d, uint32_t n, Body& b, int32_t g,
                                                   int32_t x, ScalarType ct) {
      return b.Sel(b.Bin(Opcode::kLe, x, b.Const(d.Num(d.A(n, 2)), ct)), b.Const(0, ct), g);
    });
    backward("aten.hardtanh_backward.default", [](Builder& d, uint32_t n, Body& b, int32_t g,
                                                  int32_t x, ScalarType ct) {
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
    (*r)["aten.native_dropout_backward.default"] = [](Builder& d, uint32_t n) {
      return d.Pointwise(n, [&](Body& b, ScalarType ct) -> absl::StatusOr<int32_t> {
        int32_t g = b.Cast(d.LoadB(b, d.In(n, 0)), ct);
        int32_t m = b.Cast(d.LoadB(b, d.In(n, 1)), ct);
        return b.MulC(b.Mul(g, m), d.Num(d.A(n, 2)));
      });
    };

    // Binary arithmetic with alpha.
    auto add_sub = [&](const std::string& target, double sign, bool reversed) {
      (*r)[target] = [sign, reversed](Builder& d, uint32_t n) {
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
      };
    };
    add_sub("aten.add.Tensor", 1, false);
    add_sub("aten.add.Scalar", 1, false);
    add_sub("aten.sub.Tensor", -1, false);
    add_sub("aten.sub.Scalar", -1, false);
    add_sub("aten.rsub.Tensor", -1, true);
    add_sub("aten.rsub.Scalar", -1, true);
    auto binary = [&](const std::string& target, Opcode op) {
      (*r)[target] = [op](Builder& d, uint32_t n) { return Binary(d, n, op); };
    };
    (*r)["aten.mul.Tensor"] = [](Builder& d, uint32_t n) {
      return d.Pointwise(n, [&](Body& b, ScalarType ct) -> absl::StatusOr<int32_t> {
        auto x = d.Operand(b, d.A(n, 0), ct);
        if (!x.ok()) return x;
        auto y = d.Operand(b, d.A(n, 1), ct);
        if (!y.ok()) return y;
        if (ct == ScalarType::kBool) return b.Bin(Opcode::kAnd, b.Cast(*x, ct), b.Cast(*y, ct));
        return b.Mul(b.Cast(*x, ct), b.Cast(*y, ct));
      });
    };
    (*r)["aten.mul.Scalar"] = (*r)["aten.mul.Tensor"];
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
    (*r)["aten.div.Tensor_mode"] = div_mode;
    (*r)["aten.div.Scalar_mode"] = div_mode;
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
    (*r)["aten.pow.Tensor_Scalar"] = [](Builder& d, uint32_t n) {
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
    };
    auto compare = [&](const std::string& name, Opcode op) {
      (*r)["aten." + name + ".Tensor"] = [op](Builder& d, uint32_t n) { return Compare(d, n, op); };
      (*r)["aten." + name + ".Scalar"] = [op](Builder& d, uint32_t n) { return Compare(d, n, op); };
    };
    compare("eq", Opcode::kEq);
    compare("ne", Opcode::kNe);
    compare("lt", Opcode::kLt);
    compare("le", Opcode::kLe);
    compare("gt", Opcode::kGt);
    compare("ge", Opcode::kGe);
    auto logical = [&](const std::string& target, Opcode op) {
      (*r)[target] = [op](Builder& d, uint32_t n) {
        return d.Pointwise(n, [&](Body& b, ScalarType) -> absl::StatusOr<int32_t> {
          return b.Bin(op, b.ToBool(d.LoadB(b, d.In(n, 0))), b.ToBool(d.LoadB(b, d.In(n, 1))));
        });
      };
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
    (*r)["aten.where.self"] = where;
    (*r)["aten.where.ScalarSelf"] = where;
    (*r)["aten.where.ScalarOther"] = where;
    auto masked_fill = [](Builder& d, uint32_t n) {
      return d.Pointwise(n, [&](Body& b, ScalarType ct) -> absl::StatusOr<int32_t> {
        int32_t x = b.Cast(d.LoadB(b, d.In(n, 0)), ct);
        int32_t m = b.ToBool(d.LoadB(b, d.In(n, 1)));
        auto v = d.Operand(b, d.A(n, 2), ct);
        if (!v.ok()) return v;
        return b.Sel(m, b.Cast(*v, ct), x);
      });
    };
    (*r)["aten.masked_fill.Scalar"] = masked_fill;
    (*r)["aten.masked_fill.Tensor"] = masked_fill;
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
    (*r)["aten.lerp.Scalar"] = lerp;
    (*r)["aten.lerp.Tensor"] = lerp;
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
    (*r)["aten.addcmul.default"] = addc(false);
    (*r)["aten.addcdiv.default"] = addc(true);

    // Copies and casts.
    for (const char* t : {"aten.clone.default", "aten._to_copy.default",
                          "aten.lift_fresh_copy.default", "aten.contiguous.default"}) {
      (*r)[t] = [](Builder& d, uint32_t n) { return Copy(d, n, 0); };
    }
    (*r)["aten.copy.default"] = [](Builder& d, uint32_t n) { return Copy(d, n, 1); };
    (*r)["aten.copy_.default"] = [](Builder& d, uint32_t n) { return CopyInPlace(d, n); };

    // Factories.
    auto fill_arg = [](size_t arg) {
      return [arg](Builder& d, uint32_t n) {
        return d.Pointwise(n, [&](Body& b, ScalarType ct) -> absl::StatusOr<int32_t> {
          return d.ScalarValue(b, d.A(n, arg), ct);
        });
      };
    };
    auto fill_const = [](double v) {
      return [v](Builder& d, uint32_t n) {
        return d.Pointwise(
            n, [&](Body& b, ScalarType ct) -> absl::StatusOr<int32_t> { return b.Const(v, ct); });
      };
    };
    (*r)["aten.full.default"] = fill_arg(1);
    (*r)["aten.full_like.default"] = fill_arg(1);
    (*r)["aten.scalar_tensor.default"] = fill_arg(0);
    (*r)["aten.zeros.default"] = fill_const(0);
    (*r)["aten.zeros_like.default"] = fill_const(0);
    (*r)["aten.empty.memory_format"] = fill_const(0);
    (*r)["aten.empty_strided.default"] = fill_const(0);
    (*r)["aten.empty_like.default"] = fill_const(0);
    (*r)["aten.ones.default"] = fill_const(1);
    (*r)["aten.ones_like.default"] = fill_const(1);
    for (const char* t : {"aten.arange.default", "aten.arange.start", "aten.arange.start_step"}) {
      (*r)[t] = [](Builder& d, uint32_t n) { return Arange(d, n); };
    }
    for (const char* t : {"aten.rand_like.default", "aten.rand.default", "aten.bernoulli.p"}) {
      (*r)[t] = [](Builder& d, uint32_t n) { return Random(d, n); };
    }

    // Reductions.
    auto dims_of = [](Builder& d, uint32_t n, size_t i) {
      return d.IsNone(d.A(n, i)) ? std::vector<int64_t>{} : d.Ints(d.A(n, i));
    };
    (*r)["aten.sum.default"] = [](Builder& d, uint32_t n) {
      return Reduction(d, n, ReduceKind::kSum, {}, false, false);
    };
    (*r)["aten.sum.dim_IntList"] = [dims_of](Builder& d, uint32_t n) {
      return Reduction(d, n, ReduceKind::kSum, dims_of(d, n, 1), d.Int(d.A(n, 2)) != 0, false);
    };
    (*r)["aten.mean.default"] = [](Builder& d, uint32_t n) {
      return Reduction(d, n, ReduceKind::kSum, {}, false, true);
    };
    (*r)["aten.mean.dim"] = [dims_of](Builder& d, uint32_t n) {
      return Reduction(d, n, ReduceKind::kSum, dims_of(d, n, 1), d.Int(d.A(n, 2)) != 0, true);
    };
    (*r)["aten.prod.default"] = [](Builder& d, uint32_t n) {
      return Reduction(d, n, ReduceKind::kProd, {}, false, false);
    };
    (*r)["aten.prod.dim_int"] = [](Builder& d, uint32_t n) {
      return Reduction(d, n, ReduceKind::kProd, {d.Int(d.A(n, 1))}, d.Int(d.A(n, 2)) != 0, false);
    };
    (*r)["aten.amax.default"] = [dims_of](Builder& d, uint32_t n) {
      return Reduction(d, n, ReduceKind::kMax, dims_of(d, n, 1), d.Int(d.A(n, 2)) != 0, false);
    };
    (*r)["aten.amin.default"] = [dims_of](Builder& d, uint32_t n) {
      return Reduction(d, n, ReduceKind::kMin, dims_of(d, n, 1), d.Int(d.A(n, 2)) != 0, false);
    };
    (*r)["aten.max.default"] = [](Builder& d, uint32_t n) {
      return Reduction(d, n, ReduceKind::kMax, {}, false, false);
    };
    (*r)["aten.min.default"] = [](Builder& d, uint32_t n) {
      return Reduction(d, n, ReduceKind::kMin, {}, false, false);
    };
    (*r)["aten.any.default"] = [](Builder& d, uint32_t n) {
      return Reduction(d, n, ReduceKind::kAny, {}, false, false);
    };
    (*r)["aten.all.default"] = [](Builder& d, uint32_t n) {
      return Reduction(d, n, ReduceKind::kAll, {}, false, false);
    };
    (*r)["aten.any.dim"] = [](Builder& d, uint32_t n) {
      return Reduction(d, n, ReduceKind::kAny, {d.Int(d.A(n, 1))}, d.Int(d.A(n, 2)) != 0, false);
    };
    (*r)["aten.all.dim"] = [](Builder& d, uint32_t n) {
      return Reduction(d, n, ReduceKind::kAll, {d.Int(d.A(n, 1))}, d.Int(d.A(n, 2)) != 0, false);
    };
    (*r)["aten.max.dim"] = [](Builder& d, uint32_t n) {
      return ArgReduction(d, n, true, {d.Int(d.A(n, 1))}, d.Int(d.A(n, 2)) != 0, 0, 1);
    };
    (*r)["aten.min.dim"] = [](Builder& d, uint32_t n) {
      return ArgReduction(d, n, false, {d.Int(d.A(n, 1))}, d.Int(d.A(n, 2)) != 0, 0, 1);
    };
    (*r)["aten.argmax.default"] = [](Builder& d, uint32_t n) {
      std::vector<int64_t> dims;
      if (!d.IsNone(d.A(n, 1))) dims.push_back(d.Int(d.A(n, 1)));
      return ArgReduction(d, n, true, dims, d.Int(d.A(n, 2)) != 0, -1, 0);
    };
    (*r)["aten.argmin.default"] = [](Builder& d, uint32_t n) {
      std::vector<int64_t> dims;
      if (!d.IsNone(d.A(n, 1))) dims.push_back(d.Int(d.A(n, 1)));
      return ArgReduction(d, n, false, dims, d.Int(d.A(n, 2)) != 0, -1, 0);
    };
    auto correction = [](Builder& d, uint32_t n) {
      return d.IsNone(d.A(n, 2)) ? 1.0 : d.Num(d.A(n, 2));
    };
    (*r)["aten.var.correction"] = [dims_of, correction](Builder& d, uint32_t n) {
      return Variance(d, n, dims_of(d, n, 1), correction(d, n), d.Int(d.A(n, 3)) != 0, 0, -1,
                      false);
    };
    (*r)["aten.std.correction"] = [dims_of, correction](Builder& d, uint32_t n) {
      return Variance(d, n, dims_of(d, n, 1), correction(d, n), d.Int(d.A(n, 3)) != 0, 0, -1, true);
    };
    (*r)["aten.var_mean.correction"] = [dims_of, correction](Builder& d, uint32_t n) {
      return Variance(d, n, dims_of(d, n, 1), correction(d, n), d.Int(d.A(n, 3)) != 0, 0, 1, false);
    };
    (*r)["aten._softmax.default"] = [](Builder& d, uint32_t n) { return Softmax(d, n, false); };
    (*r)["aten._log_softmax.default"] = [](Builder& d, uint32_t n) { return Softmax(d, n, true); };
    (*r)["aten._softmax_backward_data.default"] = [](Builder& d, uint32_t n) {
      return SoftmaxBackward(d, n, false);
    };
    (*r)["aten._log_softmax_backward_data.default"] = [](Builder& d, uint32_t n) {
      return SoftmaxBackward(d, n, true);
    };

    // Composite ops.
    (*r)["aten.native_layer_norm.default"] = [](Builder& d, uint32_t n) { return LayerNorm(d, n); };
    (*r)["aten.native_layer_norm_backward.default"] = [](Builder& d, uint32_t n) {
      return LayerNormBackward(d, n);
    };
    (*r)["aten._native_batch_norm_legit_functional.default"] = [](Builder& d, uint32_t n) {
      return BatchNorm(d, n, true);
    };
    (*r)["aten._native_batch_norm_legit_no_training.default"] = [](Builder& d, uint32_t n) {
      return BatchNorm(d, n, false);
    };
    (*r)["aten.native_batch_norm_backward.default"] = [](Builder& d, uint32_t n) {
      return BatchNormBackward(d, n);
    };
    (*r)["aten.native_dropout.default"] = [](Builder& d, uint32_t n) { return Dropout(d, n); };
    (*r)["aten.nll_loss_forward.default"] = [](Builder& d, uint32_t n) { return NllLoss(d, n); };
    (*r)["aten.nll_loss_backward.default"] = [](Builder& d, uint32_t n) {
      return NllLossBackward(d, n);
    };
    (*r)["aten.embedding.default"] = [](Builder& d, uint32_t n) { return Embedding(d, n); };
    (*r)["aten.embedding_dense_backward.default"] = [](Builder& d, uint32_t n) {
      return EmbeddingBackward(d, n);
    };
    (*r)["aten.cat.default"] = [](Builder& d, uint32_t n) { return Cat(d, n, false); };
    (*r)["aten.stack.default"] = [](Builder& d, uint32_t n) { return Cat(d, n, true); };
    (*r)["aten.slice_backward.default"] = [](Builder& d, uint32_t n) {
      return SliceBackward(d, n);
    };
    (*r)["aten.select_backward.default"] = [](Builder& d, uint32_t n) {
      return SelectBackward(d, n);
    };
    (*r)["aten.max_pool2d_with_indices.default"] = [](Builder& d, uint32_t n) {
      return MaxPool2d(d, n);
    };
    (*r)["aten.max_pool2d_with_indices_backward.default"] = [](Builder& d, uint32_t n) {
      return MaxPool2dBackward(d, n);
    };
    (*r)["aten.index_select.default"] = [](Builder& d, uint32_t n) {
      return IndexSelect(d, n, false);
    };
    (*r)["aten.gather.default"] = [](Builder& d, uint32_t n) { return IndexSelect(d, n, true); };
    (*r)["aten.constant_pad_nd.default"] = [](Builder& d, uint32_t n) { return ConstantPad(d, n); };
    (*r)["aten.flip.default"] = [](Builder& d, uint32_t n) { return Flip(d, n); };
    (*r)["aten.tril.default"] = [](Builder& d, uint32_t n) { return TriangleMask(d, n, true); };
    (*r)["aten.triu.default"] = [](Builder& d, uint32_t n) { return TriangleMask(d, n, false); };
    (*r)["aten.addmm.default"] = [](Builder& d, uint32_t n) { return Addmm(d, n, false); };
    (*r)["aten.baddbmm.default"] = [](Builder& d, uint32_t n) { return Addmm(d, n, true); };
    return r;
  }();
  return *rules;
}

// Dispatches `node` to what decomposes it; returns UNIMPLEMENTED where it must fall back.
absl::Status Visit(Builder& d, uint32_t node) {
  const graph::Node& gn = d.N(node);
  const std::string& target = d.graph().target(gn);
  // Symbolic scalars carry their value in their metadata: nothing to compute.
  bool has_tensor = false;
  for (const graph::Value& v : d.graph().outputs(gn)) {
    if (v.kind == graph::ValueKind::kTensor) has_tensor = true;
  }
  if (target == "operator.getitem") {
    const Arg& a = d.A(node, 0);
    const int64_t k = d.Int(d.A(node, 1));
    for (const graph::Value& v : d.graph().outputs(gn)) {
      if (v.kind != graph::ValueKind::kTensor || a.kind != ArgKind::kRef) continue;
      const graph::Node& src = d.N(a.ref.node);
      if (k < 0 || static_cast<uint32_t>(k) >= src.num_outputs) {
        return absl::InternalError(
            absl::StrCat("getitem ", k, " out of range at ", d.NodeName(node)));
      }
      const graph::Value& sv = d.graph().outputs(src)[static_cast<size_t>(k)];
      d.Bind(v, d.TensorOf(sv));
    }
    return absl::OkStatus();
  }
  if (!has_tensor && !absl::StartsWith(target, "_c10d_functional.")) return absl::OkStatus();
  if (gn.schema == nullptr) return d.Fallback(node, absl::StrCat("Kiln does not know ", target));
  if (absl::StartsWith(target, "_c10d_functional.")) return d.Extern(node, target, false, "");
  if (ExternOps().contains(target)) return d.Extern(node, target, false, "");
  if (ViewOps().contains(target) || target == "aten.reshape.default") return d.View(node);
  auto it = Rules().find(target);
  if (it == Rules().end()) return d.Fallback(node, absl::StrCat("no lowering for ", target));
  absl::Status s = it->second(d, node);
  if (absl::IsUnimplemented(s)) return d.Fallback(node, std::string(s.message()));
  return s;
}

// What the runtime is told about graph input `i`.
absl::StatusOr<loop::InputDesc> InputDescOf(const Builder& d, uint32_t i) {
  const graph::Node& gn = d.N(i);
  loop::InputDesc desc;
  desc.role = gn.role;
  desc.name = d.NodeName(i);
  if (gn.num_outputs == 1) {
    const graph::Value& v = d.graph().outputs(gn)[0];
    if (v.kind == graph::ValueKind::kTensor) {
      desc.kind = loop::InputDesc::Kind::kTensor;
      auto sizes = d.Syms(d.graph().sizes(v));
      auto strides = d.Syms(d.graph().strides(v));
      if (!sizes.ok()) return sizes.status();
      if (!strides.ok()) return strides.status();
      desc.sizes = *std::move(sizes);
      desc.strides = *std::move(strides);
      desc.dtype = v.dtype;
      desc.on_cpu = v.device.type == graph::DeviceType::kCpu;
    } else if (v.kind == graph::ValueKind::kSymInt) {
      auto e = d.Sym(v.scalar);
      if (e.ok()) {
        desc.kind = loop::InputDesc::Kind::kScalar;
        desc.scalar = *std::move(e);
      }
    }
  }
  return desc;
}

// Appends the graph's outputs below `a` to `outputs`, lists flattened.
absl::Status FlattenOutputs(const Builder& d, const Arg& a, std::vector<Output>& outputs) {
  if (a.kind == ArgKind::kList) {
    for (const Arg& x : d.graph().items(a)) {
      if (absl::Status s = FlattenOutputs(d, x, outputs); !s.ok()) return s;
    }
    return absl::OkStatus();
  }
  Output o;
  if (a.kind == ArgKind::kRef) {
    const graph::Value* v = d.graph().Resolve(a.ref);
    if (v != nullptr && v->kind == graph::ValueKind::kTensor) {
      o.kind = Output::Kind::kTensor;
      o.tensor = d.TensorOf(*v);
      if (o.tensor < 0) {
        return absl::InternalError(absl::StrCat("output ", d.ValueName(*v), " has no tensor"));
      }
    } else if (v != nullptr && v->kind == graph::ValueKind::kSymInt) {
      auto e = d.Sym(v->scalar);
      if (!e.ok()) return e.status();
      o.kind = Output::Kind::kSymbol;
      o.symbol = *e;
    }
  } else if (a.kind == ArgKind::kInt) {
    o.kind = Output::Kind::kSymbol;
    o.symbol = IndexExpr::Const(a.int_value);
  } else if (a.kind == ArgKind::kSymbolic) {
    auto e = d.Sym(a.sym);
    if (!e.ok()) return e.status();
    o.kind = Output::Kind::kSymbol;
    o.symbol = *e;
  }
  outputs.push_back(std::move(o));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<PrimGraph> Decompose(const graph::Graph& graph,
                                    const canon::CanonicalGraph& canonical) {
  std::vector<int64_t> rng_streams(graph.num_nodes(), -1);
  int64_t rng_ops = 0;
  for (uint32_t i = 0; i < graph.num_nodes(); ++i) {
    if (RngOps().contains(graph.target(graph.node(i)))) rng_streams[i] = rng_ops++;
  }
  Builder d(graph, canonical, std::move(rng_streams));
  std::vector<loop::InputDesc> inputs;
  for (uint32_t i = 0; i < graph.num_inputs(); ++i) {
    auto desc = InputDescOf(d, i);
    if (!desc.ok()) return desc.status();
    inputs.push_back(*std::move(desc));
  }
  for (uint32_t node : canonical.order()) {
    if (graph.node(node).kind == graph::NodeKind::kInput) {
      if (absl::Status s = d.AddInput(node); !s.ok()) return s;
      continue;
    }
    if (absl::Status s = Visit(d, node); !s.ok()) {
      if (absl::IsUnimplemented(s)) {
        if (absl::Status f = d.Fallback(node, std::string(s.message())); !f.ok()) return f;
        continue;
      }
      return s;
    }
  }
  std::vector<Output> outputs;
  if (absl::Status s = FlattenOutputs(d, graph.output(), outputs); !s.ok()) return s;
  PrimGraph out = d.Take();
  out.inputs = std::move(inputs);
  out.outputs = std::move(outputs);
  out.rng_ops = rng_ops;
  return out;
}

bool HasLowering(absl::string_view target) {
  const std::string t(target);
  return ExternOps().contains(t) || ViewOps().contains(t) || t == "aten.reshape.default" ||
         absl::StartsWith(t, "_c10d_functional.") || t == "operator.getitem" || Rules().contains(t);
}

std::vector<std::string> LoweredOps() {
  std::vector<std::string> ops = {"aten.reshape.default", "operator.getitem"};
  ops.insert(ops.end(), ExternOps().begin(), ExternOps().end());
  ops.insert(ops.end(), ViewOps().begin(), ViewOps().end());
  for (const auto& [target, rule] : Rules()) ops.push_back(target);
  for (const graph::OpSchema* schema : graph::AllOpSchemas()) {
    if (absl::StartsWith(schema->target, "_c10d_functional.")) ops.push_back(schema->target);
  }
  std::sort(ops.begin(), ops.end());
  ops.erase(std::unique(ops.begin(), ops.end()), ops.end());
  return ops;
}

}  // namespace kiln::decompose
