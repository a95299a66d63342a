// Ops that move elements by index: cat/stack, index_select, gather, scatter/scatter_add,
// advanced indexing (index.Tensor), index_put, flip and constant padding, and the ones that
// keep elements by position (tril/triu).

#include <algorithm>

#include "absl/strings/str_join.h"
#include "compiler/interp/op_registry.h"

namespace kiln::interp {
namespace {

int64_t CheckIndex(int64_t i, int64_t n, absl::string_view what) {
  Check(i >= -n && i < n, what, ": index ", i, " is out of bounds for size ", n);
  return i < 0 ? i + n : i;
}

Tensor Cat(const std::vector<Tensor>& in, int64_t dim_arg) {
  std::vector<Tensor> tensors;
  // Legacy behaviour: 1-d empty tensors are skipped whatever the other shapes are.
  for (const Tensor& t : in) {
    Check(t.defined(), "cat: undefined tensor");
    if (t.dim() == 1 && t.size(0) == 0) continue;
    tensors.push_back(t);
  }
  DType dtype = in.empty() ? kDefaultFloat : in[0].dtype();
  for (const Tensor& t : in) dtype = PromoteTypes(dtype, t.dtype());
  if (tensors.empty()) return Tensor::Zeros({0}, dtype);
  const Tensor& first = tensors[0];
  Check(first.dim() > 0, "cat: zero-dimensional tensors cannot be concatenated");
  const int64_t dim = WrapDim(dim_arg, first.dim());
  std::vector<int64_t> sizes = first.sizes();
  sizes[static_cast<size_t>(dim)] = 0;
  for (const Tensor& t : tensors) {
    Check(t.dim() == first.dim(), "cat: tensors must have the same rank");
    for (int64_t d = 0; d < t.dim(); ++d) {
      Check(d == dim || t.size(d) == first.size(d), "cat: sizes must match except in dim ", dim);
    }
    sizes[static_cast<size_t>(dim)] += t.size(dim);
  }
  Tensor out = Tensor::Zeros(sizes, dtype);
  int64_t start = 0;
  for (const Tensor& t : tensors) {
    SliceView(out, dim, start, start + t.size(dim), 1).CopyFrom(t);
    start += t.size(dim);
  }
  return out;
}

// For gather/scatter: calls f(self_pos, index_value_pos) over every element of `index`,
// where the position in self/src differs from the index's position only in `dim`.
template <typename F>
void ForIndexed(const Tensor& index, const std::vector<int64_t>& self_sizes, int64_t dim, F f) {
  const std::vector<int64_t> idx = index.ToInts();
  const std::vector<int64_t>& isz = index.sizes();
  const std::vector<int64_t> self_strides = ContiguousStrides(self_sizes);
  const std::vector<int64_t> index_strides = ContiguousStrides(isz);
  for (size_t lin = 0; lin < idx.size(); ++lin) {
    int64_t rem = static_cast<int64_t>(lin);
    int64_t self_pos = 0;
    // A 0-d index (of a 0-d self) has no dim loop below to check it.
    if (isz.empty()) CheckIndex(idx[lin], self_sizes[static_cast<size_t>(dim)], "gather/scatter");
    for (size_t d = 0; d < isz.size(); ++d) {
      const int64_t coord = rem / index_strides[d];
      rem %= index_strides[d];
      if (static_cast<int64_t>(d) == dim) {
        self_pos += CheckIndex(idx[lin], self_sizes[d], "gather/scatter") * self_strides[d];
      } else {
        self_pos += coord * self_strides[d];
      }
    }
    f(self_pos, static_cast<int64_t>(lin));
  }
}

void CheckGatherShapes(const Tensor& self, const Tensor& index, int64_t dim) {
  Check(index.dim() == std::max<int64_t>(self.dim(), 1) || (self.dim() == 0 && index.dim() <= 1),
        "index must have the same rank as self");
  for (int64_t d = 0; d < index.dim() && self.dim() > 0; ++d) {
    if (d != dim) {
      Check(index.size(d) <= self.size(d), "index size ", index.size(d), " exceeds self size ",
            self.size(d), " at dim ", d);
    }
  }
}

Tensor Scatter(const Tensor& self, int64_t dim_arg, const Tensor& index, const Tensor& src,
               const std::string& reduce) {
  const int64_t dim = WrapDim(dim_arg, self.dim());
  CheckGatherShapes(self, index, dim);
  const std::vector<int64_t> self_sizes = self.dim() == 0 ? std::vector<int64_t>{1} : self.sizes();
  std::vector<double> out = self.ToDoubles();
  const Tensor src_c = src.Contiguous();
  const std::vector<int64_t> src_strides = ContiguousStrides(src.sizes());
  const std::vector<int64_t> idx_strides = ContiguousStrides(index.sizes());
  ForIndexed(index, self_sizes, dim, [&](int64_t self_pos, int64_t lin) {
    // The src element at the index's position (src may be larger than index).
    int64_t rem = lin;
    int64_t src_pos = 0;
    for (size_t d = 0; d < idx_strides.size(); ++d) {
      src_pos += (rem / idx_strides[d]) * (src.dim() == 0 ? 0 : src_strides[d]);
      rem %= idx_strides[d];
    }
    const double v = src_c.ReadDouble(src_c.storage_offset() + src_pos);
    if (reduce == "add" || reduce == "sum") {
      out[static_cast<size_t>(self_pos)] += v;
    } else if (reduce == "multiply" || reduce == "prod") {
      out[static_cast<size_t>(self_pos)] *= v;
    } else {
      out[static_cast<size_t>(self_pos)] = v;
    }
  });
  return MakeTensor(self.sizes(), self.dtype(), out);
}

// Advanced indexing: the broadcast index tensors select elements; the result puts the
// indexed dims where the first index was if the indexed dims are adjacent, else in front.
struct AdvancedIndex {
  std::vector<int64_t> out_sizes;
  std::vector<int64_t> self_positions;  // row-major storage-free positions into self
};

AdvancedIndex ComputeAdvancedIndex(const Tensor& self, const std::vector<Tensor>& indices_in) {
  std::vector<Tensor> indices;
  // Bool/byte masks become the long indices of their nonzero elements.
  for (const Tensor& t : indices_in) {
    if (t.defined() && (t.dtype() == v1::DTYPE_BOOL || t.dtype() == v1::DTYPE_UINT8)) {
      Check(false, "index with a boolean mask has a data-dependent shape; not supported");
    }
    indices.push_back(t);
  }
  Check(static_cast<int64_t>(indices.size()) <= self.dim(), "too many indices for tensor of rank ",
        self.dim());
  std::vector<std::vector<int64_t>> shapes;
  std::vector<int64_t> indexed_dims;
  for (size_t d = 0; d < indices.size(); ++d) {
    if (!indices[d].defined()) continue;
    shapes.push_back(indices[d].sizes());
    indexed_dims.push_back(static_cast<int64_t>(d));
  }
  Check(!indexed_dims.empty(), "index needs at least one index tensor");
  const std::vector<int64_t> bshape = BroadcastShapes(shapes);
  bool adjacent = true;
  for (size_t i = 1; i < indexed_dims.size(); ++i) {
    adjacent = adjacent && indexed_dims[i] == indexed_dims[i - 1] + 1;
  }
  std::vector<int64_t> before;
  std::vector<int64_t> after;
  std::vector<int64_t> rest;  // non-indexed dims in order
  for (int64_t d = 0; d < self.dim(); ++d) {
    const bool indexed =
        std::find(indexed_dims.begin(), indexed_dims.end(), d) != indexed_dims.end();
    if (indexed) continue;
    rest.push_back(d);
    if (adjacent && d < indexed_dims.front()) {
      before.push_back(d);
    } else {
      after.push_back(d);
    }
  }
  AdvancedIndex r;
  for (int64_t d : before) r.out_sizes.push_back(self.size(d));
  r.out_sizes.insert(r.out_sizes.end(), bshape.begin(), bshape.end());
  for (int64_t d : after) r.out_sizes.push_back(self.size(d));
  std::vector<std::vector<int64_t>> idx_vals;
  for (int64_t d : indexed_dims) {
    idx_vals.push_back(ExpandTo(indices[static_cast<size_t>(d)], bshape).ToInts());
  }
  const std::vector<int64_t> self_strides = ContiguousStrides(self.sizes());
  const std::vector<int64_t> out_strides = ContiguousStrides(r.out_sizes);
  const int64_t bnumel = NumElements(bshape);
  const std::vector<int64_t> bstrides = ContiguousStrides(bshape);
  const int64_t n = NumElements(r.out_sizes);
  r.self_positions.resize(static_cast<size_t>(n));
  for (int64_t lin = 0; lin < n; ++lin) {
    std::vector<int64_t> coord(r.out_sizes.size());
    int64_t rem = lin;
    for (size_t d = 0; d < coord.size(); ++d) {
      coord[d] = rem / out_strides[d];
      rem %= out_strides[d];
    }
    int64_t pos = 0;
    size_t c = 0;
    for (int64_t d : before) pos += coord[c++] * self_strides[static_cast<size_t>(d)];
    int64_t b = 0;
    for (size_t k = 0; k < bshape.size(); ++k) b += coord[c++] * bstrides[k];
    (void)bnumel;
    for (size_t k = 0; k < indexed_dims.size(); ++k) {
      const int64_t d = indexed_dims[k];
      pos += CheckIndex(idx_vals[k][static_cast<size_t>(b)], self.size(d), "index") *
             self_strides[static_cast<size_t>(d)];
    }
    for (int64_t d : after) pos += coord[c++] * self_strides[static_cast<size_t>(d)];
    r.self_positions[static_cast<size_t>(lin)] = pos;
  }
  return r;
}

// A fresh copy of `self` reversed along `dims` (each at most once).
Tensor Flip(const Tensor& self, const std::vector<int64_t>& dims) {
  std::vector<bool> seen(static_cast<size_t>(std::max<int64_t>(self.dim(), 1)), false);
  std::vector<int64_t> strides = self.strides();
  int64_t offset = self.storage_offset();
  for (int64_t d : dims) {
    const int64_t w = WrapDim(d, self.dim());
    Check(!seen[static_cast<size_t>(w)], "flip: dim ", d, " appears more than once");
    seen[static_cast<size_t>(w)] = true;
    if (self.dim() == 0 || self.size(w) == 0) continue;
    offset += (self.size(w) - 1) * self.stride(w);
    strides[static_cast<size_t>(w)] = -strides[static_cast<size_t>(w)];
  }
  // A reversed view with negative strides, copied at once: it never leaves this function.
  return self.AsStrided(self.sizes(), strides, offset).Contiguous();
}

// constant_pad_nd: pad[2k] and pad[2k + 1] widen the start and end of the k-th dim from the
// last with `value`; negative widths crop instead.
Tensor ConstantPad(const Tensor& self, const std::vector<int64_t>& pad, const Tensor& value) {
  Check(pad.size() % 2 == 0, "constant_pad_nd: the length of pad must be even, got ", pad.size());
  const int64_t padded = static_cast<int64_t>(pad.size() / 2);
  Check(padded <= self.dim(), "constant_pad_nd: ", pad.size(), " pad widths for a tensor of rank ",
        self.dim());
  Tensor kept = self;
  std::vector<int64_t> sizes = self.sizes();
  std::vector<int64_t> starts(sizes.size(), 0);  // where `kept` lands in the result
  for (int64_t k = 0; k < padded; ++k) {
    const int64_t d = self.dim() - 1 - k;
    const int64_t before = pad[static_cast<size_t>(2 * k)];
    const int64_t after = pad[static_cast<size_t>(2 * k + 1)];
    const int64_t n = self.size(d) + std::min<int64_t>(before, 0) + std::min<int64_t>(after, 0);
    Check(n >= 0, "constant_pad_nd: dim ", d, " of size ", self.size(d), " cannot be cropped by ",
          before, " and ", after);
    const int64_t crop = std::max<int64_t>(-before, 0);
    kept = SliceView(kept, d, crop, crop + n, 1);
    sizes[static_cast<size_t>(d)] = self.size(d) + before + after;
    starts[static_cast<size_t>(d)] = std::max<int64_t>(before, 0);
  }
  Tensor out = Tensor::Zeros(sizes, self.dtype());
  out.CopyFrom(value);
  Tensor window = out;
  for (int64_t d = 0; d < out.dim(); ++d) {
    const int64_t start = starts[static_cast<size_t>(d)];
    window = SliceView(window, d, start, start + kept.size(d), 1);
  }
  window.CopyFrom(kept);
  return out;
}

// tril (lower) / triu: the elements of the last two dims whose column minus row is at most
// (at least) `diagonal`; zeros elsewhere.
Tensor Triangle(const Tensor& self, int64_t diagonal, bool lower) {
  Check(self.dim() >= 2, lower ? "tril" : "triu", ": the tensor must have at least 2 dims, got ",
        self.dim());
  Tensor out = self.Contiguous();
  const int64_t rows = self.size(self.dim() - 2);
  const int64_t cols = self.size(self.dim() - 1);
  for (int64_t i = 0; i < out.numel(); ++i) {
    const int64_t above = i % cols - (i / cols) % rows;
    if (lower ? above > diagonal : above < diagonal) out.WriteInt(i, 0);
  }
  return out;
}

}  // namespace

void RegisterIndexingOps(OpRegistry& r) {
  r.Add("aten.cat.default",
        [](OpCall& c) { return One(Cat(c.GetTensors(0, "tensors"), c.GetInt(1, "dim", 0))); });
  r.Add("aten.stack.default", [](OpCall& c) {
    std::vector<Tensor> ts = c.GetTensors(0, "tensors");
    Check(!ts.empty(), "stack expects a non-empty list");
    const int64_t dim = WrapDim(c.GetInt(1, "dim", 0), ts[0].dim() + 1);
    const std::vector<int64_t> sizes = ts[0].sizes();
    for (Tensor& t : ts) {
      Check(t.sizes() == sizes, "stack expects tensors of equal sizes");
      std::vector<int64_t> s = t.sizes();
      s.insert(s.begin() + dim, 1);
      t = ReshapeTensor(t, s);
    }
    return One(Cat(ts, dim));
  });
  r.Add("aten.index_select.default", [](OpCall& c) {
    const Tensor self = c.GetTensor(0, "self");
    const int64_t dim = WrapDim(c.GetInt(1, "dim"), self.dim());
    const Tensor index = c.GetTensor(2, "index");
    Check(index.dim() <= 1, "index_select: index must be 0-d or 1-d");
    const std::vector<int64_t> idx = index.ToInts();
    std::vector<int64_t> sizes = self.sizes();
    if (self.dim() > 0) sizes[static_cast<size_t>(dim)] = static_cast<int64_t>(idx.size());
    Tensor out = Tensor::Zeros(sizes, self.dtype());
    for (size_t i = 0; i < idx.size(); ++i) {
      if (self.dim() == 0) {
        CheckIndex(idx[i], 1, "index_select");
        out.CopyFrom(self);
        continue;
      }
      const int64_t j = CheckIndex(idx[i], self.size(dim), "index_select");
      SelectView(out, dim, static_cast<int64_t>(i)).CopyFrom(SelectView(self, dim, j));
    }
    return One(out);
  });
  r.Add("aten.gather.default", [](OpCall& c) {
    const Tensor self = c.GetTensor(0, "self");
    const int64_t dim = WrapDim(c.GetInt(1, "dim"), self.dim());
    const Tensor index = c.GetTensor(2, "index");
    CheckGatherShapes(self, index, dim);
    const std::vector<int64_t> self_sizes =
        self.dim() == 0 ? std::vector<int64_t>{1} : self.sizes();
    const Tensor sc = self.Contiguous();
    Tensor out = Tensor::Zeros(index.sizes(), self.dtype());
    ForIndexed(index, self_sizes, dim, [&](int64_t self_pos, int64_t lin) {
      if (StoresInts(self.dtype())) {
        out.WriteInt(lin, sc.ReadInt(self_pos));
      } else {
        out.WriteDouble(lin, sc.ReadDouble(self_pos));
      }
    });
    return One(out);
  });
  r.Add("aten.scatter_add.default", [](OpCall& c) {
    return One(Scatter(c.GetTensor(0, "self"), c.GetInt(1, "dim"), c.GetTensor(2, "index"),
                       c.GetTensor(3, "src"), "add"));
  });
  r.Add("aten.scatter.src", [](OpCall& c) {
    return One(Scatter(c.GetTensor(0, "self"), c.GetInt(1, "dim"), c.GetTensor(2, "index"),
                       c.GetTensor(3, "src"), ""));
  });
  r.Add("aten.scatter.value", [](OpCall& c) {
    const Tensor value = GetOperand(c, 3, "value").AsTensor();
    return One(
        Scatter(c.GetTensor(0, "self"), c.GetInt(1, "dim"), c.GetTensor(2, "index"), value, ""));
  });
  r.Add("aten.scatter.reduce", [](OpCall& c) {
    return One(Scatter(c.GetTensor(0, "self"), c.GetInt(1, "dim"), c.GetTensor(2, "index"),
                       c.GetTensor(3, "src"), c.GetString(4, "reduce", "")));
  });
  r.Add("aten.flip.default",
        [](OpCall& c) { return One(Flip(c.GetTensor(0, "self"), c.GetInts(1, "dims"))); });
  r.Add("aten.constant_pad_nd.default", [](OpCall& c) {
    const auto value = c.GetOptScalar(2, "value");
    const Tensor v = value.has_value() ? Operand{Tensor(), value}.AsTensor()
                                       : Tensor::FromInts({}, v1::DTYPE_INT64, {0});
    return One(ConstantPad(c.GetTensor(0, "self"), c.GetInts(1, "pad"), v));
  });
  r.Add("aten.tril.default", [](OpCall& c) {
    return One(Triangle(c.GetTensor(0, "self"), c.GetInt(1, "diagonal", 0), true));
  });
  r.Add("aten.triu.default", [](OpCall& c) {
    return One(Triangle(c.GetTensor(0, "self"), c.GetInt(1, "diagonal", 0), false));
  });
  r.Add("aten.index.Tensor", [](OpCall& c) {
    const Tensor self = c.GetTensor(0, "self");
    const AdvancedIndex ai = ComputeAdvancedIndex(self, c.GetTensors(1, "indices"));
    const Tensor sc = self.Contiguous();
    Tensor out = Tensor::Zeros(ai.out_sizes, self.dtype());
    for (size_t i = 0; i < ai.self_positions.size(); ++i) {
      if (StoresInts(self.dtype())) {
        out.WriteInt(static_cast<int64_t>(i), sc.ReadInt(ai.self_positions[i]));
      } else {
        out.WriteDouble(static_cast<int64_t>(i), sc.ReadDouble(ai.self_positions[i]));
      }
    }
    return One(out);
  });
  r.Add("aten.index_put.default", [](OpCall& c) {
    const Tensor self = c.GetTensor(0, "self");
    const AdvancedIndex ai = ComputeAdvancedIndex(self, c.GetTensors(1, "indices"));
    const Tensor values = ExpandTo(c.GetTensor(2, "values"), ai.out_sizes);
    const bool accumulate = c.GetBool(3, "accumulate", false);
    std::vector<double> out = self.ToDoubles();
    const std::vector<double> v = values.ToDoubles();
    for (size_t i = 0; i < ai.self_positions.size(); ++i) {
      double& o = out[static_cast<size_t>(ai.self_positions[i])];
      o = accumulate ? o + v[i] : v[i];
    }
    return One(MakeTensor(self.sizes(), self.dtype(), out));
  });
  // The unsafe forms skip ATen's bounds checks; the interpreter keeps them, so that an index
  // out of range is an error here rather than a read of other memory.
  r.Add("aten._unsafe_index.Tensor", r.Find("aten.index.Tensor")->fn);
  r.Add("aten._unsafe_index_put.default", r.Find("aten.index_put.default")->fn);
}

}  // namespace kiln::interp
