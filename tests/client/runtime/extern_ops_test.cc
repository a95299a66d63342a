// Each extern op of the CPU runtime against the reference interpreter on random inputs:
// odd sizes, sizes that cross the blocking boundaries, non-contiguous operands and
// outputs, every floating dtype; the same bytes for any number of threads; and the
// contract with the compiler: the runtime implements exactly the op registry's extern ops,
// which are the ops decompose turns into extern steps.

#include "client/runtime/extern_ops.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "absl/strings/str_join.h"
#include "compiler/canon/canonical_graph.h"
#include "compiler/decompose/decompose.h"
#include "compiler/graph/import.h"
#include "proto/ops/registry.h"
#include "tests/client/runtime/interp_bridge.h"

namespace kiln::runtime {
namespace {

using testing::B;
using testing::Bools;
using testing::Ints;
using testing::Layout;
using testing::None;
using testing::RandomTensor;
using testing::V;
using Kwargs = std::vector<std::pair<std::string, CallValue>>;

constexpr auto kF32 = v1::DTYPE_FLOAT32;
constexpr auto kF64 = v1::DTYPE_FLOAT64;
constexpr auto kBF16 = v1::DTYPE_BFLOAT16;
constexpr auto kF16 = v1::DTYPE_FLOAT16;

double MaxAbs(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) {
    if (std::isfinite(x)) m = std::max(m, std::fabs(x));
  }
  return m;
}

// Runs `op` on `args` into `outs` with `ctx`, bypassing the comparison Check makes.
absl::Status RunDirect(absl::string_view op, const std::vector<CallValue>& args,
                       const std::vector<Tensor>& outs, const ExternContext& ctx) {
  return RunExternOp({.op = op, .args = args, .outputs = outs, .context = &ctx});
}

class ExternOpsTest : public ::testing::Test {
 protected:
  // Runs `op` natively into outputs shaped like the interpreter's results (laid out as
  // `out_layout`), compares every result, and returns the native outputs.
  std::vector<Tensor> Check(const std::string& op, std::vector<CallValue> args, Kwargs kwargs,
                            Layout out_layout = Layout::kContiguous, int threads = 0,
                            double tol_scale = 1.0) {
    interp::RunOptions options;
    options.rng_seed = rng_seed_;
    options.rng_offset = rng_stream_;
    absl::StatusOr<std::vector<interp::Value>> want = testing::RunInterp(op, args, kwargs, options);
    EXPECT_TRUE(want.ok()) << op << ": " << want.status();
    if (!want.ok()) return {};
    std::vector<Tensor> outs;
    for (const interp::Value& v : *want) {
      const auto* t = std::get_if<interp::Tensor>(&v);
      if (t == nullptr || !t->defined()) {
        outs.emplace_back();
        continue;
      }
      Tensor out = RandomTensor(t->sizes(), t->dtype(), out_layout, rng_, 1e6, 2e6);
      outs.push_back(out);
    }
    ExternContext ctx;
    ctx.pool = &pool_;
    ctx.max_threads = threads;
    ctx.rng_seed = rng_seed_;
    ctx.rng_offset = rng_stream_;
    const absl::Status s =
        RunExternOp({.op = op, .args = args, .kwargs = kwargs, .outputs = outs, .context = &ctx});
    EXPECT_TRUE(s.ok()) << op << ": " << s;
    if (!s.ok()) return {};
    for (size_t i = 0; i < outs.size(); ++i) {
      if (!outs[i].defined()) continue;
      const interp::Tensor& w = std::get<interp::Tensor>((*want)[i]);
      const std::vector<double> wv = w.ToDoubles();
      const testing::Tolerance tol = testing::ToleranceFor(outs[i].dtype());
      EXPECT_TRUE(testing::AllClose(outs[i].ToDoubles(), wv, tol.rtol * tol_scale,
                                    tol.atol * tol_scale * std::max(1.0, MaxAbs(wv))))
          << op << " result " << i << " " << outs[i].DebugString();
    }
    return outs;
  }

