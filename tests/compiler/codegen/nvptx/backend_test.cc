// The sm_90 backend: its key facts, its launch geometry, the PTX of a small pointwise kernel
// (structure, not text), cubins nvJitLink accepts with their resources, module layout, and
// bytes that do not depend on the number of threads.

#include "compiler/codegen/nvptx/backend.h"

#include <gmock/gmock.h>
#include <google/protobuf/text_format.h>
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "compiler/codegen/nvptx/codegen.h"
#include "compiler/codegen/nvptx/launch.h"
#include "compiler/codegen/nvptx/libdevice.h"
#include "compiler/codegen/nvptx/nvjitlink.h"
#include "compiler/codegen/target.h"
#include "compiler/compile.h"
#include "compiler/graph/import.h"
#include "tests/compiler/graph_testing.h"

namespace kiln::codegen::nvptx {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// `op` of `arity` inputs x0, x1, ... of n elements of `dtype`, returned: one pointwise kernel.
v1::Graph PointwiseGraph(const std::string& op, int64_t n, const std::string& dtype,
                         int arity = 1) {
  const std::string meta = absl::StrCat(R"pb(tensor { sizes { value:)pb", n, R"pb(}
                                                                                  strides { value: 1 }
    storage_offset { value: 0 }
    dtype: )pb",
                                        dtype, R"pb(
    device { type: "cuda" index: 0 }
  })pb");
  std::string inputs, args;
  for (int i = 0; i < arity; ++i) {
    absl::StrAppend(&inputs, "inputs { name: \"x", i, "\" role: INPUT_ROLE_USER_INPUT meta { ",
                    meta, " } }\n");
    absl::StrAppend(&args, "args { ref { node: \"x", i, "\" } }\n");
  }
  const std::string text = absl::StrCat(inputs, R"pb(
                                          nodes { name: "y" target: ")pb",
                                        op, "\"\n", args, R"pb(
                                          outputs {)pb",
                                        meta, R"pb(}
                                                   }
    output { list { items { ref { node: "y" } } } }
  )pb");
  v1::Graph g;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &g)) << text;
  return g;
}

TEST(NvptxBackendTest, KeyFactsNameTheArchitectureAndTools) {
  ASSERT_TRUE(NvJitLinkAvailable().ok()) << NvJitLinkAvailable();
  const std::unique_ptr<Backend> backend = NewBackend();
  EXPECT_EQ(backend->target(), kTargetCudaSm90);
  EXPECT_THAT(backend->KeyFacts(), HasSubstr("nvptx64-nvidia-cuda"));
  EXPECT_THAT(backend->KeyFacts(), HasSubstr("sm_90 +ptx78"));
  EXPECT_THAT(backend->KeyFacts(), HasSubstr("O2"));
  EXPECT_THAT(backend->KeyFacts(), HasSubstr(absl::StrCat("nvJitLink ", NvJitLinkVersion())));
  EXPECT_THAT(backend->KeyFacts(),
              HasSubstr(absl::StrCat("libdevice ", LibdeviceSha256().substr(0, 16))));
  EXPECT_EQ(LibdeviceSha256().size(), 64u);
  EXPECT_EQ(LibdeviceBitcode().substr(0, 4), "BC\xc0\xde");
}

TEST(NvptxLaunchTest, ConstantRangesGetEnoughBlocksUpToTheCap) {
  auto schedule = [](int64_t points) {
    loop::Kernel k;
    k.parallel = {loop::IndexExpr::Const(points)};
    return ScheduleKernel(loop::Program(), k);
  };
  const KernelSchedule small = schedule(1000);
  ASSERT_EQ(small.grid.size(), 3u);
  EXPECT_EQ(small.grid[0], loop::IndexExpr::Const(4));
  EXPECT_EQ(small.grid[1], loop::IndexExpr::Const(1));
  EXPECT_EQ(small.grid[2], loop::IndexExpr::Const(1));
  ASSERT_EQ(small.block.size(), 3u);
  EXPECT_EQ(small.block[0], loop::IndexExpr::Const(kBlockThreads));
  EXPECT_EQ(schedule(256).grid[0], loop::IndexExpr::Const(1));
  EXPECT_EQ(schedule(257).grid[0], loop::IndexExpr::Const(2));
  EXPECT_EQ(schedule(int64_t{1} << 30).grid[0], loop::IndexExpr::Const(int64_t{1} << 22));
  EXPECT_EQ(schedule(int64_t{1} << 40).grid[0], loop::IndexExpr::Const(kMaxGridBlocks))
      << "past the hardware's grid limit the grid strides";
  EXPECT_EQ(schedule(0).grid[0], loop::IndexExpr::Const(0));
  loop::Kernel none;  // no parallel dimension: one point
  EXPECT_EQ(ScheduleKernel(loop::Program(), none).grid[0], loop::IndexExpr::Const(1));
}

