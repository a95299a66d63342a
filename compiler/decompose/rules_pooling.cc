// Pooling: max_pool2d with indices and its backward.

#include <limits>
#include <utility>
#include <vector>

#include "compiler/decompose/rule_registry.h"

namespace kiln::decompose {
namespace {

using loop::IndexExpr;
using loop::Opcode;
using loop::ReduceKind;
using loop::ScalarType;

// max_pool2d's window, from the op's kernel_size, stride, padding and dilation arguments.
struct PoolWindow {
  int64_t kh = 1, kw = 1, sh = 1, sw = 1, ph = 0, pw = 0, dh = 1, dw = 1;
};

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

}  // namespace

void RegisterPoolingRules(RuleRegistry& r) {
  r.Add("aten.max_pool2d_with_indices.default",
        [](Builder& d, uint32_t n) { return MaxPool2d(d, n); });
  r.Add("aten.max_pool2d_with_indices_backward.default",
        [](Builder& d, uint32_t n) { return MaxPool2dBackward(d, n); });
}

}  // namespace kiln::decompose