  ThreadPool pool_{ThreadPoolOptions::ForLoops(4)};
  std::mt19937_64 rng_{1234};
  // The Philox seed and stream both sides draw from (attention dropout).
  uint64_t rng_seed_ = 0;
  uint64_t rng_stream_ = 0;
};

TEST_F(ExternOpsTest, MmAgainstInterpreter) {
  const std::vector<std::array<int64_t, 3>> shapes = {{1, 1, 1},     {7, 13, 5},     {6, 16, 8},
                                                      {97, 31, 257}, {130, 300, 33}, {3, 0, 4}};
  for (DType dtype : {kF32, kF64, kBF16, kF16}) {
    for (const auto& [m, k, n] : shapes) {
      for (Layout la : {Layout::kContiguous, Layout::kTransposed, Layout::kStrided}) {
        SCOPED_TRACE(::testing::Message() << testing::ToleranceFor(dtype).rtol << " " << m << "x"
                                          << k << "x" << n << " layout " << static_cast<int>(la));
        const Tensor a = RandomTensor({m, k}, dtype, la, rng_);
        const Tensor b =
            RandomTensor({k, n}, dtype, la == Layout::kTransposed ? Layout::kContiguous : la, rng_);
        Check("aten.mm.default", {V(a), V(b)}, {},
              la == Layout::kStrided ? Layout::kStrided : Layout::kContiguous);
      }
    }
  }
}

TEST_F(ExternOpsTest, BmmAgainstInterpreter) {
  for (DType dtype : {kF32, kF64, kF16}) {
    for (Layout la : {Layout::kContiguous, Layout::kTransposed, Layout::kStrided}) {
      const Tensor a = RandomTensor({3, 17, 9}, dtype, la, rng_);
      const Tensor b = RandomTensor({3, 9, 11}, dtype, Layout::kTransposed, rng_);
      Check("aten.bmm.default", {V(a), V(b)}, {}, la);
    }
  }
}

// addmm and baddbmm, which the compiler emits where the result is stored anyway: the addend
// broadcast from any of its forms, scaled by beta, the product by alpha.
TEST_F(ExternOpsTest, AddmmAgainstInterpreter) {
  const int64_t m = 37, k = 19, n = 24;
  const std::vector<std::vector<int64_t>> biases = {{n}, {1, n}, {m, 1}, {m, n}, {1}};
  for (DType dtype : {kF32, kBF16}) {
    for (const std::vector<int64_t>& bias_sizes : biases) {
      for (auto [beta, alpha] : {std::pair{1.0, 1.0}, {0.5, 2.0}, {0.0, 1.0}}) {
        SCOPED_TRACE(::testing::Message() << "bias " << absl::StrJoin(bias_sizes, "x") << " beta "
                                          << beta << " alpha " << alpha);
        const Tensor bias = RandomTensor(bias_sizes, dtype, Layout::kContiguous, rng_);
        const Tensor a = RandomTensor({m, k}, dtype, Layout::kContiguous, rng_);
        const Tensor b = RandomTensor({k, n}, dtype, Layout::kTransposed, rng_);
        Kwargs kwargs;
        if (beta != 1) kwargs.emplace_back("beta", V(beta));
        if (alpha != 1) kwargs.emplace_back("alpha", V(alpha));
        Check("aten.addmm.default", {V(bias), V(a), V(b)}, kwargs);
      }
    }
  }
  for (Layout la : {Layout::kContiguous, Layout::kStrided}) {
    const Tensor bias = RandomTensor({11}, kF32, Layout::kContiguous, rng_);
    const Tensor a = RandomTensor({3, 17, 9}, kF32, la, rng_);
    const Tensor b = RandomTensor({3, 9, 11}, kF32, Layout::kTransposed, rng_);
    Check("aten.baddbmm.default", {V(bias), V(a), V(b)}, {{"alpha", V(0.25)}}, la);
  }
}

TEST_F(ExternOpsTest, AnAddendThatDoesNotBroadcastIsNamed) {
  ExternContext ctx;
  ctx.pool = &pool_;
  const Tensor bias = Tensor::Empty({3}, kF32);
  const Tensor a = Tensor::Empty({2, 4}, kF32);
  const Tensor b = Tensor::Empty({4, 5}, kF32);
  const Tensor out = Tensor::Empty({2, 5}, kF32);
  const absl::Status s = RunDirect("aten.addmm.default", {V(bias), V(a), V(b)}, {out}, ctx);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr("does not broadcast to [2, 5]"));
}

TEST_F(ExternOpsTest, MatmulErrors) {
  ExternContext ctx;
  ctx.pool = &pool_;
  const Tensor a = Tensor::Empty({2, 3}, kF32);
  const Tensor b = Tensor::Empty({4, 5}, kF32);
  const Tensor out = Tensor::Empty({2, 5}, kF32);
  std::vector<CallValue> args = {V(a), V(b)};
  std::vector<Tensor> outs = {out};
  absl::Status s = RunDirect("aten.mm.default", args, outs, ctx);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("cannot be multiplied"), std::string::npos) << s;
  const Tensor ints = Tensor::Empty({2, 3}, v1::DTYPE_INT64);
  args = {V(ints), V(ints)};
  EXPECT_EQ(RunDirect("aten.mm.default", args, outs, ctx).code(), absl::StatusCode::kUnimplemented);
  EXPECT_EQ(RunDirect("aten.nonzero.default", args, outs, ctx).code(),
            absl::StatusCode::kUnimplemented);
  EXPECT_FALSE(IsExternOpSupported("aten.nonzero.default"));
  EXPECT_TRUE(IsExternOpSupported("aten.convolution_backward.default"));
}

struct ConvCase {
  std::vector<int64_t> input, weight;
  std::vector<int64_t> stride, padding, dilation;
  bool transposed;
  std::vector<int64_t> output_padding;
  int64_t groups;
  bool bias;
};

