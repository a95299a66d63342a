// Ordered dimensions: a pointwise kernel that stores a channels-last tensor walks its
// channels innermost, every point computing and storing what it did.

#include "compiler/fuse/order_dims.h"

#include <cstdint>
#include <vector>

#include "compiler/fuse/coalesce_dims.h"
#include "gtest/gtest.h"
#include "tests/compiler/graph_testing.h"

namespace kiln {
namespace {

using loop::IndexExpr;
using loop::Inst;
using loop::Opcode;
using testing::C;
using testing::V;

// The index of element (n, c, h, w) of an [N, C, H, W] tensor, channels last or not.
IndexExpr At(int64_t c, int64_t h, int64_t w, bool channels_last, const IndexExpr& n,
             const IndexExpr& ch, const IndexExpr& y, const IndexExpr& x) {
  if (channels_last) return n * C(h * w * c) + ch + y * C(w * c) + x * C(c);
  return n * C(c * h * w) + ch * C(h * w) + y * C(w) + x;
}

// out = relu(x * scale[c]) over (n, c, h, w): x is read and out written channels last or not,
// the per-channel scale at c.
loop::Kernel ScaleRelu(int64_t n, int64_t c, int64_t h, int64_t w, bool x_last, bool out_last) {
  loop::Program p;
  const int32_t x = testing::AddInput(p, n * c * h * w);
  const int32_t scale = testing::AddInput(p, c);
  const int32_t out = testing::AddOutput(p, n * c * h * w);
  testing::AddKernel(p, "%1", n, {});
  loop::Kernel k = p.kernels.back();
  k.parallel = {C(n), C(c), C(h), C(w)};
  Inst lx = testing::LoadAt(x);
  lx.index = At(c, h, w, x_last, V(0), V(1), V(2), V(3));
  Inst ls = testing::LoadAt(scale);
  ls.index = V(1);
  Inst zero = testing::ConstF32(0);
  Inst st = testing::StoreAt(out, 4);
  st.index = At(c, h, w, out_last, V(0), V(1), V(2), V(3));
  k.insts = {lx, ls, testing::Binary(Opcode::kMul, 0, 1), zero, testing::Binary(Opcode::kMax, 2, 3),
             st};
  k.stages = {{false, 0, 6}};
  return k;
}

// Every index of `before` at every point equals `after`'s at the permuted point:
// after's variable i is before's order[i].
void ExpectSameIndices(const loop::Kernel& before, const loop::Kernel& after,
                       const std::vector<int32_t>& order) {
  ASSERT_EQ(before.insts.size(), after.insts.size());
  std::vector<int64_t> extents;
  for (const IndexExpr& e : before.parallel) extents.push_back(e.const_value());
  int64_t total = 1;
  for (int64_t e : extents) total *= e;
  std::vector<int64_t> vars(extents.size()), permuted(extents.size());
  for (int64_t flat = 0; flat < total; ++flat) {
    int64_t rest = flat;
    for (size_t d = extents.size(); d-- > 0;) {
      vars[d] = rest % extents[d];
      rest /= extents[d];
    }
    for (size_t i = 0; i < order.size(); ++i) permuted[i] = vars[static_cast<size_t>(order[i])];
    testing::ExpectSameIndicesAt(before, vars, after, permuted, flat);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

TEST(OrderDimsTest, AChannelsLastStoreWalksChannelsInnermost) {
  const loop::Kernel before = ScaleRelu(2, 3, 4, 5, /*x_last=*/true, /*out_last=*/true);
  const loop::Kernel k = fuse::OrderDims(before);
  EXPECT_EQ(k.parallel, (std::vector<IndexExpr>{C(2), C(4), C(5), C(3)}));
  EXPECT_EQ(k.insts[5].index, V(0) * C(60) + V(1) * C(15) + V(2) * C(3) + V(3));
  EXPECT_EQ(k.insts[1].index, V(3));  // the scale, at the channel
  ExpectSameIndices(before, k, {0, 2, 3, 1});
  // Then the image's rows, columns and batch are one contiguous run beside the channels.
  const loop::Kernel merged = fuse::CoalesceDims(k);
  EXPECT_EQ(merged.parallel, (std::vector<IndexExpr>{C(40), C(3)}));
}

TEST(OrderDimsTest, AKernelWhoseStoresAreContiguousAlreadyIsLeft) {
  const loop::Kernel before = ScaleRelu(2, 3, 4, 5, /*x_last=*/true, /*out_last=*/false);
  const loop::Kernel k = fuse::OrderDims(before);
  EXPECT_EQ(k.parallel, before.parallel);  // a load strides instead: the store decides
  EXPECT_EQ(k.insts[5].index, before.insts[5].index);
}

TEST(OrderDimsTest, StoresThatDisagreeLeaveTheKernel) {
  loop::Kernel before = ScaleRelu(2, 3, 4, 5, /*x_last=*/true, /*out_last=*/true);
  Inst second = before.insts.back();
  second.index = At(3, 4, 5, /*channels_last=*/false, V(0), V(1), V(2), V(3));
  before.insts.push_back(second);
  before.stages = {{false, 0, 7}};
  const loop::Kernel k = fuse::OrderDims(before);
  EXPECT_EQ(k.parallel, before.parallel);
}

TEST(OrderDimsTest, UnitDimensionsKeepTheirPlaces) {
  // [N, C, 1, 1] channels last: the unit dimensions walk nothing; the channels already
  // are innermost among the others, so nothing moves.
  const loop::Kernel before = ScaleRelu(2, 3, 1, 1, /*x_last=*/true, /*out_last=*/true);
  const loop::Kernel k = fuse::OrderDims(before);
  EXPECT_EQ(k.parallel, before.parallel);
}

TEST(OrderDimsTest, AReductionKeepsItsReductionVariables) {
  // A window of 2 over x's next row, as a pool reads it: the load walks the reduction
  // variable p4, which stays p4.
  loop::Kernel before = ScaleRelu(2, 3, 4, 5, true, true);
  before.reduction = {C(2)};
  before.insts[0].index = before.insts[0].index + V(4) * C(15);
  before.stages = {{true, 0, 5}, {false, 5, 6}};
  const loop::Kernel k = fuse::OrderDims(before);
  EXPECT_EQ(k.parallel, (std::vector<IndexExpr>{C(2), C(4), C(5), C(3)}));
  EXPECT_EQ(k.reduction, before.reduction);
  EXPECT_EQ(k.insts[0].index, V(0) * C(60) + V(1) * C(15) + V(2) * C(3) + V(3) + V(4) * C(15));
  // A store inside the reduction loop walks p4: left.
  loop::Kernel scatter = before;
  scatter.insts[5].index = scatter.insts[5].index + V(4);
  EXPECT_EQ(fuse::OrderDims(scatter).parallel, scatter.parallel);
}

TEST(OrderDimsTest, IndicesOutsideTheAffineFormAreLeft) {
  loop::Kernel divided = ScaleRelu(2, 3, 4, 5, true, true);
  divided.insts[5].index =
      divided.insts[5].index + IndexExpr::FloorDiv(V(3), C(2), divided.Extents());
  EXPECT_EQ(fuse::OrderDims(divided).parallel, divided.parallel);
}

}  // namespace
}  // namespace kiln
