// Convolution (N-d, strided, padded, dilated, grouped, transposed) and its backward, and
// 2-d max pooling with indices and its backward.

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_join.h"
#include "compiler/interp/op_registry.h"
#include "proto/ops/conv_shape.h"

namespace kiln::interp {
namespace {

// A per-spatial-dim parameter: a single value applies to every dim.
std::vector<int64_t> Expand(std::vector<int64_t> v, size_t dims, absl::string_view name) {
  if (v.size() == 1 && dims > 1) v.assign(dims, v[0]);
  Check(v.size() == dims, name, " must have ", dims, " entries, got ", v.size());
  return v;
}

// The geometry of a convolution. "Small" positions are the output's for a regular
// convolution and the input's for a transposed one; "big" positions are the other side.
// They relate by big = small * stride - padding + k * dilation in each spatial dim.
struct ConvGeometry {
  int64_t n = 0, cin = 0, cout = 0, groups = 1;
  bool transposed = false;
  std::vector<int64_t> in_sp, out_sp, k_sp, stride, padding, dilation;
  int64_t in_size = 1, out_size = 1, k_size = 1;
  // table[s * k_size + k]: big position for small position s and kernel offset k, or -1.
  std::vector<int64_t> table;
};

ConvGeometry MakeGeometry(const std::vector<int64_t>& input, const std::vector<int64_t>& weight,
                          std::vector<int64_t> stride, std::vector<int64_t> padding,
                          std::vector<int64_t> dilation, bool transposed,
                          std::vector<int64_t> output_padding, int64_t groups) {
  absl::StatusOr<ops::ConvShape> shape =
      ops::ConvolutionShape(input, weight, std::move(stride), std::move(padding),
                            std::move(dilation), transposed, std::move(output_padding), groups);
  if (!shape.ok()) Fail("convolution: ", shape.status().message());
  ConvGeometry g;
  g.n = shape->n;
  g.cin = shape->cin;
  g.cout = shape->cout;
  g.groups = shape->groups;
  g.transposed = shape->transposed;
  g.in_sp = shape->in;
  g.out_sp = shape->out;
  g.k_sp = shape->kernel;
  g.stride = shape->stride;
  g.padding = shape->padding;
  g.dilation = shape->dilation;
  for (size_t d = 0; d < g.in_sp.size(); ++d) {
    g.in_size *= g.in_sp[d];
    g.out_size *= g.out_sp[d];
    g.k_size *= g.k_sp[d];
  }
  const size_t dims = g.in_sp.size();
  const std::vector<int64_t>& small = transposed ? g.in_sp : g.out_sp;
  const std::vector<int64_t>& big = transposed ? g.out_sp : g.in_sp;
  const int64_t small_size = transposed ? g.in_size : g.out_size;
  g.table.assign(static_cast<size_t>(small_size * g.k_size), -1);
  for (int64_t s = 0; s < small_size; ++s) {
    for (int64_t k = 0; k < g.k_size; ++k) {
      int64_t srem = s;
      int64_t krem = k;
      int64_t pos = 0;
      bool inside = true;
      for (size_t d = dims; d-- > 0;) {
        const int64_t sc = srem % small[d];
        srem /= small[d];
        const int64_t kc = krem % g.k_sp[d];
        krem /= g.k_sp[d];
        const int64_t b = sc * g.stride[d] - g.padding[d] + kc * g.dilation[d];
        if (b < 0 || b >= big[d]) inside = false;
        int64_t scale = 1;
        for (size_t e = d + 1; e < dims; ++e) scale *= big[e];
        pos += b * scale;
      }
      if (inside) g.table[static_cast<size_t>(s * g.k_size + k)] = pos;
    }
  }
  return g;
}

// Visits every (input element, output element, weight element) triple the convolution
// multiplies together.
template <typename F>
void ForEachTap(const ConvGeometry& g, F f) {
  const int64_t cin_g = g.cin / g.groups;
  const int64_t cout_g = g.cout / g.groups;
  const int64_t small_size = g.transposed ? g.in_size : g.out_size;
  for (int64_t n = 0; n < g.n; ++n) {
    for (int64_t grp = 0; grp < g.groups; ++grp) {
      for (int64_t co_l = 0; co_l < cout_g; ++co_l) {
        const int64_t co = grp * cout_g + co_l;
        for (int64_t ci_l = 0; ci_l < cin_g; ++ci_l) {
          const int64_t ci = grp * cin_g + ci_l;
          const int64_t wbase =
              g.transposed ? (ci * cout_g + co_l) * g.k_size : (co * cin_g + ci_l) * g.k_size;
          const int64_t xbase = (n * g.cin + ci) * g.in_size;
          const int64_t ybase = (n * g.cout + co) * g.out_size;
          for (int64_t s = 0; s < small_size; ++s) {
            for (int64_t k = 0; k < g.k_size; ++k) {
              const int64_t b = g.table[static_cast<size_t>(s * g.k_size + k)];
              if (b < 0) continue;
              if (g.transposed) {
                f(xbase + s, ybase + b, wbase + k);
              } else {
                f(xbase + b, ybase + s, wbase + k);
              }
            }
          }
        }
      }
    }
  }
}

std::vector<int64_t> OutputSizes(const ConvGeometry& g) {
  std::vector<int64_t> s = {g.n, g.cout};
  s.insert(s.end(), g.out_sp.begin(), g.out_sp.end());
  return s;
}

// Unbatched convolutions run as a batch of one.
bool Unbatched(const Tensor& input, const Tensor& weight) {
  return input.dim() == weight.dim() - 1;
}

Tensor Batched(const Tensor& t, bool unbatched) {
  if (!unbatched) return t;
  std::vector<int64_t> s = t.sizes();
  s.insert(s.begin(), 1);
  return ReshapeTensor(t, s);
}

Tensor Unbatch(const Tensor& t, bool unbatched) {
  if (!unbatched) return t;
  std::vector<int64_t> s(t.sizes().begin() + 1, t.sizes().end());
  return ReshapeTensor(t, s);
}

std::vector<Value> Convolution(const OpCall& c) {
  const Tensor weight = c.GetTensor(1, "weight");
  const Tensor input_in = c.GetTensor(0, "input");
  const bool unbatched = Unbatched(input_in, weight);
  const Tensor input = Batched(input_in, unbatched);
  const Tensor bias = c.GetOptTensor(2, "bias");
  const ConvGeometry g =
      MakeGeometry(input.sizes(), weight.sizes(), c.GetInts(3, "stride"), c.GetInts(4, "padding"),
                   c.GetInts(5, "dilation"), c.GetBool(6, "transposed", false),
                   c.GetInts(7, "output_padding", {}), c.GetInt(8, "groups", 1));
  Check(input.dtype() == weight.dtype(), "convolution: input and weight dtypes differ");
  const std::vector<double> x = input.ToDoubles();
  const std::vector<double> w = weight.ToDoubles();
  std::vector<double> y(static_cast<size_t>(g.n * g.cout * g.out_size), 0.0);
  ForEachTap(g, [&](int64_t xi, int64_t yi, int64_t wi) {
    y[static_cast<size_t>(yi)] += x[static_cast<size_t>(xi)] * w[static_cast<size_t>(wi)];
  });
  if (bias.defined()) {
    Check(bias.numel() == g.cout, "convolution: bias must have ", g.cout, " elements");
    const std::vector<double> b = bias.ToDoubles();
    for (size_t i = 0; i < y.size(); ++i) {
      y[i] += b[static_cast<size_t>((static_cast<int64_t>(i) / g.out_size) % g.cout)];
    }
  }
  return One(Unbatch(MakeTensor(OutputSizes(g), input.dtype(), y), unbatched));
}

std::vector<Value> ConvolutionBackward(const OpCall& c) {
  const Tensor weight = c.GetTensor(2, "weight");
  const Tensor input_in = c.GetTensor(1, "input");
  const bool unbatched = Unbatched(input_in, weight);
  const Tensor input = Batched(input_in, unbatched);
  const Tensor grad_out = Batched(c.GetTensor(0, "grad_output"), unbatched);
  const ConvGeometry g =
      MakeGeometry(input.sizes(), weight.sizes(), c.GetInts(4, "stride"), c.GetInts(5, "padding"),
                   c.GetInts(6, "dilation"), c.GetBool(7, "transposed", false),
                   c.GetInts(8, "output_padding", {}), c.GetInt(9, "groups", 1));
  const std::vector<bool> mask = c.GetBools(10, "output_mask", {true, true, true});
  Check(mask.size() == 3, "output_mask must have 3 entries");
  Check(grad_out.sizes() == OutputSizes(g), "convolution_backward: grad_output ",
        grad_out.DebugString(), " does not match the output [", absl::StrJoin(OutputSizes(g), ", "),
        "]");
  const std::vector<double> x = input.ToDoubles();
  const std::vector<double> w = weight.ToDoubles();
  const std::vector<double> gy = grad_out.ToDoubles();
  std::vector<double> gx(x.size(), 0.0);
  std::vector<double> gw(w.size(), 0.0);
  ForEachTap(g, [&](int64_t xi, int64_t yi, int64_t wi) {
    const double go = gy[static_cast<size_t>(yi)];
    gx[static_cast<size_t>(xi)] += go * w[static_cast<size_t>(wi)];
    gw[static_cast<size_t>(wi)] += go * x[static_cast<size_t>(xi)];
  });
  std::vector<double> gb(static_cast<size_t>(g.cout), 0.0);
  for (size_t i = 0; i < gy.size(); ++i) {
    gb[static_cast<size_t>((static_cast<int64_t>(i) / g.out_size) % g.cout)] += gy[i];
  }
  std::vector<Value> out;
  out.emplace_back(mask[0] ? Value(Unbatch(MakeTensor(input.sizes(), input.dtype(), gx), unbatched))
                           : Value(None{}));
  out.emplace_back(mask[1] ? Value(MakeTensor(weight.sizes(), weight.dtype(), gw)) : Value(None{}));
  out.emplace_back(mask[2] ? Value(MakeTensor({g.cout}, grad_out.dtype(), gb)) : Value(None{}));
  return out;
}

// ---- Max pooling ----

struct Pool2d {
  int64_t planes = 1, h = 0, w = 0, oh = 0, ow = 0;
  int64_t kh, kw, sh, sw, ph, pw, dh, dw;
  std::vector<int64_t> out_sizes;
};

int64_t PoolOutputSize(int64_t in, int64_t k, int64_t pad, int64_t stride, int64_t dil,
                       bool ceil_mode) {
  const int64_t num = in + 2 * pad - dil * (k - 1) - 1 + (ceil_mode ? stride - 1 : 0);
  int64_t out = (num >= 0 ? num / stride : -((-num + stride - 1) / stride)) + 1;
  if (ceil_mode && (out - 1) * stride >= in + pad) --out;
  return out;
}

Pool2d MakePool(const OpCall& c, const Tensor& self, int first) {
  Check(self.dim() == 3 || self.dim() == 4, "max_pool2d: expected a 3-d or 4-d input, got ",
        self.DebugString());
  Pool2d p;
  const std::vector<int64_t> k = Expand(c.GetInts(first, "kernel_size"), 2, "kernel_size");
  std::vector<int64_t> s = c.GetInts(first + 1, "stride", {});
  s = s.empty() ? k : Expand(s, 2, "stride");
  const std::vector<int64_t> pad = Expand(c.GetInts(first + 2, "padding", {0}), 2, "padding");
  const std::vector<int64_t> dil = Expand(c.GetInts(first + 3, "dilation", {1}), 2, "dilation");
  const bool ceil_mode = c.GetBool(first + 4, "ceil_mode", false);
  p.kh = k[0];
  p.kw = k[1];
  p.sh = s[0];
  p.sw = s[1];
  p.ph = pad[0];
  p.pw = pad[1];
  p.dh = dil[0];
  p.dw = dil[1];
  Check(p.ph <= p.kh / 2 && p.pw <= p.kw / 2,
        "max_pool2d: padding must be at most half the kernel");
  Check(p.sh > 0 && p.sw > 0 && p.dh > 0 && p.dw > 0,
        "max_pool2d: stride and dilation must be positive");
  p.h = self.size(self.dim() - 2);
  p.w = self.size(self.dim() - 1);
  for (int64_t d = 0; d < self.dim() - 2; ++d) p.planes *= self.size(d);
  p.oh = PoolOutputSize(p.h, p.kh, p.ph, p.sh, p.dh, ceil_mode);
  p.ow = PoolOutputSize(p.w, p.kw, p.pw, p.sw, p.dw, ceil_mode);
  Check(p.oh > 0 && p.ow > 0, "max_pool2d: the output would be empty");
  p.out_sizes = self.sizes();
  p.out_sizes[p.out_sizes.size() - 2] = p.oh;
  p.out_sizes[p.out_sizes.size() - 1] = p.ow;
  return p;
}

std::vector<Value> MaxPool2d(const OpCall& c) {
  const Tensor self = c.GetTensor(0, "self");
  const Pool2d p = MakePool(c, self, 1);
  const std::vector<double> x = self.ToDoubles();
  std::vector<double> y(static_cast<size_t>(p.planes * p.oh * p.ow));
  std::vector<int64_t> idx(y.size());
  for (int64_t pl = 0; pl < p.planes; ++pl) {
    const double* plane = x.data() + pl * p.h * p.w;
    for (int64_t i = 0; i < p.oh; ++i) {
      for (int64_t j = 0; j < p.ow; ++j) {
        // As ATen: start at the window's first in-bounds element; a larger value or a NaN
        // takes over.
        int64_t h0 = i * p.sh - p.ph;
        while (h0 < 0) h0 += p.dh;
        int64_t w0 = j * p.sw - p.pw;
        while (w0 < 0) w0 += p.dw;
        double best = -std::numeric_limits<double>::infinity();
        int64_t best_idx = h0 * p.w + w0;
        for (int64_t a = 0; a < p.kh; ++a) {
          const int64_t hh = i * p.sh - p.ph + a * p.dh;
          if (hh < 0 || hh >= p.h) continue;
          for (int64_t b = 0; b < p.kw; ++b) {
            const int64_t ww = j * p.sw - p.pw + b * p.dw;
            if (ww < 0 || ww >= p.w) continue;
            const double v = plane[hh * p.w + ww];
            if (v > best || std::isnan(v)) {
              best = v;
              best_idx = hh * p.w + ww;
            }
          }
        }
        const size_t o = static_cast<size_t>((pl * p.oh + i) * p.ow + j);
        y[o] = best;
        idx[o] = best_idx;
      }
    }
  }
  return {MakeTensor(p.out_sizes, self.dtype(), y),
          Tensor::FromInts(p.out_sizes, v1::DTYPE_INT64, idx)};
}

std::vector<Value> MaxPool2dBackward(const OpCall& c) {
  const Tensor grad = c.GetTensor(0, "grad_output");
  const Tensor self = c.GetTensor(1, "self");
  const Pool2d p = MakePool(c, self, 2);
  const Tensor indices = c.GetTensor(7, "indices");
  Check(grad.sizes() == p.out_sizes && indices.sizes() == p.out_sizes,
        "max_pool2d_with_indices_backward: grad_output and indices must be [",
        absl::StrJoin(p.out_sizes, ", "), "]");
  const std::vector<double> g = grad.ToDoubles();
  const std::vector<int64_t> idx = indices.ToInts();
  std::vector<double> gx(static_cast<size_t>(self.numel()), 0.0);
  for (int64_t pl = 0; pl < p.planes; ++pl) {
    for (int64_t o = 0; o < p.oh * p.ow; ++o) {
      const size_t k = static_cast<size_t>(pl * p.oh * p.ow + o);
      const int64_t i = idx[k];
      Check(i >= 0 && i < p.h * p.w, "max_pool2d_with_indices_backward: index ", i,
            " is out of range");
      gx[static_cast<size_t>(pl * p.h * p.w + i)] += g[k];
    }
  }
  return One(MakeTensor(self.sizes(), grad.dtype(), gx));
}

}  // namespace

void RegisterConvOps(OpRegistry& r) {
  r.Add("aten.convolution.default", Convolution);
  r.Add("aten.convolution_backward.default", ConvolutionBackward);
}

void RegisterPoolOps(OpRegistry& r) {
  r.Add("aten.max_pool2d_with_indices.default", MaxPool2d);
  r.Add("aten.max_pool2d_with_indices_backward.default", MaxPool2dBackward);
}

}  // namespace kiln::interp
