// Backward ops against central finite differences of their forward ops, in double. This
// validates the oracle's backwards independently of PyTorch.

#include <gtest/gtest.h>

#include <functional>

#include "compiler/interp/philox.h"
#include "tests/compiler/interp/test_util.h"

namespace kiln::interp {
namespace {

using testing::I;
using testing::Run1;
using testing::RunAll;
using testing::T;

using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

// Deterministic values in [-1, 1).
Tensor Rand(std::vector<int64_t> sizes, uint32_t seed, double lo = -1.0, double hi = 1.0) {
  std::vector<double> v(static_cast<size_t>(NumElements(sizes)));
  uint64_t s = seed * 2654435761u + 1;
  for (double& x : v) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    x = lo + (hi - lo) * std::ldexp(static_cast<double>(s >> 11), -53);
  }
  return T(std::move(sizes), v);
}

double Objective(const Fn& f, const std::vector<Tensor>& x, const Tensor& r) {
  const std::vector<double> y = f(x).ToDoubles();
  const std::vector<double> w = r.ToDoubles();
  EXPECT_EQ(y.size(), w.size());
  double s = 0;
  for (size_t i = 0; i < y.size() && i < w.size(); ++i) s += y[i] * w[i];
  return s;
}

// d/dx_k of sum(r * f(x)), elementwise by central differences.
std::vector<double> NumericGrad(const Fn& f, const std::vector<Tensor>& x, size_t k,
                                const Tensor& r, double eps = 1e-6) {
  std::vector<double> base = x[k].ToDoubles();
  std::vector<double> g(base.size());
  for (size_t i = 0; i < base.size(); ++i) {
    std::vector<Tensor> xp = x;
    std::vector<double> v = base;
    v[i] = base[i] + eps;
    xp[k] = T(x[k].sizes(), v);
    const double fp = Objective(f, xp, r);
    v[i] = base[i] - eps;
    xp[k] = T(x[k].sizes(), v);
    const double fm = Objective(f, xp, r);
    g[i] = (fp - fm) / (2 * eps);
  }
  return g;
}

void ExpectGrad(const Tensor& analytic, const std::vector<double>& numeric, double tol = 1e-6) {
  ASSERT_TRUE(analytic.defined());
  const std::vector<double> a = analytic.ToDoubles();
  ASSERT_EQ(a.size(), numeric.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_NEAR(a[i], numeric[i], tol * std::max(1.0, std::fabs(numeric[i]))) << "element " << i;
  }
}

class GradCheck : public ::testing::Test {
 protected:
  ExactFloatScope exact_;
};

TEST_F(GradCheck, LayerNorm) {
  const Tensor x = Rand({3, 2, 5}, 1);
  const Tensor w = Rand({2, 5}, 2);
  const Tensor b = Rand({2, 5}, 3);
  const Tensor r = Rand({3, 2, 5}, 4);
  const Fn f = [](const std::vector<Tensor>& in) {
    return Run1("aten.native_layer_norm.default", {in[0], Arg::Ints({2, 5}), in[1], in[2], 1e-5});
  };
  const std::vector<Value> fw =
      RunAll("aten.native_layer_norm.default", {x, Arg::Ints({2, 5}), w, b, 1e-5});
  const std::vector<Value> bw =
      RunAll("aten.native_layer_norm_backward.default",
             {r, x, Arg::Ints({2, 5}), fw[1], fw[2], w, b, Arg::Bools({true, true, true})});
  for (size_t k = 0; k < 3; ++k)
    ExpectGrad(std::get<Tensor>(bw[k]), NumericGrad(f, {x, w, b}, k, r));
  // No weight or bias; masked outputs are None.
  const Fn g = [](const std::vector<Tensor>& in) {
    return Run1("aten.native_layer_norm.default", {in[0], Arg::Ints({5}), Arg(), Arg(), 1e-5});
  };
  const std::vector<Value> fw2 =
      RunAll("aten.native_layer_norm.default", {x, Arg::Ints({5}), Arg(), Arg(), 1e-5});
  const std::vector<Value> bw2 = RunAll(
      "aten.native_layer_norm_backward.default",
      {r, x, Arg::Ints({5}), fw2[1], fw2[2], Arg(), Arg(), Arg::Bools({true, false, false})});
  ExpectGrad(std::get<Tensor>(bw2[0]), NumericGrad(g, {x}, 0, r));
  EXPECT_TRUE(std::holds_alternative<None>(bw2[1]));
  EXPECT_TRUE(std::holds_alternative<None>(bw2[2]));
}

TEST_F(GradCheck, PointwiseActivations) {
  const Tensor x = Rand({4, 3}, 5, -3, 3);
  const Tensor r = Rand({4, 3}, 6);
  for (const char* approx : {"none", "tanh"}) {
    const Fn f = [approx](const std::vector<Tensor>& in) {
      return Run1("aten.gelu.default", {in[0]}, {{"approximate", approx}});
    };
    ExpectGrad(Run1("aten.gelu_backward.default", {r, x}, {{"approximate", approx}}),
               NumericGrad(f, {x}, 0, r));
  }
  const Fn silu = [](const std::vector<Tensor>& in) { return Run1("aten.silu.default", {in[0]}); };
  ExpectGrad(Run1("aten.silu_backward.default", {r, x}), NumericGrad(silu, {x}, 0, r));
  const Fn th = [](const std::vector<Tensor>& in) { return Run1("aten.tanh.default", {in[0]}); };
  ExpectGrad(Run1("aten.tanh_backward.default", {r, Run1("aten.tanh.default", {x})}),
             NumericGrad(th, {x}, 0, r));
  const Fn sg = [](const std::vector<Tensor>& in) { return Run1("aten.sigmoid.default", {in[0]}); };
  ExpectGrad(Run1("aten.sigmoid_backward.default", {r, Run1("aten.sigmoid.default", {x})}),
             NumericGrad(sg, {x}, 0, r));
  const Fn relu = [](const std::vector<Tensor>& in) { return Run1("aten.relu.default", {in[0]}); };
  ExpectGrad(Run1("aten.threshold_backward.default", {r, x, 0}), NumericGrad(relu, {x}, 0, r));
}

TEST_F(GradCheck, HardActivationsAndMseLoss) {
  // Away from the kinks at -3 and 3, where finite differences straddle them.
  const Tensor x = T({6}, {-3.5, -2.9, -1, 0.3, 2.9, 3.5});
  const Tensor r = Rand({6}, 37);
  const Fn hs = [](const std::vector<Tensor>& in) {
    return Run1("aten.hardswish.default", {in[0]});
  };
  ExpectGrad(Run1("aten.hardswish_backward.default", {r, x}), NumericGrad(hs, {x}, 0, r));
  const Fn hsig = [](const std::vector<Tensor>& in) {
    return Run1("aten.hardsigmoid.default", {in[0]});
  };
  ExpectGrad(Run1("aten.hardsigmoid_backward.default", {r, x}), NumericGrad(hsig, {x}, 0, r));
  const Tensor target = Rand({6}, 38);
  for (int64_t reduction : {0, 1, 2}) {
    const Tensor g = reduction == 0 ? r : Rand({}, 39);
    const Fn mse = [&](const std::vector<Tensor>& in) {
      return Run1("aten.mse_loss.default", {in[0], target, reduction});
    };
    ExpectGrad(Run1("aten.mse_loss_backward.default", {g, x, target, reduction}),
               NumericGrad(mse, {x}, 0, g));
  }
}

TEST_F(GradCheck, GroupNorm) {
  // N 2, C 4 in 2 groups, HxW 3.
  const Tensor x = Rand({2, 4, 3}, 40);
  const Tensor w = Rand({4}, 41);
  const Tensor b = Rand({4}, 42);
  const Tensor r = Rand({2, 4, 3}, 43);
  const Fn f = [](const std::vector<Tensor>& in) {
    return Run1("aten.native_group_norm.default", {in[0], in[1], in[2], 2, 4, 3, 2, 1e-5});
  };
  const std::vector<Value> fw =
      RunAll("aten.native_group_norm.default", {x, w, b, 2, 4, 3, 2, 1e-5});
  const std::vector<Value> bw =
      RunAll("aten.native_group_norm_backward.default",
             {r, x, fw[1], fw[2], w, 2, 4, 3, 2, Arg::Bools({true, true, true})});
  ASSERT_EQ(bw.size(), 3u);
  for (size_t k = 0; k < 3; ++k) {
    ExpectGrad(std::get<Tensor>(bw[k]), NumericGrad(f, {x, w, b}, k, r));
  }
  // Without a weight; masked outputs are None.
  const Fn g = [](const std::vector<Tensor>& in) {
    return Run1("aten.native_group_norm.default", {in[0], Arg(), Arg(), 2, 4, 3, 2, 1e-5});
  };
  const std::vector<Value> fw2 =
      RunAll("aten.native_group_norm.default", {x, Arg(), Arg(), 2, 4, 3, 2, 1e-5});
  const std::vector<Value> bw2 =
      RunAll("aten.native_group_norm_backward.default",
             {r, x, fw2[1], fw2[2], Arg(), 2, 4, 3, 2, Arg::Bools({true, false, false})});
  ExpectGrad(std::get<Tensor>(bw2[0]), NumericGrad(g, {x}, 0, r));
  EXPECT_TRUE(std::holds_alternative<None>(bw2[1]));
  EXPECT_TRUE(std::holds_alternative<None>(bw2[2]));
}

TEST_F(GradCheck, SoftmaxAndLogSoftmax) {
  const Tensor x = Rand({3, 4, 5}, 7, -2, 2);
  const Tensor r = Rand({3, 4, 5}, 8);
  for (int64_t dim : {1, -1}) {
    const Fn sm = [dim](const std::vector<Tensor>& in) {
      return Run1("aten._softmax.default", {in[0], dim, false});
    };
    const Fn lsm = [dim](const std::vector<Tensor>& in) {
      return Run1("aten._log_softmax.default", {in[0], dim, false});
    };
    ExpectGrad(Run1("aten._softmax_backward_data.default", {r, sm({x}), dim, v1::DTYPE_FLOAT64}),
               NumericGrad(sm, {x}, 0, r));
    ExpectGrad(
        Run1("aten._log_softmax_backward_data.default", {r, lsm({x}), dim, v1::DTYPE_FLOAT64}),
        NumericGrad(lsm, {x}, 0, r));
  }
}

TEST_F(GradCheck, NllLoss) {
  const Tensor x = Rand({5, 4}, 9);
  const Tensor target = I({5}, {0, 3, -100, 1, 3});
  const Tensor weight = Rand({4}, 10, 0.5, 2.0);
  for (int64_t reduction : {0, 1, 2}) {
    const Tensor r = reduction == 0 ? Rand({5}, 11) : Rand({}, 12);
    const Fn f = [&](const std::vector<Tensor>& in) {
      return Run1("aten.nll_loss_forward.default", {in[0], target, weight, reduction, -100});
    };
    const std::vector<Value> fw =
        RunAll("aten.nll_loss_forward.default", {x, target, weight, reduction, -100});
    ExpectGrad(
        Run1("aten.nll_loss_backward.default", {r, x, target, weight, reduction, -100, fw[1]}),
        NumericGrad(f, {x}, 0, r));
  }
}

TEST_F(GradCheck, Embedding) {
  const Tensor w = Rand({6, 3}, 13);
  const Tensor idx = I({2, 3}, {1, 4, 1, 0, 5, 4});
  const Tensor r = Rand({2, 3, 3}, 14);
  const Fn f = [&](const std::vector<Tensor>& in) {
    return Run1("aten.embedding.default", {in[0], idx});
  };
  ExpectGrad(Run1("aten.embedding_dense_backward.default", {r, idx, 6, -1, false}),
             NumericGrad(f, {w}, 0, r));
  // padding_idx rows get no gradient.
  const Tensor g = Run1("aten.embedding_dense_backward.default", {r, idx, 6, 4, false});
  const std::vector<double> gv = g.ToDoubles();
  for (int k = 0; k < 3; ++k) EXPECT_EQ(gv[4 * 3 + k], 0.0);
}

void CheckConv(const std::vector<int64_t>& xs, const std::vector<int64_t>& ws,
               std::vector<int64_t> stride, std::vector<int64_t> pad, std::vector<int64_t> dil,
               bool transposed, std::vector<int64_t> out_pad, int64_t groups) {
  const Tensor x = Rand(xs, 15);
  const Tensor w = Rand(ws, 16);
  const int64_t cout = transposed ? ws[1] * groups : ws[0];
  const Tensor b = Rand({cout}, 17);
  const Fn f = [&](const std::vector<Tensor>& in) {
    return Run1("aten.convolution.default",
                {in[0], in[1], in[2], Arg::Ints(stride), Arg::Ints(pad), Arg::Ints(dil), transposed,
                 Arg::Ints(out_pad), groups});
  };
  const Tensor y = f({x, w, b});
  const Tensor r = Rand(y.sizes(), 18);
  const std::vector<Value> bw =
      RunAll("aten.convolution_backward.default",
             {r, x, w, Arg::Ints({cout}), Arg::Ints(stride), Arg::Ints(pad), Arg::Ints(dil),
              transposed, Arg::Ints(out_pad), groups, Arg::Bools({true, true, true})});
  for (size_t k = 0; k < 3; ++k)
    ExpectGrad(std::get<Tensor>(bw[k]), NumericGrad(f, {x, w, b}, k, r));
}

TEST_F(GradCheck, Convolution) {
  CheckConv({2, 2, 5, 6}, {3, 2, 3, 2}, {1, 1}, {1, 0}, {1, 1}, false, {0, 0}, 1);
  CheckConv({1, 4, 7, 7}, {4, 2, 3, 3}, {2, 2}, {1, 1}, {2, 1}, false, {0, 0}, 2);
  CheckConv({2, 3, 9}, {2, 3, 4}, {3}, {2}, {1}, false, {0}, 1);
  CheckConv({1, 2, 3, 4}, {2, 3, 3, 2}, {2, 1}, {1, 0}, {1, 1}, true, {1, 0}, 1);
  CheckConv({1, 1, 2, 2, 3}, {2, 1, 2, 1, 2}, {1, 1, 1}, {0, 0, 1}, {1, 1, 1}, false, {0, 0, 0}, 1);
}

TEST_F(GradCheck, MaxPool2d) {
  const Tensor x = Rand({2, 2, 5, 6}, 19);
  const auto args = [](const Tensor& t) {
    return std::vector<Arg>{
        t, Arg::Ints({3, 2}), Arg::Ints({2, 2}), Arg::Ints({1, 1}), Arg::Ints({1, 1}), true};
  };
  const Fn f = [&](const std::vector<Tensor>& in) {
    return Run1("aten.max_pool2d_with_indices.default", args(in[0]));
  };
  const std::vector<Value> fw = RunAll("aten.max_pool2d_with_indices.default", args(x));
  const Tensor r = Rand(std::get<Tensor>(fw[0]).sizes(), 20);
  std::vector<Arg> bw_args = {r,
                              x,
                              Arg::Ints({3, 2}),
                              Arg::Ints({2, 2}),
                              Arg::Ints({1, 1}),
                              Arg::Ints({1, 1}),
                              true,
                              std::get<Tensor>(fw[1])};
  ExpectGrad(Run1("aten.max_pool2d_with_indices_backward.default", bw_args),
             NumericGrad(f, {x}, 0, r));
}

TEST_F(GradCheck, BatchNorm) {
  const Tensor x = Rand({3, 2, 4}, 21);
  const Tensor w = Rand({2}, 22);
  const Tensor b = Rand({2}, 23);
  const Tensor rm = Rand({2}, 24);
  const Tensor rv = Rand({2}, 25, 0.5, 1.5);
  const Tensor r = Rand({3, 2, 4}, 26);
  for (const bool train : {true, false}) {
    const Fn f = [&](const std::vector<Tensor>& in) {
      return Run1("aten._native_batch_norm_legit_functional.default",
                  {in[0], in[1], in[2], rm, rv, train, 0.1, 1e-5});
    };
    const std::vector<Value> fw = RunAll("aten._native_batch_norm_legit_functional.default",
                                         {x, w, b, rm, rv, train, 0.1, 1e-5});
    const std::vector<Value> bw =
        RunAll("aten.native_batch_norm_backward.default",
               {r, x, w, rm, rv, fw[1], fw[2], train, 1e-5, Arg::Bools({true, true, true})});
    for (size_t k = 0; k < 3; ++k) {
      ExpectGrad(std::get<Tensor>(bw[k]), NumericGrad(f, {x, w, b}, k, r));
    }
  }
}

void CheckAttention(bool causal, bool with_bias, double dropout_p, bool cudnn) {
  const Tensor q = Rand({1, 2, 3, 4}, 27);
  const Tensor k = Rand({1, 2, 5, 4}, 28);
  const Tensor v = Rand({1, 2, 5, 3}, 29);
  const Tensor bias = with_bias ? Rand({2, 3, 5}, 30) : Tensor();
  RunOptions o;
  o.rng_seed = 31;
  o.rng_offset = 4;
  o.round_to_dtype = false;
  const std::string fw_op = cudnn ? "aten._scaled_dot_product_cudnn_attention.default"
                                  : "aten._scaled_dot_product_efficient_attention.default";
  auto forward = [&](const std::vector<Tensor>& in) {
    std::vector<Arg> args = {in[0], in[1],     in[2], with_bias ? Arg(in[3]) : Arg(),
                             true,  dropout_p, causal};
    absl::StatusOr<std::vector<Value>> r = RunOp(fw_op, args, {{"scale", 0.7}}, o);
    EXPECT_TRUE(r.ok()) << r.status();
    return *r;
  };
  const Fn f = [&](const std::vector<Tensor>& in) { return std::get<Tensor>(forward(in)[0]); };
  std::vector<Tensor> inputs = {q, k, v};
  if (with_bias) inputs.push_back(bias);
  const std::vector<Value> fw = forward(inputs);
  ASSERT_TRUE(std::holds_alternative<Tensor>(fw[0]));
  const Tensor out = std::get<Tensor>(fw[0]);
  const Tensor r = Rand(out.sizes(), 32);
  std::vector<Value> bw;
  if (cudnn) {
    bw = RunAll("aten._scaled_dot_product_cudnn_attention_backward.default",
                {r, q, k, v, out, fw[1], fw[6], fw[7], with_bias ? Arg(bias) : Arg(), Arg(), Arg(),
                 3, 5, dropout_p, causal},
                {{"scale", 0.7}}, o);
  } else {
    bw = RunAll("aten._scaled_dot_product_efficient_attention_backward.default",
                {r, q, k, v, with_bias ? Arg(bias) : Arg(), out, fw[1], fw[2], fw[3], dropout_p,
                 Arg::Bools({true, true, true, with_bias}), causal},
                {{"scale", 0.7}}, o);
  }
  // cuDNN's backward has no bias gradient.
  const size_t checked = cudnn ? 3 : inputs.size();
  ASSERT_GE(bw.size(), checked);
  for (size_t i = 0; i < checked; ++i) {
    ASSERT_TRUE(std::holds_alternative<Tensor>(bw[i])) << i;
    ExpectGrad(std::get<Tensor>(bw[i]), NumericGrad(f, inputs, i, r));
  }
}

TEST_F(GradCheck, Attention) {
  CheckAttention(false, false, 0.0, false);
  CheckAttention(true, true, 0.0, false);
  CheckAttention(true, false, 0.3, false);
  CheckAttention(false, true, 0.25, false);
  CheckAttention(true, false, 0.0, true);
  CheckAttention(false, true, 0.2, true);
}

TEST_F(GradCheck, ViewBackwardsAndDropout) {
  const Tensor x = Rand({4, 5}, 33);
  const Tensor r = Rand({4, 2}, 34);
  const Fn sl = [](const std::vector<Tensor>& in) {
    return Run1("aten.slice.Tensor", {in[0], 1, 1, 5, 2});
  };
  ExpectGrad(Run1("aten.slice_backward.default", {r, Arg::Ints({4, 5}), 1, 1, 5, 2}),
             NumericGrad(sl, {x}, 0, r));
  const Tensor r2 = Rand({5}, 35);
  const Fn se = [](const std::vector<Tensor>& in) {
    return Run1("aten.select.int", {in[0], 0, -2});
  };
  ExpectGrad(Run1("aten.select_backward.default", {r2, Arg::Ints({4, 5}), 0, 2}),
             NumericGrad(se, {x}, 0, r2));
  RunOptions o;
  o.rng_seed = 3;
  o.round_to_dtype = false;
  const Fn drop = [&](const std::vector<Tensor>& in) {
    absl::StatusOr<std::vector<Value>> res =
        RunOp("aten.native_dropout.default", {in[0], 0.4, true}, {}, o);
    return std::get<Tensor>((*res)[0]);
  };
  const Tensor mask =
      std::get<Tensor>((*RunOp("aten.native_dropout.default", {x, 0.4, true}, {}, o))[1]);
  const Tensor r3 = Rand({4, 5}, 36);
  ExpectGrad(Run1("aten.native_dropout_backward.default", {r3, mask, 1.0 / 0.6}),
             NumericGrad(drop, {x}, 0, r3));
}

}  // namespace
}  // namespace kiln::interp
