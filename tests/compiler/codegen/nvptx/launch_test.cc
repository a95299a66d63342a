// The sm_90 launch policy for pointwise kernels: how many elements each thread's run covers
// (VectorLanes) for the dtypes a kernel moves and the shapes it walks, and the grid over the
// runs, constant or symbolic, as the plan records it.

#include "compiler/codegen/nvptx/launch.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "compiler/codegen/target.h"
#include "compiler/compile.h"
#include "compiler/graph/import.h"
#include "tests/compiler/codegen/nvptx/pointwise_graphs.h"
#include "tests/compiler/graph_testing.h"

namespace kiln::codegen::nvptx {
namespace {

using loop::IndexExpr;

// The one kernel of `graph`, fused, with the program around it.
struct OneKernel {
  loop::Program program;
  const loop::Kernel& kernel() const { return program.kernels[0]; }
};

OneKernel Fused(const v1::Graph& graph) {
  absl::StatusOr<loop::Program> program = testing::FuseGraph(graph);
  EXPECT_TRUE(program.ok()) << program.status();
  if (!program.ok()) return {};
  EXPECT_EQ(program->kernels.size(), 1u) << loop::ToString(*program);
  return {*std::move(program)};
}

int32_t LanesOf(const v1::Graph& graph) {
  const OneKernel k = Fused(graph);
  return k.program.kernels.empty() ? -1 : VectorLanes(k.program, k.kernel());
}

IndexExpr GridOf(const v1::Graph& graph) {
  const OneKernel k = Fused(graph);
  if (k.program.kernels.empty()) return IndexExpr::Const(-1);
  const KernelSchedule s = ScheduleKernel(k.program, k.kernel());
  EXPECT_EQ(s.block[0], IndexExpr::Const(kBlockThreads));
  return s.grid[0];
}

TEST(NvptxVectorLanesTest, SixteenBytesOfTheNarrowestAccess) {
  EXPECT_EQ(LanesOf(testing::AddGraph({1 << 20})), 4);
  EXPECT_EQ(LanesOf(testing::GeluBf16Graph(1 << 20)), 8);
  // 16 bytes of bf16 in, 32 bytes of f32 out: two 128-bit stores.
  EXPECT_EQ(LanesOf(testing::ScaleBf16ToF32Graph(1 << 20)), 8);
  // The broadcast operand and the transposed input do not walk the innermost dimension;
  // the others do.
  EXPECT_EQ(LanesOf(testing::RowBroadcastAddGraph(64, 256)), 4);
  EXPECT_EQ(LanesOf(testing::TransposedAddGraph(64, 256)), 4);
}

TEST(NvptxVectorLanesTest, ShapesThatKeepRunsFromAligning) {
  // One odd row: every run but the last is whole.
  EXPECT_EQ(LanesOf(testing::AddGraph({1001})), 4);
  // Rows of 1001 fp32 start 4 bytes apart from 16-byte alignment, row after row.
  EXPECT_EQ(LanesOf(testing::AddGraph({3, 1001})), 1);
  // An innermost extent shorter than 4 shortens the run, to nothing for 1.
  EXPECT_EQ(LanesOf(testing::AddGraph({64, 3})), 1) << "rows of 3 never align";
  EXPECT_EQ(LanesOf(testing::AddGraph({2})), 2);
  EXPECT_EQ(LanesOf(testing::AddGraph({1})), 1);
  // Symbolic sizes: the rows' alignment is checked at run time.
  EXPECT_EQ(LanesOf(testing::AddGraph({"s0"})), 4);
  EXPECT_EQ(LanesOf(testing::AddGraph({4, "s0"})), 4);
}

// A copy of `rows` rows of `width` elements from rows `from` elements apart into rows `to`
// elements apart: the padded logits' copies of a 16-bit matmul.
loop::Program RowCopyProgram(int64_t rows, int64_t width, int64_t from, int64_t to) {
  loop::Program p;
  const int32_t in = testing::AddInput(p, rows * from), out = testing::AddOutput(p, rows * to);
  auto at = [](int64_t stride) {
    return IndexExpr::Var(0) * IndexExpr::Const(stride) + IndexExpr::Var(1);
  };
  loop::Inst load = testing::LoadAt(in), store = testing::StoreAt(out, 0);
  load.index = at(from);
  store.index = at(to);
  testing::AddKernel(p, "copy", rows * width, {load, store});
  p.kernels[0].parallel = {IndexExpr::Const(rows), IndexExpr::Const(width)};
  return p;
}

TEST(NvptxVectorLanesTest, AStoreThatCannotAlignLeavesTheKernelWithoutRuns) {
  auto lanes = [](const loop::Program& p) { return VectorLanes(p, p.kernels[0]); };
  EXPECT_EQ(lanes(RowCopyProgram(64, 1000, 1000, 1000)), 4) << "rows 16-byte aligned";
  EXPECT_EQ(lanes(RowCopyProgram(64, 1000, 1008, 1000)), 4) << "both sides aligned";
  // Into rows of 1001 (4 bytes off alignment, then 8, 12, ...): the loads would align, but a
  // run would store its elements one by one, the warp's lanes four elements apart.
  EXPECT_EQ(lanes(RowCopyProgram(64, 1000, 1008, 1001)), 1);
  // Out of them: the loads go one by one, the stores as vectors.
  EXPECT_EQ(lanes(RowCopyProgram(64, 1000, 1001, 1008)), 4);
  EXPECT_EQ(lanes(RowCopyProgram(64, 1000, 1001, 1001)), 1) << "nothing aligns";
}

// A kernel over [n] that loads, multiplies `muls` times and stores: a point's code is
// muls + 3 instructions.
loop::Program ChainProgram(int64_t n, int muls) {
  loop::Program p;
  const int32_t in = testing::AddInput(p, n), out = testing::AddOutput(p, n);
  std::vector<loop::Inst> insts = {testing::LoadAt(in), testing::ConstF32(2.0)};
  int32_t last = 0;  // the loaded value, then each product
  for (int i = 0; i < muls; ++i) {
    insts.push_back(testing::Binary(loop::Opcode::kMul, last, 1));
    last = static_cast<int32_t>(insts.size()) - 1;
  }
  insts.push_back(testing::StoreAt(out, last));
  testing::AddKernel(p, "chain", n, std::move(insts));
  return p;
}

TEST(NvptxVectorLanesTest, SmallKernelsOfLongPointsRunAPointAThread) {
  const int64_t few = 4096, many = kMaxScalarPoints * 2;
  const int longest = static_cast<int>(kMinScalarInsts);
  auto lanes = [](const loop::Program& p) { return VectorLanes(p, p.kernels[0]); };
  EXPECT_EQ(lanes(ChainProgram(few, longest)), 1) << "few points, long code";
  EXPECT_EQ(lanes(ChainProgram(kMaxScalarPoints, longest)), 1);
  EXPECT_EQ(lanes(ChainProgram(kMaxScalarPoints + 4, longest)), 4) << "memory matters again";
  EXPECT_EQ(lanes(ChainProgram(many, longest)), 4);
  EXPECT_EQ(lanes(ChainProgram(few, 4)), 4) << "short code keeps its vectors";
  // A kernel of segments counts each segment's points and code: AdamW's updates of several
  // parameters, each its own segment.
  loop::Program joined = ChainProgram(few, longest);
  loop::Kernel& k = joined.kernels[0];
  const loop::Kernel one = k;
  const int32_t shift = static_cast<int32_t>(one.insts.size());
  for (loop::Inst in : one.insts) {
    for (int32_t* operand : {&in.a, &in.b}) {
      if (*operand >= 0) *operand += shift;
    }
    k.insts.push_back(in);
  }
  k.stages[0].end = static_cast<int32_t>(k.insts.size());
  k.segments = {0, shift};
  EXPECT_EQ(lanes(joined), 1);
  k.segment_points = {kMaxScalarPoints, 8};
  EXPECT_EQ(lanes(joined), 4) << "past kMaxScalarPoints over both segments";
}

TEST(NvptxVectorLanesTest, ReductionsGetNoRuns) {
  absl::StatusOr<loop::Program> program = testing::FuseSharedGraph("nanogpt_fp32.fw.json");
  ASSERT_TRUE(program.ok()) << program.status();
  int pointwise = 0;
  for (const loop::Kernel& k : program->kernels) {
    if (!k.reduction.empty()) {
      EXPECT_EQ(VectorLanes(*program, k), 1) << k.name;
    } else if (!k.parallel.empty()) {
      pointwise += VectorLanes(*program, k) > 1;
    }
  }
  EXPECT_GT(pointwise, 0);
}

TEST(NvptxVectorLanesTest, TheGridCountsRuns) {
  // 2^20 elements in runs of 4: 2^18 threads, 1024 blocks.
  EXPECT_EQ(GridOf(testing::AddGraph({1 << 20})), IndexExpr::Const(1024));
  // Runs of 8 bf16: 512 blocks.
  EXPECT_EQ(GridOf(testing::GeluBf16Graph(1 << 20)), IndexExpr::Const(512));
  EXPECT_EQ(GridOf(testing::ScaleBf16ToF32Graph(1 << 20)), IndexExpr::Const(512));
  // 251 runs, the last of one element.
  EXPECT_EQ(GridOf(testing::AddGraph({1001})), IndexExpr::Const(1));
  // No runs: a thread per element.
  EXPECT_EQ(GridOf(testing::AddGraph({3, 1001})), IndexExpr::Const(12));
  // 64 rows of 64 runs.
  EXPECT_EQ(GridOf(testing::RowBroadcastAddGraph(64, 256)), IndexExpr::Const(16));
  // A thread per run however many: 2^22 runs of 4.
  EXPECT_EQ(GridOf(testing::AddGraph({1 << 24})), IndexExpr::Const(1 << 14));
}

TEST(NvptxVectorLanesTest, SymbolicGridsCountRunsPerRow) {
  const IndexExpr grid = GridOf(testing::AddGraph({4, "s0"}));
  const IndexExpr runs =
      IndexExpr::Const(4) * IndexExpr::CeilDiv(IndexExpr::Sym(0), IndexExpr::Const(4), nullptr);
  EXPECT_EQ(grid, IndexExpr::FloorDiv(runs + IndexExpr::Const(kBlockThreads - 1),
                                      IndexExpr::Const(kBlockThreads), nullptr));
  for (const auto& [s0, blocks] : std::vector<std::pair<int64_t, int64_t>>{
           {1, 1}, {4, 1}, {256, 1}, {257, 2}, {1001, 4}, {4096, 16}}) {
    absl::StatusOr<int64_t> v = grid.Evaluate({s0}, {});
    ASSERT_TRUE(v.ok()) << v.status();
    EXPECT_EQ(*v, blocks) << "s0 = " << s0;
  }
}

// The plan records the runs' geometry over the symbols and each kernel's run length.
TEST(NvptxVectorLanesTest, ThePlanCarriesRunLengthsAndTheirGrid) {
  absl::StatusOr<graph::Graph> g = graph::Import(testing::AddGraph({4, "s0"}));
  ASSERT_TRUE(g.ok()) << g.status();
  v1::CompileOptions options;
  options.set_target(std::string(kTargetCudaSm90));
  absl::StatusOr<v1::CompiledGraph> artifact = compiler::Compile(*g, options, "key");
  ASSERT_TRUE(artifact.ok()) << artifact.status();
  ASSERT_EQ(artifact->kernels_size(), 1);
  const v1::Kernel& k = artifact->kernels(0);
  EXPECT_EQ(k.vector_width(), 4);
  ASSERT_EQ(k.launch().grid(0).kind_case(), v1::SymInt::kExpr);
  // The contiguous [4, s0] is one dimension of 4*s0 elements by then: s0 runs of 4.
  EXPECT_EQ(k.launch().grid(0).expr(), "FloorDiv(s0 + 255, 256)");
}

}  // namespace
}  // namespace kiln::codegen::nvptx
