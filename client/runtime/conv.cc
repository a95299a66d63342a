// aten.convolution and aten.convolution_backward on the CPU: N-d, strided, padded, dilated,
// grouped and transposed, through im2col and the blocked Gemm.
//
// Both directions of a convolution relate a "small" spatial side (the output of a regular
// convolution, the input of a transposed one) to a "big" side, big = s * stride - padding +
// k * dilation per dim, with the weight read as a matrix Wm = [Ca, Cb/groups * K] (Ca the
// small side's channels, Cb the big side's, K the kernel volume). Then per sample and group
//   small = Wm @ im2col(big)              (regular forward, transposed grad_input)
//   big  += col2im(Wm^T @ small)          (transposed forward, regular grad_input)
//   dWm  += small' @ im2col(big')^T       (grad_weight of either kind)
// Everything is computed in float32 (float64 for float64 tensors) on dense copies, and each
// output element is summed in a fixed order, so results do not depend on threads.

#include <algorithm>
#include <vector>

#include "client/runtime/extern_args.h"
#include "client/runtime/gemm.h"
#include "proto/ops/conv_shape.h"

namespace kiln::runtime {
namespace {

struct ConvGeometry {
  int64_t n = 0, groups = 1;
  int64_t ca = 0, cb = 0;  // channels of the small and big sides
  int64_t cin = 0, cout = 0;
  bool transposed = false;
  std::vector<int64_t> small_sp, big_sp, in_sp, out_sp, k_sp;
  int64_t small = 1, big = 1, k = 1;  // volumes
  std::vector<int64_t> table;         // table[kk * small + s]: big position, or -1
};

bool MakeGeometry(ArgReader& r, const std::vector<int64_t>& input,
                  const std::vector<int64_t>& weight, std::vector<int64_t> stride,
                  std::vector<int64_t> padding, std::vector<int64_t> dilation, bool transposed,
                  std::vector<int64_t> output_padding, int64_t groups, ConvGeometry& g) {
  absl::StatusOr<ops::ConvShape> shape =
      ops::ConvolutionShape(input, weight, std::move(stride), std::move(padding),
                            std::move(dilation), transposed, std::move(output_padding), groups);
  if (!r.Check(shape.ok(), shape.status().message())) return false;
  const size_t dims = shape->in.size();
  g.n = shape->n;
  g.cin = shape->cin;
  g.cout = shape->cout;
  g.groups = shape->groups;
  g.transposed = transposed;
  g.in_sp = shape->in;
  g.out_sp = shape->out;
  g.k_sp = shape->kernel;
  for (size_t d = 0; d < dims; ++d) g.k *= g.k_sp[d];
  g.small_sp = transposed ? g.in_sp : g.out_sp;
  g.big_sp = transposed ? g.out_sp : g.in_sp;
  g.ca = transposed ? g.cin : g.cout;
  g.cb = transposed ? g.cout : g.cin;
  for (size_t d = 0; d < dims; ++d) {
    g.small *= g.small_sp[d];
    g.big *= g.big_sp[d];
  }
  g.table.assign(static_cast<size_t>(g.small * g.k), -1);
  for (int64_t kk = 0; kk < g.k; ++kk) {
    for (int64_t s = 0; s < g.small; ++s) {
      int64_t srem = s, krem = kk, pos = 0, scale = 1;
      bool inside = true;
      for (size_t d = dims; d-- > 0;) {
        const int64_t sc = srem % g.small_sp[d];
        srem /= g.small_sp[d];
        const int64_t kc = krem % g.k_sp[d];
        krem /= g.k_sp[d];
        const int64_t b = sc * shape->stride[d] - shape->padding[d] + kc * shape->dilation[d];
        if (b < 0 || b >= g.big_sp[d]) inside = false;
        pos += b * scale;
        scale *= g.big_sp[d];
      }
      if (inside) g.table[static_cast<size_t>(kk * g.small + s)] = pos;
    }
  }
  return true;
}

std::vector<int64_t> Shape(int64_t n, int64_t c, const std::vector<int64_t>& sp) {
  std::vector<int64_t> s = {n, c};
  s.insert(s.end(), sp.begin(), sp.end());
  return s;
}

template <typename T>
DType DTypeOf() {
  return std::is_same_v<T, double> ? v1::DTYPE_FLOAT64 : v1::DTYPE_FLOAT32;
}

// col[(c * K + kk) * small + s] = plane[c * big + table[kk, s]] for the cb_g channels of one
// sample and group.
template <typename T>
void Im2Col(const ConvGeometry& g, const T* plane, int64_t channels, T* col,
            const ExternContext& ctx) {
  ctx.pool->ParallelFor(channels * g.k, 1, ctx.max_threads, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const int64_t c = row / g.k, kk = row % g.k;
      const int64_t* tab = g.table.data() + kk * g.small;
      const T* src = plane + c * g.big;
      T* dst = col + row * g.small;
      for (int64_t s = 0; s < g.small; ++s) dst[s] = tab[s] >= 0 ? src[tab[s]] : T(0);
    }
  });
}