std::vector<ConvCase> ConvCases() {
  return {
      {{2, 3, 11}, {4, 3, 3}, {1}, {0}, {1}, false, {0}, 1, true},
      {{1, 4, 13}, {6, 2, 4}, {2}, {3}, {2}, false, {0}, 2, false},
      {{2, 3, 9, 7}, {5, 3, 3, 3}, {1, 1}, {1, 1}, {1, 1}, false, {0, 0}, 1, true},
      {{2, 4, 10, 9}, {8, 1, 3, 2}, {2, 3}, {1, 0}, {2, 1}, false, {0, 0}, 4, true},
      {{1, 2, 5, 6, 4},
       {3, 2, 2, 3, 2},
       {1, 2, 1},
       {1, 1, 0},
       {1, 1, 2},
       false,
       {0, 0, 0},
       1,
       true},
      {{2, 3, 1, 1}, {2, 3, 1, 1}, {1, 1}, {0, 0}, {1, 1}, false, {0, 0}, 1, true},
      // Transposed: weight is [Cin, Cout/groups, k...].
      {{2, 4, 5, 6}, {4, 3, 3, 2}, {2, 1}, {1, 0}, {1, 1}, true, {1, 0}, 1, true},
      {{1, 4, 7}, {4, 2, 3}, {3}, {2}, {2}, true, {2}, 2, true},
  };
}

TEST_F(ExternOpsTest, ConvolutionForwardAndBackwardAgainstInterpreter) {
  int index = 0;
  for (const ConvCase& c : ConvCases()) {
    for (DType dtype : {kF32, kF64, kBF16, kF16}) {
      SCOPED_TRACE(::testing::Message() << "case " << index << " dtype " << dtype);
      const Layout layout = dtype == kF32 ? Layout::kStrided : Layout::kContiguous;
      const Tensor x = RandomTensor(c.input, dtype, layout, rng_);
      const Tensor w = RandomTensor(c.weight, dtype, Layout::kContiguous, rng_);
      const int64_t cout = c.transposed ? c.weight[1] * c.groups : c.weight[0];
      const Tensor bias = c.bias ? RandomTensor({cout}, dtype, Layout::kStrided, rng_) : Tensor();
      std::vector<Tensor> y =
          Check("aten.convolution.default",
                {V(x), V(w), c.bias ? V(bias) : None(), Ints(c.stride), Ints(c.padding),
                 Ints(c.dilation), B(c.transposed), Ints(c.output_padding), V(c.groups)},
                {}, layout);
      ASSERT_EQ(y.size(), 1u);
      const Tensor dy = RandomTensor(y[0].sizes(), dtype, Layout::kTransposed, rng_);
      for (const std::vector<bool>& mask : std::vector<std::vector<bool>>{
               {true, true, true}, {true, false, false}, {false, true, false}}) {
        Check("aten.convolution_backward.default",
              {V(dy), V(x), V(w), c.bias ? Ints({cout}) : None(), Ints(c.stride), Ints(c.padding),
               Ints(c.dilation), B(c.transposed), Ints(c.output_padding), V(c.groups), Bools(mask)},
              {}, layout);
      }
    }
    ++index;
  }
}

struct AttentionCase {
  int64_t b, h, l, s, e, ev;
  bool causal;
  bool bias;
  double scale;  // 0: the default
};

