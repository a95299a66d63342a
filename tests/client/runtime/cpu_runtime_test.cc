#include "client/runtime/cpu_runtime.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include "client/runtime/module.h"
#include "tests/client/runtime/interp_bridge.h"
#include "tests/client/runtime/plan_builder.h"

namespace kiln::runtime {
namespace {

using testing::BoolArg;
using testing::BufferParam;
using testing::DoubleParam;
using testing::IntParam;
using testing::Layout;
using testing::NoView;
using testing::PlanBuilder;
using testing::RandomTensor;
using testing::StringArg;
using testing::SymbolParam;
using testing::TensorArg;
using testing::View;
using Sz = testing::Sz;

std::string KernelBytes() {
  std::ifstream in(KILN_TEST_KERNELS_SO, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

constexpr auto kF32 = v1::DTYPE_FLOAT32;
const Sz kS0 = std::string("s0");

// One plan with every step kind over a symbolic row count s0:
//   t1 = relu(2 * x + 1)            launch affine_rows, launch relu_inplace (arena, offset 0)
//   out0 = t1 @ w                   extern aten.mm
//   t2 = tanh(t1)                   fallback aten.tanh (arena, offset after t1)
//   out1 = t2                       copy
//   state <- t2                     write back into input 2
//   free t1, free t2
//   out2 = x.t()                    a view of input 0
//   out3 = out1[1:, ::2]            a view of output 1
//   out4 = 2 * s0                   a symbolic scalar
//   out5 = None
//   out6 = row_reduce(out1)         launch writing an output buffer
v1::CompiledGraph EveryStepPlan(const std::string& bytes) {
  PlanBuilder p;
  const int m = p.Module(bytes);
  p.Symbol("s0", 0, 0);
  p.TensorInput("x", kF32, {kS0, int64_t{8}}, {int64_t{8}, int64_t{1}});
  p.TensorInput("w", kF32, {int64_t{8}, int64_t{4}}, {int64_t{4}, int64_t{1}});
  p.TensorInput("state", kF32, {kS0, int64_t{8}}, {int64_t{8}, int64_t{1}});
  const int x = p.Buffer(v1::BUFFER_KIND_INPUT, std::string("32*s0"), kF32, "x", 0);
  const int w = p.Buffer(v1::BUFFER_KIND_INPUT, int64_t{128}, kF32, "w", 1);
  p.Buffer(v1::BUFFER_KIND_INPUT, std::string("32*s0"), kF32, "state", 2);
  const int t1 =
      p.Buffer(v1::BUFFER_KIND_INTERMEDIATE, std::string("32*s0"), kF32, "t1", 0, int64_t{0});
  const int t2 = p.Buffer(v1::BUFFER_KIND_INTERMEDIATE, std::string("32*s0"), kF32, "t2", 0,
                          std::string("64*CeilDiv(32*s0, 64)"));
  const int out0 = p.Buffer(v1::BUFFER_KIND_OUTPUT, std::string("16*s0"), kF32, "out0");
  const int out1 = p.Buffer(v1::BUFFER_KIND_OUTPUT, std::string("32*s0"), kF32, "out1");
  const int out6 = p.Buffer(v1::BUFFER_KIND_OUTPUT, std::string("4*s0"), kF32, "out6");
  const int affine =
      p.Kernel(m, "kiln_test_affine_rows",
               {BufferParam(x), BufferParam(t1), IntParam(8), DoubleParam(2.0), IntParam(1)}, kS0);
  const int relu = p.Kernel(m, "kiln_test_relu_inplace", {BufferParam(t1)}, std::string("8*s0"));
  const int reduce =
      p.Kernel(m, "kiln_test_row_reduce", {BufferParam(out1), BufferParam(out6), IntParam(8)}, kS0);
  const auto mat = [&](int b) { return View(b, {kS0, int64_t{8}}, {int64_t{8}, int64_t{1}}); };
  p.Launch(affine);
  p.Launch(relu);
  v1::ExternStep* mm = p.Extern("aten.mm.default", "mm");
  *mm->add_args() = TensorArg(mat(t1));
  *mm->add_args() = TensorArg(View(w, {int64_t{8}, int64_t{4}}, {int64_t{4}, int64_t{1}}));
  *mm->add_outputs() = View(out0, {kS0, int64_t{4}}, {int64_t{4}, int64_t{1}});
  v1::FallbackStep* tanh = p.Fallback("aten.tanh.default", "tanh");
  *tanh->add_args() = TensorArg(mat(t1));
  *tanh->add_outputs() = mat(t2);
  p.Free(t1);
  p.Copy(mat(t2), mat(out1));
  p.WriteBack(2, mat(t2));
  p.Free(t2);
  p.Launch(reduce);
  p.Output(View(out0, {kS0, int64_t{4}}, {int64_t{4}, int64_t{1}}));
  p.Output(mat(out1));
  p.Output(View(x, {int64_t{8}, kS0}, {int64_t{1}, int64_t{8}}))->set_aliases_input(0);
  p.Output(View(out1, {std::string("s0 - 1"), int64_t{4}}, {int64_t{8}, int64_t{2}}, int64_t{8}))
      ->set_aliases_output(1);
  p.SymbolOutput("2*s0");
  p.NoneOutput();
  p.Output(View(out6, {kS0}, {int64_t{1}}));
  return p.graph();
}

struct Reference {
  std::vector<double> out0, out1, out6;
};

Reference Expected(const Tensor& x, const Tensor& w) {
  const int64_t n = x.size(0);
  const std::vector<double> xv = x.ToDoubles();
  const std::vector<double> wv = w.ToDoubles();
  std::vector<float> t1(static_cast<size_t>(n * 8));
  for (size_t i = 0; i < t1.size(); ++i) {
    t1[i] = std::max(0.0f, static_cast<float>(xv[i] * 2.0 + 1.0));
  }
  Reference r;
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < 4; ++j) {
      double acc = 0;
      for (int64_t k = 0; k < 8; ++k)
        acc += t1[static_cast<size_t>(i * 8 + k)] * wv[static_cast<size_t>(k * 4 + j)];
      r.out0.push_back(acc);
    }
  }
  for (float v : t1) r.out1.push_back(static_cast<float>(std::tanh(static_cast<double>(v))));
  for (int64_t i = 0; i < n; ++i) {
    float acc = 0;
    for (int64_t c = 0; c < 8; ++c) {
      const float v = static_cast<float>(r.out1[static_cast<size_t>(i * 8 + c)]);
      acc += std::sin(v) * v;
    }
    r.out6.push_back(acc);
  }
  return r;
}

class CpuRuntimeTest : public ::testing::Test {
 protected:
  std::string bytes_ = KernelBytes();
  std::mt19937_64 rng_{42};
};

TEST_F(CpuRuntimeTest, RunsEveryStepKindWithSymbolicSizes) {
  ASSERT_FALSE(bytes_.empty());
  absl::StatusOr<std::unique_ptr<CpuRuntime>> rt = CpuRuntime::Load(EveryStepPlan(bytes_));
  ASSERT_TRUE(rt.ok()) << rt.status();
  EXPECT_EQ((*rt)->num_inputs(), 3);
  EXPECT_EQ((*rt)->num_outputs(), 7);
  for (int64_t n : {1, 5, 37, 300}) {
    SCOPED_TRACE(n);
    const Tensor x = RandomTensor({n, 8}, kF32, Layout::kContiguous, rng_);
    const Tensor w = RandomTensor({8, 4}, kF32, Layout::kContiguous, rng_);
    const Tensor state = Tensor::Empty({n, 8}, kF32);
    CpuRuntime::RunOptions options;
    options.fallback = testing::InterpFallback();
    options.poison = true;
    absl::StatusOr<std::vector<Tensor>> out = (*rt)->Run({x, w, state}, options);
    ASSERT_TRUE(out.ok()) << out.status();
    ASSERT_EQ(out->size(), 7u);
    const Reference ref = Expected(x, w);
    EXPECT_TRUE(testing::AllClose((*out)[0].ToDoubles(), ref.out0, 1e-5, 1e-5));
    EXPECT_TRUE(testing::AllClose((*out)[1].ToDoubles(), ref.out1, 1e-6, 1e-7));
    EXPECT_TRUE(testing::AllClose(state.ToDoubles(), ref.out1, 1e-6, 1e-7)) << "write-back";
    // Output 2 is a view of the caller's x, not a copy.
    EXPECT_EQ((*out)[2].data(), x.data());
    EXPECT_EQ((*out)[2].sizes(), (std::vector<int64_t>{8, n}));
    EXPECT_EQ((*out)[2].strides(), (std::vector<int64_t>{1, 8}));
    // Output 3 is a view into output 1's memory.
    EXPECT_EQ((*out)[3].storage(), (*out)[1].storage());
    EXPECT_EQ((*out)[3].sizes(), (std::vector<int64_t>{n - 1, 4}));
    if (n > 1) {
      EXPECT_EQ((*out)[3].ToDoubles()[0], ref.out1[8]);
    }
    EXPECT_EQ((*out)[4].dtype(), v1::DTYPE_INT64);
    EXPECT_EQ((*out)[4].ItemInt(), 2 * n);
    EXPECT_FALSE((*out)[5].defined());
    EXPECT_TRUE(testing::AllClose((*out)[6].ToDoubles(), ref.out6, 1e-5, 1e-5));
    EXPECT_TRUE((*out)[0].owns_memory());
  }
}

TEST_F(CpuRuntimeTest, SameBytesForAnyThreadCount) {
  CpuRuntime::Options opts;
  opts.threads = 4;
  absl::StatusOr<std::unique_ptr<CpuRuntime>> rt = CpuRuntime::Load(EveryStepPlan(bytes_), opts);
  ASSERT_TRUE(rt.ok()) << rt.status();
  const int64_t n = 1001;
  const Tensor x = RandomTensor({n, 8}, kF32, Layout::kContiguous, rng_, -3, 3);
  const Tensor w = RandomTensor({8, 4}, kF32, Layout::kContiguous, rng_);
  std::vector<std::vector<Tensor>> results;
  for (int threads : {1, 2, 3, 4}) {
    CpuRuntime::RunOptions options;
    options.fallback = testing::InterpFallback();
    options.threads = threads;
    const Tensor state = Tensor::Empty({n, 8}, kF32);
    absl::StatusOr<std::vector<Tensor>> out = (*rt)->Run({x, w, state}, options);
    ASSERT_TRUE(out.ok()) << out.status();
    results.push_back(*std::move(out));
  }
  for (size_t r = 1; r < results.size(); ++r) {
    for (size_t i : {0, 1, 6}) {
      EXPECT_TRUE(testing::SameBytes(results[0][i], results[r][i])) << "output " << i;
    }
  }
}

TEST_F(CpuRuntimeTest, ConcurrentRunsAgree) {
  absl::StatusOr<std::unique_ptr<CpuRuntime>> rt = CpuRuntime::Load(EveryStepPlan(bytes_));
  ASSERT_TRUE(rt.ok()) << rt.status();
  const Tensor w = RandomTensor({8, 4}, kF32, Layout::kContiguous, rng_);
  std::vector<Tensor> xs;
  for (int i = 0; i < 4; ++i)
    xs.push_back(RandomTensor({50 + i, 8}, kF32, Layout::kContiguous, rng_));
  std::vector<std::thread> threads;
  std::vector<int> ok(xs.size(), 0);  // not vector<bool>: threads write neighbouring entries
  for (size_t i = 0; i < xs.size(); ++i) {
    threads.emplace_back([&, i] {
      for (int rep = 0; rep < 5; ++rep) {
        CpuRuntime::RunOptions options;
        options.fallback = testing::InterpFallback();
        const Tensor state = Tensor::Empty(xs[i].sizes(), kF32);
        absl::StatusOr<std::vector<Tensor>> out = (*rt)->Run({xs[i], w, state}, options);
        if (!out.ok()) return;
        const Reference ref = Expected(xs[i], w);
        if (!testing::AllClose((*out)[0].ToDoubles(), ref.out0, 1e-5, 1e-5)) return;
      }
      ok[i] = 1;
    });
  }
  for (std::thread& t : threads) t.join();
  for (size_t i = 0; i < ok.size(); ++i) EXPECT_TRUE(ok[i]) << "thread " << i;
}

TEST_F(CpuRuntimeTest, InputsAreValidatedByName) {
  absl::StatusOr<std::unique_ptr<CpuRuntime>> rt = CpuRuntime::Load(EveryStepPlan(bytes_));
  ASSERT_TRUE(rt.ok()) << rt.status();
  const Tensor x = Tensor::Empty({5, 8}, kF32);
  const Tensor w = Tensor::Empty({8, 4}, kF32);
  const Tensor state = Tensor::Empty({5, 8}, kF32);
  CpuRuntime::RunOptions options;
  options.fallback = testing::InterpFallback();
  auto expect_error = [&](std::vector<Tensor> inputs, const std::string& needle) {
    absl::StatusOr<std::vector<Tensor>> out = (*rt)->Run(inputs, options);
    ASSERT_FALSE(out.ok()) << needle;
    EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(out.status().message().find(needle), std::string::npos) << out.status();
  };
  expect_error({x, w}, "takes 3 inputs, got 2");
  expect_error({x, Tensor::Empty({8, 4}, v1::DTYPE_FLOAT64), state},
               "input 1 (w) has dtype float64");
  expect_error({x, Tensor::Empty({8, 4, 1}, kF32), state}, "input 1 (w) has rank 3");
  expect_error({x, Tensor::Empty({8, 5}, kF32), state}, "input 1 (w) has size 5 in dim 1");
  // s0 comes from x; state disagrees with it.
  expect_error({x, w, Tensor::Empty({6, 8}, kF32)},
               "input 2 (state) has size 6 in dim 0, the plan expects 5 (s0)");
  // A transposed w has the right sizes but not the layout the plan's views assume.
  const Tensor wt = RandomTensor({8, 4}, kF32, Layout::kTransposed, rng_);
  expect_error({x, wt, state}, "input 1 (w) has stride");
  expect_error({Tensor(), w, state}, "input 0 (x) gives symbol s0");
}

TEST_F(CpuRuntimeTest, DigestMismatchIsRefused) {
  v1::CompiledGraph g = EveryStepPlan(bytes_);
  std::string tampered = bytes_;
  tampered[tampered.size() / 2] ^= 0x5a;
  g.mutable_modules(0)->set_binary(tampered);
  absl::StatusOr<std::unique_ptr<CpuRuntime>> rt = CpuRuntime::Load(g);
  ASSERT_FALSE(rt.ok());
  EXPECT_EQ(rt.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(rt.status().message().find("module 0"), std::string::npos) << rt.status();
  EXPECT_NE(rt.status().message().find("refusing"), std::string::npos) << rt.status();

  g = EveryStepPlan(bytes_);
  g.mutable_modules(0)->mutable_digest()->set_hash("not a digest");
  EXPECT_EQ(CpuRuntime::Load(g).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(CpuRuntimeTest, MissingKernelSymbolIsNamed) {
  v1::CompiledGraph g = EveryStepPlan(bytes_);
  g.mutable_kernels(1)->set_name("kiln_test_no_such_kernel");
  absl::StatusOr<std::unique_ptr<CpuRuntime>> rt = CpuRuntime::Load(g);
  ASSERT_FALSE(rt.ok());
  EXPECT_EQ(rt.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(rt.status().message().find("module 0"), std::string::npos) << rt.status();
  EXPECT_NE(rt.status().message().find("\"kiln_test_no_such_kernel\""), std::string::npos)
      << rt.status();
}

TEST_F(CpuRuntimeTest, NotASharedObjectFailsToLoad) {
  PlanBuilder p;
  p.Module("this is not an ELF file");
  absl::StatusOr<std::unique_ptr<CpuRuntime>> rt = CpuRuntime::Load(p.graph());
  ASSERT_FALSE(rt.ok());
  EXPECT_EQ(rt.status().code(), absl::StatusCode::kInternal);
  EXPECT_NE(rt.status().message().find("module 0"), std::string::npos) << rt.status();
}

TEST_F(CpuRuntimeTest, ModulesAreSharedByDigest) {
  const v1::CompiledGraph g = EveryStepPlan(bytes_);
  const int before = LoadedModuleCount();
  {
    absl::StatusOr<std::unique_ptr<CpuRuntime>> a = CpuRuntime::Load(g);
    absl::StatusOr<std::unique_ptr<CpuRuntime>> b = CpuRuntime::Load(g);
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_EQ(LoadedModuleCount(), before + 1);
  }
  EXPECT_EQ(LoadedModuleCount(), before);
}

// Two different modules loaded at once are two mappings. The loader knows a library by the
// path it was opened under: with the memory file closed after loading, the second module's
// file got the first one's descriptor number, the same /proc/self/fd/N path, and dlopen
// handed back the first module.
TEST_F(CpuRuntimeTest, DifferentModulesLoadedAtOnceStayApart) {
  auto module = [](const std::string& bytes) {
    v1::CodeModule m;
    m.set_target("x86_64");
    m.set_kind(v1::BINARY_KIND_SHARED_OBJECT);
    m.set_binary(bytes);
    *m.mutable_digest() = DigestOf(bytes);
    return m;
  };
  // Bytes after an ELF object's end are not part of it: the same code, another digest.
  absl::StatusOr<std::shared_ptr<LoadedModule>> a = LoadedModule::Load(module(bytes_), "a");
  ASSERT_TRUE(a.ok()) << a.status();
  absl::StatusOr<std::shared_ptr<LoadedModule>> b =
      LoadedModule::Load(module(bytes_ + std::string(64, '\0')), "b");
  ASSERT_TRUE(b.ok()) << b.status();
  absl::StatusOr<CpuKernelFn> ka = (*a)->FindKernel("kiln_test_add");
  absl::StatusOr<CpuKernelFn> kb = (*b)->FindKernel("kiln_test_add");
  ASSERT_TRUE(ka.ok() && kb.ok());
  EXPECT_NE(*ka, *kb) << "the second module resolved to the first one's mapping";
}

TEST_F(CpuRuntimeTest, MalformedPlansAreRejected) {
  auto expect_invalid = [&](v1::CompiledGraph g, const std::string& needle) {
    absl::StatusOr<std::unique_ptr<CpuRuntime>> rt = CpuRuntime::Load(g);
    ASSERT_FALSE(rt.ok()) << needle;
    EXPECT_NE(rt.status().message().find(needle), std::string::npos) << rt.status();
  };
  v1::CompiledGraph g = EveryStepPlan(bytes_);
  g.set_target("cuda:sm_90");
  expect_invalid(g, "x86_64");
  g = EveryStepPlan(bytes_);
  g.mutable_buffers(3)->mutable_size_bytes()->set_expr("32*s1");
  expect_invalid(g, "unknown symbol s1");
  g = EveryStepPlan(bytes_);
  g.mutable_steps(0)->mutable_launch()->set_kernel(17);
  expect_invalid(g, "step 0");
  g = EveryStepPlan(bytes_);
  g.mutable_steps(2)->mutable_extern_call()->set_op("aten.nonzero.default");
  expect_invalid(g, "does not implement aten.nonzero.default");
  g = EveryStepPlan(bytes_);
  g.mutable_outputs(2)->set_aliases_input(1);
  expect_invalid(g, "aliases input 1");
  g = EveryStepPlan(bytes_);
  g.clear_symbol_sources();
  expect_invalid(g, "symbol s0 has no symbol source");
}

TEST_F(CpuRuntimeTest, ViewsOutsideTheirBufferAreRefused) {
  v1::CompiledGraph g = EveryStepPlan(bytes_);
  // The copy's destination reaches one row past out1.
  *g.mutable_steps(5)->mutable_copy()->mutable_dst()->mutable_offset() = testing::S(int64_t{8});
  absl::StatusOr<std::unique_ptr<CpuRuntime>> rt = CpuRuntime::Load(g);
  ASSERT_TRUE(rt.ok()) << rt.status();
  CpuRuntime::RunOptions options;
  options.fallback = testing::InterpFallback();
  const Tensor x = Tensor::Empty({3, 8}, kF32);
  absl::StatusOr<std::vector<Tensor>> out =
      (*rt)->Run({x, Tensor::Empty({8, 4}, kF32), Tensor::Empty({3, 8}, kF32)}, options);
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("step 5 (copy)"), std::string::npos) << out.status();
  EXPECT_NE(out.status().message().find("reaches past"), std::string::npos) << out.status();
}

TEST_F(CpuRuntimeTest, FallbackWithoutHookIsAClearError) {
  absl::StatusOr<std::unique_ptr<CpuRuntime>> rt = CpuRuntime::Load(EveryStepPlan(bytes_));
  ASSERT_TRUE(rt.ok()) << rt.status();
  const Tensor x = Tensor::Empty({3, 8}, kF32);
  absl::StatusOr<std::vector<Tensor>> out =
      (*rt)->Run({x, Tensor::Empty({8, 4}, kF32), Tensor::Empty({3, 8}, kF32)});
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(out.status().message().find("fallback aten.tanh.default, node tanh"), std::string::npos)
      << out.status();
}

TEST_F(CpuRuntimeTest, FallbackErrorsNameTheStep) {
  absl::StatusOr<std::unique_ptr<CpuRuntime>> rt = CpuRuntime::Load(EveryStepPlan(bytes_));
  ASSERT_TRUE(rt.ok()) << rt.status();
  CpuRuntime::RunOptions options;
  options.fallback = [](const FallbackCall&) { return absl::InternalError("framework says no"); };
  const Tensor x = Tensor::Empty({3, 8}, kF32);
  absl::StatusOr<std::vector<Tensor>> out =
      (*rt)->Run({x, Tensor::Empty({8, 4}, kF32), Tensor::Empty({3, 8}, kF32)}, options);
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInternal);
  EXPECT_NE(out.status().message().find(
                "step 3 (fallback aten.tanh.default, node tanh): framework says no"),
            std::string::npos)
      << out.status();
}

// A plan with a symbolic-int input, kernels that read RNG parameters, and symbols taken
// from a stride and from a scalar input.
TEST_F(CpuRuntimeTest, ScalarInputsStridesAndRngParameters) {
  PlanBuilder p;
  const int m = p.Module(bytes_);
  p.Symbol("s0", 0, -1);
  p.Symbol("s1", 1, 0, /*from_stride=*/true);
  p.SymbolicInput("n");
  p.TensorInput("y", kF32, {int64_t{3}}, {std::string("s1")});
  p.Buffer(v1::BUFFER_KIND_INPUT, std::string("8*s1 + 4"), kF32, "y", 1);
  const int out =
      p.Buffer(v1::BUFFER_KIND_OUTPUT, std::string("8*(s0 + s1)"), v1::DTYPE_INT64, "o");
  const int k = p.Kernel(m, "kiln_test_rng_probe",
                         {BufferParam(out), testing::RngParam(v1::PARAM_KIND_RNG_SEED),
                          testing::RngParam(v1::PARAM_KIND_RNG_OFFSET)},
                         std::string("s0 + s1"));
  p.Launch(k);
  p.Output(View(out, {std::string("s0 + s1")}, {int64_t{1}}, int64_t{0}, v1::DTYPE_INT64));
  absl::StatusOr<std::unique_ptr<CpuRuntime>> rt = CpuRuntime::Load(p.graph());
  ASSERT_TRUE(rt.ok()) << rt.status();
  const Tensor y = RandomTensor({3}, kF32, Layout::kStrided, rng_);  // stride 2
  CpuRuntime::RunOptions options;
  options.rng_seed = 7;
  options.rng_offset = 300;
  absl::StatusOr<std::vector<Tensor>> o = (*rt)->Run({Tensor::Scalar(4), y}, options);
  ASSERT_TRUE(o.ok()) << o.status();
  std::vector<double> want;
  for (int i = 0; i < 6; ++i) want.push_back(7 * 1000 + 300 + i);
  EXPECT_EQ((*o)[0].ToDoubles(), want);
  // A float tensor cannot give a symbol.
  absl::StatusOr<std::vector<Tensor>> bad = (*rt)->Run({Tensor::Empty({}, kF32), y}, options);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("input 0 (n)"), std::string::npos) << bad.status();
}

// An extern call inside a plan with symbolic sizes passed as a SymInt argument, and a
// dropped (buffer -1) output.
TEST_F(CpuRuntimeTest, CollectivesInAPlan) {
  PlanBuilder p;
  p.Symbol("s0", 0, 0);
  p.TensorInput("g", kF32, {kS0}, {int64_t{1}});
  const int in = p.Buffer(v1::BUFFER_KIND_INPUT, std::string("4*s0"), kF32, "g", 0);
  const int t =
      p.Buffer(v1::BUFFER_KIND_INTERMEDIATE, std::string("4*s0"), kF32, "t", 0, int64_t{0});
  const int out = p.Buffer(v1::BUFFER_KIND_OUTPUT, std::string("4*s0"), kF32, "o");
  const auto vec = [&](int b) { return View(b, {kS0}, {int64_t{1}}); };
  v1::ExternStep* ar = p.Extern("_c10d_functional.all_reduce.default", "all_reduce");
  *ar->add_args() = TensorArg(vec(in));
  *ar->add_args() = StringArg("sum");
  *ar->add_args() = StringArg("0");
  *ar->add_outputs() = vec(t);
  ar->set_collective(true);
  v1::ExternStep* wait = p.Extern("_c10d_functional.wait_tensor.default", "wait");
  *wait->add_args() = TensorArg(vec(t));
  *wait->add_outputs() = vec(out);
  p.Output(vec(out));
  absl::StatusOr<std::unique_ptr<CpuRuntime>> rt = CpuRuntime::Load(p.graph());
  ASSERT_TRUE(rt.ok()) << rt.status();
  const Tensor g = RandomTensor({10}, kF32, Layout::kContiguous, rng_);

  // One rank: the identity.
  absl::StatusOr<std::vector<Tensor>> o = (*rt)->Run({g});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ((*o)[0].ToDoubles(), g.ToDoubles());

  // Two ranks without a hook: a clear error.
  CpuRuntime::RunOptions options;
  options.world_size = 2;
  o = (*rt)->Run({g}, options);
  ASSERT_FALSE(o.ok());
  EXPECT_EQ(o.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(o.status().message().find("needs a collective hook"), std::string::npos) << o.status();

  // Two ranks with a hook standing in for a process group that doubles the values.
  int calls = 0;
  options.collective = [&](const CollectiveCall& c) {
    ++calls;
    EXPECT_EQ(c.op, "all_reduce");
    EXPECT_EQ(c.reduce_op, "sum");
    EXPECT_EQ(c.group_size, 2);
    std::vector<double> v = c.input.ToDoubles();
    for (double& x : v) x *= 2;
    c.output.FromDoubles(v);
    return absl::OkStatus();
  };
  o = (*rt)->Run({g}, options);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(calls, 1);
  std::vector<double> want = g.ToDoubles();
  for (double& x : want) x *= 2;
  EXPECT_EQ((*o)[0].ToDoubles(), want);
}

TEST_F(CpuRuntimeTest, ExternArgumentsFromSymbolsAndDroppedOutputs) {
  // convolution_backward with output_mask [false, true, true] and grad_input dropped,
  // its stride given as a symbolic expression.
  PlanBuilder p;
  p.Symbol("s0", 0, 0);
  p.TensorInput("dy", kF32, {kS0, int64_t{2}, int64_t{3}}, {int64_t{6}, int64_t{3}, int64_t{1}});
  p.TensorInput("x", kF32, {kS0, int64_t{1}, int64_t{5}}, {int64_t{5}, int64_t{5}, int64_t{1}});
  p.TensorInput("w", kF32, {int64_t{2}, int64_t{1}, int64_t{3}},
                {int64_t{3}, int64_t{3}, int64_t{1}});
  const int dy = p.Buffer(v1::BUFFER_KIND_INPUT, std::string("24*s0"), kF32, "dy", 0);
  const int x = p.Buffer(v1::BUFFER_KIND_INPUT, std::string("20*s0"), kF32, "x", 1);
  const int w = p.Buffer(v1::BUFFER_KIND_INPUT, int64_t{24}, kF32, "w", 2);
  const int dw = p.Buffer(v1::BUFFER_KIND_OUTPUT, int64_t{24}, kF32, "dw");
  const int db = p.Buffer(v1::BUFFER_KIND_OUTPUT, int64_t{8}, kF32, "db");
  v1::ExternStep* e = p.Extern("aten.convolution_backward.default", "conv_bw");
  *e->add_args() =
      TensorArg(View(dy, {kS0, int64_t{2}, int64_t{3}}, {int64_t{6}, int64_t{3}, int64_t{1}}));
  *e->add_args() =
      TensorArg(View(x, {kS0, int64_t{1}, int64_t{5}}, {int64_t{5}, int64_t{5}, int64_t{1}}));
  *e->add_args() = TensorArg(
      View(w, {int64_t{2}, int64_t{1}, int64_t{3}}, {int64_t{3}, int64_t{3}, int64_t{1}}));
  *e->add_args() = testing::IntsArg({2});
  v1::CallArgument stride;
  stride.mutable_list()->add_items()->mutable_value()->mutable_symbolic()->set_expr("s0 // s0");
  *e->add_args() = stride;
  *e->add_args() = testing::IntsArg({0});
  *e->add_args() = testing::IntsArg({1});
  *e->add_args() = BoolArg(false);
  *e->add_args() = testing::IntsArg({0});
  *e->add_args() = testing::IntArg(1);
  v1::CallArgument mask;
  for (bool b : {false, true, true})
    mask.mutable_value()->mutable_list()->add_items()->set_bool_value(b);
  *e->add_args() = mask;
  *e->add_outputs() = NoView();
  *e->add_outputs() =
      View(dw, {int64_t{2}, int64_t{1}, int64_t{3}}, {int64_t{3}, int64_t{3}, int64_t{1}});
  *e->add_outputs() = View(db, {int64_t{2}}, {int64_t{1}});
  p.Output(View(dw, {int64_t{2}, int64_t{1}, int64_t{3}}, {int64_t{3}, int64_t{3}, int64_t{1}}));
  p.Output(View(db, {int64_t{2}}, {int64_t{1}}));
  absl::StatusOr<std::unique_ptr<CpuRuntime>> rt = CpuRuntime::Load(p.graph());
  ASSERT_TRUE(rt.ok()) << rt.status();
  const Tensor tdy = RandomTensor({3, 2, 3}, kF32, Layout::kContiguous, rng_);
  const Tensor tx = RandomTensor({3, 1, 5}, kF32, Layout::kContiguous, rng_);
  const Tensor tw = RandomTensor({2, 1, 3}, kF32, Layout::kContiguous, rng_);
  absl::StatusOr<std::vector<Tensor>> o = (*rt)->Run({tdy, tx, tw});
  ASSERT_TRUE(o.ok()) << o.status();
  std::vector<CallValue> args(11);
  args[0].v = tdy;
  args[1].v = tx;
  args[2].v = tw;
  args[3].v = CallValue::List{CallValue{int64_t{2}}};
  args[4].v = CallValue::List{CallValue{int64_t{1}}};
  args[5].v = CallValue::List{CallValue{int64_t{0}}};
  args[6].v = CallValue::List{CallValue{int64_t{1}}};
  args[7].v = false;
  args[8].v = CallValue::List{CallValue{int64_t{0}}};
  args[9].v = int64_t{1};
  args[10].v = CallValue::List{CallValue{false}, CallValue{true}, CallValue{true}};
  absl::StatusOr<std::vector<interp::Value>> want =
      testing::RunInterp("aten.convolution_backward.default", args);
  ASSERT_TRUE(want.ok()) << want.status();
  EXPECT_TRUE(testing::AllClose((*o)[0].ToDoubles(),
                                std::get<interp::Tensor>((*want)[1]).ToDoubles(), 1e-5, 1e-5));
  EXPECT_TRUE(testing::AllClose((*o)[1].ToDoubles(),
                                std::get<interp::Tensor>((*want)[2]).ToDoubles(), 1e-5, 1e-5));
}

}  // namespace
}  // namespace kiln::runtime
