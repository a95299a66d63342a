// Reductions over dims (sum, mean, prod, amax/amin, max/min with indices, argmax/argmin,
// var/std/var_mean, any/all, logsumexp, vector norms) and cumulative sums. Sums accumulate
// in double (exact int64 for integer sums), so the oracle's only rounding is the final one.

#include <cmath>
#include <limits>

#include "compiler/interp/op_registry.h"

namespace kiln::interp {
namespace {

// The input's elements grouped by output position: group g holds the storage indices of
// the elements that reduce into output element g.
struct Grouped {
  std::vector<int64_t> out_sizes;
  int64_t groups = 1;
  int64_t group_size = 1;
  std::vector<int64_t> index;
  const int64_t* Group(int64_t g) const { return index.data() + g * group_size; }
};

Grouped Group(const Tensor& t, const std::vector<bool>& mask, bool keepdim) {
  Grouped g;
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;
  for (int64_t d = 0; d < t.dim(); ++d) {
    if (mask[static_cast<size_t>(d)]) {
      if (keepdim) g.out_sizes.push_back(1);
      continue;
    }
    sizes.push_back(t.size(d));
    strides.push_back(t.stride(d));
    g.out_sizes.push_back(t.size(d));
    g.groups *= t.size(d);
  }
  for (int64_t d = 0; d < t.dim(); ++d) {
    if (!mask[static_cast<size_t>(d)]) continue;
    sizes.push_back(t.size(d));
    strides.push_back(t.stride(d));
    g.group_size *= t.size(d);
  }
  g.index = t.AsStrided(sizes, strides, t.storage_offset()).ElementIndices();
  return g;
}

std::optional<std::vector<int64_t>> Dims(const OpCall& c, int pos, absl::string_view name) {
  return c.GetOptInts(pos, name);
}

DType SumType(DType in, std::optional<DType> requested) {
  if (requested.has_value()) return *requested;
  return StoresInts(in) ? v1::DTYPE_INT64 : in;
}

// Folds each group with `op` from `init`; integer results wrap, as ATen's int64
// accumulation does.
template <typename Op>
Tensor Fold(const Tensor& self, const std::vector<bool>& mask, bool keepdim, DType out_dtype,
            int init, Op op) {
  const Grouped g = Group(self, mask, keepdim);
  Tensor out = Tensor::Zeros(g.out_sizes, out_dtype);
  for (int64_t i = 0; i < g.groups; ++i) {
    const int64_t* idx = g.Group(i);
    if (StoresInts(out_dtype)) {
      uint64_t acc = static_cast<uint64_t>(init);
      for (int64_t k = 0; k < g.group_size; ++k)
        acc = op(acc, static_cast<uint64_t>(self.ReadInt(idx[k])));
      out.WriteInt(i, static_cast<int64_t>(acc));
    } else {
      double acc = init;
      for (int64_t k = 0; k < g.group_size; ++k) acc = op(acc, self.ReadDouble(idx[k]));
      out.WriteDouble(i, acc);
    }
  }
  return out;
}

Tensor Sum(const Tensor& self, const std::vector<bool>& mask, bool keepdim, DType out_dtype) {
  return Fold(self, mask, keepdim, out_dtype, 0, [](auto a, auto b) { return a + b; });
}

Tensor Prod(const Tensor& self, const std::vector<bool>& mask, bool keepdim, DType out_dtype) {
  return Fold(self, mask, keepdim, out_dtype, 1, [](auto a, auto b) { return a * b; });
}

Tensor Mean(const Tensor& self, const std::vector<bool>& mask, bool keepdim,
            std::optional<DType> dtype) {
  const DType out = dtype.value_or(self.dtype());
  Check(IsFloating(out), "mean needs a floating dtype, got ", DTypeName(out),
        "; pass dtype= to reduce integers");
  const Grouped g = Group(self, mask, keepdim);
  Tensor result = Tensor::Zeros(g.out_sizes, out);
  for (int64_t i = 0; i < g.groups; ++i) {
    const int64_t* idx = g.Group(i);
    double acc = 0;
    for (int64_t k = 0; k < g.group_size; ++k) acc += self.ReadDouble(idx[k]);
    result.WriteDouble(i, acc / static_cast<double>(g.group_size));
  }
  return result;
}

// max/min over groups; NaN wins, ties keep the first index.
std::pair<Tensor, Tensor> Extreme(const Tensor& self, const std::vector<bool>& mask, bool keepdim,
                                  bool is_max, bool want_values) {
  const Grouped g = Group(self, mask, keepdim);
  Check(g.group_size > 0 || g.groups == 0, "cannot reduce over an empty dimension");
  Tensor values = want_values ? Tensor::Zeros(g.out_sizes, self.dtype()) : Tensor();
  Tensor indices = Tensor::Zeros(g.out_sizes, v1::DTYPE_INT64);
  const bool ints = StoresInts(self.dtype());
  for (int64_t i = 0; i < g.groups; ++i) {
    const int64_t* idx = g.Group(i);
    int64_t best = 0;
    if (ints) {
      int64_t bv = self.ReadInt(idx[0]);
      for (int64_t k = 1; k < g.group_size; ++k) {
        const int64_t v = self.ReadInt(idx[k]);
        if (is_max ? v > bv : v < bv) {
          bv = v;
          best = k;
        }
      }
      if (want_values) values.WriteInt(i, bv);
    } else {
      double bv = self.ReadDouble(idx[0]);
      for (int64_t k = 1; k < g.group_size && !std::isnan(bv); ++k) {
        const double v = self.ReadDouble(idx[k]);
        if (std::isnan(v) || (is_max ? v > bv : v < bv)) {
          bv = v;
          best = k;
        }
      }
      if (want_values) values.WriteDouble(i, bv);
    }
    indices.WriteInt(i, best);
  }
  return {values, indices};
}

std::vector<bool> OneDim(int64_t dim, int64_t rank) {
  return ReductionMask(std::vector<int64_t>{dim}, rank);
}

// Variance with Bessel-style correction, and the mean, per group.
std::pair<Tensor, Tensor> VarMean(const Tensor& self, const std::vector<bool>& mask, bool keepdim,
                                  double correction) {
  const DType dtype = FloatResultType(self.dtype());
  const Grouped g = Group(self, mask, keepdim);
  Tensor var = Tensor::Zeros(g.out_sizes, dtype);
  Tensor mean = Tensor::Zeros(g.out_sizes, dtype);
  for (int64_t i = 0; i < g.groups; ++i) {
    const int64_t* idx = g.Group(i);
    double acc = 0;
    for (int64_t k = 0; k < g.group_size; ++k) acc += self.ReadDouble(idx[k]);
    const double m = acc / static_cast<double>(g.group_size);
    double sq = 0;
    for (int64_t k = 0; k < g.group_size; ++k) {
      const double d = self.ReadDouble(idx[k]) - m;
      sq += d * d;
    }
    const double denom = std::max(0.0, static_cast<double>(g.group_size) - correction);
    var.WriteDouble(i, sq / denom);
    mean.WriteDouble(i, m);
  }
  return {var, mean};
}

double Correction(const OpCall& c, int pos) {
  auto corr = c.GetOptScalar(pos, "correction");
  return corr.has_value() ? corr->value : 1.0;
}

Tensor AnyAll(const Tensor& self, const std::vector<bool>& mask, bool keepdim, bool is_any) {
  const Grouped g = Group(self, mask, keepdim);
  Tensor out = Tensor::Zeros(g.out_sizes, v1::DTYPE_BOOL);
  for (int64_t i = 0; i < g.groups; ++i) {
    const int64_t* idx = g.Group(i);
    bool acc = !is_any;
    for (int64_t k = 0; k < g.group_size; ++k) {
      const bool v = self.ReadDouble(idx[k]) != 0;
      acc = is_any ? (acc || v) : (acc && v);
    }
    out.WriteInt(i, acc ? 1 : 0);
  }
  return out;
}

}  // namespace

void RegisterReductionOps(OpRegistry& r) {
  r.Add("aten.sum.default", [](OpCall& c) {
    const Tensor self = c.GetTensor(0, "self");
    return One(Sum(self, ReductionMask(std::nullopt, self.dim()), false,
                   SumType(self.dtype(), c.GetOptDType(1, "dtype"))));
  });
  r.Add("aten.sum.dim_IntList", [](OpCall& c) {
    const Tensor self = c.GetTensor(0, "self");
    return One(Sum(self, ReductionMask(Dims(c, 1, "dim"), self.dim()),
                   c.GetBool(2, "keepdim", false),
                   SumType(self.dtype(), c.GetOptDType(3, "dtype"))));
  });
  r.Add("aten.prod.default", [](OpCall& c) {
    const Tensor self = c.GetTensor(0, "self");
    return One(Prod(self, ReductionMask(std::nullopt, self.dim()), false,
                    SumType(self.dtype(), c.GetOptDType(1, "dtype"))));
  });
  r.Add("aten.prod.dim_int", [](OpCall& c) {
    const Tensor self = c.GetTensor(0, "self");
    return One(Prod(self, OneDim(c.GetInt(1, "dim"), self.dim()), c.GetBool(2, "keepdim", false),
                    SumType(self.dtype(), c.GetOptDType(3, "dtype"))));
  });
  r.Add("aten.mean.default", [](OpCall& c) {
    const Tensor self = c.GetTensor(0, "self");
    return One(
        Mean(self, ReductionMask(std::nullopt, self.dim()), false, c.GetOptDType(1, "dtype")));
  });
  r.Add("aten.mean.dim", [](OpCall& c) {
    const Tensor self = c.GetTensor(0, "self");
    return One(Mean(self, ReductionMask(Dims(c, 1, "dim"), self.dim()),
                    c.GetBool(2, "keepdim", false), c.GetOptDType(3, "dtype")));
  });
  for (const bool is_max : {true, false}) {
    const std::string n = is_max ? "max" : "min";
    r.Add(absl::StrCat("aten.a", n, ".default"), [is_max](OpCall& c) {
      const Tensor self = c.GetTensor(0, "self");
      return One(Extreme(self, ReductionMask(Dims(c, 1, "dim"), self.dim()),
                         c.GetBool(2, "keepdim", false), is_max, true)
                     .first);
    });
    r.Add(absl::StrCat("aten.", n, ".default"), [is_max](OpCall& c) {
      const Tensor self = c.GetTensor(0, "self");
      return One(Extreme(self, ReductionMask(std::nullopt, self.dim()), false, is_max, true).first);
    });
    r.Add(absl::StrCat("aten.", n, ".dim"), [is_max](OpCall& c) {
      const Tensor self = c.GetTensor(0, "self");
      auto [v, i] = Extreme(self, OneDim(c.GetInt(1, "dim"), self.dim()),
                            c.GetBool(2, "keepdim", false), is_max, true);
      return std::vector<Value>{v, i};
    });
    r.Add(absl::StrCat("aten.arg", n, ".default"), [is_max](OpCall& c) {
      Tensor self = c.GetTensor(0, "self");
      const auto dim = c.GetOptInt(1, "dim");
      const bool keepdim = c.GetBool(2, "keepdim", false);
      if (dim.has_value()) {
        return One(Extreme(self, OneDim(*dim, self.dim()), keepdim, is_max, false).second);
      }
      // Over the flattened tensor; keepdim keeps every dim as size 1.
      const Tensor flat = ReshapeTensor(self, {self.numel()});
      Tensor idx = Extreme(flat, {true}, false, is_max, false).second;
      if (keepdim)
        idx = idx.AsStrided(std::vector<int64_t>(static_cast<size_t>(self.dim()), 1),
                            std::vector<int64_t>(static_cast<size_t>(self.dim()), 1), 0);
      return One(idx);
    });
  }
  r.Add("aten.var_mean.correction", [](OpCall& c) {
    const Tensor self = c.GetTensor(0, "self");
    auto [v, m] = VarMean(self, ReductionMask(Dims(c, 1, "dim"), self.dim()),
                          c.GetBool(3, "keepdim", false), Correction(c, 2));
    return std::vector<Value>{v, m};
  });
  r.Add("aten.var.correction", [](OpCall& c) {
    const Tensor self = c.GetTensor(0, "self");
    return One(VarMean(self, ReductionMask(Dims(c, 1, "dim"), self.dim()),
                       c.GetBool(3, "keepdim", false), Correction(c, 2))
                   .first);
  });
  r.Add("aten.std.correction", [](OpCall& c) {
    const Tensor self = c.GetTensor(0, "self");
    const Tensor var = VarMean(self, ReductionMask(Dims(c, 1, "dim"), self.dim()),
                               c.GetBool(3, "keepdim", false), Correction(c, 2))
                           .first;
    return One(MapDoubles({var}, var.dtype(), [](const double* v) { return std::sqrt(v[0]); }));
  });
  for (const bool is_any : {true, false}) {
    const std::string n = is_any ? "any" : "all";
    r.Add(absl::StrCat("aten.", n, ".default"), [is_any](OpCall& c) {
      const Tensor self = c.GetTensor(0, "self");
      return One(AnyAll(self, ReductionMask(std::nullopt, self.dim()), false, is_any));
    });
    auto by_dims = [is_any](OpCall& c) {
      const Tensor self = c.GetTensor(0, "self");
      return One(AnyAll(self, ReductionMask(Dims(c, 1, "dim"), self.dim()),
                        c.GetBool(2, "keepdim", false), is_any));
    };
    r.Add(absl::StrCat("aten.", n, ".dim"), by_dims);
    r.Add(absl::StrCat("aten.", n, ".dims"), by_dims);
  }
  r.Add("aten.logsumexp.default", [](OpCall& c) {
    const Tensor self = c.GetTensor(0, "self");
    const Grouped g =
        Group(self, ReductionMask(Dims(c, 1, "dim"), self.dim()), c.GetBool(2, "keepdim", false));
    Tensor out = Tensor::Zeros(g.out_sizes, FloatResultType(self.dtype()));
    for (int64_t i = 0; i < g.groups; ++i) {
      const int64_t* idx = g.Group(i);
      double m = -INFINITY;
      for (int64_t k = 0; k < g.group_size; ++k) m = std::max(m, self.ReadDouble(idx[k]));
      if (std::isinf(m)) {
        out.WriteDouble(i, m);
        continue;
      }
      double acc = 0;
      for (int64_t k = 0; k < g.group_size; ++k) acc += std::exp(self.ReadDouble(idx[k]) - m);
      out.WriteDouble(i, m + std::log(acc));
    }
    return One(out);
  });
  r.Add("aten.linalg_vector_norm.default", [](OpCall& c) {
    const Tensor self = c.GetTensor(0, "self");
    const double ord = c.GetDouble(1, "ord", 2.0);
    const Grouped g =
        Group(self, ReductionMask(Dims(c, 2, "dim"), self.dim()), c.GetBool(3, "keepdim", false));
    Tensor out = Tensor::Zeros(g.out_sizes,
                               c.GetOptDType(4, "dtype").value_or(FloatResultType(self.dtype())));
    for (int64_t i = 0; i < g.groups; ++i) {
      const int64_t* idx = g.Group(i);
      double acc = 0;
      for (int64_t k = 0; k < g.group_size; ++k) {
        const double a = std::fabs(self.ReadDouble(idx[k]));
        if (std::isinf(ord)) {
          acc = (k == 0) ? a : (ord > 0 ? std::max(acc, a) : std::min(acc, a));
        } else if (ord == 0) {
          acc += a != 0 ? 1 : 0;
        } else {
          acc += std::pow(a, ord);
        }
      }
      if (!std::isinf(ord) && ord != 0) acc = std::pow(acc, 1.0 / ord);
      out.WriteDouble(i, acc);
    }
    return One(out);
  });
  r.Add("aten.cumsum.default", [](OpCall& c) {
    const Tensor self = c.GetTensor(0, "self");
    const int64_t dim = WrapDim(c.GetInt(1, "dim"), self.dim());
    const DType dtype = SumType(self.dtype(), c.GetOptDType(2, "dtype"));
    const std::vector<double> v = self.ToDoubles();
    std::vector<double> out(v.size());
    const Lanes lanes(self.sizes(), self.dim() == 0 ? 0 : dim);
    for (int64_t l = 0; l < lanes.count(); ++l) {
      double acc = 0;
      for (int64_t k = 0; k < lanes.n; ++k) {
        acc += v[static_cast<size_t>(lanes.At(l, k))];
        out[static_cast<size_t>(lanes.At(l, k))] = acc;
      }
    }
    return One(MakeTensor(self.sizes(), dtype, out));
  });
}

}  // namespace kiln::interp
