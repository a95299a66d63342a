// The backward extern ops against finite differences of their forwards, in float64: an
// oracle independent of the interpreter. For a random cotangent r and loss
// L = sum(forward(inputs) * r), each gradient the backward returns must match
// (L(x + h e_i) - L(x - h e_i)) / 2h at sampled positions i.

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "client/runtime/extern_ops.h"
#include "tests/client/runtime/interp_bridge.h"

namespace kiln::runtime {
namespace {

using testing::Bools;
using testing::Ints;
using testing::Layout;
using testing::RandomTensor;
using testing::V;

constexpr auto kF64 = v1::DTYPE_FLOAT64;

class GradientTest : public ::testing::Test {
 protected:
  absl::Status Run(const std::string& op, std::vector<CallValue> args,
                   std::vector<std::pair<std::string, CallValue>> kwargs,
                   std::vector<Tensor> outputs) {
    ExternContext ctx;
    ctx.pool = &pool_;
    return RunExternOp(
        {.op = op, .args = args, .kwargs = kwargs, .outputs = outputs, .context = &ctx});
  }

  // Checks d/dx sum(f() * r) against central differences at up to `samples` positions of x.
  void CheckGradient(const Tensor& x, const Tensor& grad, const std::function<Tensor()>& f,
                     const Tensor& r, const std::string& what, int samples = 12) {
    const std::vector<double> rv = r.ToDoubles();
    auto loss = [&] {
      const std::vector<double> y = f().ToDoubles();
      double l = 0;
      for (size_t i = 0; i < y.size(); ++i) l += y[i] * rv[i];
      return l;
    };
    std::vector<double> xv = x.ToDoubles();
    const std::vector<double> g = grad.ToDoubles();
    std::uniform_int_distribution<size_t> pick(0, xv.size() - 1);
    const double h = 1e-6;
    for (int s = 0; s < samples; ++s) {
      const size_t i = pick(rng_);
      const double saved = xv[i];
      xv[i] = saved + h;
      x.FromDoubles(xv);
      const double up = loss();
      xv[i] = saved - h;
      x.FromDoubles(xv);
      const double down = loss();
      xv[i] = saved;
      x.FromDoubles(xv);
      const double fd = (up - down) / (2 * h);
      EXPECT_NEAR(g[i], fd, 1e-6 * std::max(1.0, std::fabs(fd))) << what << " element " << i;
    }
  }

