// Placing a view's values in a whole tensor: slice_backward and select_backward place a view's
// gradient in zeros, slice_scatter and select_scatter place src in self. (Views themselves
// are Builder::View.)

#include <algorithm>
#include <limits>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compiler/decompose/rule_registry.h"

namespace kiln::decompose {
namespace {

using graph::ArgKind;
using loop::IndexExpr;
using loop::Opcode;
using loop::ScalarType;

// Where a slice's or a select's values go, in a tensor shaped as the node's output: the
// values are argument `src`, the rest is argument `base` (-1: zeros). The backwards of the
// views (slice_backward, select_backward) place a gradient in zeros; the scatters
// (slice_scatter, select_scatter) place src in self.
struct Placement {
  size_t src = 0;
  int base = -1;
  size_t dim = 2;  // the arguments that follow: dim, then start, end, step or index
};

// The value at a point of `b`: src's at `coords`/`dyn` where `in`, else base's (or 0).
int32_t Placed(Builder& d, uint32_t node, const Placement& p, Body& b, ScalarType ct, int32_t in,
               std::vector<IndexExpr> coords, std::vector<int32_t> dyn) {
  const int32_t src = d.In(node, p.src);
  const int32_t v = b.Cast(b.Load(src, d.ST(src), std::move(coords), in, std::move(dyn)), ct);
  const int32_t other =
      p.base < 0 ? b.Const(0, ct) : b.Cast(d.LoadB(b, d.In(node, static_cast<size_t>(p.base))), ct);
  return b.Sel(in, v, other);
}

// An int argument, `dflt` where it is None or absent; nullopt where it is symbolic.
std::optional<int64_t> IntOr(Builder& d, uint32_t node, size_t i, int64_t dflt) {
  if (i >= d.NumArgs(node) || Builder::IsNone(d.A(node, i))) return dflt;
  if (d.A(node, i).kind != ArgKind::kInt) return std::nullopt;
  return d.Int(d.A(node, i));
}

absl::Status SliceInto(Builder& d, uint32_t node, const Placement& p) {
  const graph::Value* o = d.Out(node, 0);
  auto sizes = d.Syms(d.graph().sizes(*o));
  if (!sizes.ok()) return sizes.status();
  const int64_t dim = WrapDim(d.Int(d.A(node, p.dim), 0), sizes->size());
  const std::optional<int64_t> first = IntOr(d, node, p.dim + 1, 0);
  const std::optional<int64_t> last =
      IntOr(d, node, p.dim + 2, std::numeric_limits<int64_t>::max());
  const std::optional<int64_t> stride = IntOr(d, node, p.dim + 3, 1);
  // A slice of the whole dim (x[:, 0:] as dynamic shapes record it, to the largest int64):
  // src is the result, whatever the dim's size.
  const int32_t src = d.In(node, p.src);
  if (first == 0 && last == std::numeric_limits<int64_t>::max() && stride == 1 &&
      d.Tn(src).sizes.size() == sizes->size()) {
    return d.Alias(node, 0, src);
  }
  if (!first || !last || !stride || !(*sizes)[static_cast<size_t>(dim)].is_const()) {
    return absl::UnimplementedError(
        absl::StrCat(d.graph().target(d.N(node)), " with symbolic bounds has no lowering"));
  }
  const int64_t n = (*sizes)[static_cast<size_t>(dim)].const_value();
  int64_t start = *first, end = *last;
  const int64_t step = *stride;
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
    return Placed(d, node, p, b, ct, in, std::move(coords), std::move(dyn));
  });
}

absl::Status SelectInto(Builder& d, uint32_t node, const Placement& p) {
  const graph::Value* o = d.Out(node, 0);
  const int64_t dim = WrapDim(d.Int(d.A(node, p.dim)), d.graph().sizes(*o).size());
  const graph::Arg& at = d.A(node, p.dim + 1);
  auto index = d.Sym(at.kind == ArgKind::kSymbolic ? at.sym : graph::SymInt::Constant(d.Int(at)));
  if (!index.ok()) return index.status();
  return d.Pointwise(node, [&](Body& b, ScalarType ct) -> absl::StatusOr<int32_t> {
    IndexExpr idx = *index;
    if (idx.is_const() && idx.const_value() < 0) idx = b.dim(static_cast<size_t>(dim)) + idx;
    int32_t hit = b.Bin(Opcode::kEq, b.Idx(Body::V(static_cast<size_t>(dim))), b.Idx(idx));
    std::vector<IndexExpr> coords;
    for (size_t i = 0; i < b.rank(); ++i) {
      if (static_cast<int64_t>(i) != dim) coords.push_back(Body::V(i));
    }
    return Placed(d, node, p, b, ct, hit, std::move(coords), {});
  });
}

}  // namespace

void RegisterViewRules(RuleRegistry& r) {
  // (grad_output, input_sizes, dim, ...) and (self, src, dim, ...).
  const Placement backward{.src = 0, .base = -1}, scatter{.src = 1, .base = 0};
  r.Add("aten.slice_backward.default",
        [=](Builder& d, uint32_t n) { return SliceInto(d, n, backward); });
  r.Add("aten.select_backward.default",
        [=](Builder& d, uint32_t n) { return SelectInto(d, n, backward); });
  r.Add("aten.slice_scatter.default",
        [=](Builder& d, uint32_t n) { return SliceInto(d, n, scatter); });
  r.Add("aten.select_scatter.default",
        [=](Builder& d, uint32_t n) { return SelectInto(d, n, scatter); });
}

}  // namespace kiln::decompose
