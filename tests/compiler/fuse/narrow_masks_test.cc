// Masked indices narrowed to the part of the space their mask lets through: cheaper where the
// part makes divisions constant, the same value at every point the mask lets through, and
// unchanged where nothing is gained or the mask says nothing about a variable.

#include "compiler/fuse/narrow_masks.h"

#include <cstdint>
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

const loop::VarExtents kNone = [](int32_t) -> const IndexExpr* { return nullptr; };

Inst IndexOf(const IndexExpr& e) {
  Inst in;
  in.op = Opcode::kIndex;
  in.type = loop::ScalarType::kI64;
  in.index = e;
  return in;
}

Inst Compare(Opcode op, int32_t a, int32_t b) {
  Inst in = testing::Binary(op, a, b);
  in.type = loop::ScalarType::kBool;
  return in;
}

// The qkv gradient's assembly over [2, 64, 192]: out[p0, p1, p2] reads the middle third
// (64 <= p2 < 128) of a [2, 4, 64, 16] view through the index a reshape back leaves, masked.
struct Cat {
  loop::Kernel kernel;
  int32_t load = -1;  // the masked load's instruction
};

Cat MiddleThird(bool mirrored = false) {
  loop::Program p;
  const int32_t x = testing::AddInput(p, 2 * 4096);
  const int32_t out = testing::AddOutput(p, 2 * 64 * 192);
  testing::AddKernel(p, "%1", 2, {});
  Cat cat;
  loop::Kernel& k = cat.kernel;
  k = p.kernels.back();
  k.parallel = {C(2), C(64), C(192)};
  const loop::VarExtents extents = k.Extents();
  const IndexExpr p0 = V(0), p1 = V(1), p2 = V(2);
  const IndexExpr index =
      C(16) * IndexExpr::Mod(IndexExpr::FloorDiv(p2, C(64), extents) + p1 - C(1), C(64), extents) +
      C(4096) * IndexExpr::FloorDiv(C(64) * p1 + p2 - C(64), C(4096), extents) +
      C(1024) * IndexExpr::Mod(IndexExpr::FloorDiv(p2, C(16), extents), C(4), extents) +
      IndexExpr::Mod(p2, C(16), extents) + C(4096) * p0;
  k.insts.clear();
  k.insts.push_back(IndexOf(p2));      // %0
  k.insts.push_back(IndexOf(C(64)));   // %1
  k.insts.push_back(IndexOf(C(128)));  // %2
  if (mirrored) {  // 64 <= p2 as 128 > p2 and 64 <= p2, written with the bound first
    k.insts.push_back(Compare(Opcode::kLe, 1, 0));  // %3: 64 <= p2
    k.insts.push_back(Compare(Opcode::kGt, 2, 0));  // %4: 128 > p2
  } else {
    k.insts.push_back(Compare(Opcode::kGe, 0, 1));  // %3
    k.insts.push_back(Compare(Opcode::kLt, 0, 2));  // %4
  }
  k.insts.push_back(Compare(Opcode::kAnd, 3, 4));  // %5
  Inst load = testing::LoadAt(x);
  load.index = index;
  load.mask = 5;
  cat.load = static_cast<int32_t>(k.insts.size());
  k.insts.push_back(load);
  Inst store = testing::StoreAt(out, cat.load);
  store.index = p0 * C(12288) + p1 * C(192) + p2;
  k.insts.push_back(store);
  k.stages = {{false, 0, static_cast<int32_t>(k.insts.size())}};
  return cat;
}

// Every point of [2, 64, 192] with lo <= p2 < hi: both indices have the same value.
void ExpectSameInside(const IndexExpr& before, const IndexExpr& after, int64_t lo, int64_t hi) {
  for (int64_t p0 = 0; p0 < 2; ++p0) {
    for (int64_t p1 = 0; p1 < 64; ++p1) {
      for (int64_t p2 = lo; p2 < hi; ++p2) {
        const std::vector<int64_t> vars = {p0, p1, p2};
        ASSERT_EQ(*before.Evaluate({}, vars), *after.Evaluate({}, vars))
            << "at " << p0 << ", " << p1 << ", " << p2;
      }
    }
  }
}

std::string Text(const IndexExpr& e) { return e.ToString({}); }

TEST(NarrowMaskedIndicesTest, ACatBranchLoadsWithoutTheDivisionsItsPartMakesConstant) {
  for (bool mirrored : {false, true}) {
    const Cat cat = MiddleThird(mirrored);
    const IndexExpr before = cat.kernel.insts[static_cast<size_t>(cat.load)].index;
    const loop::Kernel narrowed = fuse::NarrowMaskedIndices(cat.kernel);
    const IndexExpr after = narrowed.insts[static_cast<size_t>(cat.load)].index;
    // 16*p1 for the head's row, the rest of p2's quotient and remainder by 16 over 64..127.
    EXPECT_EQ(Text(after), "1024*FloorDiv(p2, 16) + Mod(p2, 16) + 4096*p0 + 16*p1 - 4096")
        << Text(before);
    ExpectSameInside(before, after, 64, 128);
    // Nothing else changes.
    ASSERT_EQ(narrowed.insts.size(), cat.kernel.insts.size());
    for (size_t i = 0; i < narrowed.insts.size(); ++i) {
      if (static_cast<int32_t>(i) == cat.load) continue;
      EXPECT_EQ(narrowed.insts[i].index, cat.kernel.insts[i].index) << i;
    }
  }
}