TEST(NvptxLaunchTest, SymbolicRangesGetOneThreadPerPoint) {
  absl::StatusOr<loop::Program> program =
      testing::FuseSharedGraph("mlp_automatic_dynamic2.fw.json");
  ASSERT_TRUE(program.ok()) << program.status();
  absl::StatusOr<std::vector<KernelSchedule>> schedules = NewBackend()->Schedule(*program);
  ASSERT_TRUE(schedules.ok()) << schedules.status();
  ASSERT_EQ(schedules->size(), program->kernels.size());
  int symbolic = 0;
  for (size_t i = 0; i < schedules->size(); ++i) {
    const loop::IndexExpr points =
        PointsOf(program->kernels[i], VectorLanes(*program, program->kernels[i]));
    const loop::IndexExpr& grid = (*schedules)[i].grid[0];
    if (points.is_const()) {
      EXPECT_TRUE(grid.is_const()) << "kernel " << i;
      EXPECT_LE(grid.const_value(), kMaxGridBlocks) << "kernel " << i;
      continue;
    }
    ++symbolic;
    if (ReductionThreads(program->kernels[i]) > 0) {
      // A block per point, up to the cap.
      EXPECT_EQ(grid, loop::IndexExpr::Min({points, loop::IndexExpr::Const(kMaxBlocks)}, nullptr))
          << "kernel " << i;
      continue;
    }
    EXPECT_EQ(grid, loop::IndexExpr::FloorDiv(points + loop::IndexExpr::Const(kBlockThreads - 1),
                                              loop::IndexExpr::Const(kBlockThreads), nullptr))
        << "kernel " << i;
  }
  EXPECT_GT(symbolic, 0) << "the graph has symbolic sizes";
}

// A kernel of `points` rows reducing `length` elements each, in one looping stage.
loop::Kernel ReductionKernel(loop::IndexExpr points, loop::IndexExpr length, bool fusible = true) {
  loop::Kernel k;
  k.parallel = {std::move(points)};
  k.reduction = {std::move(length)};
  k.stages.push_back({true, 0, 0});
  k.fusible = fusible;
  return k;
}

TEST(NvptxLaunchTest, LongReductionsGetABlockPerPoint) {
  using loop::IndexExpr;
  EXPECT_EQ(ReductionThreads(ReductionKernel(IndexExpr::Const(512), IndexExpr::Const(1024))),
            kBlockThreads);
  EXPECT_EQ(ReductionThreads(ReductionKernel(IndexExpr::Const(512), IndexExpr::Const(100))), 128);
  EXPECT_EQ(ReductionThreads(ReductionKernel(IndexExpr::Const(512), IndexExpr::Const(64))), 64);
  // Short rows stay one thread's; a scatter's threads own whole columns.
  EXPECT_EQ(ReductionThreads(ReductionKernel(IndexExpr::Const(512), IndexExpr::Const(63))), 0);
  EXPECT_EQ(ReductionThreads(ReductionKernel(IndexExpr::Const(512), IndexExpr::Const(4096),
                                             /*fusible=*/false)),
            0);
  loop::Kernel pointwise;
  pointwise.parallel = {IndexExpr::Const(1 << 20)};
  pointwise.stages.push_back({false, 0, 0});
  EXPECT_EQ(ReductionThreads(pointwise), 0);

  const KernelSchedule rows = ScheduleKernel(
      loop::Program(), ReductionKernel(IndexExpr::Const(512), IndexExpr::Const(100)));
  EXPECT_EQ(rows.grid[0], IndexExpr::Const(512));
  EXPECT_EQ(rows.block[0], IndexExpr::Const(128));
  EXPECT_EQ(ScheduleKernel(loop::Program(),
                           ReductionKernel(IndexExpr::Const(1 << 20), IndexExpr::Const(4096)))
                .grid[0],
            IndexExpr::Const(kMaxBlocks));
  // A symbolic row length gets a full block.
  const IndexExpr s0 = IndexExpr::Sym(0);
  const KernelSchedule symbolic =
      ScheduleKernel(loop::Program(), ReductionKernel(IndexExpr::Const(8), s0));
  EXPECT_EQ(symbolic.grid[0], IndexExpr::Const(8));
  EXPECT_EQ(symbolic.block[0], IndexExpr::Const(kBlockThreads));
}

