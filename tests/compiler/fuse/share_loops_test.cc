// Loops that need nothing of each other run as one, a kernel computes each value once, and a
// later loop recomputes what an earlier one stored rather than loading it back.

#include "compiler/fuse/share_loops.h"

#include <cstdint>
#include <vector>

#include "gtest/gtest.h"
#include "tests/compiler/graph_testing.h"

namespace kiln {
namespace {

using loop::IndexExpr;
using loop::Inst;
using loop::Kernel;
using loop::Opcode;
using testing::C;
using testing::V;

Inst Load(int32_t buffer, IndexExpr index) {
  Inst in;
  in.op = Opcode::kLoad;
  in.buffer = buffer;
  in.index = std::move(index);
  return in;
}

Inst Store(int32_t buffer, IndexExpr index, int32_t value) {
  Inst in;
  in.op = Opcode::kStore;
  in.buffer = buffer;
  in.index = std::move(index);
  in.a = value;
  return in;
}

Inst Binary(Opcode op, int32_t a, int32_t b) {
  Inst in;
  in.op = op;
  in.a = a;
  in.b = b;
  return in;
}

Inst Reduce(int32_t a) {
  Inst r;
  r.op = Opcode::kReduce;
  r.a = a;
  return r;
}

// Per-point rows x[p0, r] of 8 points by 64: row element `x`, a per-point value `w`.
IndexExpr Row() { return V(0) * C(64) + V(1); }

Kernel Rows() {
  Kernel k;
  k.parallel = {C(8)};
  k.reduction = {C(64)};
  return k;
}

int LoopStages(const Kernel& k) {
  int n = 0;
  for (const loop::Stage& s : k.stages) n += s.loops ? 1 : 0;
  return n;
}

int Count(const Kernel& k, Opcode op, int32_t buffer = -1) {
  int n = 0;
  for (const Inst& in : k.insts) n += in.op == op && (buffer < 0 || in.buffer == buffer);
  return n;
}

// Batch norm's backward: sum(g) and sum(g * (x - mean)) over the same rows, in two loops that
// both load g; then the sums stored, the second scaled by a per-point weight.
Kernel BatchNormSums() {
  Kernel k = Rows();
  const int32_t g = 0, x = 1, mean = 2, w = 3, out0 = 4, out1 = 5;
  k.insts = {
      Load(g, Row()),              // %0
      Reduce(0),                   // %1 sum(g)
      Store(out0, V(0), 1),        // %2
      Load(x, Row()),              // %3
      Load(mean, V(0)),            // %4
      Binary(Opcode::kSub, 3, 4),  // %5
      Load(g, Row()),              // %6 g again
      Binary(Opcode::kMul, 6, 5),  // %7
      Reduce(7),                   // %8
      Load(w, V(0)),               // %9
      Binary(Opcode::kMul, 8, 9),  // %10
      Store(out1, V(0), 10),       // %11
  };
  k.stages = {{true, 0, 2}, {false, 2, 3}, {true, 3, 9}, {false, 9, 12}};
  return k;
}

TEST(JoinIndependentLoopsTest, BatchNormSumsRunInOneLoopThatLoadsEachRowOnce) {
  Kernel k = BatchNormSums();
  fuse::JoinIndependentLoops(k);
  EXPECT_EQ(LoopStages(k), 1);
  ASSERT_EQ(k.stages.size(), 3u);
  EXPECT_TRUE(k.stages[0].loops);
  EXPECT_EQ(k.stages[0].end, 8) << "both loops' instructions in the first";
  EXPECT_EQ(Count(k, Opcode::kReduce), 2);
  // The stores follow in their order, reading the reduce results.
  EXPECT_EQ(k.insts[8].op, Opcode::kStore);
  EXPECT_EQ(k.insts[8].buffer, 4);
  EXPECT_EQ(k.insts[static_cast<size_t>(k.insts[8].a)].op, Opcode::kReduce);
  EXPECT_EQ(k.insts.back().buffer, 5);
  EXPECT_EQ(k.insts[static_cast<size_t>(k.insts[static_cast<size_t>(k.insts.back().a)].a)].op,
            Opcode::kReduce);

  fuse::ShareValues(k);
  EXPECT_EQ(Count(k, Opcode::kLoad, 0), 1) << "g is loaded once";
  EXPECT_EQ(Count(k, Opcode::kReduce), 2);
  // Every operand is an earlier instruction.
  for (size_t i = 0; i < k.insts.size(); ++i) {
    loop::ForEachOperand(k.insts[i], [&](int32_t v) { EXPECT_LT(v, static_cast<int32_t>(i)); });
  }
}

// A softmax's sum of exponentials needs the max of the loop before: the loops stay apart.
TEST(JoinIndependentLoopsTest, ALoopThatUsesAnEarlierReduceStaysApart) {
  Kernel k = Rows();
  Inst exp;
  exp.op = Opcode::kExp;
  exp.a = 3;
  k.insts = {Load(0, Row()), Reduce(0),        Load(0, Row()), Binary(Opcode::kSub, 2, 1), exp,
             Reduce(4),      Store(1, V(0), 5)};
  k.stages = {{true, 0, 2}, {true, 2, 6}, {false, 6, 7}};
  const Kernel before = k;
  fuse::JoinIndependentLoops(k);
  EXPECT_EQ(LoopStages(k), 2);
  EXPECT_EQ(k.insts.size(), before.insts.size());
  // The second loop's value is not visible from the first: its load of x stays.
  fuse::ShareValues(k);
  EXPECT_EQ(Count(k, Opcode::kLoad, 0), 2);
}

// A loop that reads what a stage between the two stores, or stores what the first loop
// reads, must run after it.
TEST(JoinIndependentLoopsTest, ALoopTiedThroughMemoryStaysApart) {
  Kernel between = BatchNormSums();
  between.insts[2].buffer = 1;  // the first sum is stored into x, which the second loop reads
  between.insts[2].index = V(0) * C(64);
  fuse::JoinIndependentLoops(between);
  EXPECT_EQ(LoopStages(between), 2);

  // Loop one sums g; loop two copies x into `copy` and sums x.
  auto copying = [](int32_t copy) {
    Kernel k = Rows();
    k.insts = {Load(0, Row()), Reduce(0), Load(1, Row()), Store(copy, Row(), 2), Reduce(2)};
    k.stages = {{true, 0, 2}, {true, 2, 5}};
    return k;
  };
  Kernel elsewhere = copying(6);
  fuse::JoinIndependentLoops(elsewhere);
  EXPECT_EQ(LoopStages(elsewhere), 1);
  Kernel over_g = copying(0);
  fuse::JoinIndependentLoops(over_g);
  EXPECT_EQ(LoopStages(over_g), 2) << "its copy would overwrite g while the first loop reads it";
}

TEST(ShareValuesTest, LoadsOfStoredBuffersAndLoopValuesAreNotSharedWhereTheyMayDiffer) {
  Kernel k = Rows();
  k.insts = {
      Load(0, V(0)),   // %0 per point, seen by later stages
      Load(1, Row()),  // %1 a buffer the kernel stores
      Reduce(1),       // %2
      Load(0, V(0)),   // %3 = %0
      Load(1, Row()),  // %4 not shared: buffer 1 is stored
      Binary(Opcode::kAdd, 4, 3),
      Reduce(5),  // %6
      Store(1, V(0) * C(64), 6),
      Binary(Opcode::kAdd, 2, 0),
      Binary(Opcode::kAdd, 2, 3),  // = %8 once %3 is %0
      Store(2, V(0), 9),
  };
  k.stages = {{false, 0, 1}, {true, 1, 3}, {true, 3, 7}, {false, 7, 11}};
  fuse::ShareValues(k);
  EXPECT_EQ(Count(k, Opcode::kLoad, 0), 1);
  EXPECT_EQ(Count(k, Opcode::kLoad, 1), 2);
  EXPECT_EQ(Count(k, Opcode::kAdd), 2);
  ASSERT_EQ(k.stages.size(), 4u);
  EXPECT_EQ(k.stages[2].end - k.stages[2].begin, 3) << "the loop keeps its load, add, reduce";
  EXPECT_EQ(k.insts.back().op, Opcode::kStore);
}

TEST(ShareValuesTest, KernelsOfIndependentSegmentsAreLeftAlone) {
  Kernel k;
  k.parallel = {C(16)};
  k.insts = {Load(0, V(0)), Store(1, V(0), 0), Load(0, V(0)), Store(2, V(0), 2)};
  k.stages = {{false, 0, 4}};
  k.segments = {0, 2};
  fuse::ShareValues(k);
  EXPECT_EQ(k.insts.size(), 4u);
}

}  // namespace

// A residual sum before a layer norm: the first loop stores a + b into s and sums it; the
// second loop reads s back and sums its squares; then the result is stored.
Kernel ResidualNorm() {
  Kernel k = Rows();
  const int32_t a = 0, b = 1, s = 2, out = 3;
  k.insts = {
      Load(a, Row()),              // %0
      Load(b, Row()),              // %1
      Binary(Opcode::kAdd, 0, 1),  // %2
      Store(s, Row(), 2),          // %3
      Reduce(2),                   // %4
      Load(s, Row()),              // %5 what the first loop stored, at the same index
      Binary(Opcode::kMul, 5, 5),  // %6
      Reduce(6),                   // %7
      Binary(Opcode::kAdd, 4, 7),  // %8
      Store(out, V(0), 8),         // %9
  };
  k.stages = {{true, 0, 5}, {true, 5, 8}, {false, 8, 10}};
  return k;
}

TEST(RecomputeAcrossLoopsTest, ALaterLoopRecomputesWhatAnEarlierLoopStored) {
  Kernel k = ResidualNorm();
  fuse::RecomputeAcrossLoops(k);
  EXPECT_EQ(Count(k, Opcode::kLoad, 2), 0) << "s is not loaded back";
  EXPECT_EQ(Count(k, Opcode::kStore, 2), 1) << "s is still stored: the graph returns it";
  EXPECT_EQ(Count(k, Opcode::kLoad, 0), 2);
  EXPECT_EQ(Count(k, Opcode::kLoad, 1), 2);
  EXPECT_EQ(Count(k, Opcode::kAdd), 3);
  ASSERT_EQ(k.stages.size(), 3u);
  EXPECT_EQ(LoopStages(k), 2);
  // The second loop computes a + b itself, each operand an earlier instruction of its own.
  const loop::Stage& second = k.stages[1];
  for (int32_t i = second.begin; i < second.end; ++i) {
    loop::ForEachOperand(k.insts[static_cast<size_t>(i)], [&](int32_t v) {
      EXPECT_GE(v, second.begin);
      EXPECT_LT(v, i);
    });
  }
}

TEST(RecomputeAcrossLoopsTest, AValueThatReadsAStoredBufferOrAnotherTypeIsLoadedOrCast) {
  Kernel stored = ResidualNorm();
  stored.insts.push_back(Store(1, V(0) * C(64), 8));  // b is written too: its load must stay
  stored.stages.back().end = static_cast<int32_t>(stored.insts.size());
  const Kernel before = stored;
  fuse::RecomputeAcrossLoops(stored);
  EXPECT_EQ(Count(stored, Opcode::kLoad, 2), 1);
  EXPECT_EQ(stored.insts.size(), before.insts.size());

  Kernel wider = ResidualNorm();
  wider.insts[2].type = loop::ScalarType::kF64;  // the sum is computed wider than s is read
  fuse::RecomputeAcrossLoops(wider);
  EXPECT_EQ(Count(wider, Opcode::kLoad, 2), 0);
  ASSERT_EQ(Count(wider, Opcode::kCast), 1);
  for (const Inst& in : wider.insts) {
    if (in.op == Opcode::kCast) EXPECT_EQ(in.type, loop::ScalarType::kF32);
  }
}

TEST(RecomputeAcrossLoopsTest, AKernelOfOneLoopIsLeftAlone) {
  Kernel k = ResidualNorm();
  k.stages = {{true, 0, 8}, {false, 8, 10}};
  const size_t n = k.insts.size();
  fuse::RecomputeAcrossLoops(k);
  EXPECT_EQ(k.insts.size(), n);
  EXPECT_EQ(Count(k, Opcode::kLoad, 2), 1);
}

}  // namespace kiln
