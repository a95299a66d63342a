#include "compiler/fuse/batch_write_backs.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "compiler/loop/ir.h"
#include "compiler/loop/verify.h"
#include "tests/compiler/graph_testing.h"

namespace kiln {
namespace {

using loop::Opcode;
using loop::Step;
using testing::AddBuffer;
using testing::AddInput;
using testing::AddKernel;
using testing::C;
using testing::ConstF32;
using testing::LoadAt;
using testing::StoreAt;
using testing::V;

// A write-back of `input` (its buffer `buffer`, `size` elements) from buffer `src`, viewed
// densely from element `offset`.
void AddWriteBack(loop::Program& p, int32_t input, int32_t src, int64_t size, int64_t offset = 0,
                  int64_t stride = 1) {
  Step s;
  s.kind = Step::Kind::kWriteBack;
  s.input_index = input;
  s.src.buffer = src;
  s.src.sizes = {C(size)};
  s.src.strides = {C(stride)};
  s.src.offset = C(offset);
  p.steps.push_back(s);
}

// A kernel that stores input + 1 into `out` over [size].
void AddIncrement(loop::Program& p, int32_t input, int32_t out, int64_t size) {
  AddKernel(p, "add", size,
            {LoadAt(input), ConstF32(1), testing::Binary(Opcode::kAdd, 0, 1), StoreAt(out, 2)});
}

// The batch norm's shape: three inputs of 4, 8 and 1 elements each get input + 1 back.
struct Stats {
  loop::Program p;
  std::vector<int32_t> inputs, values;
};

Stats ThreeStatistics() {
  Stats s;
  for (const int64_t size : {4, 8, 1}) {
    s.inputs.push_back(AddInput(s.p, size));
    s.values.push_back(AddBuffer(s.p, size + 2));
  }
  for (size_t i = 0; i < 3; ++i) {
    AddIncrement(s.p, s.inputs[i], s.values[i], i == 0 ? 4 : i == 1 ? 8 : 1);
  }
  AddWriteBack(s.p, 0, s.values[0], 4);
  AddWriteBack(s.p, 1, s.values[1], 8, /*offset=*/2);
  AddWriteBack(s.p, 2, s.values[2], 1);
  return s;
}

TEST(BatchWriteBacksTest, ARunOfWriteBacksBecomesOneKernelOfASegmentEach) {
  Stats s = ThreeStatistics();
  const loop::Program out = fuse::BatchWriteBacks(s.p);
  ASSERT_EQ(out.steps.size(), 7u);  // three kernels, the copies, three write-backs
  ASSERT_EQ(out.steps[3].kind, Step::Kind::kKernel);
  const loop::Kernel& k = out.kernels[static_cast<size_t>(out.steps[3].kernel)];
  EXPECT_EQ(k.parallel, std::vector<loop::IndexExpr>{C(8)});
  EXPECT_TRUE(k.reduction.empty());
  EXPECT_EQ(k.segment_points, (std::vector<int64_t>{4, 8, 1}));
  ASSERT_EQ(k.segments.size(), 3u);
  for (size_t g = 0; g < 3; ++g) {
    std::vector<const loop::Inst*> loads, stores;
    for (int32_t i = k.segments[g]; i < k.SegmentEnd(g); ++i) {
      const loop::Inst& in = k.insts[static_cast<size_t>(i)];
      if (in.op == Opcode::kLoad) loads.push_back(&in);
      if (in.op == Opcode::kStore) stores.push_back(&in);
    }
    ASSERT_EQ(loads.size(), 1u);
    ASSERT_EQ(stores.size(), 1u);
    EXPECT_EQ(loads[0]->buffer, s.values[g]);
    EXPECT_EQ(loads[0]->index, g == 1 ? C(2) + V(0) : V(0)) << "the value's own offset";
    EXPECT_EQ(stores[0]->buffer, s.inputs[g]);
    EXPECT_EQ(stores[0]->index, V(0));
    EXPECT_EQ(loads[0]->mask >= 0, g != 1) << "masked to its points where it has fewer";
    EXPECT_EQ(stores[0]->mask, loads[0]->mask);
  }
  for (size_t i = 4; i < 7; ++i) {
    const Step& w = out.steps[i];
    ASSERT_EQ(w.kind, Step::Kind::kWriteBack);
    EXPECT_EQ(w.src.buffer, s.inputs[static_cast<size_t>(w.input_index)]) << "in place";
    EXPECT_EQ(w.src.offset, C(0));
  }
  EXPECT_TRUE(loop::VerifyTypes(out).ok()) << loop::VerifyTypes(out);
  EXPECT_EQ(loop::ToString(fuse::BatchWriteBacks(s.p)), loop::ToString(out));  // deterministic
}

TEST(BatchWriteBacksTest, CopiesOfOneSizeNeedNoMasks) {
  loop::Program p;
  const int32_t a = AddInput(p, 8), b = AddInput(p, 8);
  const int32_t va = AddBuffer(p, 8), vb = AddBuffer(p, 8);
  AddIncrement(p, a, va, 8);
  AddIncrement(p, b, vb, 8);
  AddWriteBack(p, 0, va, 8);
  AddWriteBack(p, 1, vb, 8);
  const loop::Program out = fuse::BatchWriteBacks(p);
  const loop::Kernel& k = out.kernels.back();
  EXPECT_EQ(k.segments.size(), 2u);
  EXPECT_TRUE(k.segment_points.empty());
  for (const loop::Inst& in : k.insts) EXPECT_LT(in.mask, 0);
}

TEST(BatchWriteBacksTest, WriteBacksThatCannotRunAtOnceStayCopies) {
  loop::Program p;
  const int32_t a = AddInput(p, 4);
  AddInput(p, 4);
  const int32_t c = AddInput(p, 4);
  AddInput(p, 4, /*stride=*/2);
  const int32_t va = AddBuffer(p, 4), vd = AddBuffer(p, 8);
  AddIncrement(p, a, va, 4);
  AddWriteBack(p, 0, va, 4);
  AddWriteBack(p, 1, c, 4);  // reads input 2, which the next step writes
  AddWriteBack(p, 2, va, 4);
  AddWriteBack(p, 3, vd, 4, 0, /*stride=*/2);  // strided: not dense
  const loop::Program out = fuse::BatchWriteBacks(p);
  // Input 0 alone is left batchable (input 2's value is read by input 1's step): one copy
  // makes no kernel.
  EXPECT_EQ(out.kernels.size(), p.kernels.size());
  ASSERT_EQ(out.steps.size(), p.steps.size());
  for (size_t i = 0; i < p.steps.size(); ++i) {
    EXPECT_EQ(out.steps[i].src.buffer, p.steps[i].src.buffer);
  }
}

TEST(BatchWriteBacksTest, AnInputWrittenInPlaceAlreadyIsLeft) {
  Stats s = ThreeStatistics();
  const loop::Program once = fuse::BatchWriteBacks(s.p);
  const loop::Program twice = fuse::BatchWriteBacks(once);
  EXPECT_EQ(loop::ToString(twice), loop::ToString(once));
}

}  // namespace
}  // namespace kiln