TEST_F(ExternOpsTest, AttentionForwardAndBackwardAgainstInterpreter) {
  const std::vector<AttentionCase> cases = {
      {2, 3, 5, 7, 4, 6, false, false, 0},  {1, 2, 9, 9, 8, 8, true, false, 0},
      {2, 1, 6, 4, 3, 5, false, true, 0.7}, {1, 2, 33, 33, 16, 16, true, true, 0},
      {1, 1, 1, 1, 1, 1, false, false, 0},
  };
  for (const AttentionCase& c : cases) {
    for (DType dtype : {kF32, kF64, kBF16, kF16}) {
      for (bool cudnn : {false, true}) {
        SCOPED_TRACE(::testing::Message() << "L " << c.l << " S " << c.s << " causal " << c.causal
                                          << " dtype " << dtype << " cudnn " << cudnn);
        if (cudnn && c.bias) continue;  // exercised through the efficient op
        const Tensor q = RandomTensor({c.b, c.h, c.l, c.e}, dtype, Layout::kTransposed, rng_);
        const Tensor k = RandomTensor({c.b, c.h, c.s, c.e}, dtype, Layout::kStrided, rng_);
        const Tensor v = RandomTensor({c.b, c.h, c.s, c.ev}, dtype, Layout::kContiguous, rng_);
        const Tensor bias =
            c.bias ? RandomTensor({1, c.h, c.l, c.s}, dtype, Layout::kContiguous, rng_) : Tensor();
        Kwargs kwargs;
        if (c.scale != 0) kwargs.emplace_back("scale", V(c.scale));
        const std::string fw = cudnn ? "aten._scaled_dot_product_cudnn_attention.default"
                                     : "aten._scaled_dot_product_efficient_attention.default";
        std::vector<CallValue> fw_args = {V(q),    V(k),   V(v),       c.bias ? V(bias) : None(),
                                          B(true), V(0.0), B(c.causal)};
        std::vector<Tensor> outs = Check(fw, fw_args, kwargs);
        ASSERT_GE(outs.size(), 2u);
        // The backward takes the forward's output and logsumexp; feed both ops the
        // interpreter's so they compare on identical inputs.
        absl::StatusOr<std::vector<interp::Value>> ref = testing::RunInterp(fw, fw_args, kwargs);
        ASSERT_TRUE(ref.ok()) << ref.status();
        const auto as_tensor = [](const interp::Tensor& t) {
          Tensor out = Tensor::Empty(t.sizes(), t.dtype());
          out.FromDoubles(t.ToDoubles());
          return out;
        };
        const Tensor out = as_tensor(std::get<interp::Tensor>((*ref)[0]));
        const Tensor lse = as_tensor(std::get<interp::Tensor>((*ref)[1]));
        const Tensor dout = RandomTensor(out.sizes(), dtype, Layout::kTransposed, rng_);
        const Tensor seed = Tensor::Scalar(0), offset = Tensor::Scalar(0);
        if (cudnn) {
          Check("aten._scaled_dot_product_cudnn_attention_backward.default",
                {V(dout), V(q), V(k), V(v), V(out), V(lse), V(seed), V(offset), None(), None(),
                 None(), V(c.l), V(c.s), V(0.0), B(c.causal)},
                kwargs, Layout::kStrided);
        } else {
          Check("aten._scaled_dot_product_efficient_attention_backward.default",
                {V(dout), V(q), V(k), V(v), c.bias ? V(bias) : None(), V(out), V(lse), V(seed),
                 V(offset), V(0.0), Bools({true, true, true, c.bias}), B(c.causal)},
                kwargs, Layout::kStrided);
        }
      }
    }
  }
}

// Dropout keeps exactly the probabilities the interpreter keeps: the same Philox bits over
// the [B, H, L, S] positions, under a seed that needs all 64 bits, in the forward and, from
// the philox_seed and philox_offset the forward returned, in the backward.
TEST_F(ExternOpsTest, AttentionDropoutAgainstInterpreter) {
  rng_seed_ = 0x9E3779B97F4A7C15ull;
  rng_stream_ = 5;
  const AttentionCase c = {2, 3, 9, 11, 4, 6, false, true, 0};
  for (DType dtype : {kF32, kF64}) {
    for (bool causal : {false, true}) {
      for (double p : {0.3, 1.0}) {
        SCOPED_TRACE(::testing::Message()
                     << "dtype " << dtype << " causal " << causal << " p " << p);
        const Tensor q = RandomTensor({c.b, c.h, c.l, c.e}, dtype, Layout::kContiguous, rng_);
        const Tensor k = RandomTensor({c.b, c.h, c.s, c.e}, dtype, Layout::kStrided, rng_);
        const Tensor v = RandomTensor({c.b, c.h, c.s, c.ev}, dtype, Layout::kContiguous, rng_);
        const Tensor bias = RandomTensor({1, c.h, c.l, c.s}, dtype, Layout::kContiguous, rng_);
        const std::string fw = "aten._scaled_dot_product_efficient_attention.default";
        const std::vector<CallValue> fw_args = {V(q),    V(k), V(v),     V(bias),
                                                B(true), V(p), B(causal)};
        std::vector<Tensor> outs = Check(fw, fw_args, {});
        ASSERT_EQ(outs.size(), 4u);
        EXPECT_EQ(outs[2].ItemInt(), static_cast<int64_t>(rng_seed_));
        EXPECT_EQ(outs[3].ItemInt(), static_cast<int64_t>(rng_stream_));
        // Not the output without dropout: the mask did something.
        const std::vector<double> kept = outs[0].ToDoubles();
        absl::StatusOr<std::vector<interp::Value>> all_kept =
            testing::RunInterp(fw, {V(q), V(k), V(v), V(bias), B(true), V(0.0), B(causal)});
        ASSERT_TRUE(all_kept.ok()) << all_kept.status();
        EXPECT_GT(MaxAbs(std::get<interp::Tensor>((*all_kept)[0]).ToDoubles()), 0);
        EXPECT_NE(kept, std::get<interp::Tensor>((*all_kept)[0]).ToDoubles());
        // The backward replays the stream from the forward's seed and offset, whatever the
        // run's own are.
        const Tensor dout = RandomTensor(outs[0].sizes(), dtype, Layout::kContiguous, rng_);
        const uint64_t run_seed = rng_seed_, run_stream = rng_stream_;
        rng_seed_ = 1;
        rng_stream_ = 2;
        Check("aten._scaled_dot_product_efficient_attention_backward.default",
              {V(dout), V(q), V(k), V(v), V(bias), V(outs[0]), V(outs[1]), V(outs[2]), V(outs[3]),
               V(p), Bools({true, true, true, true}), B(causal)},
              {}, Layout::kStrided);
        rng_seed_ = run_seed;
        rng_stream_ = run_stream;
      }
    }
  }
}