// plane[c * big + table[kk, s]] += col[(c * K + kk) * small + s]; one channel per task, so
// each element is summed in a fixed order.
template <typename T>
void Col2Im(const ConvGeometry& g, const T* col, int64_t channels, T* plane,
            const ExternContext& ctx) {
  ctx.pool->ParallelFor(channels, 1, ctx.max_threads, [&](int64_t begin, int64_t end) {
    for (int64_t c = begin; c < end; ++c) {
      T* dst = plane + c * g.big;
      for (int64_t kk = 0; kk < g.k; ++kk) {
        const int64_t* tab = g.table.data() + kk * g.small;
        const T* src = col + (c * g.k + kk) * g.small;
        for (int64_t s = 0; s < g.small; ++s) {
          if (tab[s] >= 0) dst[tab[s]] += src[s];
        }
      }
    }
  });
}

template <typename T>
MatRef Mat(const T* data, int64_t rs, int64_t cs) {
  MatRef m;
  m.data = data;
  m.dtype = DTypeOf<T>();
  m.rs = rs;
  m.cs = cs;
  return m;
}

// small[n] (ca x S) = Wm_g @ im2col(big[n]) for every sample and group; bias per small channel.
template <typename T>
void SmallFromBig(const ConvGeometry& g, const T* wm, const T* big, const T* bias, T* small,
                  const ExternContext& ctx) {
  const int64_t ca_g = g.ca / g.groups, cb_g = g.cb / g.groups;
  std::vector<T> col(static_cast<size_t>(cb_g * g.k * g.small));
  for (int64_t n = 0; n < g.n; ++n) {
    for (int64_t grp = 0; grp < g.groups; ++grp) {
      Im2Col<T>(g, big + (n * g.cb + grp * cb_g) * g.big, cb_g, col.data(), ctx);
      GemmArgs a;
      a.m = ca_g;
      a.n = g.small;
      a.k = cb_g * g.k;
      a.a = Mat(wm + grp * ca_g * cb_g * g.k, cb_g * g.k, 1);
      a.b = Mat(col.data(), g.small, 1);
      a.c = Mat<T>(small + (n * g.ca + grp * ca_g) * g.small, g.small, 1);
      MatRef addend = Mat(bias != nullptr ? bias + grp * ca_g : nullptr, 1, 0);
      if (bias != nullptr) {
        a.addend = &addend;
        a.beta = 1.0;
      }
      Gemm(a, ctx.pool, ctx.max_threads);
    }
  }
}

// big[n] += col2im(Wm_g^T @ small[n]) for every sample and group (big starts zeroed).
template <typename T>
void BigFromSmall(const ConvGeometry& g, const T* wm, const T* small, T* big,
                  const ExternContext& ctx) {
  const int64_t ca_g = g.ca / g.groups, cb_g = g.cb / g.groups;
  std::vector<T> col(static_cast<size_t>(cb_g * g.k * g.small));
  for (int64_t n = 0; n < g.n; ++n) {
    for (int64_t grp = 0; grp < g.groups; ++grp) {
      GemmArgs a;
      a.m = cb_g * g.k;
      a.n = g.small;
      a.k = ca_g;
      a.a = Mat(wm + grp * ca_g * cb_g * g.k, 1, cb_g * g.k);  // Wm_g transposed
      a.b = Mat(small + (n * g.ca + grp * ca_g) * g.small, g.small, 1);
      a.c = Mat<T>(col.data(), g.small, 1);
      Gemm(a, ctx.pool, ctx.max_threads);
      Col2Im<T>(g, col.data(), cb_g, big + (n * g.cb + grp * cb_g) * g.big, ctx);
    }
  }
}

