// Matrix products (mm, bmm, addmm, baddbmm, mv, dot): the extern steps of compiled plans,
// computed naively in double with one rounding of each result.

#include "compiler/interp/op_registry.h"

namespace kiln::interp {
namespace {

// c[b] = a[b] @ bm[b] for row-major buffers of batch `batch`.
std::vector<double> BatchedMatmul(const std::vector<double>& a, const std::vector<double>& bm,
                                  int64_t batch, int64_t m, int64_t k, int64_t n) {
  std::vector<double> c(static_cast<size_t>(batch * m * n), 0.0);
  for (int64_t b = 0; b < batch; ++b) {
    const double* ab = a.data() + b * m * k;
    const double* bb = bm.data() + b * k * n;
    double* cb = c.data() + b * m * n;
    for (int64_t i = 0; i < m; ++i) {
      double* crow = cb + i * n;
      for (int64_t p = 0; p < k; ++p) {
        const double av = ab[i * k + p];
        const double* brow = bb + p * n;
        for (int64_t j = 0; j < n; ++j) crow[j] += av * brow[j];
      }
    }
  }
  return c;
}

void CheckSameDType(const Tensor& a, const Tensor& b, absl::string_view op) {
  Check(a.dtype() == b.dtype(), op, ": expected both operands to have the same dtype, got ",
        DTypeName(a.dtype()), " and ", DTypeName(b.dtype()));
}

Tensor Mm(const Tensor& a, const Tensor& b) {
  Check(a.dim() == 2 && b.dim() == 2, "mm: expected 2-d tensors, got ", a.DebugString(), " and ",
        b.DebugString());
  Check(a.size(1) == b.size(0), "mm: shapes ", a.DebugString(), " and ", b.DebugString(),
        " cannot be multiplied");
  CheckSameDType(a, b, "mm");
  return MakeTensor(
      {a.size(0), b.size(1)}, a.dtype(),
      BatchedMatmul(a.ToDoubles(), b.ToDoubles(), 1, a.size(0), a.size(1), b.size(1)));
}

Tensor Bmm(const Tensor& a, const Tensor& b) {
  Check(a.dim() == 3 && b.dim() == 3, "bmm: expected 3-d tensors, got ", a.DebugString(), " and ",
        b.DebugString());
  Check(a.size(0) == b.size(0) && a.size(2) == b.size(1), "bmm: shapes ", a.DebugString(), " and ",
        b.DebugString(), " cannot be multiplied");
  CheckSameDType(a, b, "bmm");
  return MakeTensor(
      {a.size(0), a.size(1), b.size(2)}, a.dtype(),
      BatchedMatmul(a.ToDoubles(), b.ToDoubles(), a.size(0), a.size(1), a.size(2), b.size(2)));
}

// beta * self + alpha * product, with self ignored entirely when beta == 0.
Tensor AddProduct(const OpCall& c, const Tensor& self, const std::vector<int64_t>& sizes,
                  const std::vector<double>& product, DType dtype) {
  const double beta = c.GetDouble(-1, "beta", 1.0);
  const double alpha = c.GetDouble(-1, "alpha", 1.0);
  CheckSameDType(self, Tensor::Zeros({}, dtype), "addmm");
  std::vector<double> out(product.size());
  const std::vector<double> s =
      beta == 0 ? std::vector<double>(product.size(), 0.0) : ExpandTo(self, sizes).ToDoubles();
  for (size_t i = 0; i < out.size(); ++i) {
    out[i] = (beta == 0 ? 0.0 : beta * s[i]) + alpha * product[i];
  }
  return MakeTensor(sizes, dtype, out);
}

}  // namespace

void RegisterLinalgOps(OpRegistry& r) {
  r.Add("aten.mm.default",
        [](OpCall& c) { return One(Mm(c.GetTensor(0, "self"), c.GetTensor(1, "mat2"))); });
  r.Add("aten.bmm.default",
        [](OpCall& c) { return One(Bmm(c.GetTensor(0, "self"), c.GetTensor(1, "mat2"))); });
  // The product stays unrounded until the bias is added: addmm rounds once.
  r.Add("aten.addmm.default", [](OpCall& c) {
    const Tensor self = c.GetTensor(0, "self");
    const Tensor a = c.GetTensor(1, "mat1");
    const Tensor b = c.GetTensor(2, "mat2");
    Check(a.dim() == 2 && b.dim() == 2 && a.size(1) == b.size(0), "addmm: shapes ", a.DebugString(),
          " and ", b.DebugString(), " cannot be multiplied");
    CheckSameDType(a, b, "addmm");
    return One(
        AddProduct(c, self, {a.size(0), b.size(1)},
                   BatchedMatmul(a.ToDoubles(), b.ToDoubles(), 1, a.size(0), a.size(1), b.size(1)),
                   a.dtype()));
  });
  r.Add("aten.baddbmm.default", [](OpCall& c) {
    const Tensor self = c.GetTensor(0, "self");
    const Tensor a = c.GetTensor(1, "batch1");
    const Tensor b = c.GetTensor(2, "batch2");
    Check(a.dim() == 3 && b.dim() == 3 && a.size(0) == b.size(0) && a.size(2) == b.size(1),
          "baddbmm: shapes ", a.DebugString(), " and ", b.DebugString(), " cannot be multiplied");
    CheckSameDType(a, b, "baddbmm");
    return One(AddProduct(
        c, self, {a.size(0), a.size(1), b.size(2)},
        BatchedMatmul(a.ToDoubles(), b.ToDoubles(), a.size(0), a.size(1), a.size(2), b.size(2)),
        a.dtype()));
  });
  r.Add("aten.mv.default", [](OpCall& c) {
    const Tensor a = c.GetTensor(0, "self");
    const Tensor v = c.GetTensor(1, "vec");
    Check(a.dim() == 2 && v.dim() == 1 && a.size(1) == v.size(0), "mv: bad shapes");
    CheckSameDType(a, v, "mv");
    return One(MakeTensor({a.size(0)}, a.dtype(),
                          BatchedMatmul(a.ToDoubles(), v.ToDoubles(), 1, a.size(0), a.size(1), 1)));
  });
  r.Add("aten.dot.default", [](OpCall& c) {
    const Tensor a = c.GetTensor(0, "self");
    const Tensor b = c.GetTensor(1, "tensor");
    Check(a.dim() == 1 && b.dim() == 1 && a.size(0) == b.size(0), "dot: bad shapes");
    CheckSameDType(a, b, "dot");
    return One(
        MakeTensor({}, a.dtype(), BatchedMatmul(a.ToDoubles(), b.ToDoubles(), 1, 1, a.size(0), 1)));
  });
}

}  // namespace kiln::interp