TEST_F(ExternOpsTest, CollectivesForOneRankAreTheIdentity) {
  const Tensor x = RandomTensor({4, 5}, kF32, Layout::kStrided, rng_);
  Check("_c10d_functional.all_reduce.default",
        {V(x), CallValue{std::string("sum")}, CallValue{std::string("0")}}, {});
  Check("_c10d_functional.all_gather_into_tensor.default",
        {V(x), V(int64_t{1}), CallValue{std::string("0")}}, {});
  Check("_c10d_functional.reduce_scatter_tensor.default",
        {V(x), CallValue{std::string("sum")}, V(int64_t{1}), CallValue{std::string("0")}}, {});
  Check("_c10d_functional.wait_tensor.default", {V(x)}, {});
  Check("_c10d_functional.all_to_all_single.default",
        {V(x), Ints({4}), Ints({4}), CallValue{std::string("0")}}, {});
  Check("_c10d_functional.broadcast.default", {V(x), V(int64_t{0}), CallValue{std::string("0")}},
        {});
  const Tensor y = RandomTensor({3}, kF32, Layout::kContiguous, rng_);
  const CallValue both{CallValue::List{V(x), V(y)}};
  Check("_c10d_functional.all_reduce_coalesced.default",
        {both, CallValue{std::string("sum")}, CallValue{std::string("0")}}, {});
  Check("_c10d_functional.all_gather_into_tensor_coalesced.default",
        {both, V(int64_t{1}), CallValue{std::string("0")}}, {});
  Check("_c10d_functional.reduce_scatter_tensor_coalesced.default",
        {both, CallValue{std::string("sum")}, V(int64_t{1}), CallValue{std::string("0")}}, {});
}

// Coalesced collectives reach the hook as one call per tensor, in order.
TEST_F(ExternOpsTest, CoalescedCollectivesCallTheHookPerTensor) {
  const Tensor x = RandomTensor({2, 2}, kF32, Layout::kContiguous, rng_);
  const Tensor y = RandomTensor({5}, kF32, Layout::kContiguous, rng_);
  std::vector<CallValue> args = {CallValue{CallValue::List{V(x), V(y)}},
                                 CallValue{std::string("avg")}, CallValue{std::string("pg1")}};
  std::vector<Tensor> outs = {Tensor::Empty({2, 2}, kF32), Tensor::Empty({5}, kF32)};
  ExternContext ctx;
  ctx.pool = &pool_;
  ctx.world_size = 2;
  std::vector<const void*> seen;
  CollectiveHook hook = [&](const CollectiveCall& c) {
    EXPECT_EQ(c.op, "all_reduce");
    EXPECT_EQ(c.reduce_op, "avg");
    EXPECT_EQ(c.group_name, "pg1");
    EXPECT_EQ(c.group_size, 2);
    seen.push_back(c.input.data());
    return CopyTensor(c.input, c.output);
  };
  ctx.collective = &hook;
  ASSERT_TRUE(RunDirect("_c10d_functional.all_reduce_coalesced.default", args, outs, ctx).ok());
  EXPECT_EQ(seen, (std::vector<const void*>{x.data(), y.data()}));
  EXPECT_EQ(outs[1].ToDoubles(), y.ToDoubles());
}

TEST_F(ExternOpsTest, CollectiveHookReceivesGroupAndRanks) {
  const Tensor x = RandomTensor({3, 2}, kF32, Layout::kContiguous, rng_);
  const Tensor out = Tensor::Empty({6, 2}, kF32);
  std::vector<CallValue> args = {V(x), V(int64_t{2}), CallValue{std::string("tp")}};
  std::vector<Tensor> outs = {out};
  ExternContext ctx;
  ctx.pool = &pool_;
  absl::Status s = RunDirect("_c10d_functional.all_gather_into_tensor.default", args, outs, ctx);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("group \"tp\""), std::string::npos) << s;
  CollectiveHook hook = [&](const CollectiveCall& c) {
    EXPECT_EQ(c.op, "all_gather_into_tensor");
    EXPECT_EQ(c.group_name, "tp");
    EXPECT_EQ(c.group_size, 2);
    EXPECT_EQ(c.output.data(), out.data());
    std::vector<double> v = c.input.ToDoubles();
    std::vector<double> both = v;
    both.insert(both.end(), v.begin(), v.end());
    c.output.FromDoubles(both);
    return absl::OkStatus();
  };
  ctx.collective = &hook;
  ASSERT_TRUE(RunDirect("_c10d_functional.all_gather_into_tensor.default", args, outs, ctx).ok());
  std::vector<double> v = x.ToDoubles();
  v.insert(v.end(), v.begin(), v.begin() + 6);
  EXPECT_EQ(out.ToDoubles(), v);
}

