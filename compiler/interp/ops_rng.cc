// Random ops, all drawing from the op's Philox stream (see philox.h; which ops draw is the
// op registry's `random` trait): native_dropout and its backward, rand_like/rand and
// bernoulli.p.

#include "compiler/interp/op_registry.h"
#include "compiler/interp/philox.h"

namespace kiln::interp {
namespace {

std::vector<Value> NativeDropout(const OpCall& c) {
  const Tensor input = c.GetTensor(0, "input");
  const double p = c.GetDouble(1, "p");
  const auto train = c.GetOptBool(2, "train");
  Check(p >= 0 && p <= 1, "dropout probability has to be between 0 and 1, but got ", p);
  const int64_t n = input.numel();
  std::vector<int64_t> mask(static_cast<size_t>(n), 1);
  std::vector<double> x = input.ToDoubles();
  if (!train.has_value() || *train) {
    const double scale = DropoutScale(p);
    const uint64_t seed = c.options().rng_seed;
    const uint64_t stream = c.context().rng_stream;
    for (int64_t i = 0; i < n; ++i) {
      const bool keep = DropoutKeeps(seed, stream, static_cast<uint64_t>(i), p);
      mask[static_cast<size_t>(i)] = keep ? 1 : 0;
      x[static_cast<size_t>(i)] = keep ? x[static_cast<size_t>(i)] * scale : 0.0;
    }
  }
  return {MakeTensor(input.sizes(), input.dtype(), x),
          Tensor::FromInts(input.sizes(), v1::DTYPE_BOOL, mask)};
}

Tensor Uniform(const OpCall& c, const std::vector<int64_t>& sizes, DType dtype) {
  const uint64_t seed = c.options().rng_seed;
  const uint64_t stream = c.context().rng_stream;
  std::vector<double> v(static_cast<size_t>(NumElements(sizes)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = PhiloxUniform(seed, stream, i);
  return MakeTensor(sizes, dtype, v);
}

}  // namespace

void RegisterRngOps(OpRegistry& r) {
  r.Add("aten.native_dropout.default", NativeDropout);
  r.Add("aten.native_dropout_backward.default", [](OpCall& c) {
    const Tensor grad = c.GetTensor(0, "grad_output");
    const Tensor mask = c.GetTensor(1, "mask");
    const double scale = c.GetDouble(2, "scale");
    return One(MapDoubles({grad, mask}, grad.dtype(),
                          [&](const double* v) { return v[1] != 0 ? v[0] * scale : 0.0; }));
  });
  // u in [0, 1) per element, as philox.h defines it.
  r.Add("aten.rand_like.default", [](OpCall& c) {
    const Tensor self = c.GetTensor(0, "self");
    return One(Uniform(c, self.sizes(), c.GetOptDType(-1, "dtype").value_or(self.dtype())));
  });
  r.Add("aten.rand.default", [](OpCall& c) {
    return One(
        Uniform(c, c.GetInts(0, "size"), c.GetOptDType(-1, "dtype").value_or(kDefaultFloat)));
  });
  // 1 with probability p: u < p.
  r.Add("aten.bernoulli.p", [](OpCall& c) {
    const Tensor self = c.GetTensor(0, "self");
    const double p = c.GetDouble(1, "p", 0.5);
    const Tensor u = Uniform(c, self.sizes(), v1::DTYPE_FLOAT64);
    return One(
        MapDoubles({u}, self.dtype(), [&](const double* v) { return v[0] < p ? 1.0 : 0.0; }));
  });
}

}  // namespace kiln::interp
