#include "compiler/codegen/nvptx/specialize.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>

#include "compiler/codegen/llvm/point_runs.h"
#include "compiler/codegen/nvptx/launch.h"
#include "compiler/fuse/fuse.h"
#include "tests/compiler/graph_testing.h"

namespace kiln::codegen::nvptx {
namespace {

using loop::Inst;
using loop::Opcode;

// Two independent scaled copies of `n` and `m` elements, joined by fusion: padded, the
// smaller one's accesses masked to its points, when n != m.
loop::Program Joined(int64_t n, int64_t m) {
  loop::Program p;
  const int32_t in0 = testing::AddInput(p, n), in1 = testing::AddInput(p, m);
  const int32_t out0 = testing::AddOutput(p, n), out1 = testing::AddOutput(p, m);
  const Inst three = testing::ConstF32(3.0), scale = testing::Binary(Opcode::kMul, 0, 1);
  testing::AddKernel(p, "a", n, {testing::LoadAt(in0), three, scale, testing::StoreAt(out0, 2)});
  testing::AddKernel(p, "b", m, {testing::LoadAt(in1), three, scale, testing::StoreAt(out1, 2)});
  absl::StatusOr<loop::Program> fused = fuse::Fuse(std::move(p));
  EXPECT_TRUE(fused.ok()) << fused.status();
  return fused.ok() ? *std::move(fused) : loop::Program{};
}

int MaskedAccesses(const loop::Kernel& k) {
  int masked = 0;
  for (const Inst& in : k.insts) {
    masked += (in.op == Opcode::kLoad || in.op == Opcode::kStore) && in.mask >= 0;
  }
  return masked;
}

TEST(SpecializeTest, APaddedSegmentsBoundsAreDroppedAndItsAccessesMoveAsVectors) {
  const loop::Program program = Joined(4096, 1000);
  ASSERT_EQ(program.kernels.size(), 1u) << loop::ToString(program);
  const loop::Kernel& padded = program.kernels[0];
  ASSERT_EQ(SegmentsOf(padded), 2) << loop::ToString(program);
  ASSERT_EQ(padded.segment_points, (std::vector<int64_t>{4096, 1000}));
  EXPECT_EQ(MaskedAccesses(padded), 2) << "the smaller copy's load and store";

  const loop::Program specialized = Specialize(program);
  const loop::Kernel& k = specialized.kernels[0];
  EXPECT_EQ(MaskedAccesses(k), 0) << loop::ToString(specialized);
  // Everything else is as fusion left it.
  EXPECT_EQ(k.insts.size(), padded.insts.size());
  EXPECT_EQ(k.segments, padded.segments);
  EXPECT_EQ(k.segment_points, padded.segment_points);
  const PointRuns before = PlanPointRuns(program, padded, 0, 4, kVectorBytes);
  const PointRuns after = PlanPointRuns(specialized, k, 0, 4, kVectorBytes);
  EXPECT_EQ(before.vectors.size(), 2u) << "the larger copy's load and store";
  EXPECT_EQ(after.vectors.size(), 4u) << "both copies' loads and stores";
}

TEST(SpecializeTest, AMaskThatCanBeFalseInsideTheSegmentStays) {
  loop::Program program = Joined(4096, 1000);
  ASSERT_EQ(program.kernels.size(), 1u);
  loop::Kernel& k = program.kernels[0];
  // The segment's points widened past its bound: p0 < 1000 is no longer always true.
  k.segment_points[1] = 1001;
  EXPECT_EQ(MaskedAccesses(Specialize(program).kernels[0]), 2);
}

TEST(SpecializeTest, AnotherMaskAndedWithTheBoundIsKept) {
  loop::Program program = Joined(4096, 1000);
  ASSERT_EQ(program.kernels.size(), 1u);
  loop::Kernel& k = program.kernels[0];
  // The second segment's load, masked by (p0 != 7) and the bound.
  const int32_t load = k.segments[1] + 3;
  ASSERT_EQ(k.insts[static_cast<size_t>(load)].op, Opcode::kLoad) << loop::ToString(program);
  const int32_t bound = k.insts[static_cast<size_t>(load)].mask;
  const int32_t point = k.insts[static_cast<size_t>(bound)].a;
  Inst seven;
  seven.op = Opcode::kConst;
  seven.type = loop::ScalarType::kI64;
  seven.iimm = 7;
  Inst ne;
  ne.op = Opcode::kNe;
  ne.type = loop::ScalarType::kBool;
  ne.a = point;
  ne.b = static_cast<int32_t>(k.insts.size());
  Inst both;
  both.op = Opcode::kAnd;
  both.type = loop::ScalarType::kBool;
  both.a = static_cast<int32_t>(k.insts.size() + 1);
  both.b = bound;
  // Appended past the last instruction: values only, read through the load's mask.
  k.insts.push_back(seven);
  k.insts.push_back(ne);
  k.insts.push_back(both);
  k.insts[static_cast<size_t>(load)].mask = static_cast<int32_t>(k.insts.size() - 1);

  const loop::Kernel s = Specialize(program).kernels[0];
  EXPECT_EQ(s.insts[static_cast<size_t>(load)].mask, both.a) << "p0 != 7 alone";
}

TEST(SpecializeTest, KernelsWithoutSegmentsOfTheirOwnPointsAreUnchanged) {
  // Segments over the same points carry no bounds; a kernel of one segment is walked over
  // its whole (padded) space, so its masks stay.
  const loop::Program same = Joined(4096, 4096);
  ASSERT_EQ(same.kernels.size(), 1u);
  EXPECT_TRUE(same.kernels[0].segment_points.empty());
  EXPECT_EQ(loop::ToString(Specialize(same)), loop::ToString(same));

  loop::Program one = Joined(4096, 1000);
  ASSERT_EQ(one.kernels.size(), 1u);
  loop::Kernel& k = one.kernels[0];
  k.segments = {0};
  k.segment_points = {1000};
  EXPECT_EQ(loop::ToString(Specialize(one)), loop::ToString(one));
}

}  // namespace
}  // namespace kiln::codegen::nvptx