TEST_F(ExternOpsTest, BroadcastReachesTheHookWithItsSource) {
  const Tensor x = RandomTensor({3, 2}, kF32, Layout::kContiguous, rng_);
  std::vector<Tensor> outs = {Tensor::Empty({3, 2}, kF32)};
  ExternContext ctx;
  ctx.pool = &pool_;
  ctx.world_size = 4;
  int calls = 0;
  CollectiveHook hook = [&](const CollectiveCall& c) {
    ++calls;
    EXPECT_EQ(c.op, "broadcast");
    EXPECT_EQ(c.src, 3);
    EXPECT_EQ(c.group_name, "pg0");
    EXPECT_EQ(c.group_size, 4);
    return CopyTensor(c.input, c.output);
  };
  ctx.collective = &hook;
  ASSERT_TRUE(RunDirect("_c10d_functional.broadcast.default",
                        {V(x), V(int64_t{3}), CallValue{std::string("pg0")}}, outs, ctx)
                  .ok());
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(outs[0].ToDoubles(), x.ToDoubles());
}

constexpr auto kI64 = v1::DTYPE_INT64;
constexpr auto kI32 = v1::DTYPE_INT32;
constexpr const char* kEmbeddingBackward = "aten.embedding_dense_backward.default";

// embedding_dense_backward's arguments: grad_output [..., D], indices [...], num_weights,
// padding_idx, scale_grad_by_freq.
std::vector<CallValue> EmbeddingGradArgs(const Tensor& grad, const Tensor& indices, int64_t rows,
                                         int64_t padding_idx, bool scale) {
  return {V(grad), V(indices), V(rows), V(padding_idx), B(scale)};
}

// Indices of every row of the table and many repeats (more indices than rows), padding rows,
// scaling by frequency, int32 and int64 indices, every floating dtype, strided operands and
// outputs, and tables with rows no index names (their gradient is zero).
TEST_F(ExternOpsTest, EmbeddingBackwardAgainstInterpreter) {
  struct Case {
    std::vector<int64_t> index_sizes;
    int64_t rows, cols;
  };
  const std::vector<Case> cases = {{{3, 17}, 11, 6}, {{40}, 7, 33}, {{2, 3, 4}, 50, 5},
                                   {{1}, 1, 1},      {{0}, 4, 3},   {{5}, 9, 0}};
  for (const Case& c : cases) {
    for (DType dtype : {kF32, kF64, kBF16, kF16}) {
      for (DType index_dtype : {kI64, kI32}) {
        for (const auto& [padding_idx, scale] : std::vector<std::pair<int64_t, bool>>{
                 {-1, false}, {c.rows / 2, false}, {-1, true}, {c.rows - 1, true}}) {
          SCOPED_TRACE(::testing::Message()
                       << "indices " << c.index_sizes.size() << "-d, " << c.rows << "x" << c.cols
                       << " dtype " << dtype << " index dtype " << index_dtype << " padding "
                       << padding_idx << " scale " << scale);
          const Layout layout = dtype == kF32 ? Layout::kStrided : Layout::kContiguous;
          std::vector<int64_t> grad_sizes = c.index_sizes;
          grad_sizes.push_back(c.cols);
          const Tensor indices = RandomTensor(c.index_sizes, index_dtype, layout, rng_, 0,
                                              static_cast<double>(c.rows));
          const Tensor grad =
              RandomTensor(grad_sizes, dtype, dtype == kBF16 ? Layout::kTransposed : layout, rng_);
          Check(kEmbeddingBackward, EmbeddingGradArgs(grad, indices, c.rows, padding_idx, scale),
                {}, layout);
        }
      }
    }
  }
}

// Each row is summed in index order: 1e8 + 1 - 1e8 is 0 in float32 that way and 1 in any
// order that adds the 1 last (the interpreter, in double, says 1: this is about order only).
TEST_F(ExternOpsTest, EmbeddingBackwardSumsEachRowInIndexOrder) {
  const Tensor grad = Tensor::Empty({5, 1}, kF32);
  grad.FromDoubles({1e8, 7, 1, 5, -1e8});
  const Tensor indices = Tensor::Empty({5}, kI64);
  indices.FromDoubles({2, 0, 2, 1, 2});
  const Tensor out = Tensor::Empty({3, 1}, kF32);
  ExternContext ctx;
  ctx.pool = &pool_;
  ASSERT_TRUE(
      RunDirect(kEmbeddingBackward, EmbeddingGradArgs(grad, indices, 3, -1, false), {out}, ctx)
          .ok());
  EXPECT_EQ(out.ToDoubles(), (std::vector<double>{7, 5, 0}));
}

