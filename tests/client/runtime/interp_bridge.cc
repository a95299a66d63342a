#include "tests/client/runtime/interp_bridge.h"

#include <cmath>
#include <cstring>

namespace kiln::runtime::testing {

Tensor RandomTensor(const std::vector<int64_t>& sizes, DType dtype, Layout layout,
                    std::mt19937_64& rng, double lo, double hi) {
  Tensor t;
  const size_t rank = sizes.size();
  if (layout == Layout::kTransposed && rank >= 2) {
    std::vector<int64_t> mem = sizes;
    std::swap(mem[rank - 1], mem[rank - 2]);
    std::vector<int64_t> strides = ContiguousStrides(mem);
    std::swap(strides[rank - 1], strides[rank - 2]);
    t = Tensor::EmptyStrided(sizes, strides, 0, dtype);
  } else if (layout == Layout::kStrided) {
    std::vector<int64_t> doubled = sizes;
    for (int64_t& s : doubled) s = 2 * s;
    std::vector<int64_t> strides = ContiguousStrides(doubled);
    for (int64_t& s : strides) s *= 2;
    t = Tensor::EmptyStrided(sizes, strides, 3, dtype);
  } else {
    t = Tensor::Empty(sizes, dtype);
  }
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> v(static_cast<size_t>(t.numel()));
  for (double& x : v) x = dist(rng);
  t.FromDoubles(v);
  return t;
}

::testing::AssertionResult AllClose(const std::vector<double>& got, const std::vector<double>& want,
                                    double rtol, double atol) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure() << "size " << got.size() << " vs " << want.size();
  }
  int bad = 0;
  ::testing::AssertionResult fail = ::testing::AssertionFailure();
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(got[i]) && std::isnan(want[i])) continue;
    if (got[i] == want[i]) continue;  // infinities of one sign too
    if (std::fabs(got[i] - want[i]) <= atol + rtol * std::fabs(want[i])) continue;
    if (++bad <= 5) fail << "element " << i << ": got " << got[i] << ", want " << want[i] << "; ";
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return fail << bad << " of " << got.size() << " elements differ";
}

Tolerance ToleranceFor(DType dtype) {
  switch (dtype) {
    case v1::DTYPE_FLOAT64:
      return {1e-10, 1e-12};
    case v1::DTYPE_FLOAT32:
      return {2e-5, 2e-5};
    case v1::DTYPE_FLOAT16:
      return {4e-3, 4e-3};
    default:
      return {2e-2, 2e-2};
  }
}

bool SameBytes(const Tensor& a, const Tensor& b) {
  if (a.sizes() != b.sizes() || a.dtype() != b.dtype()) return false;
  const int64_t es = a.element_size();
  const char* pa = static_cast<const char*>(a.data());
  const char* pb = static_cast<const char*>(b.data());
  bool same = true;
  ForEachIndexPair(a.sizes(), a.strides(), b.strides(), [&](int64_t x, int64_t y) {
    if (std::memcmp(pa + x * es, pb + y * es, static_cast<size_t>(es)) != 0) same = false;
  });
  return same;
}

}  // namespace kiln::runtime::testing
