// The backwards of views: slice_backward and select_backward place a view's gradient in a
// tensor of zeros. (Views themselves are Builder::View.)

#include <algorithm>
#include <vector>

#include "compiler/decompose/rule_registry.h"

namespace kiln::decompose {
namespace {

using graph::ArgKind;
using loop::IndexExpr;
using loop::Opcode;
using loop::ScalarType;

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

}  // namespace

void RegisterViewRules(RuleRegistry& r) {
  r.Add("aten.slice_backward.default", [](Builder& d, uint32_t n) { return SliceBackward(d, n); });
  r.Add("aten.select_backward.default",
        [](Builder& d, uint32_t n) { return SelectBackward(d, n); });
}

}  // namespace kiln::decompose