TEST_F(ExternOpsTest, EmbeddingBackwardErrorsNameTheArgument) {
  ExternContext ctx;
  ctx.pool = &pool_;
  const Tensor grad = RandomTensor({4, 3}, kF32, Layout::kContiguous, rng_);
  const Tensor out = Tensor::Empty({5, 3}, kF32);
  Tensor indices = Tensor::Empty({4}, kI64);
  indices.FromDoubles({0, 4, 5, 1});
  absl::Status s =
      RunDirect(kEmbeddingBackward, EmbeddingGradArgs(grad, indices, 5, -1, false), {out}, ctx);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("index 5 is out of range for 5 rows"), std::string::npos) << s;
  indices.FromDoubles({0, -1, 2, 1});
  s = RunDirect(kEmbeddingBackward, EmbeddingGradArgs(grad, indices, 5, -1, false), {out}, ctx);
  EXPECT_NE(s.message().find("index -1 is out of range"), std::string::npos) << s;
  const Tensor float_indices = RandomTensor({4}, kF32, Layout::kContiguous, rng_, 0, 4);
  s = RunDirect(kEmbeddingBackward, EmbeddingGradArgs(grad, float_indices, 5, -1, false), {out},
                ctx);
  EXPECT_NE(s.message().find("indices must be int64 or int32, got float32"), std::string::npos)
      << s;
  indices = Tensor::Empty({3}, kI64);
  s = RunDirect(kEmbeddingBackward, EmbeddingGradArgs(grad, indices, 5, -1, false), {out}, ctx);
  EXPECT_NE(s.message().find("does not have a row for each of the indices"), std::string::npos)
      << s;
  indices = Tensor::Empty({4}, kI64);
  s = RunDirect(kEmbeddingBackward, EmbeddingGradArgs(grad, indices, 6, -1, false), {out}, ctx);
  EXPECT_NE(s.message().find("output 0 is float32[5, 3]"), std::string::npos) << s;
  const Tensor int_grad = Tensor::Empty({4, 3}, kI64);
  EXPECT_EQ(RunDirect(kEmbeddingBackward, EmbeddingGradArgs(int_grad, indices, 5, -1, false),
                      {Tensor::Empty({5, 3}, kI64)}, ctx)
                .code(),
            absl::StatusCode::kUnimplemented);
}

// Results are bit-identical whatever the number of threads.
TEST_F(ExternOpsTest, SameBytesForAnyThreadCount) {
  const Tensor a = RandomTensor({200, 300}, kF32, Layout::kTransposed, rng_);
  const Tensor b = RandomTensor({300, 270}, kF32, Layout::kContiguous, rng_);
  const Tensor x = RandomTensor({2, 4, 20, 17}, kF32, Layout::kContiguous, rng_);
  const Tensor w = RandomTensor({6, 2, 3, 3}, kF32, Layout::kContiguous, rng_);
  const Tensor q = RandomTensor({2, 2, 40, 16}, kF32, Layout::kContiguous, rng_);
  const Tensor indices = RandomTensor({8, 250}, kI64, Layout::kContiguous, rng_, 0, 300);
  const Tensor embedding_grad = RandomTensor({8, 250, 40}, kF32, Layout::kContiguous, rng_);
  std::vector<std::vector<Tensor>> runs;
  for (int threads : {1, 2, 4}) {
    std::vector<Tensor> all;
    for (const Tensor& t :
         Check("aten.mm.default", {V(a), V(b)}, {}, Layout::kContiguous, threads)) {
      all.push_back(t);
    }
    std::vector<Tensor> y = Check("aten.convolution.default",
                                  {V(x), V(w), None(), Ints({1, 2}), Ints({1, 1}), Ints({1, 1}),
                                   B(false), Ints({0, 0}), V(int64_t{2})},
                                  {}, Layout::kContiguous, threads);
    all.insert(all.end(), y.begin(), y.end());
    const Tensor dy = Tensor::Empty(y[0].sizes(), kF32);
    dy.FromDoubles(y[0].ToDoubles());
    for (const Tensor& t :
         Check("aten.convolution_backward.default",
               {V(dy), V(x), V(w), None(), Ints({1, 2}), Ints({1, 1}), Ints({1, 1}), B(false),
                Ints({0, 0}), V(int64_t{2}), Bools({true, true, false})},
               {}, Layout::kContiguous, threads)) {
      all.push_back(t);
    }
    for (const Tensor& t : Check("aten._scaled_dot_product_efficient_attention.default",
                                 {V(q), V(q), V(q), None(), B(true), V(0.0), B(true)}, {},
                                 Layout::kContiguous, threads)) {
      all.push_back(t);
    }
    for (bool scale : {false, true}) {
      for (const Tensor& t :
           Check(kEmbeddingBackward, EmbeddingGradArgs(embedding_grad, indices, 300, 7, scale), {},
                 Layout::kContiguous, threads)) {
        all.push_back(t);
      }
    }
    runs.push_back(all);
  }
  for (size_t r = 1; r < runs.size(); ++r) {
    ASSERT_EQ(runs[r].size(), runs[0].size());
    for (size_t i = 0; i < runs[0].size(); ++i) {
      if (!runs[0][i].defined()) continue;
      EXPECT_TRUE(testing::SameBytes(runs[0][i], runs[r][i])) << "result " << i << " run " << r;
    }
  }
}

// ---- the contract with the op registry and the compiler ----

