// View ops: every result shares storage with its input and only its sizes, strides and
// storage offset differ, as in PyTorch (reshape copies only when no view exists).

#include <algorithm>
#include <numeric>
#include <optional>

#include "absl/strings/str_join.h"
#include "compiler/interp/op_registry.h"

namespace kiln::interp {
namespace {

// Resolves a -1 in a requested shape against `numel`.
std::vector<int64_t> InferSize(std::vector<int64_t> shape, int64_t numel) {
  int64_t known = 1;
  std::optional<size_t> infer;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      Check(!infer.has_value(), "only one dimension can be inferred");
      infer = i;
    } else {
      Check(shape[i] >= 0, "invalid shape dimension ", shape[i]);
      known *= shape[i];
    }
  }
  if (infer.has_value()) {
    Check(known != 0 && numel % known == 0, "shape [", absl::StrJoin(shape, ", "),
          "] is invalid for input of size ", numel);
    shape[*infer] = numel / known;
  } else {
    Check(known == numel, "shape [", absl::StrJoin(shape, ", "), "] is invalid for input of size ",
          numel);
  }
  return shape;
}

// ATen's computeStride: the strides of a view with `newshape`, if one exists.
std::optional<std::vector<int64_t>> ComputeStride(const std::vector<int64_t>& oldshape,
                                                  const std::vector<int64_t>& oldstride,
                                                  const std::vector<int64_t>& newshape) {
  if (oldshape.empty()) return std::vector<int64_t>(newshape.size(), 1);
  const int64_t numel = NumElements(oldshape);
  if (numel == 0 && oldshape == newshape) return oldstride;
  std::vector<int64_t> newstride(newshape.size(), 0);
  if (numel == 0) return ContiguousStrides(newshape);
  int64_t view_d = static_cast<int64_t>(newshape.size()) - 1;
  int64_t chunk_base_stride = oldstride.back();
  int64_t tensor_numel = 1;
  int64_t view_numel = 1;
  for (int64_t tensor_d = static_cast<int64_t>(oldshape.size()) - 1; tensor_d >= 0; --tensor_d) {
    tensor_numel *= oldshape[static_cast<size_t>(tensor_d)];
    if (tensor_d == 0 ||
        (oldshape[static_cast<size_t>(tensor_d - 1)] != 1 &&
         oldstride[static_cast<size_t>(tensor_d - 1)] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 &&
             (view_numel < tensor_numel || newshape[static_cast<size_t>(view_d)] == 1)) {
        newstride[static_cast<size_t>(view_d)] = view_numel * chunk_base_stride;
        view_numel *= newshape[static_cast<size_t>(view_d)];
        --view_d;
      }
      if (view_numel != tensor_numel) return std::nullopt;
      if (tensor_d > 0) {
        chunk_base_stride = oldstride[static_cast<size_t>(tensor_d - 1)];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return std::nullopt;
  return newstride;
}

Tensor View(const Tensor& self, const std::vector<int64_t>& size) {
  const std::vector<int64_t> shape = InferSize(size, self.numel());
  auto strides = ComputeStride(self.sizes(), self.strides(), shape);
  Check(strides.has_value(), "view of ", self.DebugString(), " as [", absl::StrJoin(shape, ", "),
        "] is not possible with its strides; use reshape");
  return self.AsStrided(shape, *strides, self.storage_offset());
}

Tensor Reshape(const Tensor& self, const std::vector<int64_t>& size) {
  const std::vector<int64_t> shape = InferSize(size, self.numel());
  auto strides = ComputeStride(self.sizes(), self.strides(), shape);
  if (strides.has_value()) return self.AsStrided(shape, *strides, self.storage_offset());
  const Tensor c = self.Contiguous();
  return c.AsStrided(shape, ContiguousStrides(shape), 0);
}

Tensor Transpose(const Tensor& self, int64_t d0, int64_t d1) {
  if (self.dim() == 0) return self;
  d0 = WrapDim(d0, self.dim());
  d1 = WrapDim(d1, self.dim());
  std::vector<int64_t> sizes = self.sizes();
  std::vector<int64_t> strides = self.strides();
  std::swap(sizes[static_cast<size_t>(d0)], sizes[static_cast<size_t>(d1)]);
  std::swap(strides[static_cast<size_t>(d0)], strides[static_cast<size_t>(d1)]);
  return self.AsStrided(sizes, strides, self.storage_offset());
}

Tensor Permute(const Tensor& self, const std::vector<int64_t>& dims) {
  Check(static_cast<int64_t>(dims.size()) == self.dim(), "permute needs ", self.dim(), " dims");
  std::vector<bool> seen(dims.size(), false);
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;
  for (int64_t d : dims) {
    const int64_t w = WrapDim(d, self.dim());
    Check(!seen[static_cast<size_t>(w)], "permute: repeated dim ", d);
    seen[static_cast<size_t>(w)] = true;
    sizes.push_back(self.size(w));
    strides.push_back(self.stride(w));
  }
  return self.AsStrided(sizes, strides, self.storage_offset());
}

Tensor Expand(const Tensor& self, const std::vector<int64_t>& size) {
  Check(size.size() >= static_cast<size_t>(self.dim()), "expand: the number of sizes (",
        size.size(), ") must be at least the tensor's rank (", self.dim(), ")");
  std::vector<int64_t> sizes(size.size());
  std::vector<int64_t> strides(size.size());
  const size_t lead = size.size() - static_cast<size_t>(self.dim());
  for (size_t i = 0; i < size.size(); ++i) {
    if (i < lead) {
      Check(size[i] >= 0, "expand: -1 is not allowed in a new leading dimension");
      sizes[i] = size[i];
      strides[i] = 0;
      continue;
    }
    const int64_t d = static_cast<int64_t>(i - lead);
    const int64_t s = self.size(d);
    if (size[i] == -1 || size[i] == s) {
      sizes[i] = s;
      strides[i] = self.stride(d);
    } else {
      Check(s == 1, "expand: size ", size[i], " does not match ", s, " at dim ", i);
      sizes[i] = size[i];
      strides[i] = 0;
    }
  }
  return self.AsStrided(sizes, strides, self.storage_offset());
}

Tensor Unsqueeze(const Tensor& self, int64_t dim) {
  dim = WrapDim(dim, self.dim() + 1);
  std::vector<int64_t> sizes = self.sizes();
  std::vector<int64_t> strides = self.strides();
  const int64_t stride = dim >= self.dim() ? 1 : self.size(dim) * self.stride(dim);
  sizes.insert(sizes.begin() + dim, 1);
  strides.insert(strides.begin() + dim, stride);
  return self.AsStrided(sizes, strides, self.storage_offset());
}

Tensor SqueezeDims(const Tensor& self, const std::vector<bool>& mask) {
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;
  for (int64_t d = 0; d < self.dim(); ++d) {
    if (mask[static_cast<size_t>(d)] && self.size(d) == 1) continue;
    sizes.push_back(self.size(d));
    strides.push_back(self.stride(d));
  }
  return self.AsStrided(sizes, strides, self.storage_offset());
}

// split.Tensor: pieces of `split` along `dim`, the last one shorter; one empty piece for an
// empty dim.
std::vector<Tensor> SplitBySize(const Tensor& self, int64_t split, int64_t dim) {
  dim = WrapDim(dim, self.dim());
  const int64_t n = self.size(dim);
  Check(split > 0 || n == 0, "split_size must be positive");
  std::vector<int64_t> sizes;
  if (n == 0) {
    sizes.push_back(0);
  } else {
    for (int64_t s = 0; s < n; s += split) sizes.push_back(std::min(split, n - s));
  }
  return SplitWithSizes(self, sizes, dim);
}

// chunk: pieces of ceil(n / chunks) elements; `chunks` empty pieces for an empty dim.
std::vector<Tensor> Chunk(const Tensor& self, int64_t chunks, int64_t dim) {
  Check(self.dim() > 0, "chunk expects at least a 1-dimensional tensor");
  Check(chunks > 0, "chunk expects chunks to be greater than 0, got ", chunks);
  dim = WrapDim(dim, self.dim());
  const int64_t n = self.size(dim);
  if (n == 0) {
    return SplitWithSizes(self, std::vector<int64_t>(static_cast<size_t>(chunks), 0), dim);
  }
  return SplitBySize(self, (n + chunks - 1) / chunks, dim);
}

// diagonal: dims dim1 and dim2 replaced by one last dim walking their diagonal `offset`
// (above the main one when positive, below when negative).
Tensor Diagonal(const Tensor& self, int64_t offset, int64_t dim1, int64_t dim2) {
  dim1 = WrapDim(dim1, self.dim());
  dim2 = WrapDim(dim2, self.dim());
  Check(dim1 != dim2, "diagonal dimensions cannot be identical ", dim1, ", ", dim2);
  const int64_t n = offset >= 0 ? std::min(self.size(dim1), self.size(dim2) - offset)
                                : std::min(self.size(dim1) + offset, self.size(dim2));
  const int64_t size = std::max<int64_t>(n, 0);
  int64_t start = self.storage_offset();
  if (size > 0) start += offset >= 0 ? offset * self.stride(dim2) : -offset * self.stride(dim1);
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;
  for (int64_t d = 0; d < self.dim(); ++d) {
    if (d == dim1 || d == dim2) continue;
    sizes.push_back(self.size(d));
    strides.push_back(self.stride(d));
  }
  sizes.push_back(size);
  strides.push_back(self.stride(dim1) + self.stride(dim2));
  return self.AsStrided(sizes, strides, start);
}

// unfold: windows of `size` elements every `step` along `dim`, as a new last dim.
Tensor Unfold(const Tensor& self, int64_t dim, int64_t size, int64_t step) {
  dim = WrapDim(dim, self.dim());
  const int64_t n = self.dim() == 0 ? 1 : self.size(dim);
  Check(size >= 0 && size <= n, "unfold: size ", size, " is out of range for dimension ", dim,
        " of size ", n);
  Check(step > 0, "unfold: step is ", step, " but must be > 0");
  std::vector<int64_t> sizes = self.sizes();
  std::vector<int64_t> strides = self.strides();
  sizes.push_back(size);
  strides.push_back(self.dim() == 0 ? 1 : self.stride(dim));
  if (self.dim() > 0) {
    sizes[static_cast<size_t>(dim)] = (n - size) / step + 1;
    strides[static_cast<size_t>(dim)] *= step;
  }
  return self.AsStrided(sizes, strides, self.storage_offset());
}

}  // namespace

// Shared with other families (cat, backward ops build on slices).
Tensor SliceView(const Tensor& self, int64_t dim, std::optional<int64_t> start_opt,
                 std::optional<int64_t> end_opt, int64_t step) {
  Check(self.dim() > 0, "slice() cannot be applied to a 0-dim tensor");
  Check(step > 0, "slice step must be positive");
  dim = WrapDim(dim, self.dim());
  const int64_t n = self.size(dim);
  int64_t start = start_opt.value_or(0);
  int64_t end = end_opt.value_or(INT64_MAX);
  if (start < 0) start += n;
  if (end < 0) end += n;
  start = std::clamp<int64_t>(start, 0, n);
  end = std::clamp<int64_t>(end, 0, n);
  if (end < start) end = start;
  std::vector<int64_t> sizes = self.sizes();
  std::vector<int64_t> strides = self.strides();
  sizes[static_cast<size_t>(dim)] = (end - start + step - 1) / step;
  strides[static_cast<size_t>(dim)] *= step;
  return self.AsStrided(sizes, strides, self.storage_offset() + start * self.stride(dim));
}

Tensor SelectView(const Tensor& self, int64_t dim, int64_t index) {
  Check(self.dim() > 0, "select() cannot be applied to a 0-dim tensor");
  dim = WrapDim(dim, self.dim());
  const int64_t n = self.size(dim);
  Check(index >= -n && index < n, "select(): index ", index, " out of range for size ", n);
  if (index < 0) index += n;
  std::vector<int64_t> sizes = self.sizes();
  std::vector<int64_t> strides = self.strides();
  sizes.erase(sizes.begin() + dim);
  strides.erase(strides.begin() + dim);
  return self.AsStrided(sizes, strides, self.storage_offset() + index * self.stride(dim));
}

Tensor ReshapeTensor(const Tensor& self, const std::vector<int64_t>& size) {
  return Reshape(self, size);
}

std::vector<Tensor> SplitWithSizes(const Tensor& self, const std::vector<int64_t>& sizes,
                                   int64_t dim) {
  dim = WrapDim(dim, self.dim());
  int64_t total = 0;
  for (int64_t s : sizes) {
    Check(s >= 0, "split sizes must be non-negative");
    total += s;
  }
  Check(total == self.size(dim), "split sizes sum to ", total, " but dim ", dim, " has size ",
        self.size(dim));
  std::vector<Tensor> out;
  int64_t start = 0;
  for (int64_t s : sizes) {
    out.push_back(SliceView(self, dim, start, start + s, 1));
    start += s;
  }
  return out;
}

void RegisterViewOps(OpRegistry& r) {
  auto view = [](OpCall& c) { return One(View(c.GetTensor(0, "self"), c.GetInts(1, "size"))); };
  r.AddView("aten.view.default", view);
  r.AddView("aten._unsafe_view.default",
            [](OpCall& c) { return One(Reshape(c.GetTensor(0, "self"), c.GetInts(1, "size"))); });
  r.AddView("aten.reshape.default",
            [](OpCall& c) { return One(Reshape(c.GetTensor(0, "self"), c.GetInts(1, "shape"))); });
  r.AddView("aten.t.default", [](OpCall& c) {
    const Tensor self = c.GetTensor(0, "self");
    Check(self.dim() <= 2, "t() expects a tensor of rank <= 2, got ", self.dim());
    return One(self.dim() < 2 ? self : Transpose(self, 0, 1));
  });
  r.AddView("aten.transpose.int", [](OpCall& c) {
    return One(Transpose(c.GetTensor(0, "self"), c.GetInt(1, "dim0"), c.GetInt(2, "dim1")));
  });
  r.AddView("aten.permute.default",
            [](OpCall& c) { return One(Permute(c.GetTensor(0, "self"), c.GetInts(1, "dims"))); });
  r.AddView("aten.expand.default",
            [](OpCall& c) { return One(Expand(c.GetTensor(0, "self"), c.GetInts(1, "size"))); });
  r.AddView("aten.unsqueeze.default",
            [](OpCall& c) { return One(Unsqueeze(c.GetTensor(0, "self"), c.GetInt(1, "dim"))); });
  r.AddView("aten.squeeze.default", [](OpCall& c) {
    const Tensor self = c.GetTensor(0, "self");
    return One(SqueezeDims(self, std::vector<bool>(static_cast<size_t>(self.dim()), true)));
  });
  r.AddView("aten.squeeze.dim", [](OpCall& c) {
    const Tensor self = c.GetTensor(0, "self");
    std::vector<bool> mask(static_cast<size_t>(self.dim()), false);
    const int64_t d = WrapDim(c.GetInt(1, "dim"), self.dim());
    if (self.dim() > 0) mask[static_cast<size_t>(d)] = true;
    return One(SqueezeDims(self, mask));
  });
  r.AddView("aten.squeeze.dims", [](OpCall& c) {
    const Tensor self = c.GetTensor(0, "self");
    std::vector<bool> mask(static_cast<size_t>(self.dim()), false);
    for (int64_t d : c.GetInts(1, "dim")) {
      const int64_t w = WrapDim(d, self.dim());
      if (self.dim() > 0) mask[static_cast<size_t>(w)] = true;
    }
    return One(SqueezeDims(self, mask));
  });
  r.AddView("aten.slice.Tensor", [](OpCall& c) {
    return One(SliceView(c.GetTensor(0, "self"), c.GetInt(1, "dim", 0), c.GetOptInt(2, "start"),
                         c.GetOptInt(3, "end"), c.GetInt(4, "step", 1)));
  });
  r.AddView("aten.narrow.default", [](OpCall& c) {
    const Tensor self = c.GetTensor(0, "self");
    const int64_t dim = WrapDim(c.GetInt(1, "dim"), self.dim());
    int64_t start = c.GetInt(2, "start");
    const int64_t length = c.GetInt(3, "length");
    if (start < 0) start += self.size(dim);
    Check(start >= 0 && length >= 0 && start + length <= self.size(dim), "narrow out of range");
    return One(SliceView(self, dim, start, start + length, 1));
  });
  r.AddView("aten.select.int", [](OpCall& c) {
    return One(SelectView(c.GetTensor(0, "self"), c.GetInt(1, "dim"), c.GetInt(2, "index")));
  });
  auto to_values = [](std::vector<Tensor> ts) {
    std::vector<Value> out;
    for (Tensor& t : ts) out.emplace_back(std::move(t));
    return out;
  };
  r.AddView("aten.split.Tensor", [to_values](OpCall& c) {
    return to_values(
        SplitBySize(c.GetTensor(0, "self"), c.GetInt(1, "split_size"), c.GetInt(2, "dim", 0)));
  });
  r.AddView("aten.chunk.default", [to_values](OpCall& c) {
    return to_values(Chunk(c.GetTensor(0, "self"), c.GetInt(1, "chunks"), c.GetInt(2, "dim", 0)));
  });
  r.AddView("aten.split_with_sizes.default", [to_values](OpCall& c) {
    return to_values(
        SplitWithSizes(c.GetTensor(0, "self"), c.GetInts(1, "split_sizes"), c.GetInt(2, "dim", 0)));
  });
  r.AddView("aten.unbind.int", [to_values](OpCall& c) {
    const Tensor self = c.GetTensor(0, "self");
    const int64_t dim = WrapDim(c.GetInt(1, "dim", 0), self.dim());
    std::vector<Tensor> out;
    for (int64_t i = 0; i < self.size(dim); ++i) out.push_back(SelectView(self, dim, i));
    return to_values(out);
  });
  r.AddView("aten.diagonal.default", [](OpCall& c) {
    return One(Diagonal(c.GetTensor(0, "self"), c.GetInt(1, "offset", 0), c.GetInt(2, "dim1", 0),
                        c.GetInt(3, "dim2", 1)));
  });
  r.AddView("aten.unfold.default", [](OpCall& c) {
    return One(Unfold(c.GetTensor(0, "self"), c.GetInt(1, "dimension"), c.GetInt(2, "size"),
                      c.GetInt(3, "step")));
  });
  auto alias = [](OpCall& c) { return One(c.GetTensor(0, "self")); };
  r.AddView("aten.alias.default", alias);
  r.AddView("aten.detach.default", alias);
  r.AddView("aten.as_strided.default", [](OpCall& c) {
    const Tensor self = c.GetTensor(0, "self");
    const Tensor out = self.AsStrided(c.GetInts(1, "size"), c.GetInts(2, "stride"),
                                      c.GetInt(3, "storage_offset", self.storage_offset()));
    Check(out.sizes().size() == out.strides().size(),
          "as_strided: sizes and strides differ in rank");
    for (int64_t s : out.strides()) Check(s >= 0, "as_strided: negative strides are not supported");
    Check(out.InBounds(), "as_strided: the view reaches outside the storage");
    return One(out);
  });
}

}  // namespace kiln::interp