TEST(NarrowMaskedIndicesTest, AnUpperBoundAloneNarrowsTheExtent) {
  Cat cat = MiddleThird();
  loop::Kernel& k = cat.kernel;
  // p2 < 64 only: the first third, where FloorDiv(p2, 64) is 0.
  const loop::VarExtents extents = k.Extents();
  Inst& load = k.insts[static_cast<size_t>(cat.load)];
  load.index =
      C(64) * IndexExpr::FloorDiv(V(2), C(64), extents) + IndexExpr::Mod(V(2), C(64), extents);
  k.insts[5] = Compare(Opcode::kLt, 0, 1);  // p2 < 64
  const IndexExpr before = load.index;
  const loop::Kernel narrowed = fuse::NarrowMaskedIndices(k);
  EXPECT_EQ(Text(narrowed.insts[static_cast<size_t>(cat.load)].index), "p2") << Text(before);
  // 0 <= p2 < 64 (and -5 <= p2): a lower bound at or below zero narrows nothing more.
  for (int64_t lo : {0, -5}) {
    k.insts[2] = IndexOf(C(lo));
    k.insts[3] = Compare(Opcode::kGe, 0, 2);
    k.insts[5] = Compare(Opcode::kAnd, 3, 4);
    k.insts[4] = Compare(Opcode::kLt, 0, 1);
    const loop::Kernel bounded = fuse::NarrowMaskedIndices(k);
    EXPECT_EQ(Text(bounded.insts[static_cast<size_t>(cat.load)].index), "p2") << lo;
  }
}

TEST(NarrowMaskedIndicesTest, AnIndexWithNothingToGainIsLeftAsItWas) {
  Cat cat = MiddleThird();
  loop::Kernel& k = cat.kernel;
  Inst& load = k.insts[static_cast<size_t>(cat.load)];
  load.index = V(0) * C(4096) + V(1) * C(64) + V(2) - C(64);  // affine: nothing to simplify
  const loop::Kernel narrowed = fuse::NarrowMaskedIndices(k);
  EXPECT_EQ(narrowed.insts[static_cast<size_t>(cat.load)].index, load.index);
}

TEST(NarrowMaskedIndicesTest, ADisjunctionOrAComparisonOfTwoVariablesBoundsNothing) {
  for (Opcode join : {Opcode::kOr, Opcode::kXor}) {
    Cat cat = MiddleThird();
    cat.kernel.insts[5].op = join;  // p2 >= 64 or p2 < 128: every p2
    const loop::Kernel narrowed = fuse::NarrowMaskedIndices(cat.kernel);
    EXPECT_EQ(narrowed.insts[static_cast<size_t>(cat.load)].index,
              cat.kernel.insts[static_cast<size_t>(cat.load)].index);
  }
  Cat cat = MiddleThird();
  cat.kernel.insts[1] = IndexOf(V(1));  // p2 >= p1: no constant bound
  cat.kernel.insts[2] = IndexOf(V(1) + C(64));
  const loop::Kernel narrowed = fuse::NarrowMaskedIndices(cat.kernel);
  EXPECT_EQ(narrowed.insts[static_cast<size_t>(cat.load)].index,
            cat.kernel.insts[static_cast<size_t>(cat.load)].index);
}

TEST(NarrowMaskedIndicesTest, AnEmptyPartIsLeftAlone) {
  Cat cat = MiddleThird();
  cat.kernel.insts[1] = IndexOf(C(128));  // 128 <= p2 < 128: never read
  const loop::Kernel narrowed = fuse::NarrowMaskedIndices(cat.kernel);
  EXPECT_EQ(narrowed.insts[static_cast<size_t>(cat.load)].index,
            cat.kernel.insts[static_cast<size_t>(cat.load)].index);
}

TEST(NarrowMaskedIndicesTest, ASymbolicLowerBoundKeepsTheValueOverItsPart) {
  // s0 <= p2 < 128: the shift is by a symbol.
  Cat cat = MiddleThird();
  loop::Kernel& k = cat.kernel;
  k.insts[1] = IndexOf(IndexExpr::Sym(0));
  Inst& load = k.insts[static_cast<size_t>(cat.load)];
  load.index = IndexExpr::Mod(V(2), C(64), kNone) + C(64) * V(1);
  const IndexExpr before = load.index;
  const loop::Kernel narrowed = fuse::NarrowMaskedIndices(k);
  const IndexExpr after = narrowed.insts[static_cast<size_t>(cat.load)].index;
  for (int64_t s0 = 0; s0 < 128; s0 += 17) {
    for (int64_t p2 = s0; p2 < 128; ++p2) {
      const std::vector<int64_t> vars = {1, 3, p2};
      ASSERT_EQ(*before.Evaluate({s0}, vars), *after.Evaluate({s0}, vars)) << s0 << " " << p2;
    }
  }
}

TEST(NarrowMaskedIndicesTest, AProgramsKernelsAreEachNarrowed) {
  loop::Program program;
  program.kernels = {MiddleThird().kernel, MiddleThird(true).kernel};
  const loop::Program narrowed = fuse::NarrowMaskedIndices(program);
  for (const loop::Kernel& k : narrowed.kernels) {
    EXPECT_EQ(Text(k.insts[6].index),
              "1024*FloorDiv(p2, 16) + Mod(p2, 16) + 4096*p0 + 16*p1 - 4096");
  }
}

}  // namespace
}  // namespace kiln