// dWm_g = sum over samples of small[n] @ im2col(big[n])^T.
template <typename T>
void WeightGrad(const ConvGeometry& g, const T* small, const T* big, T* dwm,
                const ExternContext& ctx) {
  const int64_t ca_g = g.ca / g.groups, cb_g = g.cb / g.groups;
  std::vector<T> col(static_cast<size_t>(cb_g * g.k * g.small));
  for (int64_t grp = 0; grp < g.groups; ++grp) {
    T* dst = dwm + grp * ca_g * cb_g * g.k;
    MatRef acc = Mat<T>(dst, cb_g * g.k, 1);
    for (int64_t n = 0; n < g.n; ++n) {
      Im2Col<T>(g, big + (n * g.cb + grp * cb_g) * g.big, cb_g, col.data(), ctx);
      GemmArgs a;
      a.m = ca_g;
      a.n = cb_g * g.k;
      a.k = g.small;
      a.a = Mat(small + (n * g.ca + grp * ca_g) * g.small, g.small, 1);
      a.b = Mat(col.data(), 1, g.small);  // im2col transposed
      a.c = acc;
      if (n > 0) {  // accumulate: each element is read and rewritten by the same task
        a.addend = &acc;
        a.beta = 1.0;
      }
      Gemm(a, ctx.pool, ctx.max_threads);
    }
  }
}

// Reads stride, padding, dilation, transposed, output_padding and groups from argument
// `first` on (where both convolution ops keep them) and derives the geometry.
bool ReadGeometry(ArgReader& r, int first, const Tensor& input, const Tensor& weight,
                  ConvGeometry& g) {
  const std::vector<int64_t> stride = r.GetInts(first, "stride", {1});
  const std::vector<int64_t> padding = r.GetInts(first + 1, "padding", {0});
  const std::vector<int64_t> dilation = r.GetInts(first + 2, "dilation", {1});
  const bool transposed = r.GetBool(first + 3, "transposed", false);
  const std::vector<int64_t> output_padding = r.GetInts(first + 4, "output_padding", {0});
  const int64_t groups = r.GetInt(first + 5, "groups", 1);
  if (!r.ok()) return false;
  return MakeGeometry(r, input.sizes(), weight.sizes(), stride, padding, dilation, transposed,
                      output_padding, groups, g);
}

template <typename T>
absl::Status ConvolutionTyped(ArgReader& r, const ExternCall& call) {
  const Tensor input = r.GetTensor(0, "input");
  const Tensor weight = r.GetTensor(1, "weight");
  const Tensor bias = r.GetOptTensor(2, "bias");
  ConvGeometry g;
  if (!ReadGeometry(r, 3, input, weight, g)) return r.status();
  const bool transposed = g.transposed;
  if (bias.defined())
    r.Check(bias.dim() == 1 && bias.size(0) == g.cout, "bias must have ", g.cout, " elements");
  r.CheckOutput(0, Shape(g.n, g.cout, g.out_sp), input.dtype());
  if (!r.ok()) return r.status();
  const ExternContext& ctx = *call.context;
  const std::vector<T> x = ToDense<T>(input);
  const std::vector<T> w = ToDense<T>(weight);
  const std::vector<T> b = ToDense<T>(bias);
  std::vector<T> y(static_cast<size_t>(g.n * g.cout * (transposed ? g.big : g.small)), T(0));
  if (!transposed) {
    SmallFromBig<T>(g, w.data(), x.data(), bias.defined() ? b.data() : nullptr, y.data(), ctx);
  } else {
    BigFromSmall<T>(g, w.data(), x.data(), y.data(), ctx);
    if (bias.defined()) {
      for (int64_t n = 0; n < g.n; ++n) {
        for (int64_t c = 0; c < g.cout; ++c) {
          T* p = y.data() + (n * g.cout + c) * g.big;
          for (int64_t i = 0; i < g.big; ++i) p[i] += b[static_cast<size_t>(c)];
        }
      }
    }
  }
  FromDense<T>(y.data(), r.Output(0));
  return absl::OkStatus();
}

