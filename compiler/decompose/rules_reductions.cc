// Reductions: sum, mean, prod, max and min (with and without indices), any and all, variance
// and standard deviation.

#include <vector>

#include "compiler/decompose/rule_registry.h"

namespace kiln::decompose {
namespace {

using loop::IndexExpr;
using loop::Opcode;
using loop::ReduceKind;
using loop::ScalarType;

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
    return d.FinishReduce(node, b, v, kind, o->dtype, keepdim, k, /*temp=*/false, idx, want_index)
        .status();
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

}  // namespace

void RegisterReductionRules(RuleRegistry& r) {
  auto dims_of = [](Builder& d, uint32_t n, size_t i) {
    return d.IsNone(d.A(n, i)) ? std::vector<int64_t>{} : d.Ints(d.A(n, i));
  };
  r.Add("aten.sum.default",
        [](Builder& d, uint32_t n) { return Reduction(d, n, ReduceKind::kSum, {}, false, false); });
  r.Add("aten.sum.dim_IntList", [dims_of](Builder& d, uint32_t n) {
    return Reduction(d, n, ReduceKind::kSum, dims_of(d, n, 1), d.Int(d.A(n, 2)) != 0, false);
  });
  r.Add("aten.mean.default",
        [](Builder& d, uint32_t n) { return Reduction(d, n, ReduceKind::kSum, {}, false, true); });
  r.Add("aten.mean.dim", [dims_of](Builder& d, uint32_t n) {
    return Reduction(d, n, ReduceKind::kSum, dims_of(d, n, 1), d.Int(d.A(n, 2)) != 0, true);
  });
  r.Add("aten.prod.default", [](Builder& d, uint32_t n) {
    return Reduction(d, n, ReduceKind::kProd, {}, false, false);
  });
  r.Add("aten.prod.dim_int", [](Builder& d, uint32_t n) {
    return Reduction(d, n, ReduceKind::kProd, {d.Int(d.A(n, 1))}, d.Int(d.A(n, 2)) != 0, false);
  });
  r.Add("aten.amax.default", [dims_of](Builder& d, uint32_t n) {
    return Reduction(d, n, ReduceKind::kMax, dims_of(d, n, 1), d.Int(d.A(n, 2)) != 0, false);
  });
  r.Add("aten.amin.default", [dims_of](Builder& d, uint32_t n) {
    return Reduction(d, n, ReduceKind::kMin, dims_of(d, n, 1), d.Int(d.A(n, 2)) != 0, false);
  });
  r.Add("aten.max.default",
        [](Builder& d, uint32_t n) { return Reduction(d, n, ReduceKind::kMax, {}, false, false); });
  r.Add("aten.min.default",
        [](Builder& d, uint32_t n) { return Reduction(d, n, ReduceKind::kMin, {}, false, false); });
  r.Add("aten.any.default",
        [](Builder& d, uint32_t n) { return Reduction(d, n, ReduceKind::kAny, {}, false, false); });
  r.Add("aten.all.default",
        [](Builder& d, uint32_t n) { return Reduction(d, n, ReduceKind::kAll, {}, false, false); });
  r.Add("aten.any.dim", [](Builder& d, uint32_t n) {
    return Reduction(d, n, ReduceKind::kAny, {d.Int(d.A(n, 1))}, d.Int(d.A(n, 2)) != 0, false);
  });
  r.Add("aten.all.dim", [](Builder& d, uint32_t n) {
    return Reduction(d, n, ReduceKind::kAll, {d.Int(d.A(n, 1))}, d.Int(d.A(n, 2)) != 0, false);
  });
  r.Add("aten.max.dim", [](Builder& d, uint32_t n) {
    return ArgReduction(d, n, true, {d.Int(d.A(n, 1))}, d.Int(d.A(n, 2)) != 0, 0, 1);
  });
  r.Add("aten.min.dim", [](Builder& d, uint32_t n) {
    return ArgReduction(d, n, false, {d.Int(d.A(n, 1))}, d.Int(d.A(n, 2)) != 0, 0, 1);
  });
  r.Add("aten.argmax.default", [](Builder& d, uint32_t n) {
    std::vector<int64_t> dims;
    if (!d.IsNone(d.A(n, 1))) dims.push_back(d.Int(d.A(n, 1)));
    return ArgReduction(d, n, true, dims, d.Int(d.A(n, 2)) != 0, -1, 0);
  });
  r.Add("aten.argmin.default", [](Builder& d, uint32_t n) {
    std::vector<int64_t> dims;
    if (!d.IsNone(d.A(n, 1))) dims.push_back(d.Int(d.A(n, 1)));
    return ArgReduction(d, n, false, dims, d.Int(d.A(n, 2)) != 0, -1, 0);
  });
  auto correction = [](Builder& d, uint32_t n) {
    return d.IsNone(d.A(n, 2)) ? 1.0 : d.Num(d.A(n, 2));
  };
  r.Add("aten.var.correction", [dims_of, correction](Builder& d, uint32_t n) {
    return Variance(d, n, dims_of(d, n, 1), correction(d, n), d.Int(d.A(n, 3)) != 0, 0, -1, false);
  });
  r.Add("aten.std.correction", [dims_of, correction](Builder& d, uint32_t n) {
    return Variance(d, n, dims_of(d, n, 1), correction(d, n), d.Int(d.A(n, 3)) != 0, 0, -1, true);
  });
  r.Add("aten.var_mean.correction", [dims_of, correction](Builder& d, uint32_t n) {
    return Variance(d, n, dims_of(d, n, 1), correction(d, n), d.Int(d.A(n, 3)) != 0, 0, 1, false);
  });
}

}  // namespace kiln::decompose