// nanoGPT's layer norms, softmax and loss reduce rows across a block: warp shuffles, then the
// warps' partials through shared memory between two barriers.
TEST(NvptxCodegenTest, LongRowsReduceAcrossTheBlock) {
  absl::StatusOr<loop::Program> program = testing::FuseSharedGraph("nanogpt_fp32.fw.json");
  ASSERT_TRUE(program.ok()) << program.status();
  absl::StatusOr<CodegenResult> result = GenerateCubins(*program, CodegenOptions());
  ASSERT_TRUE(result.ok()) << result.status();
  int cooperative = 0;
  for (size_t i = 0; i < program->kernels.size(); ++i) {
    const std::string& ptx = result->kernels[i].ptx;
    if (ReductionThreads(program->kernels[i]) == 0) {
      EXPECT_THAT(ptx, Not(HasSubstr("shfl.sync"))) << "kernel " << i;
      continue;
    }
    ++cooperative;
    EXPECT_THAT(ptx, HasSubstr("shfl.sync.bfly.b32")) << "kernel " << i;
    EXPECT_THAT(ptx, HasSubstr("bar.sync")) << "kernel " << i;
    EXPECT_THAT(ptx, HasSubstr(".shared .align 8 .b8 kiln_reduce_values[256]")) << "kernel " << i;
  }
  EXPECT_GT(cooperative, 0);
}

TEST(NvptxLaunchTest, ThePlanCarriesLaunchesAsExpressionsOverTheSymbols) {
  absl::StatusOr<graph::Graph> g =
      graph::Import(testing::LoadSharedGraph("mlp_automatic_dynamic2.fw.json"));
  ASSERT_TRUE(g.ok()) << g.status();
  v1::CompileOptions options;
  options.set_target(std::string(kTargetCudaSm90));
  absl::StatusOr<v1::CompiledGraph> artifact = compiler::Compile(*g, options, "key");
  ASSERT_TRUE(artifact.ok()) << artifact.status();
  int symbolic = 0;
  for (const v1::Kernel& k : artifact->kernels()) {
    ASSERT_EQ(k.launch().grid_size(), 3) << k.name();
    ASSERT_EQ(k.launch().block_size(), 3) << k.name();
    EXPECT_EQ(k.launch().block(0).value(), kBlockThreads) << k.name();
    EXPECT_EQ(k.launch().block(1).value(), 1) << k.name();
    EXPECT_EQ(k.launch().grid(1).value(), 1) << k.name();
    EXPECT_EQ(k.launch().grid(2).value(), 1) << k.name();
    if (k.launch().grid(0).kind_case() == v1::SymInt::kExpr) {
      ++symbolic;
      EXPECT_THAT(k.launch().grid(0).expr(), HasSubstr("s0")) << k.name();
    }
  }
  EXPECT_GT(symbolic, 0);
}

