// Neural-network ops and their backwards: softmax and log-softmax, layer, batch and group
// norm, nll and mse losses, embedding, convolution, max pooling, scaled-dot-product attention, and
// the scatter-shaped backwards of views (slice_backward, select_backward, *_scatter). Each is
// computed from its mathematical definition in double; the backwards are checked against finite
// differences of the forwards in tests.

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_join.h"
#include "compiler/interp/op_registry.h"
#include "compiler/interp/philox.h"

namespace kiln::interp {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// The dtype statistics (mean, rstd, logsumexp) are kept in: float32 for half inputs, as
// the accumulation type of CUDA kernels.
DType AccType(DType dtype) {
  return (dtype == v1::DTYPE_FLOAT16 || dtype == v1::DTYPE_BFLOAT16) ? v1::DTYPE_FLOAT32 : dtype;
}

std::vector<Value> Values(std::initializer_list<Tensor> ts) {
  std::vector<Value> out;
  for (const Tensor& t : ts) {
    if (t.defined()) {
      out.emplace_back(t);
    } else {
      out.emplace_back(None{});
    }
  }
  return out;
}

// ---- Softmax family ----

std::vector<double> SoftmaxLanes(const Tensor& self, int64_t dim, bool log) {
  std::vector<double> v = self.ToDoubles();
  const Lanes lanes(self.sizes(), dim);
  for (int64_t l = 0; l < lanes.count() && lanes.n > 0; ++l) {
    double m = -kInf;
    for (int64_t k = 0; k < lanes.n; ++k) m = std::max(m, v[static_cast<size_t>(lanes.At(l, k))]);
    if (std::isinf(m) && m < 0) m = 0;  // an all -inf lane: exp gives 0s, log gives -inf
    double sum = 0;
    for (int64_t k = 0; k < lanes.n; ++k)
      sum += std::exp(v[static_cast<size_t>(lanes.At(l, k))] - m);
    const double lse = m + std::log(sum);
    for (int64_t k = 0; k < lanes.n; ++k) {
      double& x = v[static_cast<size_t>(lanes.At(l, k))];
      x = log ? x - lse : std::exp(x - lse);
    }
  }
  return v;
}

Tensor Softmax(const Tensor& self, int64_t dim_arg, DType out, bool log) {
  const int64_t dim = WrapDim(dim_arg, self.dim());
  return MakeTensor(self.sizes(), out, SoftmaxLanes(self, self.dim() == 0 ? 0 : dim, log));
}

Tensor SoftmaxBackward(const Tensor& grad, const Tensor& output, int64_t dim_arg, DType out,
                       bool log) {
  const int64_t dim = output.dim() == 0 ? 0 : WrapDim(dim_arg, output.dim());
  const std::vector<double> g = ExpandTo(grad, output.sizes()).ToDoubles();
  const std::vector<double> y = output.ToDoubles();
  std::vector<double> r(g.size());
  const Lanes lanes(output.sizes(), dim);
  for (int64_t l = 0; l < lanes.count(); ++l) {
    double acc = 0;
    for (int64_t k = 0; k < lanes.n; ++k) {
      const size_t i = static_cast<size_t>(lanes.At(l, k));
      acc += log ? g[i] : g[i] * y[i];
    }
    for (int64_t k = 0; k < lanes.n; ++k) {
      const size_t i = static_cast<size_t>(lanes.At(l, k));
      r[i] = log ? g[i] - std::exp(y[i]) * acc : y[i] * (g[i] - acc);
    }
  }
  return MakeTensor(output.sizes(), out, r);
}

// ---- Layer norm ----

int64_t NormAxis(const Tensor& input, const std::vector<int64_t>& normalized_shape) {
  const int64_t axis = input.dim() - static_cast<int64_t>(normalized_shape.size());
  Check(axis >= 0, "layer_norm: normalized_shape [", absl::StrJoin(normalized_shape, ", "),
        "] has more dims than the input ", input.DebugString());
  for (size_t i = 0; i < normalized_shape.size(); ++i) {
    Check(input.size(axis + static_cast<int64_t>(i)) == normalized_shape[i], "layer_norm: input ",
          input.DebugString(), " does not end in normalized_shape [",
          absl::StrJoin(normalized_shape, ", "), "]");
  }
  return axis;
}

std::vector<int64_t> StatShape(const Tensor& input, int64_t axis) {
  std::vector<int64_t> s(input.sizes().begin(), input.sizes().begin() + axis);
  for (int64_t d = axis; d < input.dim(); ++d) s.push_back(1);
  return s;
}

std::vector<double> OptionalValues(const Tensor& t, int64_t n, double fallback) {
  if (!t.defined()) return std::vector<double>(static_cast<size_t>(n), fallback);
  Check(t.numel() == n, "expected ", n, " elements, got ", t.DebugString());
  return t.ToDoubles();
}

std::vector<Value> LayerNorm(const OpCall& c) {
  const Tensor input = c.GetTensor(0, "input");
  const std::vector<int64_t> shape = c.GetInts(1, "normalized_shape");
  const Tensor weight = c.GetOptTensor(2, "weight");
  const Tensor bias = c.GetOptTensor(3, "bias");
  const double eps = c.GetDouble(4, "eps");
  const int64_t axis = NormAxis(input, shape);
  const int64_t n = NumElements(shape);
  const int64_t m = n == 0 ? 0 : input.numel() / n;
  const std::vector<double> x = input.ToDoubles();
  const std::vector<double> w = OptionalValues(weight, n, 1.0);
  const std::vector<double> b = OptionalValues(bias, n, 0.0);
  std::vector<double> y(x.size());
  std::vector<double> mean(static_cast<size_t>(m));
  std::vector<double> rstd(static_cast<size_t>(m));
  for (int64_t i = 0; i < m; ++i) {
    const double* row = x.data() + i * n;
    double mu = 0;
    for (int64_t j = 0; j < n; ++j) mu += row[j];
    mu /= static_cast<double>(n);
    double var = 0;
    for (int64_t j = 0; j < n; ++j) var += (row[j] - mu) * (row[j] - mu);
    var /= static_cast<double>(n);
    const double r = 1.0 / std::sqrt(var + eps);
    mean[static_cast<size_t>(i)] = mu;
    rstd[static_cast<size_t>(i)] = r;
    for (int64_t j = 0; j < n; ++j) {
      y[static_cast<size_t>(i * n + j)] =
          (row[j] - mu) * r * w[static_cast<size_t>(j)] + b[static_cast<size_t>(j)];
    }
  }
  const DType acc = AccType(input.dtype());
  return Values({MakeTensor(input.sizes(), input.dtype(), y),
                 MakeTensor(StatShape(input, axis), acc, mean),
                 MakeTensor(StatShape(input, axis), acc, rstd)});
}

std::vector<Value> LayerNormBackward(const OpCall& c) {
  const Tensor grad_out = c.GetTensor(0, "grad_out");
  const Tensor input = c.GetTensor(1, "input");
  const std::vector<int64_t> shape = c.GetInts(2, "normalized_shape");
  const Tensor mean_t = c.GetTensor(3, "mean");
  const Tensor rstd_t = c.GetTensor(4, "rstd");
  const Tensor weight = c.GetOptTensor(5, "weight");
  const Tensor bias = c.GetOptTensor(6, "bias");
  const std::vector<bool> mask = c.GetBools(7, "output_mask", {true, true, true});
  Check(mask.size() == 3, "output_mask must have 3 entries");
  NormAxis(input, shape);
  const int64_t n = NumElements(shape);
  const int64_t m = n == 0 ? 0 : input.numel() / n;
  Check(mean_t.numel() == m && rstd_t.numel() == m, "layer_norm_backward: mean/rstd must have ", m,
        " elements");
  const std::vector<double> x = input.ToDoubles();
  const std::vector<double> g = ExpandTo(grad_out, input.sizes()).ToDoubles();
  const std::vector<double> mean = mean_t.ToDoubles();
  const std::vector<double> rstd = rstd_t.ToDoubles();
  const std::vector<double> w = OptionalValues(weight, n, 1.0);
  std::vector<double> dx(x.size());
  std::vector<double> dw(static_cast<size_t>(n), 0.0);
  std::vector<double> db(static_cast<size_t>(n), 0.0);
  for (int64_t i = 0; i < m; ++i) {
    const double mu = mean[static_cast<size_t>(i)];
    const double r = rstd[static_cast<size_t>(i)];
    double sum_gw = 0;
    double sum_gw_xhat = 0;
    for (int64_t j = 0; j < n; ++j) {
      const size_t k = static_cast<size_t>(i * n + j);
      const double xhat = (x[k] - mu) * r;
      const double gw = g[k] * w[static_cast<size_t>(j)];
      sum_gw += gw;
      sum_gw_xhat += gw * xhat;
      dw[static_cast<size_t>(j)] += g[k] * xhat;
      db[static_cast<size_t>(j)] += g[k];
    }
    for (int64_t j = 0; j < n; ++j) {
      const size_t k = static_cast<size_t>(i * n + j);
      const double xhat = (x[k] - mu) * r;
      const double gw = g[k] * w[static_cast<size_t>(j)];
      dx[k] =
          r / static_cast<double>(n) * (static_cast<double>(n) * gw - sum_gw - xhat * sum_gw_xhat);
    }
  }
  return Values(
      {mask[0] ? MakeTensor(input.sizes(), input.dtype(), dx) : Tensor(),
       mask[1] && weight.defined() ? MakeTensor(weight.sizes(), weight.dtype(), dw) : Tensor(),
       mask[2] && bias.defined() ? MakeTensor(bias.sizes(), bias.dtype(), db) : Tensor()});
}

// ---- Batch norm ----

// An input [N, C, *] seen as (N, C, R).
struct ChannelLayout {
  int64_t n = 1;
  int64_t c = 1;
  int64_t r = 1;
  explicit ChannelLayout(const Tensor& input) {
    Check(input.dim() >= 2, "batch_norm expects an input of rank >= 2, got ", input.DebugString());
    n = input.size(0);
    c = input.size(1);
    for (int64_t d = 2; d < input.dim(); ++d) r *= input.size(d);
  }
  size_t At(int64_t i, int64_t ch, int64_t k) const {
    return static_cast<size_t>((i * c + ch) * r + k);
  }
  int64_t PerChannel() const { return n * r; }
};

struct BatchNormOut {
  Tensor out, save_mean, save_invstd, running_mean, running_var;
};

BatchNormOut BatchNorm(const Tensor& input, const Tensor& weight, const Tensor& bias,
                       const Tensor& running_mean, const Tensor& running_var, bool training,
                       double momentum, double eps) {
  const ChannelLayout L(input);
  const std::vector<double> x = input.ToDoubles();
  const std::vector<double> w = OptionalValues(weight, L.c, 1.0);
  const std::vector<double> b = OptionalValues(bias, L.c, 0.0);
  std::vector<double> rm = OptionalValues(running_mean, L.c, 0.0);
  std::vector<double> rv = OptionalValues(running_var, L.c, 1.0);
  std::vector<double> mean(static_cast<size_t>(L.c));
  std::vector<double> invstd(static_cast<size_t>(L.c));
  std::vector<double> y(x.size());
  const double count = static_cast<double>(L.PerChannel());
  for (int64_t ch = 0; ch < L.c; ++ch) {
    double mu;
    double var;
    if (training) {
      Check(L.PerChannel() > 1 || !running_mean.defined(),
            "batch_norm: expected more than 1 value per channel when training");
      mu = 0;
      for (int64_t i = 0; i < L.n; ++i) {
        for (int64_t k = 0; k < L.r; ++k) mu += x[L.At(i, ch, k)];
      }
      mu /= count;
      var = 0;
      for (int64_t i = 0; i < L.n; ++i) {
        for (int64_t k = 0; k < L.r; ++k)
          var += (x[L.At(i, ch, k)] - mu) * (x[L.At(i, ch, k)] - mu);
      }
      var /= count;
      const size_t cc = static_cast<size_t>(ch);
      rm[cc] = (1 - momentum) * rm[cc] + momentum * mu;
      rv[cc] = (1 - momentum) * rv[cc] + momentum * var * count / std::max(count - 1, 1.0);
    } else {
      mu = rm[static_cast<size_t>(ch)];
      var = rv[static_cast<size_t>(ch)];
    }
    const double is = 1.0 / std::sqrt(var + eps);
    mean[static_cast<size_t>(ch)] = mu;
    invstd[static_cast<size_t>(ch)] = is;
    for (int64_t i = 0; i < L.n; ++i) {
      for (int64_t k = 0; k < L.r; ++k) {
        const size_t p = L.At(i, ch, k);
        y[p] = (x[p] - mu) * is * w[static_cast<size_t>(ch)] + b[static_cast<size_t>(ch)];
      }
    }
  }
  BatchNormOut o;
  const DType acc = AccType(input.dtype());
  o.out = MakeTensor(input.sizes(), input.dtype(), y);
  // In evaluation mode too the statistics are [C]: the running mean and 1 / sqrt(running_var
  // + eps), which is what CUDA's batch_norm_cuda_out writes there and what PyTorch's
  // decomposition (and so the graphs' metadata) says for every device but the CPU, whose
  // kernel returns empty tensors instead. Graphs come from CUDA.
  o.save_mean = MakeTensor({L.c}, acc, mean);
  o.save_invstd = MakeTensor({L.c}, acc, invstd);
  if (running_mean.defined()) o.running_mean = MakeTensor({L.c}, running_mean.dtype(), rm);
  if (running_var.defined()) o.running_var = MakeTensor({L.c}, running_var.dtype(), rv);
  return o;
}

std::vector<Value> BatchNormBackward(const OpCall& c) {
  const Tensor grad_out = c.GetTensor(0, "grad_out");
  const Tensor input = c.GetTensor(1, "input");
  const Tensor weight = c.GetOptTensor(2, "weight");
  const Tensor running_mean = c.GetOptTensor(3, "running_mean");
  const Tensor running_var = c.GetOptTensor(4, "running_var");
  const Tensor save_mean = c.GetOptTensor(5, "save_mean");
  const Tensor save_invstd = c.GetOptTensor(6, "save_invstd");
  const bool train = c.GetBool(7, "train", true);
  const double eps = c.GetDouble(8, "eps");
  const std::vector<bool> mask = c.GetBools(9, "output_mask", {true, true, true});
  Check(mask.size() == 3, "output_mask must have 3 entries");
  const ChannelLayout L(input);
  const std::vector<double> x = input.ToDoubles();
  const std::vector<double> g = ExpandTo(grad_out, input.sizes()).ToDoubles();
  const std::vector<double> w = OptionalValues(weight, L.c, 1.0);
  std::vector<double> mean;
  std::vector<double> invstd;
  if (train) {
    mean = OptionalValues(save_mean, L.c, 0.0);
    invstd = OptionalValues(save_invstd, L.c, 1.0);
  } else {
    mean = OptionalValues(running_mean, L.c, 0.0);
    invstd = OptionalValues(running_var, L.c, 1.0);
    for (double& v : invstd) v = 1.0 / std::sqrt(v + eps);
  }
  std::vector<double> dx(x.size());
  std::vector<double> dw(static_cast<size_t>(L.c));
  std::vector<double> db(static_cast<size_t>(L.c));
  const double count = static_cast<double>(L.PerChannel());
  for (int64_t ch = 0; ch < L.c; ++ch) {
    const size_t cc = static_cast<size_t>(ch);
    double sum_g = 0;
    double sum_g_xhat = 0;
    for (int64_t i = 0; i < L.n; ++i) {
      for (int64_t k = 0; k < L.r; ++k) {
        const size_t p = L.At(i, ch, k);
        sum_g += g[p];
        sum_g_xhat += g[p] * (x[p] - mean[cc]) * invstd[cc];
      }
    }
    dw[cc] = sum_g_xhat;
    db[cc] = sum_g;
    for (int64_t i = 0; i < L.n; ++i) {
      for (int64_t k = 0; k < L.r; ++k) {
        const size_t p = L.At(i, ch, k);
        if (train) {
          const double xhat = (x[p] - mean[cc]) * invstd[cc];
          dx[p] = (g[p] - sum_g / count - xhat * sum_g_xhat / count) * invstd[cc] * w[cc];
        } else {
          dx[p] = g[p] * invstd[cc] * w[cc];
        }
      }
    }
  }
  const DType wdtype = weight.defined() ? weight.dtype() : AccType(input.dtype());
  return Values({mask[0] ? MakeTensor(input.sizes(), input.dtype(), dx) : Tensor(),
                 mask[1] ? MakeTensor({L.c}, wdtype, dw) : Tensor(),
                 mask[2] ? MakeTensor({L.c}, wdtype, db) : Tensor()});
}

// ---- Group norm ----

// An input [N, C, *] with its channels in `groups` groups: element k of channel ch of sample
// i sits at (i * c + ch) * hw + k, and a group's elements are consecutive.
struct GroupLayout {
  int64_t n, c, hw, groups;
  GroupLayout(const OpCall& call, int first, const Tensor& input)
      : n(call.GetInt(first, "N")),
        c(call.GetInt(first + 1, "C")),
        hw(call.GetInt(first + 2, "HxW")),
        groups(call.GetInt(first + 3, "group")) {
    Check(groups > 0 && c % groups == 0, "group_norm: ", c, " channels do not split into ", groups,
          " groups");
    Check(n * c * hw == input.numel(), "group_norm: N * C * HxW = ", n * c * hw,
          " does not match the input ", input.DebugString());
  }
  int64_t GroupSize() const { return c / groups * hw; }
  int64_t Channel(int64_t group, int64_t k) const { return group * (c / groups) + k / hw; }
};

// The dtype of the statistics and parameter gradients: the input's, or float32 when
// reduced-precision inputs come with float32 parameters, as ATen's param_scalar_type.
DType GroupNormParamType(const Tensor& input, const Tensor& weight) {
  if (weight.defined() && weight.dtype() != input.dtype() &&
      AccType(input.dtype()) == weight.dtype()) {
    return weight.dtype();
  }
  return input.dtype();
}

std::vector<Value> GroupNorm(const OpCall& c) {
  const Tensor input = c.GetTensor(0, "input");
  const Tensor weight = c.GetOptTensor(1, "weight");
  const Tensor bias = c.GetOptTensor(2, "bias");
  const GroupLayout L(c, 3, input);
  const double eps = c.GetDouble(7, "eps");
  const std::vector<double> x = input.ToDoubles();
  const std::vector<double> w = OptionalValues(weight, L.c, 1.0);
  const std::vector<double> b = OptionalValues(bias, L.c, 0.0);
  const int64_t d = L.GroupSize();
  std::vector<double> y(x.size());
  std::vector<double> mean(static_cast<size_t>(L.n * L.groups));
  std::vector<double> rstd(mean.size());
  for (int64_t g = 0; g < L.n * L.groups; ++g) {
    const double* row = x.data() + g * d;
    double mu = 0;
    for (int64_t k = 0; k < d; ++k) mu += row[k];
    mu /= static_cast<double>(d);
    double var = 0;
    for (int64_t k = 0; k < d; ++k) var += (row[k] - mu) * (row[k] - mu);
    var /= static_cast<double>(d);
    const double r = 1.0 / std::sqrt(var + eps);
    mean[static_cast<size_t>(g)] = mu;
    rstd[static_cast<size_t>(g)] = r;
    for (int64_t k = 0; k < d; ++k) {
      const size_t ch = static_cast<size_t>(L.Channel(g % L.groups, k));
      y[static_cast<size_t>(g * d + k)] = (row[k] - mu) * r * w[ch] + b[ch];
    }
  }
  const DType stat = GroupNormParamType(input, weight);
  return Values({MakeTensor(input.sizes(), input.dtype(), y),
                 MakeTensor({L.n, L.groups}, stat, mean), MakeTensor({L.n, L.groups}, stat, rstd)});
}

std::vector<Value> GroupNormBackward(const OpCall& c) {
  const Tensor grad_out = c.GetTensor(0, "grad_out");
  const Tensor input = c.GetTensor(1, "input");
  const Tensor mean_t = c.GetTensor(2, "mean");
  const Tensor rstd_t = c.GetTensor(3, "rstd");
  const Tensor weight = c.GetOptTensor(4, "weight");
  const GroupLayout L(c, 5, input);
  const std::vector<bool> mask = c.GetBools(9, "output_mask", {true, true, true});
  Check(mask.size() == 3, "output_mask must have 3 entries");
  Check(grad_out.sizes() == input.sizes(), "group_norm_backward: grad_out ", grad_out.DebugString(),
        " does not match the input ", input.DebugString());
  const std::vector<double> x = input.ToDoubles();
  const std::vector<double> g = grad_out.ToDoubles();
  const std::vector<double> w = OptionalValues(weight, L.c, 1.0);
  const std::vector<double> mean = OptionalValues(mean_t, L.n * L.groups, 0.0);
  const std::vector<double> rstd = OptionalValues(rstd_t, L.n * L.groups, 1.0);
  const int64_t d = L.GroupSize();
  std::vector<double> dx(x.size());
  std::vector<double> dw(static_cast<size_t>(L.c), 0.0);
  std::vector<double> db(static_cast<size_t>(L.c), 0.0);
  for (int64_t grp = 0; grp < L.n * L.groups; ++grp) {
    const double mu = mean[static_cast<size_t>(grp)];
    const double r = rstd[static_cast<size_t>(grp)];
    // With xhat = (x - mean) * rstd and gw = grad * weight:
    // dx = rstd * (gw - mean(gw) - xhat * mean(gw * xhat)).
    double sum_gw = 0;
    double sum_gw_xhat = 0;
    for (int64_t k = 0; k < d; ++k) {
      const size_t p = static_cast<size_t>(grp * d + k);
      const size_t ch = static_cast<size_t>(L.Channel(grp % L.groups, k));
      const double xhat = (x[p] - mu) * r;
      sum_gw += g[p] * w[ch];
      sum_gw_xhat += g[p] * w[ch] * xhat;
      dw[ch] += g[p] * xhat;
      db[ch] += g[p];
    }
    for (int64_t k = 0; k < d; ++k) {
      const size_t p = static_cast<size_t>(grp * d + k);
      const size_t ch = static_cast<size_t>(L.Channel(grp % L.groups, k));
      const double xhat = (x[p] - mu) * r;
      dx[p] = r * (g[p] * w[ch] - sum_gw / static_cast<double>(d) -
                   xhat * sum_gw_xhat / static_cast<double>(d));
    }
  }
  const DType param = GroupNormParamType(input, weight);
  return Values({mask[0] ? MakeTensor(input.sizes(), input.dtype(), dx) : Tensor(),
                 mask[1] ? MakeTensor({L.c}, param, dw) : Tensor(),
                 mask[2] ? MakeTensor({L.c}, param, db) : Tensor()});
}

// ---- nll loss ----

// self [N, C] or [C]; target [N] or [].
struct NllShape {
  int64_t n = 1;
  int64_t classes = 0;
  bool batched = true;
};

NllShape CheckNll(const Tensor& self, const Tensor& target) {
  Check(self.dim() == 1 || self.dim() == 2, "nll_loss: self must be 1-d or 2-d, got ",
        self.DebugString());
  Check(StoresInts(target.dtype()), "nll_loss: target must be an integer tensor");
  NllShape s;
  s.batched = self.dim() == 2;
  s.n = s.batched ? self.size(0) : 1;
  s.classes = self.size(self.dim() - 1);
  Check(target.numel() == s.n && target.dim() == (s.batched ? 1 : 0), "nll_loss: target ",
        target.DebugString(), " does not match self ", self.DebugString());
  return s;
}

std::vector<Value> NllForward(const OpCall& c) {
  const Tensor self = c.GetTensor(0, "self");
  const Tensor target = c.GetTensor(1, "target");
  const Tensor weight = c.GetOptTensor(2, "weight");
  const int64_t reduction = c.GetInt(3, "reduction", 1);
  const int64_t ignore = c.GetInt(4, "ignore_index", -100);
  const NllShape s = CheckNll(self, target);
  const std::vector<double> x = self.ToDoubles();
  const std::vector<int64_t> t = target.ToInts();
  const std::vector<double> w = OptionalValues(weight, s.classes, 1.0);
  std::vector<double> losses(static_cast<size_t>(s.n), 0.0);
  double total_weight = 0;
  double total = 0;
  for (int64_t i = 0; i < s.n; ++i) {
    const int64_t cls = t[static_cast<size_t>(i)];
    if (cls == ignore) continue;
    Check(cls >= 0 && cls < s.classes, "nll_loss: target ", cls, " is out of bounds for ",
          s.classes, " classes");
    const double wi = w[static_cast<size_t>(cls)];
    losses[static_cast<size_t>(i)] = -wi * x[static_cast<size_t>(i * s.classes + cls)];
    total_weight += wi;
    total += losses[static_cast<size_t>(i)];
  }
  if (reduction == 0 && s.batched) {
    return Values({MakeTensor({s.n}, self.dtype(), losses), Tensor::Zeros({}, self.dtype())});
  }
  double out = total;
  if (reduction == 1) out = total / total_weight;
  return Values(
      {MakeTensor({}, self.dtype(), {out}), MakeTensor({}, self.dtype(), {total_weight})});
}

std::vector<Value> NllBackward(const OpCall& c) {
  const Tensor grad = c.GetTensor(0, "grad_output");
  const Tensor self = c.GetTensor(1, "self");
  const Tensor target = c.GetTensor(2, "target");
  const Tensor weight = c.GetOptTensor(3, "weight");
  const int64_t reduction = c.GetInt(4, "reduction", 1);
  const int64_t ignore = c.GetInt(5, "ignore_index", -100);
  const Tensor total_weight = c.GetTensor(6, "total_weight");
  const NllShape s = CheckNll(self, target);
  const std::vector<int64_t> t = target.ToInts();
  const std::vector<double> w = OptionalValues(weight, s.classes, 1.0);
  const std::vector<double> g = grad.ToDoubles();
  const bool per_element = reduction == 0 && s.batched;
  Check(static_cast<int64_t>(g.size()) == (per_element ? s.n : 1),
        "nll_loss_backward: grad_output ", grad.DebugString(), " does not match the reduction");
  std::vector<double> dx(static_cast<size_t>(self.numel()), 0.0);
  const double tw = total_weight.Item();
  for (int64_t i = 0; i < s.n; ++i) {
    const int64_t cls = t[static_cast<size_t>(i)];
    if (cls == ignore) continue;
    Check(cls >= 0 && cls < s.classes, "nll_loss_backward: target ", cls, " is out of bounds for ",
          s.classes, " classes");
    double gi = per_element ? g[static_cast<size_t>(i)] : g[0];
    if (reduction == 1) gi /= tw;
    dx[static_cast<size_t>(i * s.classes + cls)] = -w[static_cast<size_t>(cls)] * gi;
  }
  return One(MakeTensor(self.sizes(), self.dtype(), dx));
}

// ---- mse loss ----

// Reductions as PyTorch numbers them (at::Reduction).
constexpr int64_t kReduceNone = 0;
constexpr int64_t kReduceMean = 1;
constexpr int64_t kReduceSum = 2;

Tensor MseLoss(const Tensor& self, const Tensor& target, int64_t reduction) {
  const DType dtype = PromoteTypes(self.dtype(), target.dtype());
  Check(IsFloating(dtype), "mse_loss is not implemented for ", DTypeName(dtype));
  const Tensor loss = MapDoubles({self, target}, dtype, [](const double* v) {
    const double d = v[0] - v[1];
    return d * d;
  });
  if (reduction == kReduceNone) return loss;
  Check(reduction == kReduceMean || reduction == kReduceSum, "mse_loss: unknown reduction ",
        reduction);
  double total = 0;
  for (double v : loss.ToDoubles()) total += v;
  if (reduction == kReduceMean) total /= static_cast<double>(loss.numel());
  return MakeTensor({}, dtype, {total});
}

// d/dself of mse_loss: 2 (self - target) grad, divided by self's element count for a mean.
Tensor MseLossBackward(const Tensor& grad, const Tensor& self, const Tensor& target,
                       int64_t reduction) {
  const DType dtype = PromoteTypes(PromoteTypes(self.dtype(), target.dtype()), grad.dtype());
  Check(IsFloating(dtype), "mse_loss_backward is not implemented for ", DTypeName(dtype));
  const double norm = reduction == kReduceMean ? 2.0 / static_cast<double>(self.numel()) : 2.0;
  return MapDoubles({self, target, grad}, dtype,
                    [norm](const double* v) { return norm * (v[0] - v[1]) * v[2]; });
}

// ---- Embedding ----

Tensor Embedding(const Tensor& weight, const Tensor& indices) {
  Check(weight.dim() == 2, "embedding: weight must be 2-d, got ", weight.DebugString());
  Check(StoresInts(indices.dtype()) && indices.dtype() != v1::DTYPE_BOOL,
        "embedding: indices must be integers");
  const int64_t v = weight.size(0);
  const int64_t d = weight.size(1);
  const std::vector<int64_t> idx = indices.ToInts();
  const std::vector<double> w = weight.ToDoubles();
  std::vector<double> out(idx.size() * static_cast<size_t>(d));
  for (size_t i = 0; i < idx.size(); ++i) {
    Check(idx[i] >= 0 && idx[i] < v, "embedding: index ", idx[i], " is out of range for ", v,
          " rows");
    std::copy_n(w.begin() + idx[i] * d, d, out.begin() + static_cast<int64_t>(i) * d);
  }
  std::vector<int64_t> sizes = indices.sizes();
  sizes.push_back(d);
  return MakeTensor(sizes, weight.dtype(), out);
}

Tensor EmbeddingBackward(const Tensor& grad, const Tensor& indices, int64_t num_weights,
                         int64_t padding_idx, bool scale_grad_by_freq) {
  const std::vector<int64_t> idx = indices.ToInts();
  Check(grad.dim() >= 1, "embedding_dense_backward: grad must have a feature dim");
  const int64_t d = grad.size(grad.dim() - 1);
  Check(grad.numel() == static_cast<int64_t>(idx.size()) * d, "embedding_dense_backward: grad ",
        grad.DebugString(), " does not match indices ", indices.DebugString());
  const std::vector<double> g = grad.ToDoubles();
  std::vector<int64_t> counts(static_cast<size_t>(num_weights), 0);
  for (int64_t i : idx) {
    Check(i >= 0 && i < num_weights, "embedding_dense_backward: index ", i, " is out of range for ",
          num_weights, " rows");
    ++counts[static_cast<size_t>(i)];
  }
  std::vector<double> out(static_cast<size_t>(num_weights * d), 0.0);
  for (size_t i = 0; i < idx.size(); ++i) {
    if (idx[i] == padding_idx) continue;
    const double scale =
        scale_grad_by_freq ? 1.0 / static_cast<double>(counts[static_cast<size_t>(idx[i])]) : 1.0;
    for (int64_t k = 0; k < d; ++k) {
      out[static_cast<size_t>(idx[i] * d + k)] +=
          scale * g[i * static_cast<size_t>(d) + static_cast<size_t>(k)];
    }
  }
  return MakeTensor({num_weights, d}, grad.dtype(), out);
}

}  // namespace

