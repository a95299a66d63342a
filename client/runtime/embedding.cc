// aten.embedding_dense_backward on the CPU: the gradient of an embedding table, whose row r is
// the sum of the grad_output rows whose index is r (each divided by how often r occurs when
// scale_grad_by_freq; none for padding_idx).
//
// Deterministic for any number of threads: a stable counting sort buckets the positions of
// the indices by the row they name, each bucket in index order, and the table's rows are split
// among threads, every row summed by one thread in that order. No sum crosses threads. Sums
// are in float32 (float64 for float64 tensors), as PyTorch's kernels accumulate; results are
// rounded to the table's dtype once per element.

#include <algorithm>
#include <type_traits>
#include <vector>

#include "client/runtime/extern_args.h"

namespace kiln::runtime {
namespace {

// The positions of the indices grouped by the row they name: row r's positions, in index
// order, are order[first[r]] .. order[first[r + 1] - 1].
struct RowBuckets {
  std::vector<int64_t> first;
  std::vector<int64_t> order;
};

RowBuckets BucketByRow(const std::vector<int64_t>& indices, int64_t rows) {
  RowBuckets b;
  b.first.assign(static_cast<size_t>(rows) + 1, 0);
  for (int64_t i : indices) ++b.first[static_cast<size_t>(i) + 1];
  for (size_t r = 1; r < b.first.size(); ++r) b.first[r] += b.first[r - 1];
  std::vector<int64_t> next(b.first.begin(), b.first.end() - 1);
  b.order.resize(indices.size());
  for (size_t p = 0; p < indices.size(); ++p) {
    b.order[static_cast<size_t>(next[static_cast<size_t>(indices[p])]++)] = static_cast<int64_t>(p);
  }
  return b;
}

// Writes one row's sums into row `row` of `out`, rounded to its dtype.
template <typename T>
void StoreRow(const Tensor& out, int64_t row, const T* sums, int64_t cols) {
  char* base = static_cast<char*>(out.data());
  const int64_t first = row * out.stride(0), step = out.stride(1);
  switch (out.dtype()) {
    case v1::DTYPE_FLOAT32: {
      float* p = reinterpret_cast<float*>(base) + first;
      for (int64_t k = 0; k < cols; ++k) p[k * step] = static_cast<float>(sums[k]);
      break;
    }
    case v1::DTYPE_FLOAT64: {
      double* p = reinterpret_cast<double*>(base) + first;
      for (int64_t k = 0; k < cols; ++k) p[k * step] = static_cast<double>(sums[k]);
      break;
    }
    case v1::DTYPE_BFLOAT16: {
      uint16_t* p = reinterpret_cast<uint16_t*>(base) + first;
      for (int64_t k = 0; k < cols; ++k) p[k * step] = FloatToBf16(static_cast<float>(sums[k]));
      break;
    }
    case v1::DTYPE_FLOAT16: {
      uint16_t* p = reinterpret_cast<uint16_t*>(base) + first;
      for (int64_t k = 0; k < cols; ++k) p[k * step] = FloatToFp16(static_cast<float>(sums[k]));
      break;
    }
    default:
      break;
  }
}

// The call's sizes and options.
struct EmbeddingGrad {
  int64_t rows = 0;  // num_weights
  int64_t cols = 0;  // the embedding's width
  int64_t padding_idx = -1;
  bool scale_grad_by_freq = false;
};

// Every row of `out`: its contributions summed in index order, zero where there are none.
template <typename T>
void SumRows(const EmbeddingGrad& e, const Tensor& grad, const RowBuckets& b, const Tensor& out,
             const ExternContext& ctx) {
  // grad_output's rows in index order, read in place when they already are.
  std::vector<T> dense;
  const T* g = nullptr;
  const DType native = std::is_same_v<T, double> ? v1::DTYPE_FLOAT64 : v1::DTYPE_FLOAT32;
  if (grad.is_contiguous() && grad.dtype() == native) {
    g = grad.data_as<T>();
  } else {
    dense = ToDense<T>(grad);
    g = dense.data();
  }
  ctx.pool->ParallelFor(e.rows, 8, ctx.max_threads, [&](int64_t begin, int64_t end) {
    std::vector<T> sums(static_cast<size_t>(e.cols));
    for (int64_t r = begin; r < end; ++r) {
      std::fill(sums.begin(), sums.end(), T(0));
      const int64_t from = b.first[static_cast<size_t>(r)];
      const int64_t to = b.first[static_cast<size_t>(r) + 1];
      if (r != e.padding_idx) {
        const T scale = e.scale_grad_by_freq && to > from ? T(1) / static_cast<T>(to - from) : T(1);
        for (int64_t p = from; p < to; ++p) {
          const T* src = g + b.order[static_cast<size_t>(p)] * e.cols;
          for (int64_t k = 0; k < e.cols; ++k) sums[static_cast<size_t>(k)] += src[k] * scale;
        }
      }
      StoreRow(out, r, sums.data(), e.cols);
    }
  });
}

}  // namespace

absl::Status RunEmbeddingBackward(const ExternCall& call) {
  ArgReader r(call);
  const Tensor grad = r.GetTensor(0, "grad_output");
  const Tensor indices = r.GetTensor(1, "indices");
  EmbeddingGrad e;
  e.rows = r.GetInt(2, "num_weights", -1);
  e.padding_idx = r.GetInt(3, "padding_idx", -1);
  e.scale_grad_by_freq = r.GetBool(4, "scale_grad_by_freq", false);
  if (!r.ok()) return r.status();
  if (!IsFloating(grad.dtype())) {
    r.FailUnimplemented(absl::StrCat("dtype ", DTypeName(grad.dtype())));
    return r.status();
  }
  if (!r.Check(indices.dtype() == v1::DTYPE_INT64 || indices.dtype() == v1::DTYPE_INT32,
               "indices must be int64 or int32, got ", DTypeName(indices.dtype())) ||
      !r.Check(grad.dim() >= 1, "grad_output ", grad.DebugString(), " has no embedding dim") ||
      !r.Check(e.rows >= 0, "num_weights is ", e.rows)) {
    return r.status();
  }
  e.cols = grad.size(grad.dim() - 1);
  if (!r.Check(grad.numel() == indices.numel() * e.cols, "grad_output ", grad.DebugString(),
               " does not have a row for each of the indices ", indices.DebugString()) ||
      !r.CheckOutput(0, {e.rows, e.cols}, grad.dtype())) {
    return r.status();
  }
  const std::vector<int64_t> idx = ToDense<int64_t>(indices);
  for (int64_t i : idx) {
    if (!r.Check(i >= 0 && i < e.rows, "index ", i, " is out of range for ", e.rows, " rows")) {
      return r.status();
    }
  }
  const Tensor out = r.Output(0);
  if (!out.defined()) return absl::OkStatus();
  const RowBuckets buckets = BucketByRow(idx, e.rows);
  if (grad.dtype() == v1::DTYPE_FLOAT64) {
    SumRows<double>(e, grad, buckets, out, *call.context);
  } else {
    SumRows<float>(e, grad, buckets, out, *call.context);
  }
  return absl::OkStatus();
}

}  // namespace kiln::runtime