TEST(NvptxCodegenTest, PointwisePtxIsAGridStrideKernelWithLibdeviceMath) {
  absl::StatusOr<loop::Program> program =
      testing::FuseGraph(PointwiseGraph("aten.exp.default", 1000, "DTYPE_FLOAT32"));
  ASSERT_TRUE(program.ok()) << program.status();
  ASSERT_EQ(program->kernels.size(), 1u);
  CodegenOptions options;
  options.emit_llvm_ir = true;
  absl::StatusOr<CodegenResult> result = GenerateCubins(*program, options);
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(result->kernels.size(), 1u);
  const std::string& ptx = result->kernels[0].ptx;
  EXPECT_THAT(ptx, HasSubstr(".version 7.8"));
  EXPECT_THAT(ptx, HasSubstr(".target sm_90"));
  EXPECT_THAT(ptx, HasSubstr(".address_size 64"));
  // The entry takes the input and output buffers as 64-bit pointers.
  EXPECT_THAT(ptx, HasSubstr(".visible .entry kiln_k0("));
  EXPECT_THAT(ptx, HasSubstr(".param .u64 kiln_k0_param_0"));
  EXPECT_THAT(ptx, HasSubstr(".param .u64 kiln_k0_param_1"));
  EXPECT_THAT(ptx, Not(HasSubstr("kiln_k0_param_2")));
  // Its position in the grid and the grid-stride loop's step, for blocks of kBlockThreads.
  for (const char* sreg : {"%ctaid.x", "%tid.x", "%nctaid.x"}) {
    EXPECT_THAT(ptx, HasSubstr(sreg)) << sreg;
  }
  EXPECT_THAT(
      ptx, ::testing::ContainsRegex(absl::StrCat("mul\\.wide\\.u32[^;]*, ", kBlockThreads, ";")));
  EXPECT_THAT(ptx, HasSubstr("ld.global"));
  EXPECT_THAT(ptx, HasSubstr("st.global.f32"));
  // libdevice's expf, inlined: no call and nothing external is left.
  EXPECT_THAT(ptx, HasSubstr("ex2.approx"));
  EXPECT_THAT(ptx, Not(HasSubstr("call")));
  EXPECT_THAT(ptx, Not(HasSubstr(".extern")));
  EXPECT_THAT(ptx, Not(HasSubstr("__nv_expf")));
  EXPECT_THAT(result->llvm_ir, HasSubstr("!\"kernel\", i32 1"));

  const std::string& cubin = result->kernels[0].cubin;
  EXPECT_EQ(cubin.substr(0, 4),
            "\x7f"
            "ELF");
  // The register count read from the cubin is what ptxas reports for the kernel.
  absl::StatusOr<std::string> again = AssembleCubin(ptx);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(*again == cubin) << "the same bytes again";
  std::string log;
  ASSERT_TRUE(AssembleCubin(ptx, &log).ok());
  EXPECT_GT(result->kernels[0].registers, 0);
  EXPECT_THAT(log, HasSubstr(absl::StrCat("Used ", result->kernels[0].registers, " registers")))
      << log;
  EXPECT_EQ(result->kernels[0].static_shared_memory_bytes, 0);
}

TEST(NvptxCodegenTest, HalfTypesLoadAndStoreAroundFloatMath) {
  for (const char* dtype : {"DTYPE_BFLOAT16", "DTYPE_FLOAT16"}) {
    absl::StatusOr<loop::Program> program =
        testing::FuseGraph(PointwiseGraph("aten.tanh.default", 64, dtype));
    ASSERT_TRUE(program.ok()) << dtype << ": " << program.status();
    absl::StatusOr<CodegenResult> result = GenerateCubins(*program);
    ASSERT_TRUE(result.ok()) << dtype << ": " << result.status();
    ASSERT_EQ(result->kernels.size(), 1u);
    const std::string& ptx = result->kernels[0].ptx;
    // 16-bit loads and stores, math in f32.
    EXPECT_THAT(ptx, ::testing::ContainsRegex("ld\\.global\\.nc\\.[bu]16")) << dtype;
    EXPECT_THAT(ptx, ::testing::ContainsRegex("st\\.global\\.[bu]16")) << dtype;
    EXPECT_THAT(ptx, HasSubstr("fma.rn.f32")) << dtype;
    EXPECT_THAT(ptx, Not(HasSubstr("call"))) << dtype;
  }
}

// Every float function the emitter leaves to the target finds its libdevice counterpart, in
// float and in double: nothing stays undefined and nvJitLink assembles it.
TEST(NvptxCodegenTest, EveryFloatFunctionLinksFromLibdevice) {
  const std::vector<std::pair<std::string, int>> ops = {
      {"aten.abs.default", 1},   {"aten.exp.default", 1},        {"aten.exp2.default", 1},
      {"aten.expm1.default", 1}, {"aten.log.default", 1},        {"aten.log2.default", 1},
      {"aten.log10.default", 1}, {"aten.log1p.default", 1},      {"aten.sqrt.default", 1},
      {"aten.rsqrt.default", 1}, {"aten.reciprocal.default", 1}, {"aten.sin.default", 1},
      {"aten.cos.default", 1},   {"aten.tan.default", 1},        {"aten.asin.default", 1},
      {"aten.acos.default", 1},  {"aten.atan.default", 1},       {"aten.sinh.default", 1},
      {"aten.cosh.default", 1},  {"aten.tanh.default", 1},       {"aten.sigmoid.default", 1},
      {"aten.erf.default", 1},   {"aten.erfc.default", 1},       {"aten.floor.default", 1},
      {"aten.ceil.default", 1},  {"aten.round.default", 1},      {"aten.trunc.default", 1},
      {"aten.sign.default", 1},  {"aten.lgamma.default", 1},     {"aten.atan2.default", 2},
      {"aten.fmod.Tensor", 2},   {"aten.remainder.Tensor", 2},   {"aten.pow.Tensor_Tensor", 2},
  };
  for (const char* dtype : {"DTYPE_FLOAT32", "DTYPE_FLOAT64"}) {
    for (const auto& [op, arity] : ops) {
      absl::StatusOr<loop::Program> program =
          testing::FuseGraph(PointwiseGraph(op, 100, dtype, arity));
      ASSERT_TRUE(program.ok()) << op << " " << dtype << ": " << program.status();
      absl::StatusOr<CodegenResult> result = GenerateCubins(*program);
      ASSERT_TRUE(result.ok()) << op << " " << dtype << ": " << result.status();
      for (const KernelBinary& k : result->kernels) {
        EXPECT_THAT(k.ptx, Not(HasSubstr(".extern"))) << op << " " << dtype;
        EXPECT_GT(k.registers, 0) << op << " " << dtype;
      }
    }
  }
}

