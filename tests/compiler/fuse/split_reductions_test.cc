// Cut reductions: a kernel with few points and long rows becomes a parts kernel and a combine
// kernel with the same results; kernels the cut cannot keep exact stay whole.

#include "compiler/fuse/split_reductions.h"

#include <string>
#include <vector>

#include "compiler/tools/check/runtime_check.h"
#include "gtest/gtest.h"
#include "tests/compiler/graph_testing.h"
#include "tests/testing/test_env.h"

namespace kiln {
namespace {

using loop::IndexExpr;
using loop::Inst;
using loop::Opcode;
using testing::C;
using testing::V;

constexpr int64_t kRows = 4096, kCols = 256;

// out[c] = reduce over r of x[r, c], x of kRows x kCols: the column reduction of a bias's
// gradient.
loop::Program ColumnReduction(loop::ReduceKind kind = loop::ReduceKind::kSum) {
  loop::Program p;
  const int32_t x = testing::AddInput(p, kRows * kCols);
  const int32_t out = testing::AddOutput(p, kCols);
  testing::AddKernel(p, "%1", kCols, {});
  loop::Kernel& k = p.kernels.back();
  k.reduction = {C(kRows)};
  Inst load = testing::LoadAt(x);
  load.index = V(1) * C(kCols) + V(0);
  Inst reduce;
  reduce.op = Opcode::kReduce;
  reduce.reduce = kind;
  reduce.a = 0;
  reduce.iimm = 0;
  k.insts = {load, reduce, testing::StoreAt(out, 1)};
  k.stages = {{true, 0, 2}, {false, 2, 3}};
  return p;
}

loop::Program Cut(loop::Program p, int64_t parts) {
  return fuse::SplitReductions(std::move(p),
                               [&](const loop::Program&, const loop::Kernel&) { return parts; });
}

TEST(SplitReductionsTest, AColumnSumBecomesPartsThenCombine) {
  const loop::Program p = Cut(ColumnReduction(), 8);
  ASSERT_EQ(p.kernels.size(), 2u);
  ASSERT_EQ(p.steps.size(), 2u);
  EXPECT_EQ(p.steps[0].kernel, 0);
  EXPECT_EQ(p.steps[1].kernel, 1);
  ASSERT_EQ(p.buffers.size(), 3u);
  const loop::Buffer& partials = p.buffers[2];
  EXPECT_EQ(partials.kind, loop::Buffer::Kind::kIntermediate);
  EXPECT_EQ(partials.elements, C(8 * kCols));
  EXPECT_EQ(partials.dtype, graph::DType::kFloat32);

  // Parts: [part, column] points, each summing kRows / 8 rows of its column from row
  // part * kRows / 8 on, stored at partials[part, column].
  const loop::Kernel& parts = p.kernels[0];
  EXPECT_EQ(parts.parallel, (std::vector<IndexExpr>{C(8), C(kCols)}));
  EXPECT_EQ(parts.reduction, (std::vector<IndexExpr>{C(kRows / 8)}));
  ASSERT_EQ(parts.insts.size(), 3u);
  EXPECT_EQ(parts.insts[0].index, (V(0) * C(kRows / 8) + V(2)) * C(kCols) + V(1));
  EXPECT_EQ(parts.insts[2].op, Opcode::kStore);
  EXPECT_EQ(parts.insts[2].buffer, 2);
  EXPECT_EQ(parts.insts[2].a, 1);
  EXPECT_EQ(parts.insts[2].index, V(0) * C(kCols) + V(1));

  // Combine: the columns again, each summing its 8 partials, then the kernel's own store.
  const loop::Kernel& combine = p.kernels[1];
  EXPECT_EQ(combine.parallel, (std::vector<IndexExpr>{C(kCols)}));
  EXPECT_EQ(combine.reduction, (std::vector<IndexExpr>{C(8)}));
  ASSERT_EQ(combine.insts.size(), 3u);
  EXPECT_EQ(combine.insts[0].buffer, 2);
  EXPECT_EQ(combine.insts[0].index, V(1) * C(kCols) + V(0));
  EXPECT_EQ(combine.insts[1].op, Opcode::kReduce);
  EXPECT_EQ(combine.insts[1].reduce, loop::ReduceKind::kSum);
  EXPECT_EQ(combine.insts[2].buffer, 1);
  EXPECT_EQ(combine.insts[2].a, 1);
  ASSERT_EQ(combine.stages.size(), 2u);
  EXPECT_TRUE(combine.stages[0].loops);
  EXPECT_FALSE(combine.stages[1].loops);
}

TEST(SplitReductionsTest, PartsAreTheLargestDivisorOfTheCutDimensionUpToTheWish) {
  EXPECT_EQ(Cut(ColumnReduction(), 7).kernels[0].parallel[0], C(4));
  EXPECT_EQ(Cut(ColumnReduction(), 1 << 20).kernels[0].parallel[0], C(kRows));
  EXPECT_EQ(Cut(ColumnReduction(), 1).kernels.size(), 1u);
}

TEST(SplitReductionsTest, KernelsTheCutCannotKeepExactStayWhole) {
  // An arg reduction's partials would need their indices.
  EXPECT_EQ(Cut(ColumnReduction(loop::ReduceKind::kArgMax), 8).kernels.size(), 1u);

  // A second looping stage (a softmax's normalisation) reads the whole row again.
  loop::Program two_loops = ColumnReduction();
  {
    loop::Kernel& k = two_loops.kernels[0];
    Inst load = k.insts[0];
    Inst store = k.insts[2];
    store.a = 3;
    store.index = load.index;
    k.insts.push_back(load);
    k.insts.push_back(store);
    k.stages.push_back({true, 3, 5});
  }
  EXPECT_EQ(Cut(two_loops, 8).kernels.size(), 1u);

  // A symbolic extent: the parts would not be known.
  loop::Program symbolic = ColumnReduction();
  symbolic.symbols = {"s0"};
  symbolic.symbol_hints = {kRows};
  symbolic.kernels[0].reduction = {IndexExpr::Sym(0)};
  EXPECT_EQ(Cut(symbolic, 8).kernels.size(), 1u);

  // A store before the loop would run in both kernels.
  loop::Program early_store = ColumnReduction();
  {
    loop::Kernel& k = early_store.kernels[0];
    Inst one;
    one.op = Opcode::kConst;
    one.fimm = 1;
    std::vector<Inst> insts = {one, testing::StoreAt(1, 0)};
    for (Inst in : k.insts) {
      for (int32_t* v : {&in.a, &in.b, &in.c}) *v = *v < 0 ? *v : *v + 2;
      insts.push_back(in);
    }
    k.insts = insts;
    k.stages = {{false, 0, 2}, {true, 2, 4}, {false, 4, 5}};
  }
  EXPECT_EQ(Cut(early_store, 8).kernels.size(), 1u);
}

// Real graphs with every reduction that can be cut cut, run on the CPU against the
// interpreter: the backward passes of an MLP (fp32 and bf16), nanoGPT and ResNet-18, whose
// bias gradients, losses and pooling reduce.
TEST(SplitReductionsTest, CutGraphsMatchTheInterpreter) {
  for (const char* name : {"mlp_fp32.bw.json", "nanogpt_fp32.bw.json", "resnet18_fp32.bw.json.gz",
                           "mlp_bf16.bw.json.gz"}) {
    if (testing::kSanitized && !std::string(name).starts_with("mlp")) continue;
    SCOPED_TRACE(name);
    const v1::Graph graph = testing::LoadSharedGraph(name);
    auto whole = testing::CompileForCpu(graph);
    ASSERT_TRUE(whole.ok()) << whole.status();
    for (int64_t parts : {3, 16}) {
      if (testing::kSanitized && parts > 3) break;
      auto cut = testing::CompileForCpuCut(graph, parts);
      ASSERT_TRUE(cut.ok()) << cut.status();
      EXPECT_GT(cut->kernels_size(), whole->kernels_size()) << "nothing was cut";
      auto report = check::CheckAgainstInterpreter(graph, *cut, {});
      ASSERT_TRUE(report.ok()) << report.status();
      EXPECT_TRUE(report->ok) << parts << " parts: " << report->message;
    }
  }
}

}  // namespace
}  // namespace kiln