template <typename T>
absl::Status ConvolutionBackwardTyped(ArgReader& r, const ExternCall& call) {
  const Tensor grad_output = r.GetTensor(0, "grad_output");
  const Tensor input = r.GetTensor(1, "input");
  const Tensor weight = r.GetTensor(2, "weight");
  const std::vector<bool> mask = r.GetBools(10, "output_mask", {true, true, true});
  if (!r.ok()) return r.status();
  if (!r.Check(mask.size() == 3, "output_mask must have 3 entries")) return r.status();
  ConvGeometry g;
  if (!ReadGeometry(r, 4, input, weight, g)) return r.status();
  const bool transposed = g.transposed;
  r.Check(grad_output.sizes() == Shape(g.n, g.cout, g.out_sp), "grad_output ",
          grad_output.DebugString(), " does not match the convolution's output");
  if (mask[0]) r.CheckOutput(0, input.sizes(), input.dtype());
  if (mask[1]) r.CheckOutput(1, weight.sizes(), weight.dtype());
  if (mask[2]) r.CheckOutput(2, {g.cout}, grad_output.dtype());
  if (!r.ok()) return r.status();
  const ExternContext& ctx = *call.context;
  const std::vector<T> dy = ToDense<T>(grad_output);
  const std::vector<T> x = mask[1] ? ToDense<T>(input) : std::vector<T>();
  const std::vector<T> w = mask[0] ? ToDense<T>(weight) : std::vector<T>();
  // The small side of a regular convolution is its output; of a transposed one its input.
  if (mask[0] && r.Output(0).defined()) {
    std::vector<T> dx(static_cast<size_t>(input.numel()), T(0));
    if (!transposed) {
      BigFromSmall<T>(g, w.data(), dy.data(), dx.data(), ctx);
    } else {
      SmallFromBig<T>(g, w.data(), dy.data(), nullptr, dx.data(), ctx);
    }
    FromDense<T>(dx.data(), r.Output(0));
  }
  if (mask[1] && r.Output(1).defined()) {
    std::vector<T> dw(static_cast<size_t>(weight.numel()), T(0));
    if (!transposed) {
      WeightGrad<T>(g, dy.data(), x.data(), dw.data(), ctx);
    } else {
      WeightGrad<T>(g, x.data(), dy.data(), dw.data(), ctx);
    }
    FromDense<T>(dw.data(), r.Output(1));
  }
  if (mask[2] && r.Output(2).defined()) {
    const int64_t plane = transposed ? g.big : g.small;
    std::vector<T> db(static_cast<size_t>(g.cout), T(0));
    for (int64_t c = 0; c < g.cout; ++c) {
      double sum = 0;
      for (int64_t n = 0; n < g.n; ++n) {
        const T* p = dy.data() + (n * g.cout + c) * plane;
        for (int64_t i = 0; i < plane; ++i) sum += p[i];
      }
      db[static_cast<size_t>(c)] = static_cast<T>(sum);
    }
    FromDense<T>(db.data(), r.Output(2));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status RunConvolution(const ExternCall& call) {
  ArgReader r(call);
  const Tensor input = r.GetTensor(0, "input");
  if (!r.ok()) return r.status();
  if (!IsFloating(input.dtype())) {
    return absl::UnimplementedError(absl::StrCat(call.op, ": dtype ", DTypeName(input.dtype())));
  }
  if (input.dtype() == v1::DTYPE_FLOAT64) return ConvolutionTyped<double>(r, call);
  return ConvolutionTyped<float>(r, call);
}

absl::Status RunConvolutionBackward(const ExternCall& call) {
  ArgReader r(call);
  const Tensor input = r.GetTensor(1, "input");
  if (!r.ok()) return r.status();
  if (!IsFloating(input.dtype())) {
    return absl::UnimplementedError(absl::StrCat(call.op, ": dtype ", DTypeName(input.dtype())));
  }
  if (input.dtype() == v1::DTYPE_FLOAT64) return ConvolutionBackwardTyped<double>(r, call);
  return ConvolutionBackwardTyped<float>(r, call);
}

}  // namespace kiln::runtime
