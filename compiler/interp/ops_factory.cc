// Ops that create tensors: arange, full/zeros/ones/empty and their new_*/ *_like forms,
// scalar_tensor. empty* allocate zeros, so results are deterministic.

#include <cmath>

#include "compiler/interp/op_registry.h"

namespace kiln::interp {
namespace {

// The dtype torch.full infers from a fill value.
DType DTypeOfScalar(const ScalarArg& s) {
  if (s.kind == v1::DTYPE_FLOAT64) return kDefaultFloat;
  return s.kind;
}

Tensor Filled(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides, DType dtype,
              const ScalarArg& value) {
  for (int64_t s : sizes) Check(s >= 0, "negative size ", s);
  Tensor out = Tensor::ZerosStrided(sizes, strides, 0, dtype);
  if (value.is_int()) {
    out.CopyFrom(Tensor::FromInts({}, v1::DTYPE_INT64, {value.int_value}));
  } else {
    out.CopyFrom(Tensor::FromDoubles({}, v1::DTYPE_FLOAT64, {value.value}));
  }
  return out;
}

ScalarArg IntScalar(int64_t v) {
  ScalarArg s;
  s.int_value = v;
  s.value = static_cast<double>(v);
  return s;
}

std::optional<v1::MemoryFormat> MemoryFormatArg(const OpCall& c) {
  const Arg* a = c.Find(-1, "memory_format");
  if (a == nullptr) return std::nullopt;
  const auto* m = std::get_if<v1::MemoryFormat>(&a->v);
  Check(m != nullptr, "memory_format must be a memory format");
  return *m;
}

// The strides of a *_like result: the input's when preserving a dense layout.
std::vector<int64_t> LikeStrides(const Tensor& self, std::optional<v1::MemoryFormat> format) {
  if (!format.has_value() || *format == v1::MEMORY_FORMAT_PRESERVE ||
      *format == v1::MEMORY_FORMAT_UNSPECIFIED) {
    return self.is_non_overlapping_and_dense() ? self.strides() : ContiguousStrides(self.sizes());
  }
  return StridesForFormat(self.sizes(), *format);
}

std::vector<int64_t> FormatStrides(const std::vector<int64_t>& sizes,
                                   std::optional<v1::MemoryFormat> format) {
  return StridesForFormat(sizes, format.value_or(v1::MEMORY_FORMAT_CONTIGUOUS));
}

Tensor Arange(const OpCall& c, const ScalarArg& start, const ScalarArg& end,
              const ScalarArg& step) {
  const bool all_int = start.is_int() && end.is_int() && step.is_int();
  const DType dtype =
      c.GetOptDType(-1, "dtype").value_or(all_int ? v1::DTYPE_INT64 : kDefaultFloat);
  Check(step.value != 0, "arange: step must be nonzero");
  Check(
      (step.value > 0 && end.value >= start.value) || (step.value < 0 && end.value <= start.value),
      "arange: upper bound and larger bound inconsistent with step sign");
  int64_t n;
  if (all_int) {
    const int64_t span = end.int_value - start.int_value;
    n = span / step.int_value + ((span % step.int_value) != 0 ? 1 : 0);
  } else {
    n = static_cast<int64_t>(std::ceil((end.value - start.value) / step.value));
  }
  Tensor out = Tensor::Zeros({n}, dtype);
  for (int64_t i = 0; i < n; ++i) {
    if (all_int && StoresInts(dtype)) {
      out.WriteInt(i, start.int_value + i * step.int_value);
    } else {
      out.WriteDouble(i, start.value + static_cast<double>(i) * step.value);
    }
  }
  return out;
}

}  // namespace

void RegisterFactoryOps(OpRegistry& r) {
  r.Add("aten.arange.default", [](OpCall& c) {
    return One(Arange(c, IntScalar(0), c.GetScalar(0, "end"), IntScalar(1)));
  });
  r.Add("aten.arange.start", [](OpCall& c) {
    return One(Arange(c, c.GetScalar(0, "start"), c.GetScalar(1, "end"), IntScalar(1)));
  });
  r.Add("aten.arange.start_step", [](OpCall& c) {
    return One(Arange(c, c.GetScalar(0, "start"), c.GetScalar(1, "end"),
                      c.GetOptScalar(2, "step").value_or(IntScalar(1))));
  });
  r.Add("aten.full.default", [](OpCall& c) {
    const std::vector<int64_t> size = c.GetInts(0, "size");
    const ScalarArg value = c.GetScalar(1, "fill_value");
    const DType dtype = c.GetOptDType(-1, "dtype").value_or(DTypeOfScalar(value));
    return One(Filled(size, ContiguousStrides(size), dtype, value));
  });
  for (const auto& [name, fill] : {std::pair{"zeros", 0}, std::pair{"ones", 1}}) {
    const int64_t v = fill;
    r.Add(absl::StrCat("aten.", name, ".default"), [v](OpCall& c) {
      const std::vector<int64_t> size = c.GetInts(0, "size");
      const DType dtype = c.GetOptDType(-1, "dtype").value_or(kDefaultFloat);
      return One(Filled(size, ContiguousStrides(size), dtype, IntScalar(v)));
    });
    r.Add(absl::StrCat("aten.new_", name, ".default"), [v](OpCall& c) {
      const Tensor self = c.GetTensor(0, "self");
      const std::vector<int64_t> size = c.GetInts(1, "size");
      const DType dtype = c.GetOptDType(-1, "dtype").value_or(self.dtype());
      return One(Filled(size, ContiguousStrides(size), dtype, IntScalar(v)));
    });
    r.Add(absl::StrCat("aten.", name, "_like.default"), [v](OpCall& c) {
      const Tensor self = c.GetTensor(0, "self");
      const DType dtype = c.GetOptDType(-1, "dtype").value_or(self.dtype());
      return One(Filled(self.sizes(), LikeStrides(self, MemoryFormatArg(c)), dtype, IntScalar(v)));
    });
  }
  r.Add("aten.empty.memory_format", [](OpCall& c) {
    const std::vector<int64_t> size = c.GetInts(0, "size");
    const DType dtype = c.GetOptDType(-1, "dtype").value_or(kDefaultFloat);
    return One(Filled(size, FormatStrides(size, MemoryFormatArg(c)), dtype, IntScalar(0)));
  });
  r.Add("aten.empty_strided.default", [](OpCall& c) {
    const DType dtype = c.GetOptDType(-1, "dtype").value_or(kDefaultFloat);
    return One(Filled(c.GetInts(0, "size"), c.GetInts(1, "stride"), dtype, IntScalar(0)));
  });
  r.Add("aten.new_empty.default", [](OpCall& c) {
    const Tensor self = c.GetTensor(0, "self");
    const std::vector<int64_t> size = c.GetInts(1, "size");
    const DType dtype = c.GetOptDType(-1, "dtype").value_or(self.dtype());
    return One(Filled(size, ContiguousStrides(size), dtype, IntScalar(0)));
  });
  r.Add("aten.new_empty_strided.default", [](OpCall& c) {
    const Tensor self = c.GetTensor(0, "self");
    const DType dtype = c.GetOptDType(-1, "dtype").value_or(self.dtype());
    return One(Filled(c.GetInts(1, "size"), c.GetInts(2, "stride"), dtype, IntScalar(0)));
  });
  r.Add("aten.new_full.default", [](OpCall& c) {
    const Tensor self = c.GetTensor(0, "self");
    const std::vector<int64_t> size = c.GetInts(1, "size");
    const DType dtype = c.GetOptDType(-1, "dtype").value_or(self.dtype());
    return One(Filled(size, ContiguousStrides(size), dtype, c.GetScalar(2, "fill_value")));
  });
  r.Add("aten.empty_like.default", [](OpCall& c) {
    const Tensor self = c.GetTensor(0, "self");
    const DType dtype = c.GetOptDType(-1, "dtype").value_or(self.dtype());
    return One(Filled(self.sizes(), LikeStrides(self, MemoryFormatArg(c)), dtype, IntScalar(0)));
  });
  r.Add("aten.full_like.default", [](OpCall& c) {
    const Tensor self = c.GetTensor(0, "self");
    const DType dtype = c.GetOptDType(-1, "dtype").value_or(self.dtype());
    return One(Filled(self.sizes(), LikeStrides(self, MemoryFormatArg(c)), dtype,
                      c.GetScalar(1, "fill_value")));
  });
  r.Add("aten.scalar_tensor.default", [](OpCall& c) {
    const ScalarArg s = c.GetScalar(0, "s");
    const DType dtype = c.GetOptDType(-1, "dtype").value_or(kDefaultFloat);
    return One(Filled({}, {}, dtype, s));
  });
}

}  // namespace kiln::interp