void RegisterNnOps(OpRegistry& r) {
  auto softmax = [](bool log) {
    return [log](OpCall& c) {
      const Tensor self = c.GetTensor(0, "self");
      const bool half_to_float = c.GetBool(2, "half_to_float", false);
      const DType out = half_to_float ? v1::DTYPE_FLOAT32 : FloatResultType(self.dtype());
      return One(Softmax(self, c.GetInt(1, "dim"), out, log));
    };
  };
  r.Add("aten._softmax.default", softmax(false));
  r.Add("aten._log_softmax.default", softmax(true));
  auto softmax_int = [](bool log) {
    return [log](OpCall& c) {
      const Tensor self = c.GetTensor(0, "self");
      const DType out = c.GetOptDType(2, "dtype").value_or(FloatResultType(self.dtype()));
      return One(Softmax(self.To(out), c.GetInt(1, "dim"), out, log));
    };
  };
  // softmax that gives 0s, not NaNs, for a lane of -inf (a fully masked attention row).
  r.Add("aten._safe_softmax.default", [](OpCall& c) {
    const Tensor self = c.GetTensor(0, "self");
    const DType out = c.GetOptDType(2, "dtype").value_or(FloatResultType(self.dtype()));
    const int64_t dim = self.dim() == 0 ? 0 : WrapDim(c.GetInt(1, "dim"), self.dim());
    const Tensor in = self.To(out);
    const std::vector<double> x = in.ToDoubles();
    std::vector<double> y = SoftmaxLanes(in, dim, false);
    const Lanes lanes(self.sizes(), dim);
    for (int64_t l = 0; l < lanes.count(); ++l) {
      bool masked = true;
      for (int64_t k = 0; k < lanes.n; ++k) {
        masked = masked && x[static_cast<size_t>(lanes.At(l, k))] == -kInf;
      }
      if (!masked) continue;
      for (int64_t k = 0; k < lanes.n; ++k) y[static_cast<size_t>(lanes.At(l, k))] = 0;
    }
    return One(MakeTensor(self.sizes(), out, y));
  });
  r.Add("aten.softmax.int", softmax_int(false));
  r.Add("aten.log_softmax.int", softmax_int(true));
  auto softmax_backward = [](bool log) {
    return [log](OpCall& c) {
      const Tensor grad = c.GetTensor(0, "grad_output");
      const Tensor output = c.GetTensor(1, "output");
      const DType out = c.GetOptDType(3, "input_dtype").value_or(grad.dtype());
      return One(SoftmaxBackward(grad, output, c.GetInt(2, "dim"), out, log));
    };
  };
  r.Add("aten._softmax_backward_data.default", softmax_backward(false));
  r.Add("aten._log_softmax_backward_data.default", softmax_backward(true));

  r.Add("aten.native_layer_norm.default", LayerNorm);
  r.Add("aten.native_layer_norm_backward.default", LayerNormBackward);

  r.Add("aten._native_batch_norm_legit_functional.default", [](OpCall& c) {
    const BatchNormOut o = BatchNorm(c.GetTensor(0, "input"), c.GetOptTensor(1, "weight"),
                                     c.GetOptTensor(2, "bias"), c.GetTensor(3, "running_mean"),
                                     c.GetTensor(4, "running_var"), c.GetBool(5, "training", true),
                                     c.GetDouble(6, "momentum"), c.GetDouble(7, "eps"));
    return Values({o.out, o.save_mean, o.save_invstd, o.running_mean, o.running_var});
  });
  // The mutating forms write the new running statistics into their inputs.
  auto legit = [](OpCall& c) {
    Tensor rm = c.GetOptTensor(3, "running_mean");
    Tensor rv = c.GetOptTensor(4, "running_var");
    const BatchNormOut o = BatchNorm(
        c.GetTensor(0, "input"), c.GetOptTensor(1, "weight"), c.GetOptTensor(2, "bias"), rm, rv,
        c.GetBool(5, "training", true), c.GetDouble(6, "momentum"), c.GetDouble(7, "eps"));
    if (rm.defined()) rm.CopyFrom(o.running_mean);
    if (rv.defined()) rv.CopyFrom(o.running_var);
    return Values({o.out, o.save_mean, o.save_invstd});
  };
  r.Add("aten._native_batch_norm_legit.default", legit);
  r.Add("aten.native_batch_norm.default", legit);
  r.Add("aten._native_batch_norm_legit.no_stats", [](OpCall& c) {
    const BatchNormOut o =
        BatchNorm(c.GetTensor(0, "input"), c.GetOptTensor(1, "weight"), c.GetOptTensor(2, "bias"),
                  Tensor(), Tensor(), c.GetBool(3, "training", true), c.GetDouble(4, "momentum"),
                  c.GetDouble(5, "eps"));
    return Values({o.out, o.save_mean, o.save_invstd});
  });
  r.Add("aten._native_batch_norm_legit_no_training.default", [](OpCall& c) {
    const BatchNormOut o =
        BatchNorm(c.GetTensor(0, "input"), c.GetOptTensor(1, "weight"), c.GetOptTensor(2, "bias"),
                  c.GetTensor(3, "running_mean"), c.GetTensor(4, "running_var"), false,
                  c.GetDouble(5, "momentum"), c.GetDouble(6, "eps"));
    return Values({o.out, o.save_mean, o.save_invstd});
  });
  r.Add("aten.native_batch_norm_backward.default", BatchNormBackward);

  r.Add("aten.native_group_norm.default", GroupNorm);
  r.Add("aten.native_group_norm_backward.default", GroupNormBackward);

  r.Add("aten.nll_loss_forward.default", NllForward);
  r.Add("aten.nll_loss_backward.default", NllBackward);

  r.Add("aten.mse_loss.default", [](OpCall& c) {
    return One(MseLoss(c.GetTensor(0, "self"), c.GetTensor(1, "target"),
                       c.GetInt(2, "reduction", kReduceMean)));
  });
  r.Add("aten.mse_loss_backward.default", [](OpCall& c) {
    return One(MseLossBackward(c.GetTensor(0, "grad_output"), c.GetTensor(1, "self"),
                               c.GetTensor(2, "target"), c.GetInt(3, "reduction")));
  });

  r.Add("aten.embedding.default", [](OpCall& c) {
    return One(Embedding(c.GetTensor(0, "weight"), c.GetTensor(1, "indices")));
  });
  r.Add("aten.embedding_dense_backward.default", [](OpCall& c) {
    return One(EmbeddingBackward(c.GetTensor(0, "grad_output"), c.GetTensor(1, "indices"),
                                 c.GetInt(2, "num_weights"), c.GetInt(3, "padding_idx", -1),
                                 c.GetBool(4, "scale_grad_by_freq", false)));
  });

  // Backwards of views: the gradient lands in a zero tensor of the input's shape.
  r.Add("aten.slice_backward.default", [](OpCall& c) {
    const Tensor grad = c.GetTensor(0, "grad_output");
    Tensor out = Tensor::Zeros(c.GetInts(1, "input_sizes"), grad.dtype());
    SliceView(out, c.GetInt(2, "dim"), c.GetInt(3, "start"), c.GetInt(4, "end"),
              c.GetInt(5, "step"))
        .CopyFrom(grad);
    return One(out);
  });
  r.Add("aten.select_backward.default", [](OpCall& c) {
    const Tensor grad = c.GetTensor(0, "grad_output");
    Tensor out = Tensor::Zeros(c.GetInts(1, "input_sizes"), grad.dtype());
    SelectView(out, c.GetInt(2, "dim"), c.GetInt(3, "index")).CopyFrom(grad);
    return One(out);
  });
  r.Add("aten.slice_scatter.default", [](OpCall& c) {
    const Tensor self = c.GetTensor(0, "self");
    Tensor out = self.ClonePreserve(self.dtype());
    SliceView(out, c.GetInt(2, "dim", 0), c.GetOptInt(3, "start"), c.GetOptInt(4, "end"),
              c.GetInt(5, "step", 1))
        .CopyFrom(c.GetTensor(1, "src"));
    return One(out);
  });
  // The clone's own layout is what size, stride and storage_offset address, as in ATen
  // (a clone of a dense input keeps its strides, at offset 0).
  r.Add("aten.as_strided_scatter.default", [](OpCall& c) {
    const Tensor self = c.GetTensor(0, "self");
    const Tensor src = c.GetTensor(1, "src");
    Tensor out = self.ClonePreserve(self.dtype());
    Tensor view = out.AsStrided(c.GetInts(2, "size"), c.GetInts(3, "stride"),
                                c.GetInt(4, "storage_offset", out.storage_offset()));
    Check(view.sizes().size() == view.strides().size(),
          "as_strided_scatter: sizes and strides differ in rank");
    for (int64_t s : view.strides()) {
      Check(s >= 0, "as_strided_scatter: negative strides are not supported");
    }
    Check(view.InBounds(), "as_strided_scatter: the view reaches outside self");
    Check(view.sizes() == src.sizes(), "as_strided_scatter: src ", src.DebugString(),
          " does not have the view's sizes ", view.DebugString());
    view.CopyFrom(src);
    return One(out);
  });
  r.Add("aten.select_scatter.default", [](OpCall& c) {
    const Tensor self = c.GetTensor(0, "self");
    Tensor out = self.ClonePreserve(self.dtype());
    SelectView(out, c.GetInt(2, "dim"), c.GetInt(3, "index")).CopyFrom(c.GetTensor(1, "src"));
    return One(out);
  });

  RegisterConvOps(r);
  RegisterPoolOps(r);
  RegisterAttentionOps(r);
}

}  // namespace kiln::interp
