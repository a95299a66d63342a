// Coalesced dimensions: adjacent loop variables that every index walks as one merge, and
// every index keeps its value at every point.

#include "compiler/fuse/coalesce_dims.h"

#include <cstdint>
#include <optional>
#include <vector>

#include "gtest/gtest.h"
#include "tests/compiler/graph_testing.h"

namespace kiln {
namespace {

using loop::IndexExpr;
using loop::Inst;
using loop::Opcode;
using testing::C;
using testing::V;

Inst Reduce(int32_t a) {
  Inst r;
  r.op = Opcode::kReduce;
  r.a = a;
  return r;
}

// Per-channel sums of x[N, C, H, W]: out[c] = sum over (n, h, w) of x.
loop::Kernel ChannelSums(int64_t n, int64_t c, int64_t h, int64_t w) {
  loop::Program p;
  const int32_t x = testing::AddInput(p, n * c * h * w);
  const int32_t out = testing::AddOutput(p, c);
  testing::AddKernel(p, "%1", c, {});
  loop::Kernel k = p.kernels.back();
  k.reduction = {C(n), C(h), C(w)};
  Inst load = testing::LoadAt(x);
  load.index = V(1) * C(c * h * w) + V(0) * C(h * w) + V(2) * C(w) + V(3);
  k.insts = {load, Reduce(0), testing::StoreAt(out, 1)};
  k.stages = {{true, 0, 2}, {false, 2, 3}};
  return k;
}

// out[b, t, c] = x[b, t, c] + y[c] over contiguous [b, t, c], plus out2 = t (a kIndex).
loop::Kernel BiasAdd(int64_t b, int64_t t, int64_t c) {
  loop::Program p;
  const int32_t x = testing::AddInput(p, b * t * c);
  const int32_t y = testing::AddInput(p, c);
  const int32_t out = testing::AddOutput(p, b * t * c);
  testing::AddKernel(p, "%1", b, {});
  loop::Kernel k = p.kernels.back();
  k.parallel = {C(b), C(t), C(c)};
  const IndexExpr flat = V(0) * C(t * c) + V(1) * C(c) + V(2);
  Inst lx = testing::LoadAt(x);
  lx.index = flat;
  Inst ly = testing::LoadAt(y);
  ly.index = V(2);
  Inst add;
  add.op = Opcode::kAdd;
  add.a = 0;
  add.b = 1;
  Inst st = testing::StoreAt(out, 2);
  st.index = flat;
  k.insts = {lx, ly, add, st};
  k.stages = {{false, 0, 4}};
  return k;
}

// Every index of `before` and `after` at every point of `before`'s space, the merged
// variables' values recomputed from the original ones as row-major flat indices.
void ExpectSameIndices(const loop::Kernel& before, const loop::Kernel& after) {
  ASSERT_EQ(before.insts.size(), after.insts.size());
  std::vector<int64_t> extents;
  for (int32_t v = 0; v < before.num_vars(); ++v)
    extents.push_back(before.Extent(v)->const_value());
  std::vector<int64_t> after_extents;
  for (int32_t v = 0; v < after.num_vars(); ++v) {
    after_extents.push_back(after.Extent(v)->const_value());
  }
  int64_t total = 1;
  for (int64_t e : extents) total *= e;
  std::vector<int64_t> vars(extents.size());
  for (int64_t flat = 0; flat < total; ++flat) {
    int64_t rest = flat;
    for (size_t d = extents.size(); d-- > 0;) {
      vars[d] = rest % extents[d];
      rest /= extents[d];
    }
    // The parallel point and the reduction element, each flat in both spaces.
    const size_t np = before.parallel.size(), anp = after.parallel.size();
    int64_t point = 0, element = 0;
    for (size_t d = 0; d < extents.size(); ++d) {
      int64_t& x = d < np ? point : element;
      x = x * extents[d] + vars[d];
    }
    std::vector<int64_t> avars(after_extents.size());
    for (size_t d = anp; d-- > 0;) {
      avars[d] = point % after_extents[d];
      point /= after_extents[d];
    }
    for (size_t d = after_extents.size(); d-- > anp;) {
      avars[d] = element % after_extents[d];
      element /= after_extents[d];
    }
    testing::ExpectSameIndicesAt(before, vars, after, avars, flat);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

TEST(CoalesceDimsTest, ChannelSumsWalkEachImageAsOneRow) {
  const loop::Kernel before = ChannelSums(4, 3, 5, 7);
  const loop::Kernel k = fuse::CoalesceDims(before);
  EXPECT_EQ(k.parallel, (std::vector<IndexExpr>{C(3)}));
  // n strides over channels too, so it stays apart; h and w are one row of 35.
  EXPECT_EQ(k.reduction, (std::vector<IndexExpr>{C(4), C(35)}));
  EXPECT_EQ(k.insts[0].index, V(1) * C(105) + V(0) * C(35) + V(2));
  ExpectSameIndices(before, k);
}

TEST(CoalesceDimsTest, AContiguousPointwiseSpaceBecomesOneDimension) {
  const loop::Kernel before = BiasAdd(2, 3, 4);
  const loop::Kernel k = fuse::CoalesceDims(before);
  // The bias reads c alone: b and t merge, t and c do not.
  EXPECT_EQ(k.parallel, (std::vector<IndexExpr>{C(6), C(4)}));
  ExpectSameIndices(before, k);

  loop::Kernel no_bias = before;
  no_bias.insts[1].index = V(0) * C(12) + V(1) * C(4) + V(2);
  EXPECT_EQ(fuse::CoalesceDims(no_bias).parallel, (std::vector<IndexExpr>{C(24)}));
  ExpectSameIndices(no_bias, fuse::CoalesceDims(no_bias));
}

TEST(CoalesceDimsTest, IndicesThatDoNotWalkAsOneKeepTheirDimensions) {
  // A transposed read: out[t, c] = x[c, t].
  loop::Kernel transposed = BiasAdd(1, 3, 4);
  transposed.insts[0].index = V(2) * C(3) + V(1);
  transposed.insts[1].index = V(1) * C(4) + V(2);
  EXPECT_EQ(fuse::CoalesceDims(transposed).parallel, (std::vector<IndexExpr>{C(3), C(4)}));

  // A view through a modulo (a rolled row).
  loop::Kernel rolled = BiasAdd(1, 3, 4);
  rolled.insts[1].index = V(1) * C(4) + V(2);
  rolled.insts[0].index = V(1) * C(4) + IndexExpr::Mod(V(2) + C(1), C(4), rolled.Extents());
  EXPECT_EQ(fuse::CoalesceDims(rolled).parallel, (std::vector<IndexExpr>{C(3), C(4)}));

  // A product of the two variables.
  loop::Kernel product = BiasAdd(1, 3, 4);
  product.insts[1].index = V(1) * V(2);
  EXPECT_EQ(fuse::CoalesceDims(product).parallel, (std::vector<IndexExpr>{C(3), C(4)}));
}

TEST(CoalesceDimsTest, UnitDimensionsAreDroppedButOneOfEachKindStays) {
  // [1, 3, 4] with the bias: the leading 1 goes; [3, 4] stays as the bias keeps them apart.
  const loop::Kernel before = BiasAdd(1, 3, 4);
  const loop::Kernel k = fuse::CoalesceDims(before);
  EXPECT_EQ(k.parallel, (std::vector<IndexExpr>{C(3), C(4)}));
  ExpectSameIndices(before, k);

  // A reduction over [1, 1]: one dimension of extent 1 remains.
  const loop::Kernel sums = ChannelSums(1, 3, 1, 1);
  const loop::Kernel s = fuse::CoalesceDims(sums);
  EXPECT_EQ(s.reduction, (std::vector<IndexExpr>{C(1)}));
  EXPECT_EQ(s.parallel, (std::vector<IndexExpr>{C(3)}));
  ExpectSameIndices(sums, s);
}

TEST(CoalesceDimsTest, AViewIsSeenOverTheSpaceItViews) {
  const loop::Kernel before = BiasAdd(2, 3, 4);
  const std::optional<loop::Kernel> k = fuse::CoalesceTo(before, {C(6), C(4)});
  ASSERT_TRUE(k.has_value());
  EXPECT_EQ(k->parallel, (std::vector<IndexExpr>{C(6), C(4)}));
  ExpectSameIndices(before, *k);
  // The bias keeps t and c apart; 5 is no product of neighbouring extents; a space is never
  // split.
  EXPECT_FALSE(fuse::CoalesceTo(before, {C(2), C(12)}).has_value());
  EXPECT_FALSE(fuse::CoalesceTo(before, {C(5), C(4)}).has_value());
  EXPECT_FALSE(fuse::CoalesceTo(before, {C(2), C(3), C(2), C(2)}).has_value());
  // Every dimension taken before the target's last one.
  EXPECT_FALSE(fuse::CoalesceTo(before, {C(24), C(1)}).has_value());
}

// A kernel over a view's rows ([6, 4], the [2, 3, 4] tensor's rows flattened) seen over the
// tensor's own space: the row variable becomes 3*b + t in every index, so every index keeps
// its value at every point, the bias's index (c alone) included.
TEST(CoalesceDimsTest, AViewsRowsAreSplitOverTheSpaceTheyFlatten) {
  const std::optional<loop::Kernel> rows = fuse::CoalesceTo(BiasAdd(2, 3, 4), {C(6), C(4)});
  ASSERT_TRUE(rows.has_value());
  const std::optional<loop::Kernel> k = fuse::SplitTo(*rows, {C(2), C(3), C(4)});
  ASSERT_TRUE(k.has_value());
  EXPECT_EQ(k->parallel, (std::vector<IndexExpr>{C(2), C(3), C(4)}));
  ExpectSameIndices(*rows, *k);
  const std::optional<loop::Kernel> finer = fuse::SplitTo(*rows, {C(3), C(2), C(2), C(2)});
  ASSERT_TRUE(finer.has_value());
  ExpectSameIndices(*rows, *finer);
  // 5 divides no extent; a space no larger is not a split; a reduction's rows stay whole.
  EXPECT_FALSE(fuse::SplitTo(*rows, {C(5), C(4), C(1)}).has_value());
  EXPECT_FALSE(fuse::SplitTo(*rows, {C(6), C(4)}).has_value());
  EXPECT_FALSE(fuse::SplitTo(*rows, {C(2), C(3), C(2)}).has_value());
  EXPECT_FALSE(fuse::SplitTo(ChannelSums(2, 3, 2, 2), {C(1), C(3)}).has_value());
}

// A kernel over [24] seen over [40]: each load and store masked by p0 < 24 (a load's own
// mask kept beside it), segment starts moved with their instructions.
TEST(PadToTest, PointsPastTheKernelsOwnTouchNoMemory) {
  loop::Kernel k = BiasAdd(1, 1, 24);  // x[p0] + y[p0] over [24]
  k.parallel = {C(24)};
  for (Inst& in : k.insts) in.index = V(0);
  Inst masked = testing::LoadAt(0);
  masked.index = V(0);
  masked.mask = 2;  // the add's value, as a stand-in for a bool
  k.insts.push_back(masked);
  k.insts.push_back(testing::StoreAt(2, 4));
  k.stages = {{false, 0, 6}};
  k.segments = {0, 4};
  const loop::Kernel padded = fuse::PadTo(k, 40);
  EXPECT_EQ(padded.parallel, (std::vector<IndexExpr>{C(40)}));
  ASSERT_EQ(padded.stages.size(), 1u);
  EXPECT_EQ(padded.stages[0].end, static_cast<int32_t>(padded.insts.size()));
  int accesses = 0;
  for (size_t i = 0; i < padded.insts.size(); ++i) {
    const Inst& in = padded.insts[i];
    loop::ForEachOperand(in, [&](int32_t v) { EXPECT_LT(v, static_cast<int32_t>(i)); });
    if (in.op != Opcode::kLoad && in.op != Opcode::kStore) continue;
    ++accesses;
    ASSERT_GE(in.mask, 0) << i;
    // The mask is p0 < 24, or that and the access's own mask.
    const Inst* m = &padded.insts[static_cast<size_t>(in.mask)];
    if (m->op == Opcode::kAnd) {
      EXPECT_EQ(padded.insts[static_cast<size_t>(m->a)].op, Opcode::kAdd);
      m = &padded.insts[static_cast<size_t>(m->b)];
    }
    ASSERT_EQ(m->op, Opcode::kLt);
    EXPECT_EQ(padded.insts[static_cast<size_t>(m->a)].index, V(0));
    EXPECT_EQ(padded.insts[static_cast<size_t>(m->b)].iimm, 24);
    // Each mask lives in the access's segment.
    const bool second = static_cast<int32_t>(i) >= padded.segments[1];
    EXPECT_EQ(in.mask >= padded.segments[1], second) << i;
  }
  EXPECT_EQ(accesses, 5);
  ASSERT_EQ(padded.segments.size(), 2u);
  EXPECT_EQ(padded.segments[0], 0);
  EXPECT_EQ(padded.insts[static_cast<size_t>(padded.segments[1]) + 4].op, Opcode::kLoad)
      << "the second segment starts at its masked load's mask";
}

TEST(CoalesceDimsTest, SymbolicExtentsMergeIntoTheirProduct) {
  loop::Kernel k = BiasAdd(1, 1, 8);
  const IndexExpr s0 = IndexExpr::Sym(0);
  k.parallel = {s0, C(8)};
  k.insts[0].index = V(0) * C(8) + V(1);
  k.insts[1].index = V(0) * C(8) + V(1);
  k.insts[3].index = V(0) * C(8) + V(1);
  const loop::Kernel merged = fuse::CoalesceDims(k);
  EXPECT_EQ(merged.parallel, (std::vector<IndexExpr>{s0 * C(8)}));
  EXPECT_EQ(merged.insts[0].index, V(0));
}

// out[r, c] = x[r, c] over rows of `row` f32 elements of out, read from x's rows `padded`
// apart (the logits copied out of the rows a matmul wrote them in), in the program `p`.
loop::Kernel CopyOutOfPaddedRows(loop::Program& p, int64_t rows, int64_t row, int64_t padded) {
  const int32_t x = testing::AddInput(p, rows * padded);
  const int32_t out = testing::AddOutput(p, rows * row);
  testing::AddKernel(p, "%1", rows, {});
  loop::Kernel k = p.kernels.back();
  k.parallel = {C(rows), C(row)};
  Inst load = testing::LoadAt(x);
  load.index = V(0) * C(padded) + V(1);
  Inst store = testing::StoreAt(out, 0);
  store.index = V(0) * C(row) + V(1);
  k.insts = {load, store};
  k.stages = {{false, 0, 2}};
  return k;
}

TEST(FlattenUnalignedRowsTest, StoresToRowsThatCannotAlignWalkTheFlatRange) {
  // Rows of 5 f32 (20 bytes) read from rows 8 apart: the store walks p0, aligned runs and
  // all; the load finds each element by the flat index's row and column.
  loop::Program p;
  const loop::Kernel before = CopyOutOfPaddedRows(p, 3, 5, 8);
  EXPECT_EQ(fuse::CoalesceDims(before).parallel, (std::vector<IndexExpr>{C(3), C(5)}));
  const loop::Kernel after = fuse::FlattenUnalignedRows(p, before);
  EXPECT_EQ(after.parallel, (std::vector<IndexExpr>{C(15)}));
  EXPECT_EQ(after.insts[1].index, V(0));
  EXPECT_EQ(after.insts[0].index, C(8) * IndexExpr::FloorDiv(V(0), C(5), after.Extents()) +
                                      IndexExpr::Mod(V(0), C(5), after.Extents()));
  ExpectSameIndices(before, after);
  // The program's phase does the same.
  p.kernels.back() = before;
  EXPECT_EQ(fuse::CoalesceDims(p).kernels.back().parallel, (std::vector<IndexExpr>{C(15)}));
}

TEST(FlattenUnalignedRowsTest, AlignedRowsAndStoresThatDoNotWalkAsOneKeepTheirDimensions) {
  loop::Program p;
  // Rows of 8 f32 are 32 bytes: their runs align as they are.
  const loop::Kernel aligned = CopyOutOfPaddedRows(p, 3, 8, 12);
  EXPECT_EQ(fuse::FlattenUnalignedRows(p, aligned).parallel, (std::vector<IndexExpr>{C(3), C(8)}));
  // A transposed store, and a store every row of which lands twice as far apart.
  loop::Kernel transposed = CopyOutOfPaddedRows(p, 3, 5, 8);
  transposed.insts[1].index = V(1) * C(3) + V(0);
  EXPECT_EQ(fuse::FlattenUnalignedRows(p, transposed).parallel,
            (std::vector<IndexExpr>{C(3), C(5)}));
  loop::Kernel strided = CopyOutOfPaddedRows(p, 3, 5, 8);
  strided.insts[1].index = V(0) * C(10) + V(1);
  EXPECT_EQ(fuse::FlattenUnalignedRows(p, strided).parallel, (std::vector<IndexExpr>{C(3), C(5)}));
  // A reduction keeps its rows.
  loop::Kernel sums = ChannelSums(2, 3, 1, 5);
  EXPECT_EQ(fuse::FlattenUnalignedRows(p, sums).reduction, sums.reduction);
}

}  // namespace
}  // namespace kiln
