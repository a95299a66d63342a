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
    if (const ReductionSplit split = SplitOf(program->kernels[i]); split.threads > 0) {
      // A block per group of points, up to the cap.
      const loop::IndexExpr groups =
          split.points == 1
              ? points
              : loop::IndexExpr::CeilDiv(points, loop::IndexExpr::Const(split.points), nullptr);
      EXPECT_EQ(grid, loop::IndexExpr::Min({groups, loop::IndexExpr::Const(kMaxBlocks)}, nullptr))
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

TEST(NvptxLaunchTest, RowsUpToAThousandGetAWarpLongerOnesABlock) {
  using loop::IndexExpr;
  auto split = [](int64_t length) {
    return SplitOf(ReductionKernel(IndexExpr::Const(2048), IndexExpr::Const(length)));
  };
  for (int64_t length : {32, 64, 100, 1024}) {
    EXPECT_EQ(split(length).threads, kBlockThreads) << length;
    EXPECT_EQ(split(length).points, kBlockThreads / 32) << length;
    EXPECT_EQ(split(length).slices(), 32) << length;
    EXPECT_FALSE(split(length).column) << length;
  }
  EXPECT_EQ(split(1025).threads, kBlockThreads);
  EXPECT_EQ(split(1025).points, 1);
  EXPECT_EQ(split(4096).points, 1);
  // Short rows of enough points stay one thread's; a scatter's threads own whole columns.
  EXPECT_EQ(
      SplitOf(ReductionKernel(IndexExpr::Const(kFewPointThreads), IndexExpr::Const(31))).threads,
      0);
  EXPECT_EQ(ReductionThreads(ReductionKernel(IndexExpr::Const(512), IndexExpr::Const(4096),
                                             /*fusible=*/false)),
            0);
  loop::Kernel pointwise;
  pointwise.parallel = {IndexExpr::Const(1 << 20)};
  pointwise.stages.push_back({false, 0, 0});
  EXPECT_EQ(ReductionThreads(pointwise), 0);

  // Few rows (a warp each would leave SMs idle) of kMinRowThreads * kRowElementsPerThread or
  // more get a block each, kRowElementsPerThread elements a thread: batch norm's 64 channels.
  auto few = [](int64_t rows, int64_t length) {
    return SplitOf(ReductionKernel(IndexExpr::Const(rows), IndexExpr::Const(length)));
  };
  EXPECT_EQ(few(64, 1024).threads, kBlockThreads);
  EXPECT_EQ(few(64, 1024).points, 1);
  EXPECT_EQ(few(128, 256).threads, kMinRowThreads);
  EXPECT_EQ(few(128, 256).points, 1);
  EXPECT_EQ(few(512, 512).threads, 128);
  EXPECT_EQ(few(1055, 1024).points, 1) << "1,055 warps are fewer than a block on each SM";
  EXPECT_EQ(few(1056, 1024).points, kBlockThreads / 32);
  EXPECT_EQ(few(64, 255).points, kBlockThreads / 32) << "too short for a block";
  EXPECT_EQ(few(512, 16).slices(), 32) << "a warp each, where a thread each used 2 SMs";
  EXPECT_EQ(few(512, 7).threads, 0);
  EXPECT_EQ(few(1152, 16).slices(), 32);
  EXPECT_EQ(few(kFewPointThreads, 16).threads, 0) << "enough points for a thread each";
  EXPECT_EQ(few(32768, 9).threads, 0) << "a 3x3 max pool's windows";

  // A warp per row: eight rows a block.
  const KernelSchedule rows = ScheduleKernel(
      loop::Program(), ReductionKernel(IndexExpr::Const(512), IndexExpr::Const(100)));
  EXPECT_EQ(rows.grid[0], IndexExpr::Const(64));
  EXPECT_EQ(rows.block[0], IndexExpr::Const(kBlockThreads));
  EXPECT_EQ(
      ScheduleKernel(loop::Program(), ReductionKernel(IndexExpr::Const(513), IndexExpr::Const(100)))
          .grid[0],
      IndexExpr::Const(65))
      << "a last group of one row";
  EXPECT_EQ(ScheduleKernel(loop::Program(),
                           ReductionKernel(IndexExpr::Const(1 << 20), IndexExpr::Const(4096)))
                .grid[0],
            IndexExpr::Const(kMaxBlocks));
  // A symbolic row length gets a block per row.
  const IndexExpr s0 = IndexExpr::Sym(0);
  const KernelSchedule symbolic =
      ScheduleKernel(loop::Program(), ReductionKernel(IndexExpr::Const(8), s0));
  EXPECT_EQ(symbolic.grid[0], IndexExpr::Const(8));
  EXPECT_EQ(symbolic.block[0], IndexExpr::Const(kBlockThreads));
}

// `columns` points reducing `rows` elements of a row-major [rows, columns] buffer: down the
// columns (x[r, c], stride `columns` along the reduction) or along the rows when transposed.
loop::Kernel SumKernel(loop::IndexExpr columns, loop::IndexExpr rows, bool down_columns) {
  loop::Kernel k = ReductionKernel(columns, rows);
  const loop::IndexExpr p0 = loop::IndexExpr::Var(0), r = loop::IndexExpr::Var(1);
  loop::Inst load;
  load.op = loop::Opcode::kLoad;
  load.buffer = 0;
  load.index = down_columns ? r * columns + p0 : p0 * rows + r;
  loop::Inst sum;
  sum.op = loop::Opcode::kReduce;
  sum.a = 0;
  k.insts = {load, sum};
  k.stages = {{true, 0, 2}};
  return k;
}

TEST(NvptxLaunchTest, ReductionsDownColumnsGiveNeighbouringLanesNeighbouringPoints) {
  using loop::IndexExpr;
  const ReductionSplit down =
      SplitOf(SumKernel(IndexExpr::Const(768), IndexExpr::Const(8192), true));
  EXPECT_TRUE(down.column);
  EXPECT_EQ(down.threads, kColumnThreads);
  EXPECT_EQ(down.points, kColumnPoints);
  const ReductionSplit short_columns =
      SplitOf(SumKernel(IndexExpr::Const(768), IndexExpr::Const(512), true));
  EXPECT_TRUE(short_columns.column);
  EXPECT_EQ(short_columns.threads, kBlockThreads);
  EXPECT_EQ(short_columns.points, kMinColumnPoints) << "too small to be cut: more blocks";
  EXPECT_EQ(ScheduleKernel(loop::Program(),
                           SumKernel(IndexExpr::Const(768), IndexExpr::Const(8192), true))
                .grid[0],
            IndexExpr::Const(768 / kColumnPoints));
  const ReductionSplit along =
      SplitOf(SumKernel(IndexExpr::Const(768), IndexExpr::Const(8192), false));
  EXPECT_FALSE(along.column);
  EXPECT_EQ(along.points, 1);
  // Fewer points than a group: the rows' split, not a mostly idle column group.
  EXPECT_FALSE(SplitOf(SumKernel(IndexExpr::Const(4), IndexExpr::Const(8192), true)).column);
  // A symbolic number of columns.
  const KernelSchedule symbolic =
      ScheduleKernel(loop::Program(), SumKernel(IndexExpr::Sym(0), IndexExpr::Const(8192), true));
  EXPECT_EQ(symbolic.grid[0],
            IndexExpr::Min(
                {IndexExpr::CeilDiv(IndexExpr::Sym(0), IndexExpr::Const(kMinColumnPoints), nullptr),
                 IndexExpr::Const(kMaxBlocks)},
                nullptr));
}

// A layer norm's weight gradient sums dy * (x - mean[r]) * rstd[r] down the columns: mean and
// rstd walk the rows, but are the same for every column, so the sum is still a column split
// (as a row split, each block walked one column 768 elements apart). A load that walks the
// rows and also moves with the column (x transposed) makes it rows.
TEST(NvptxLaunchTest, AColumnSumThatAlsoReadsAPerRowVectorStaysAColumnSplit) {
  using loop::IndexExpr;
  const IndexExpr columns = IndexExpr::Const(768), rows = IndexExpr::Const(2048);
  const IndexExpr p0 = IndexExpr::Var(0), r = IndexExpr::Var(1);
  auto with_load = [&](const IndexExpr& index) {
    loop::Kernel k = SumKernel(columns, rows, true);
    loop::Inst load;
    load.op = loop::Opcode::kLoad;
    load.buffer = 1;
    load.index = index;
    loop::Inst mul;
    mul.op = loop::Opcode::kMul;
    mul.a = 0;
    mul.b = 1;
    loop::Inst sum;
    sum.op = loop::Opcode::kReduce;
    sum.a = 2;
    k.insts = {k.insts[0], load, mul, sum};
    k.stages = {{true, 0, 4}};
    return k;
  };
  const ReductionSplit per_row = SplitOf(with_load(r));
  EXPECT_TRUE(per_row.column);
  EXPECT_EQ(per_row.threads, kColumnThreads);
  EXPECT_EQ(per_row.points, kColumnPoints);
  EXPECT_EQ(ReductionParts(with_load(r)), 8) << "24 blocks of 1,024 threads, 256 rows a part";
  EXPECT_FALSE(SplitOf(with_load(p0 * rows + r)).column);
}

TEST(NvptxLaunchTest, ReductionsThatLeaveTheMachineIdleAreCutIntoParts) {
  using loop::IndexExpr;
  auto parts = [](int64_t points, int64_t rows, bool down_columns) {
    return ReductionParts(
        SumKernel(IndexExpr::Const(points), IndexExpr::Const(rows), down_columns));
  };
  // A column sum of 65,536 x 1,024: 32 blocks of 1,024 threads, an eighth of the machine's.
  EXPECT_EQ(parts(1024, 65536, true), 17);
  // Batch norm's statistics over 64 channels: one 256-thread block each.
  EXPECT_EQ(parts(64, 200704, false), 33);
  // A whole tensor into one value: one block; parts stop at the kMaxReductionParts.
  EXPECT_EQ(parts(1, int64_t{1} << 24, false), kMaxReductionParts);
  // Each part keeps kMinPartElements of its point's reduction.
  EXPECT_EQ(parts(768, 2048, true), 8);
  // Kept whole: enough blocks to fill the machine, too little to read, a symbolic length.
  EXPECT_EQ(parts(8192, 4096, false), 1);
  EXPECT_EQ(parts(64, 4096, false), 1);
  EXPECT_EQ(parts(1, 4096, false), 1);
  EXPECT_EQ(ReductionParts(SumKernel(IndexExpr::Const(64), IndexExpr::Sym(0), false)), 1);
}

// nanoGPT's layer norms, softmax and loss reduce rows of 64 to 1,024 elements across a warp
// (shuffles alone), longer ones across a block (shuffles, then the warps' partials through
// shared memory between two barriers); its bias gradients reduce columns through shared
// memory.
TEST(NvptxCodegenTest, SplitReductionsCombineByShufflesAndSharedMemory) {
  for (const char* graph : {"nanogpt_fp32.fw.json", "nanogpt_fp32.bw.json"}) {
    absl::StatusOr<loop::Program> program = testing::FuseSharedGraph(graph);
    ASSERT_TRUE(program.ok()) << program.status();
    absl::StatusOr<CodegenResult> result = GenerateCubins(*program, CodegenOptions());
    ASSERT_TRUE(result.ok()) << result.status();
    int split = 0, columns = 0;
    for (size_t i = 0; i < program->kernels.size(); ++i) {
      const std::string& ptx = result->CodeOf(i).ptx;
      const ReductionSplit s = SplitOf(program->kernels[i]);
      columns += s.column ? 1 : 0;
      if (s.threads == 0) {
        EXPECT_THAT(ptx, Not(HasSubstr("shfl.sync"))) << graph << " kernel " << i;
        continue;
      }
      ++split;
      // A column split of 32 points has a warp per slice: nothing for shuffles to combine.
      if (!s.column || s.points < 32) {
        EXPECT_THAT(ptx, HasSubstr("shfl.sync.bfly.b32")) << graph << " kernel " << i;
      }
      if (!s.column && s.points > 1) {
        EXPECT_THAT(ptx, Not(HasSubstr("bar.sync"))) << graph << " kernel " << i;
        continue;
      }
      EXPECT_THAT(ptx, HasSubstr("bar.sync")) << graph << " kernel " << i;
      EXPECT_THAT(ptx, HasSubstr(absl::StrCat(".shared .align 8 .b8 kiln_reduce_values[",
                                              kColumnThreads / 32 * kColumnPoints * 8, "]")))
          << graph << " kernel " << i;
      if (s.threads > kBlockThreads) {
        EXPECT_THAT(ptx, HasSubstr(".maxntid 1024, 1, 1")) << graph << " kernel " << i;
      }
    }
    EXPECT_GT(split, 0) << graph;
    if (std::string(graph).find(".bw.") != std::string::npos) {
      EXPECT_GT(columns, 0) << graph << ": bias gradients sum down columns";
    }
  }
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
  ASSERT_EQ(result->codes.size(), 1u);
  const std::string& ptx = result->CodeOf(0).ptx;
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

  const std::string& cubin = result->CodeOf(0).cubin;
  EXPECT_EQ(cubin.substr(0, 4),
            "\x7f"
            "ELF");
  // The register count read from the cubin is what ptxas reports for the kernel.
  absl::StatusOr<std::string> again = AssembleCubin(ptx);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(*again == cubin) << "the same bytes again";
  std::string log;
  ASSERT_TRUE(AssembleCubin(ptx, &log).ok());
  EXPECT_GT(result->CodeOf(0).registers, 0);
  EXPECT_THAT(log, HasSubstr(absl::StrCat("Used ", result->CodeOf(0).registers, " registers")))
      << log;
  EXPECT_EQ(result->CodeOf(0).static_shared_memory_bytes, 0);
}

TEST(NvptxCodegenTest, HalfTypesLoadAndStoreAroundFloatMath) {
  for (const char* dtype : {"DTYPE_BFLOAT16", "DTYPE_FLOAT16"}) {
    absl::StatusOr<loop::Program> program =
        testing::FuseGraph(PointwiseGraph("aten.tanh.default", 64, dtype));
    ASSERT_TRUE(program.ok()) << dtype << ": " << program.status();
    absl::StatusOr<CodegenResult> result = GenerateCubins(*program);
    ASSERT_TRUE(result.ok()) << dtype << ": " << result.status();
    ASSERT_EQ(result->codes.size(), 1u);
    const std::string& ptx = result->CodeOf(0).ptx;
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
      for (const KernelBinary& k : result->codes) {
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
  EXPECT_TRUE(one->llvm_ir.empty()) << "only when asked for";
  for (size_t i = 0; i < one->kernels.size(); ++i) {
    const KernelCode& k = one->kernels[i];
    ASSERT_EQ(k.module % 2, 0) << "kernel " << i;
    ASSERT_LT(static_cast<size_t>(k.module) + 1, one->modules.size()) << "kernel " << i;
    const CodeModule& cubin = one->modules[static_cast<size_t>(k.module)];
    const CodeModule& ptx = one->modules[static_cast<size_t>(k.module) + 1];
    EXPECT_EQ(cubin.kind, v1::BINARY_KIND_CUBIN) << "kernel " << i;
    EXPECT_EQ(ptx.kind, v1::BINARY_KIND_PTX) << "kernel " << i;
    EXPECT_THAT(ptx.binary, HasSubstr(absl::StrCat(".entry ", k.entry, "("))) << "kernel " << i;
    EXPECT_GT(k.registers, 0) << "kernel " << i;
    absl::StatusOr<KernelResources> r = ResourcesOf(cubin.binary, k.entry);
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