TEST(NvptxCodegenTest, NvJitLinkErrorsCarryItsLog) {
  const absl::StatusOr<std::string> bad = AssembleCubin(
      ".version 7.8\n.target sm_90\n.address_size 64\n.visible .entry k() { "
      "no.such.instruction; }\n");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(bad.status().message(), HasSubstr("nvJitLink"));
  EXPECT_THAT(bad.status().message(), HasSubstr("Not a name of any known instruction"));
  EXPECT_FALSE(ResourcesOf("not an elf file", "k").ok());
}

TEST(NvptxBackendTest, EveryKernelGetsACubinFollowedByItsPtx) {
  absl::StatusOr<loop::Program> program = testing::FuseSharedGraph("mlp_fp32.bw.json");
  ASSERT_TRUE(program.ok()) << program.status();
  ASSERT_FALSE(program->kernels.empty());
  GenerateOptions options;
  options.threads = 1;
  absl::StatusOr<GeneratedCode> one = NewBackend()->Generate(*program, options);
  ASSERT_TRUE(one.ok()) << one.status();
  ASSERT_EQ(one->kernels.size(), program->kernels.size());
  ASSERT_EQ(one->modules.size(), 2 * program->kernels.size());
  EXPECT_TRUE(one->llvm_ir.empty()) << "only when asked for";
  for (size_t i = 0; i < one->kernels.size(); ++i) {
    const KernelCode& k = one->kernels[i];
    ASSERT_EQ(k.module, static_cast<int32_t>(2 * i));
    const CodeModule& cubin = one->modules[2 * i];
    const CodeModule& ptx = one->modules[2 * i + 1];
    EXPECT_EQ(cubin.kind, v1::BINARY_KIND_CUBIN) << "kernel " << i;
    EXPECT_EQ(ptx.kind, v1::BINARY_KIND_PTX) << "kernel " << i;
    EXPECT_THAT(ptx.binary, HasSubstr(absl::StrCat(".entry kiln_k", i, "("))) << "kernel " << i;
    EXPECT_GT(k.registers, 0) << "kernel " << i;
    absl::StatusOr<KernelResources> r = ResourcesOf(cubin.binary, absl::StrCat("kiln_k", i));
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->registers, k.registers) << "kernel " << i;
  }
  // The same bytes on four threads, and again.
  options.threads = 4;
  for (int run = 0; run < 2; ++run) {
    absl::StatusOr<GeneratedCode> four = NewBackend()->Generate(*program, options);
    ASSERT_TRUE(four.ok()) << four.status();
    ASSERT_EQ(four->modules.size(), one->modules.size());
    for (size_t m = 0; m < one->modules.size(); ++m) {
      EXPECT_TRUE(four->modules[m].binary == one->modules[m].binary) << "module " << m;
    }
  }
}

TEST(NvptxBackendTest, AProgramWithoutKernelsStillHasAModule) {
  const loop::Program empty;
  absl::StatusOr<GeneratedCode> code = NewBackend()->Generate(empty, {});
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_TRUE(code->kernels.empty());
  ASSERT_EQ(code->modules.size(), 2u);
  EXPECT_EQ(code->modules[0].kind, v1::BINARY_KIND_CUBIN);
  EXPECT_EQ(code->modules[0].binary.substr(0, 4),
            "\x7f"
            "ELF");
  EXPECT_EQ(code->modules[1].kind, v1::BINARY_KIND_PTX);
}

}  // namespace
}  // namespace kiln::codegen::nvptx
