// Vertical inlining through data-dependent reads: a pointwise producer read only where a
// gather's indices point is computed there instead of stored, when it follows the gathered
// dimension affinely; otherwise its buffer stays.

#include "compiler/fuse/fuse.h"

#include <cstdint>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "tests/compiler/graph_testing.h"

namespace kiln {
namespace {

using IndexExpr = loop::IndexExpr;
using Inst = loop::Inst;
using Opcode = loop::Opcode;
using testing::C;
using testing::V;

constexpr int64_t kRows = 4, kCols = 8;

struct Gather {
  loop::Program program;
  int32_t x = -1, labels = -1, produced = -1;
};

// produced[r, c] = 2 * x[r, (x_index)] over [kRows, kCols]; then, over [kRows] (or [kCols]
// when `rows`), out = produced read at the labels: produced[r, labels[r]] along the columns,
// or produced[labels[c], c] along the rows.
Gather Build(const IndexExpr& x_index, bool rows = false) {
  Gather g;
  loop::Program& p = g.program;
  g.x = testing::AddInput(p, kRows * kCols);
  g.labels = testing::AddInput(p, rows ? kCols : kRows);
  p.buffers[static_cast<size_t>(g.labels)].dtype = graph::DType::kInt64;
  g.produced = testing::AddBuffer(p, kRows * kCols);
  const int32_t out = testing::AddOutput(p, rows ? kCols : kRows);

  Inst load_x = testing::LoadAt(g.x);
  load_x.index = x_index;
  Inst store = testing::StoreAt(g.produced, 2);
  store.index = V(0) * C(kCols) + V(1);
  testing::AddKernel(p, "%1", kRows,
                     {load_x, testing::ConstF32(2), testing::Binary(Opcode::kMul, 0, 1), store});
  p.kernels.back().parallel = {C(kRows), C(kCols)};

  Inst label = testing::LoadAt(g.labels);
  label.type = loop::ScalarType::kI64;
  Inst read = testing::LoadAt(g.produced);
  read.index = rows ? V(0) : V(0) * C(kCols);
  read.dyn = {{0, rows ? C(kCols) : C(1)}};
  testing::AddKernel(p, "%2", rows ? kCols : kRows, {label, read, testing::StoreAt(out, 1)});
  return g;
}

// Fusion drops buffers nothing refers to any more and renumbers the rest: the inputs and the
// output are left when the produced values are never stored.
constexpr size_t kWithoutProduced = 3;

// The loads of `buffer` in the program.
std::vector<Inst> LoadsOf(const loop::Program& p, int32_t buffer) {
  std::vector<Inst> loads;
  for (const loop::Kernel& k : p.kernels) {
    for (const Inst& in : k.insts) {
      if (in.op == Opcode::kLoad && in.buffer == buffer) loads.push_back(in);
    }
  }
  return loads;
}

loop::Program Fused(const Gather& g) {
  absl::StatusOr<loop::Program> fused = fuse::Fuse(g.program);
  EXPECT_TRUE(fused.ok()) << fused.status();
  return fused.ok() ? *std::move(fused) : loop::Program();
}

// The produced values were inlined into the read: no buffer holds them, and x is loaded
// once, at `index` plus the label times 1.
void ExpectInlined(const loop::Program& fused, const Gather& g, const IndexExpr& index) {
  EXPECT_EQ(fused.buffers.size(), kWithoutProduced) << loop::ToString(fused);
  const std::vector<Inst> loads = LoadsOf(fused, g.x);
  ASSERT_EQ(loads.size(), 1u) << loop::ToString(fused);
  EXPECT_EQ(loads[0].index, index);
  ASSERT_EQ(loads[0].dyn.size(), 1u);
  EXPECT_EQ(loads[0].dyn[0].stride, C(1));
}

// The produced values stay in their buffer, read once at the labels.
void ExpectKept(const loop::Program& fused, const Gather& g) {
  ASSERT_EQ(fused.buffers.size(), kWithoutProduced + 1) << loop::ToString(fused);
  const std::vector<Inst> reads = LoadsOf(fused, g.produced);
  ASSERT_EQ(reads.size(), 1u);
  EXPECT_EQ(reads[0].dyn.size(), 1u);
}

TEST(FuseTest, AProducerReadAtAGathersIndicesIsComputedThere) {
  const Gather g = Build(V(0) * C(kCols) + V(1));
  const loop::Program fused = Fused(g);
  EXPECT_EQ(fused.kernels.size(), 1u) << loop::ToString(fused);
  ExpectInlined(fused, g, V(0) * C(kCols));
  // The label's load is what moves the inlined read.
  const Inst read = LoadsOf(fused, g.x).at(0);
  EXPECT_EQ(fused.kernels[0].insts[static_cast<size_t>(read.dyn[0].value)].buffer, g.labels);
}

TEST(FuseTest, AGatherAlongTheRowsMovesTheProducersRowIndex) {
  // produced[r, c] reads x[c * kRows + r]: the label, a row, moves x's index by 1.
  const Gather g = Build(V(1) * C(kRows) + V(0), /*rows=*/true);
  ExpectInlined(Fused(g), g, V(0) * C(kRows));
}

TEST(FuseTest, AGatherMovesTheDimensionThatCanMoveWhereAnExtentOfOneSharesItsStride) {
  // The producer over [1, kRows, kCols]: its first dimension has the rows' stride too.
  Gather g = Build(V(0) * C(kCols) + V(1), /*rows=*/true);
  loop::Kernel& producer = g.program.kernels[0];
  producer.parallel = {C(1), C(kRows), C(kCols)};
  for (Inst& in : producer.insts) {
    if (in.op == Opcode::kLoad) in.index = V(1) * C(kCols) + V(2);
    if (in.op == Opcode::kStore) in.index = V(0) * C(kCols) + V(1) * C(kCols) + V(2);
  }
  const loop::Program fused = Fused(g);
  ASSERT_EQ(fused.buffers.size(), kWithoutProduced) << loop::ToString(fused);
  const std::vector<Inst> loads = LoadsOf(fused, g.x);
  ASSERT_EQ(loads.size(), 1u) << loop::ToString(fused);
  EXPECT_EQ(loads[0].index, V(0));
  ASSERT_EQ(loads[0].dyn.size(), 1u) << "the label moves the rows, not the dimension of 1";
  EXPECT_EQ(loads[0].dyn[0].stride, C(kCols));
}

TEST(FuseTest, AProducerThatDividesTheGatheredDimensionKeepsItsBuffer) {
  const Gather g = Build(V(0) * C(kCols) + IndexExpr::Mod(V(1), C(3), [](int32_t) {
                           static const IndexExpr extent = C(kCols);
                           return &extent;
                         }));
  ExpectKept(Fused(g), g);
}

TEST(FuseTest, AGatherWhoseStrideIsNoDimensionsKeepsTheBuffer) {
  Gather g = Build(V(0) * C(kCols) + V(1));
  for (Inst& in : g.program.kernels[1].insts) {
    if (in.op == Opcode::kLoad && in.buffer == g.produced) in.dyn[0].stride = C(2);
  }
  ExpectKept(Fused(g), g);
}

}  // namespace
}  // namespace kiln
