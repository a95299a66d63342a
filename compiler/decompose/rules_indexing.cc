// Indexing: embeddings, index_select, gather and advanced indexing, concatenation, padding, flips
// and triangular masks. The embedding's backward is an extern call (see
// proto/ops/families/indexing.cc).

#include <vector>

#include "compiler/decompose/rule_registry.h"

namespace kiln::decompose {
namespace {

using graph::Arg;
using loop::IndexExpr;
using loop::Opcode;
using loop::ScalarType;

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

// scatter(self, dim, index, value) whose index holds one position for each line along `dim` and
// covers self elsewhere (the one-hot gradient nll_loss_backward's decomposition scatters into
// zeros): each element compares its position with its line's index, as Inductor rewrites a
// scatter onto a constant, and the scatter fuses with what reads it. Other scatters write where
// data says, several times into one line: those fall back.
absl::Status ScatterValue(Builder& d, uint32_t node) {
  const int32_t x = d.In(node, 0), index = d.In(node, 2);
  const size_t rank = d.Rank(x);
  const int64_t dim = WrapDim(d.Int(d.A(node, 1)), rank);
  const std::vector<IndexExpr>& sizes = d.Tn(x).sizes;
  const std::vector<IndexExpr>& index_sizes = d.Tn(index).sizes;
  if (rank == 0 || index_sizes.size() != rank) {
    return absl::UnimplementedError("scatter.value with an index of another rank than self");
  }
  for (size_t k = 0; k < rank; ++k) {
    const bool one = index_sizes[k].is_const() && index_sizes[k].const_value() == 1;
    if (static_cast<int64_t>(k) == dim ? !one : index_sizes[k] != sizes[k]) {
      return absl::UnimplementedError(
          "scatter.value whose index is not one position per line of self along dim");
    }
  }
  const Arg& value = d.A(node, 3);
  return d.Pointwise(node, [&](Body& b, ScalarType ct) -> absl::StatusOr<int32_t> {
    std::vector<IndexExpr> ic, xc;
    for (size_t k = 0; k < rank; ++k) {
      ic.push_back(static_cast<int64_t>(k) == dim ? IndexExpr() : Body::V(k));
      xc.push_back(Body::V(k));
    }
    const int32_t i = b.Cast(b.Load(index, d.ST(index), ic), ScalarType::kI64);
    const int32_t hit = b.Bin(Opcode::kEq, b.Idx(Body::V(static_cast<size_t>(dim))), i);
    return b.Sel(hit, b.Const(d.Num(value, 0), ct), b.Cast(b.Load(x, d.ST(x), xc), ct));
  });
}

// Advanced indexing (x[i, :, j]): the index tensors broadcast together to B, whose dims
// replace the indexed dims in the result where those are adjacent and lead it otherwise, as
// PyTorch orders them. Negative indices count from the end; an index out of range reads 0
// (PyTorch raises; a kernel cannot). Boolean masks give sizes that depend on the data: they
// fall back.
absl::Status AdvancedIndex(Builder& d, uint32_t node) {
  const int32_t x = d.In(node, 0);
  const size_t rank = d.Rank(x);
  std::vector<int32_t> index(rank, -1);
  std::vector<size_t> indexed;
  size_t k = 0;
  for (const Arg& a : d.graph().items(d.A(node, 1))) {
    if (k == rank) return absl::InvalidArgumentError("more indices than dimensions");
    if (!Builder::IsNone(a)) {
      const int32_t t = d.TensorArg(a);
      if (t < 0) return absl::UnimplementedError("an index that is not a tensor");
      const graph::DType dt = d.Tn(t).dtype;
      if (dt == graph::DType::kBool || dt == graph::DType::kUInt8) {
        return absl::UnimplementedError("indexing by a boolean mask has data-dependent sizes");
      }
      index[k] = t;
      indexed.push_back(k);
    }
    ++k;
  }
  if (indexed.empty()) return d.Alias(node, 0, x);
  const bool adjacent = indexed.back() - indexed.front() + 1 == indexed.size();
  return d.Pointwise(node, [&](Body& b, ScalarType ct) -> absl::StatusOr<int32_t> {
    if (b.rank() + indexed.size() < rank) {
      return absl::InternalError("index.Tensor's result has too few dimensions");
    }
    // The broadcast index dims B sit at [first, first + nb) of the result.
    const size_t nb = b.rank() + indexed.size() - rank;
    const size_t first = adjacent ? indexed.front() : 0;
    std::vector<IndexExpr> coords(rank);
    std::vector<int32_t> dyn(rank, -1);
    int32_t valid = -1;
    size_t out = 0;
    for (size_t m = 0; m < rank; ++m) {
      if (out == first) out += nb;
      if (index[m] >= 0) continue;
      coords[m] = Body::V(out++);
    }
    for (size_t m : indexed) {
      const Tensor& it = d.Tn(index[m]);
      const size_t ir = it.sizes.size();
      if (ir > nb) return absl::InternalError("an index has more dimensions than their broadcast");
      std::vector<IndexExpr> ic;
      for (size_t j = 0; j < ir; ++j) {
        const bool broadcast = it.sizes[j].is_const() && it.sizes[j].const_value() == 1;
        ic.push_back(broadcast ? IndexExpr::Const(0) : Body::V(first + nb - ir + j));
      }
      const IndexExpr& extent = d.Tn(x).sizes[m];
      int32_t i = b.Cast(b.Load(index[m], d.ST(index[m]), ic), ScalarType::kI64);
      i = b.Sel(b.Bin(Opcode::kLt, i, b.IConst(0)), b.Add(i, b.Idx(extent)), i);
      const int32_t in = b.Bin(Opcode::kAnd, b.Bin(Opcode::kGe, i, b.IConst(0)),
                               b.Bin(Opcode::kLt, i, b.Idx(extent)));
      valid = valid < 0 ? in : b.Bin(Opcode::kAnd, valid, in);
      dyn[m] = i;
    }
    const int32_t v = b.Cast(b.Load(x, d.ST(x), coords, valid, dyn), ct);
    return b.Sel(valid, v, b.Const(0, ct));
  });
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
    // A part of another rank is a legacy 1-d empty tensor (torch.cat skips it): it has no
    // `dim` to read.
    if (!stack && x.sizes.size() != sizes->size()) continue;
    IndexExpr size = stack ? IndexExpr::Const(1) : x.sizes[static_cast<size_t>(dim)];
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

}  // namespace

void RegisterIndexingRules(RuleRegistry& r) {
  r.Add("aten.embedding.default", [](Builder& d, uint32_t n) { return Embedding(d, n); });
  r.Add("aten.cat.default", [](Builder& d, uint32_t n) { return Cat(d, n, false); });
  r.Add("aten.stack.default", [](Builder& d, uint32_t n) { return Cat(d, n, true); });
  r.Add("aten.index_select.default",
        [](Builder& d, uint32_t n) { return IndexSelect(d, n, false); });
  r.Add("aten.gather.default", [](Builder& d, uint32_t n) { return IndexSelect(d, n, true); });
  r.Add("aten.scatter.value", ScatterValue);
  r.Add("aten.index.Tensor", [](Builder& d, uint32_t n) { return AdvancedIndex(d, n); });
  r.Add("aten._unsafe_index.Tensor", [](Builder& d, uint32_t n) { return AdvancedIndex(d, n); });
  r.Add("aten.constant_pad_nd.default", [](Builder& d, uint32_t n) { return ConstantPad(d, n); });
  r.Add("aten.flip.default", [](Builder& d, uint32_t n) { return Flip(d, n); });
  r.Add("aten.tril.default", [](Builder& d, uint32_t n) { return TriangleMask(d, n, true); });
  r.Add("aten.triu.default", [](Builder& d, uint32_t n) { return TriangleMask(d, n, false); });
}

}  // namespace kiln::decompose