TEST(ExternContractTest, RuntimeImplementsExactlyTheRegistryExterns) {
  const std::vector<std::string> registry =
      ops::TargetsWhere([](const ops::Op& op) { return op.extern_call || op.extern_when_stored; });
  ASSERT_FALSE(registry.empty());
  EXPECT_EQ(SupportedExternOps(), registry)
      << "runtime: " << absl::StrJoin(SupportedExternOps(), ", ")
      << "\nregistry: " << absl::StrJoin(registry, ", ");
  for (const std::string& op : registry) EXPECT_TRUE(IsExternOpSupported(op)) << op;
  // addmm is one where its result is stored anyway (below, a graph's output).
  EXPECT_TRUE(IsExternOpSupported("aten.addmm.default"));
  EXPECT_FALSE(IsExternOpSupported("aten.add.Tensor"));
}

// A one-node graph calling `op` with arguments of the types its schema asks for (values
// that decompose does not look at) and tensor metadata for every result.
absl::StatusOr<v1::Graph> OneCallGraph(const ops::Op& op) {
  v1::ValueMeta meta;
  v1::TensorMeta* t = meta.mutable_tensor();
  for (int d = 0; d < 2; ++d) {
    t->add_sizes()->set_value(2);
    t->add_strides()->set_value(d == 0 ? 2 : 1);
  }
  t->set_dtype(v1::DTYPE_FLOAT32);
  t->mutable_device()->set_type("cpu");
  v1::Graph g;
  v1::GraphInput* x = g.add_inputs();
  x->set_name("x");
  *x->mutable_meta() = meta;
  v1::Node* n = g.add_nodes();
  n->set_name("call");
  n->set_target(op.target());
  for (const ops::ParamSchema& p : op.schema.params) {
    if (p.has_default || p.keyword_only) break;
    v1::Argument* a = n->add_args();
    if (p.optional) {
      a->mutable_none();
      continue;
    }
    switch (p.type) {
      case ops::ArgType::kTensor:
        a->mutable_ref()->set_node("x");
        break;
      case ops::ArgType::kTensorList:
      case ops::ArgType::kOptTensorList:
        a->mutable_list()->add_items()->mutable_ref()->set_node("x");
        break;
      case ops::ArgType::kInt:
      case ops::ArgType::kSymInt:
        a->set_int_value(1);
        break;
      case ops::ArgType::kIntList:
      case ops::ArgType::kSymIntList:
        a->mutable_list()->add_items()->set_int_value(1);
        break;
      case ops::ArgType::kFloat:
        a->set_float_value(0.0);
        break;
      case ops::ArgType::kBool:
        a->set_bool_value(false);
        break;
      case ops::ArgType::kBoolList:
        for (int i = 0; i < 4; ++i) a->mutable_list()->add_items()->set_bool_value(true);
        break;
      case ops::ArgType::kString:
        a->set_string_value("0");
        break;
      default:
        return absl::UnimplementedError(
            absl::StrCat(op.target(), ": no test value for ", ops::ArgTypeName(p.type)));
    }
  }
  const bool tuple =
      op.schema.returns == ops::ReturnKind::kTensorList || op.schema.num_returns != 1;
  n->set_multi_output(tuple);
  const int results = op.schema.returns == ops::ReturnKind::kTensorList ? 1 : op.schema.num_returns;
  for (int i = 0; i < results; ++i) *n->add_outputs() = meta;
  v1::ValueRef* out = g.mutable_output()->mutable_list()->add_items()->mutable_ref();
  out->set_node("call");
  if (tuple) out->set_output(0);
  return g;
}

// Decompose turns every call of a registry extern op into an extern step (not a fallback),
// and so every call of an op that runs as one where its result is stored (here, the graph's
// output), so every extern step of a compiled plan is one the runtime implements.
TEST(ExternContractTest, DecomposeEmitsAnExternStepForEveryRegistryExtern) {
  int checked = 0;
  for (const ops::Op* op : ops::AllOps()) {
    if (!op->extern_call && !op->extern_when_stored) continue;
    SCOPED_TRACE(op->target());
    absl::StatusOr<v1::Graph> proto = OneCallGraph(*op);
    ASSERT_TRUE(proto.ok()) << proto.status();
    absl::StatusOr<graph::Graph> g = graph::Import(*proto);
    ASSERT_TRUE(g.ok()) << g.status();
    const canon::CanonicalGraph canonical(*g);
    absl::StatusOr<decompose::PrimGraph> p = decompose::Decompose(*g, canonical);
    ASSERT_TRUE(p.ok()) << p.status();
    int externs = 0;
    for (const decompose::Node& n : p->nodes) {
      if (n.kind != decompose::Node::Kind::kExtern) continue;
      ++externs;
      EXPECT_EQ(n.op, op->target());
      EXPECT_FALSE(n.fallback) << n.reason;
      EXPECT_EQ(n.collective, op->collective.has_value());
      EXPECT_TRUE(IsExternOpSupported(n.op));
    }
    EXPECT_EQ(externs, 1);
    ++checked;
  }
  EXPECT_EQ(checked, static_cast<int>(SupportedExternOps().size()));
}

}  // namespace
}  // namespace kiln::runtime
