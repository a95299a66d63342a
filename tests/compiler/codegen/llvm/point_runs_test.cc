// Runs of points: which loads and stores walk memory contiguously along a dimension, and
// which of them become vector accesses of a run with what alignment, and what is left to
// check at run time.

#include "compiler/codegen/llvm/point_runs.h"

#include <gtest/gtest.h>

#include <utility>
#include <vector>

namespace kiln::codegen {
namespace {

using loop::IndexExpr;
using loop::Inst;
using loop::Opcode;

const IndexExpr p0 = IndexExpr::Var(0);
const IndexExpr p1 = IndexExpr::Var(1);
const IndexExpr s0 = IndexExpr::Sym(0);

IndexExpr C(int64_t v) { return IndexExpr::Const(v); }

Inst Access(Opcode op, int32_t buffer, IndexExpr index) {
  Inst in;
  in.op = op;
  in.buffer = buffer;
  in.index = std::move(index);
  return in;
}

TEST(PointRunsTest, ContiguousMeansTheVariableAloneWithUnitStep) {
  EXPECT_TRUE(WalksContiguously(Access(Opcode::kLoad, 0, p1), 1));
  EXPECT_TRUE(WalksContiguously(Access(Opcode::kStore, 0, C(192) * p0 + p1 + C(7)), 1));
  EXPECT_TRUE(WalksContiguously(Access(Opcode::kLoad, 0, s0 * p0 + p1), 1));
  // A stride, a broadcast, the variable inside a division.
  EXPECT_FALSE(WalksContiguously(Access(Opcode::kLoad, 0, C(2) * p1), 1));
  EXPECT_FALSE(WalksContiguously(Access(Opcode::kLoad, 0, s0 * p1), 1));
  EXPECT_FALSE(WalksContiguously(Access(Opcode::kLoad, 0, C(64) * p0), 1));
  const IndexExpr div = IndexExpr::FloorDiv(C(64) * p0 + p1, C(4096), nullptr);
  EXPECT_FALSE(WalksContiguously(Access(Opcode::kLoad, 0, C(4096) * div + p1), 1));
  // A mask, a data-dependent term, something that is not an access.
  Inst masked = Access(Opcode::kLoad, 0, p1);
  masked.mask = 0;
  EXPECT_FALSE(WalksContiguously(masked, 1));
  Inst gather = Access(Opcode::kLoad, 0, p1);
  gather.dyn.push_back({0, C(64)});
  EXPECT_FALSE(WalksContiguously(gather, 1));
  Inst index;
  index.op = Opcode::kIndex;
  index.index = p1;
  EXPECT_FALSE(WalksContiguously(index, 1));
}

loop::Program ProgramOf(std::vector<graph::DType> dtypes, loop::Kernel kernel) {
  loop::Program p;
  for (graph::DType d : dtypes) {
    loop::Buffer b;
    b.dtype = d;
    p.buffers.push_back(b);
  }
  p.kernels.push_back(std::move(kernel));
  return p;
}

TEST(PointRunsTest, AlignmentIsTheRunUpToTheWidestAccess) {
  loop::Kernel k;
  k.parallel = {s0, C(256)};
  k.insts = {Access(Opcode::kLoad, 0, C(256) * p0 + p1),         // f32, row starts aligned
             Access(Opcode::kLoad, 1, C(256) * p0 + p1 + C(3)),  // bf16, never aligned
             Access(Opcode::kLoad, 1, C(256) * p0 + p1 + C(8)),  // bf16, aligned
             Access(Opcode::kLoad, 0, C(2) * p1),                // f32, strided
             Access(Opcode::kStore, 2, s0 * p0 + p1)};           // f64, rows of s0
  k.stages.push_back({false, 0, 5});
  const loop::Program p =
      ProgramOf({graph::DType::kFloat32, graph::DType::kBFloat16, graph::DType::kFloat64}, k);

  const PointRuns runs = PlanPointRuns(p, p.kernels[0], 1, 8, 16);
  EXPECT_EQ(runs.dim, 1);
  EXPECT_EQ(runs.lanes, 8);
  ASSERT_EQ(runs.vectors.size(), 3u);
  // 8 f32 are 32 bytes, moved as two aligned 16-byte halves: the offset a multiple of 4.
  EXPECT_EQ(runs.vectors[0].inst, 0);
  EXPECT_EQ(runs.vectors[0].buffer, 0);
  EXPECT_EQ(runs.vectors[0].align, 16);
  EXPECT_EQ(runs.vectors[0].elements, 4);
  EXPECT_TRUE(runs.vectors[0].multiples.empty());
  // 8 bf16 are one 16-byte access: 8 elements.
  EXPECT_EQ(runs.vectors[1].inst, 2);
  EXPECT_EQ(runs.vectors[1].align, 16);
  EXPECT_EQ(runs.vectors[1].elements, 8);
  // A row length of s0 f64 elements: s0 must be even at run time.
  EXPECT_EQ(runs.vectors[2].inst, 4);
  EXPECT_EQ(runs.vectors[2].buffer, 2);
  EXPECT_EQ(runs.vectors[2].align, 16);
  EXPECT_EQ(runs.vectors[2].elements, 2);
  ASSERT_EQ(runs.vectors[2].multiples.size(), 1u);
  EXPECT_EQ(runs.vectors[2].multiples[0], s0);

  // Runs of 2: a bf16 pair is 4 bytes, so an offset of 8 elements no longer matters and 3
  // still does.
  const PointRuns pairs = PlanPointRuns(p, p.kernels[0], 1, 2, 16);
  ASSERT_EQ(pairs.vectors.size(), 3u);
  EXPECT_EQ(pairs.vectors[1].inst, 2);
  EXPECT_EQ(pairs.vectors[1].align, 4);
  EXPECT_EQ(pairs.vectors[1].elements, 2);
  EXPECT_EQ(pairs.vectors[2].elements, 2);

  // Along p0 nothing is contiguous.
  EXPECT_TRUE(PlanPointRuns(p, p.kernels[0], 0, 8, 16).vectors.empty());
}

TEST(PointRunsTest, SymbolicTermsKeepTheirCoefficient) {
  loop::Kernel k;
  k.parallel = {s0, IndexExpr::Sym(1)};
  const IndexExpr s1 = IndexExpr::Sym(1);
  k.insts = {Access(Opcode::kLoad, 0, C(3) * s1 * p0 + p1 + C(4) * s0),
             Access(Opcode::kStore, 0, C(8) * s1 * p0 + p1)};
  k.stages.push_back({false, 0, 2});
  const loop::Program p = ProgramOf({graph::DType::kFloat32}, k);
  const PointRuns runs = PlanPointRuns(p, p.kernels[0], 1, 4, 16);
  ASSERT_EQ(runs.vectors.size(), 2u);
  // 4*s0 is a multiple of 4 whatever s0 is; 3*s1 is one only for some s1.
  ASSERT_EQ(runs.vectors[0].multiples.size(), 1u);
  EXPECT_EQ(runs.vectors[0].multiples[0], C(3) * s1);
  EXPECT_TRUE(runs.vectors[1].multiples.empty());
}

}  // namespace
}  // namespace kiln::codegen