  ThreadPool pool_{ThreadPoolOptions::ForLoops(2)};
  std::mt19937_64 rng_{99};
};

TEST_F(GradientTest, ConvolutionBackwardMatchesFiniteDifferences) {
  struct Case {
    std::vector<int64_t> input, weight, stride, padding, dilation;
    bool transposed;
    std::vector<int64_t> output_padding;
    int64_t groups;
  };
  const std::vector<Case> cases = {
      {{2, 4, 7, 6}, {6, 2, 3, 2}, {2, 1}, {1, 1}, {1, 2}, false, {0, 0}, 2},
      {{1, 2, 9}, {3, 2, 4}, {3}, {2}, {1}, false, {0}, 1},
      {{2, 4, 4, 3}, {4, 1, 3, 3}, {2, 2}, {1, 0}, {1, 1}, true, {1, 0}, 2},
  };
  for (const Case& c : cases) {
    const Tensor x = RandomTensor(c.input, kF64, Layout::kContiguous, rng_);
    const Tensor w = RandomTensor(c.weight, kF64, Layout::kContiguous, rng_);
    const Tensor b = RandomTensor({c.transposed ? c.weight[1] * c.groups : c.weight[0]}, kF64,
                                  Layout::kContiguous, rng_);
    auto forward_args = [&] {
      return std::vector<CallValue>{V(x),
                                    V(w),
                                    V(b),
                                    Ints(c.stride),
                                    Ints(c.padding),
                                    Ints(c.dilation),
                                    CallValue{c.transposed},
                                    Ints(c.output_padding),
                                    CallValue{c.groups}};
    };
    // The output's shape, from one forward through the interpreter.
    absl::StatusOr<std::vector<interp::Value>> shape =
        testing::RunInterp("aten.convolution.default", forward_args());
    ASSERT_TRUE(shape.ok()) << shape.status();
    const std::vector<int64_t> y_sizes = std::get<interp::Tensor>((*shape)[0]).sizes();
    auto forward = [&] {
      Tensor y = Tensor::Empty(y_sizes, kF64);
      EXPECT_TRUE(Run("aten.convolution.default", forward_args(), {}, {y}).ok());
      return y;
    };
    const Tensor r = RandomTensor(y_sizes, kF64, Layout::kContiguous, rng_);
    const Tensor dx = Tensor::Empty(x.sizes(), kF64);
    const Tensor dw = Tensor::Empty(w.sizes(), kF64);
    const Tensor db = Tensor::Empty(b.sizes(), kF64);
    ASSERT_TRUE(Run("aten.convolution_backward.default",
                    {V(r), V(x), V(w), Ints(b.sizes()), Ints(c.stride), Ints(c.padding),
                     Ints(c.dilation), CallValue{c.transposed}, Ints(c.output_padding),
                     CallValue{c.groups}, Bools({true, true, true})},
                    {}, {dx, dw, db})
                    .ok());
    CheckGradient(x, dx, forward, r, "grad_input");
    CheckGradient(w, dw, forward, r, "grad_weight");
    CheckGradient(b, db, forward, r, "grad_bias");
  }
}

TEST_F(GradientTest, AttentionBackwardMatchesFiniteDifferences) {
  for (bool causal : {false, true}) {
    for (bool cudnn : {false, true}) {
      const int64_t B = 1, H = 2, L = 5, S = cudnn ? 5 : 6, E = 3, Ev = 4;
      const Tensor q = RandomTensor({B, H, L, E}, kF64, Layout::kContiguous, rng_);
      const Tensor k = RandomTensor({B, H, S, E}, kF64, Layout::kContiguous, rng_);
      const Tensor v = RandomTensor({B, H, S, Ev}, kF64, Layout::kContiguous, rng_);
      const Tensor bias = RandomTensor({B, 1, L, S}, kF64, Layout::kContiguous, rng_);
      const std::string fw = cudnn ? "aten._scaled_dot_product_cudnn_attention.default"
                                   : "aten._scaled_dot_product_efficient_attention.default";
      const int64_t lse_len = cudnn ? L : (L + 31) / 32 * 32;
      const std::vector<int64_t> lse_sizes =
          cudnn ? std::vector<int64_t>{B, H, L, 1} : std::vector<int64_t>{B, H, lse_len};
      auto args = [&] {
        return std::vector<CallValue>{V(q),
                                      V(k),
                                      V(v),
                                      cudnn ? CallValue{} : V(bias),
                                      CallValue{true},
                                      CallValue{0.0},
                                      CallValue{causal}};
      };
      const std::vector<std::pair<std::string, CallValue>> kwargs = {{"scale", CallValue{0.8}}};
      Tensor out = Tensor::Empty({B, H, L, Ev}, kF64);
      Tensor lse = Tensor::Empty(lse_sizes, v1::DTYPE_FLOAT32);
      auto forward = [&] {
        Tensor y = Tensor::Empty({B, H, L, Ev}, kF64);
        EXPECT_TRUE(Run(fw, args(), kwargs, {y, Tensor()}).ok());
        return y;
      };
      ASSERT_TRUE(Run(fw, args(), kwargs, {out, lse}).ok());
      // A float32 logsumexp would limit the check to float32 accuracy: recompute it in
      // float64 from the forward's definition instead.
      Tensor lse64 = Tensor::Empty(lse_sizes, kF64);
      {
        const std::vector<double> qv = q.ToDoubles(), kv = k.ToDoubles(), bv = bias.ToDoubles();
        std::vector<double> l(static_cast<size_t>(lse64.numel()), 0.0);
        for (int64_t hd = 0; hd < B * H; ++hd) {
          for (int64_t i = 0; i < L; ++i) {
            std::vector<double> s;
            for (int64_t j = 0; j < S; ++j) {
              if (causal && j > i) continue;
              double dot = 0;
              for (int64_t c = 0; c < E; ++c)
                dot += qv[(hd * L + i) * E + c] * kv[(hd * S + j) * E + c];
              s.push_back(0.8 * dot + (cudnn ? 0.0 : bv[(i * S + j)]));
            }
            double m = -INFINITY;
            for (double x : s) m = std::max(m, x);
            double sum = 0;
            for (double x : s) sum += std::exp(x - m);
            l[static_cast<size_t>(hd * lse_len + i)] = m + std::log(sum);
          }
        }
        lse64.FromDoubles(l);
      }
      const Tensor r = RandomTensor({B, H, L, Ev}, kF64, Layout::kContiguous, rng_);
      const Tensor dq = Tensor::Empty(q.sizes(), kF64), dk = Tensor::Empty(k.sizes(), kF64),
                   dv = Tensor::Empty(v.sizes(), kF64), dbias = Tensor::Empty(bias.sizes(), kF64);
      const Tensor zero = Tensor::Scalar(0);
      absl::Status s;
      if (cudnn) {
        s = Run(
            "aten._scaled_dot_product_cudnn_attention_backward.default",
            {V(r), V(q), V(k), V(v), V(out), V(lse64), V(zero), V(zero), CallValue{}, CallValue{},
             CallValue{}, CallValue{L}, CallValue{S}, CallValue{0.0}, CallValue{causal}},
            kwargs, {dq, dk, dv});
      } else {
        s = Run("aten._scaled_dot_product_efficient_attention_backward.default",
                {V(r), V(q), V(k), V(v), V(bias), V(out), V(lse64), V(zero), V(zero),
                 CallValue{0.0}, Bools({true, true, true, true}), CallValue{causal}},
                kwargs, {dq, dk, dv, dbias});
      }
      ASSERT_TRUE(s.ok()) << s;
      CheckGradient(q, dq, forward, r, "grad_query");
      CheckGradient(k, dk, forward, r, "grad_key");
      CheckGradient(v, dv, forward, r, "grad_value");
      if (!cudnn) CheckGradient(bias, dbias, forward, r, "grad_attn_bias");
    }
  }
}

}  // namespace
}  // namespace kiln::runtime
