// Padded matmul rows: an intermediate matrix of 16-bit floats that matmuls read as unaligned
// rows gets aligned rows, every access moved with it; anything that does not walk whole rows
// keeps the buffer as it was.

#include "compiler/fuse/pad_rows.h"

#include <cstdint>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/compiler/graph_testing.h"

namespace kiln {
namespace {

using loop::CallArg;
using loop::IndexExpr;
using loop::Inst;
using loop::Opcode;
using loop::TensorRef;
using testing::C;
using testing::V;

constexpr int64_t kRows = 4, kCols = 100;  // 200 bytes of bf16: not a multiple of 16
constexpr int64_t kPadded = 104;           // 208 bytes

TensorRef View(int32_t buffer, std::vector<int64_t> sizes, std::vector<int64_t> strides,
               int64_t offset = 0, graph::DType dtype = graph::DType::kBFloat16) {
  TensorRef t;
  t.buffer = buffer;
  for (int64_t s : sizes) t.sizes.push_back(C(s));
  for (int64_t s : strides) t.strides.push_back(C(s));
  t.offset = C(offset);
  t.dtype = dtype;
  return t;
}

CallArg Tensor(TensorRef t) {
  CallArg a;
  a.kind = CallArg::Kind::kTensor;
  a.tensor = std::move(t);
  return a;
}

void AddMatmul(loop::Program& p, TensorRef a, TensorRef b, TensorRef out) {
  loop::Step step;
  step.kind = loop::Step::Kind::kExtern;
  step.call.op = "aten.mm.default";
  step.call.args = {Tensor(std::move(a)), Tensor(std::move(b))};
  step.call.outputs = {std::move(out)};
  p.steps.push_back(std::move(step));
}

struct Logits {
  loop::Program program;
  int32_t g = -1;  // the [rows, cols] matrix kernel 0 writes and the matmuls read
};

// g[r, c] = 1 (kernel 0, over [rows, cols]); y = g @ w and z = g^T @ u (matmuls); s[r] = sum
// over c of g[r, c] (kernel 1, a row reduction) -- the shape of a vocabulary projection's
// gradient and the softmax beside it.
Logits MakeLogits(graph::DType dtype = graph::DType::kBFloat16, int64_t cols = kCols) {
  Logits l;
  loop::Program& p = l.program;
  const int32_t w = testing::AddInput(p, cols * 8);
  const int32_t u = testing::AddInput(p, kRows * 8);
  l.g = testing::AddBuffer(p, kRows * cols);
  p.buffers[l.g].dtype = dtype;
  const int32_t y = testing::AddOutput(p, kRows * 8);
  const int32_t z = testing::AddOutput(p, cols * 8);
  const int32_t s = testing::AddOutput(p, kRows);

  Inst store = testing::StoreAt(l.g, 0);
  store.index = V(0) * C(cols) + V(1);
  testing::AddKernel(p, "%1", kRows, {testing::ConstF32(1), store});
  p.kernels.back().parallel = {C(kRows), C(cols)};

  AddMatmul(p, View(l.g, {kRows, cols}, {cols, 1}, 0, dtype), View(w, {cols, 8}, {8, 1}),
            View(y, {kRows, 8}, {8, 1}));
  AddMatmul(p, View(l.g, {cols, kRows}, {1, cols}, 0, dtype), View(u, {kRows, 8}, {8, 1}),
            View(z, {cols, 8}, {8, 1}));

  Inst load = testing::LoadAt(l.g);
  load.index = V(0) * C(cols) + V(1);
  Inst sum;
  sum.op = Opcode::kReduce;
  sum.a = 0;
  testing::AddKernel(p, "%4", kRows, {load, sum, testing::StoreAt(s, 1)});
  loop::Kernel& k = p.kernels.back();
  k.reduction = {C(cols)};
  k.stages = {{true, 0, 2}, {false, 2, 3}};
  return l;
}

const std::vector<CallArg>& MatmulArgs(const loop::Program& p, int which) {
  int seen = 0;
  for (const loop::Step& step : p.steps) {
    if (step.kind == loop::Step::Kind::kExtern && seen++ == which) return step.call.args;
  }
  static const std::vector<CallArg> none;
  return none;
}

TEST(PadMatmulRows, PaddedRowsRoundUpToTheAlignment) {
  EXPECT_EQ(fuse::PaddedRow(50257, 2, 16), 50264);
  EXPECT_EQ(fuse::PaddedRow(50264, 2, 16), 50264);
  EXPECT_EQ(fuse::PaddedRow(172, 2, 16), 176);
  EXPECT_EQ(fuse::PaddedRow(3, 4, 4), 3);  // one element a row's alignment: nothing to add
}

TEST(PadMatmulRows, AMatrixMatmulsReadAsUnalignedRowsGetsAlignedRows) {
  Logits l = MakeLogits();
  const loop::Program padded = fuse::PadMatmulRows(l.program, 16);
  EXPECT_EQ(padded.buffers[l.g].elements, C(kRows * kPadded));
  // The kernel that writes it and the one that reduces its rows index the padded rows.
  EXPECT_EQ(padded.kernels[0].insts[1].index, V(0) * C(kPadded) + V(1));
  EXPECT_EQ(padded.kernels[1].insts[0].index, V(0) * C(kPadded) + V(1));
  // Both matmuls see rows kPadded apart, the second as the transpose.
  const TensorRef& a = MatmulArgs(padded, 0)[0].tensor;
  EXPECT_EQ(a.sizes, (std::vector<IndexExpr>{C(kRows), C(kCols)}));
  EXPECT_EQ(a.strides, (std::vector<IndexExpr>{C(kPadded), C(1)}));
  const TensorRef& t = MatmulArgs(padded, 1)[0].tensor;
  EXPECT_EQ(t.sizes, (std::vector<IndexExpr>{C(kCols), C(kRows)}));
  EXPECT_EQ(t.strides, (std::vector<IndexExpr>{C(1), C(kPadded)}));
  // Nothing else moves: the weights are inputs, the results outputs.
  EXPECT_EQ(MatmulArgs(padded, 0)[1].tensor.strides, (std::vector<IndexExpr>{C(8), C(1)}));
  EXPECT_EQ(padded.buffers[0].elements, l.program.buffers[0].elements);
}

TEST(PadMatmulRows, AViewOfARowFromItsMiddleMovesWithIt) {
  Logits l = MakeLogits();
  // A matmul over columns 10..59 of rows 1..2.
  AddMatmul(l.program, View(l.g, {2, 50}, {kCols, 1}, kCols + 10), View(0, {50, 8}, {8, 1}),
            View(3, {2, 8}, {8, 1}));
  const loop::Program padded = fuse::PadMatmulRows(l.program, 16);
  const TensorRef& v = MatmulArgs(padded, 2)[0].tensor;
  EXPECT_EQ(v.offset, C(kPadded + 10));
  EXPECT_EQ(v.strides, (std::vector<IndexExpr>{C(kPadded), C(1)}));
}

void ExpectUnchanged(const loop::Program& before, int64_t alignment = 16) {
  EXPECT_EQ(loop::ToString(fuse::PadMatmulRows(before, alignment)), loop::ToString(before));
}

TEST(PadMatmulRows, AlignedRowsFloat32AndTargetsWithoutAnAlignmentKeepTheirLayout) {
  ExpectUnchanged(MakeLogits(graph::DType::kBFloat16, 96).program);  // 192 bytes
  ExpectUnchanged(MakeLogits(graph::DType::kFloat32).program);
  ExpectUnchanged(MakeLogits().program, /*alignment=*/0);
}

// The program's kernel steps in order, as (kernel, the buffer its last instruction stores).
std::vector<int32_t> KernelStores(const loop::Program& p) {
  std::vector<int32_t> stores;
  for (const loop::Step& step : p.steps) {
    if (step.kind == loop::Step::Kind::kKernel) {
      stores.push_back(p.kernels[step.kernel].insts.back().buffer);
    } else {
      stores.push_back(-1);  // an extern
    }
  }
  return stores;
}

// `before`'s matrix g keeps its layout, and the matmuls read one padded copy of it, made by
// a kernel right before the first.
void ExpectMatmulsReadAPaddedCopy(const Logits& before) {
  const loop::Program padded = fuse::PadMatmulRows(before.program, 16);
  EXPECT_EQ(padded.buffers[before.g].elements, before.program.buffers[before.g].elements);
  EXPECT_EQ(padded.kernels[0].insts[1].index, V(0) * C(kCols) + V(1));
  const int32_t copy = static_cast<int32_t>(before.program.buffers.size());
  ASSERT_EQ(padded.buffers.size(), before.program.buffers.size() + 1);
  EXPECT_EQ(padded.buffers[copy].elements, C(kRows * kPadded));
  // Kernel 0 writes g, the copy copies it, then both matmuls.
  ASSERT_GE(padded.steps.size(), 4u);
  EXPECT_EQ(KernelStores(padded)[1], copy);
  const loop::Kernel& k = padded.kernels[padded.steps[1].kernel];
  EXPECT_EQ(k.insts[0].buffer, before.g);
  EXPECT_EQ(k.insts[0].index, V(0) * C(kCols) + V(1));
  EXPECT_EQ(k.insts[1].index, V(0) * C(kPadded) + V(1));
  const TensorRef& a = MatmulArgs(padded, 0)[0].tensor;
  EXPECT_EQ(a.buffer, copy);
  EXPECT_EQ(a.strides, (std::vector<IndexExpr>{C(kPadded), C(1)}));
  const TensorRef& t = MatmulArgs(padded, 1)[0].tensor;
  EXPECT_EQ(t.buffer, copy);
  EXPECT_EQ(t.strides, (std::vector<IndexExpr>{C(1), C(kPadded)}));
}

TEST(PadMatmulRows, AFlattenedWalkOfTheMatrixKeepsItsLayoutAndMatmulsReadAPaddedCopy) {
  Logits l = MakeLogits();
  Inst load = testing::LoadAt(l.g);  // element p0 of the whole matrix
  testing::AddKernel(l.program, "%5", kRows * kCols,
                     {load, testing::StoreAt(testing::AddOutput(l.program, kRows * kCols), 0)});
  ExpectMatmulsReadAPaddedCopy(l);
}

TEST(PadMatmulRows, AGraphOutputKeepsTheStridesItPromisedAndMatmulsReadAPaddedCopy) {
  Logits l = MakeLogits();
  loop::Output out;
  out.kind = loop::Output::Kind::kTensor;
  out.tensor = View(l.g, {kRows, kCols}, {kCols, 1});
  l.program.outputs.push_back(out);
  ExpectMatmulsReadAPaddedCopy(l);
}

TEST(PadMatmulRows, AGatherFromTheMatrixKeepsItsLayoutAndMatmulsReadAPaddedCopy) {
  Logits l = MakeLogits();
  Inst index;
  index.op = Opcode::kIndex;
  index.type = loop::ScalarType::kI64;
  index.index = V(0);
  Inst load = testing::LoadAt(l.g);
  load.index = C(0);
  load.dyn = {{0, C(kCols)}};
  testing::AddKernel(l.program, "%6", kRows,
                     {index, load, testing::StoreAt(testing::AddOutput(l.program, kRows), 1)});
  ExpectMatmulsReadAPaddedCopy(l);
}

TEST(PadMatmulRows, AViewAcrossRowsIsReadWhereItIs) {
  Logits l = MakeLogits();
  // Columns 60..159 from row 0: past the end of the first row.
  AddMatmul(l.program, View(l.g, {1, kCols}, {kCols, 1}, 60), View(0, {kCols, 8}, {8, 1}),
            View(3, {1, 8}, {8, 1}));
  const loop::Program padded = fuse::PadMatmulRows(l.program, 16);
  EXPECT_EQ(padded.buffers[l.g].elements, C(kRows * kCols));
  const TensorRef& v = MatmulArgs(padded, 2)[0].tensor;
  EXPECT_EQ(v.buffer, l.g);
  EXPECT_EQ(v.offset, C(60));
}

TEST(PadMatmulRows, AMatrixWrittenBetweenTwoMatmulsIsCopiedForEach) {
  Logits l = MakeLogits();
  l.program.outputs.push_back(
      loop::Output{loop::Output::Kind::kTensor, View(l.g, {kRows, kCols}, {kCols, 1}), C(0)});
  // Kernel 0 again between the matmuls: the second reads the new values.
  loop::Step rewrite;
  rewrite.kernel = 0;
  l.program.steps.insert(l.program.steps.begin() + 2, rewrite);
  const loop::Program padded = fuse::PadMatmulRows(l.program, 16);
  EXPECT_EQ(padded.buffers.size(), l.program.buffers.size() + 2);
  EXPECT_NE(MatmulArgs(padded, 0)[0].tensor.buffer, MatmulArgs(padded, 1)[0].tensor.buffer);
}

TEST(PadMatmulRows, AnUnalignedResultIsWrittenToAlignedRowsAndCopiedToItsPlace) {
  loop::Program p;
  const int32_t x = testing::AddInput(p, kRows * 8);
  const int32_t w = testing::AddInput(p, 8 * kCols);
  const int32_t y = testing::AddOutput(p, kRows * kCols);  // logits: the graph's output
  p.buffers[y].dtype = graph::DType::kBFloat16;
  AddMatmul(p, View(x, {kRows, 8}, {8, 1}), View(w, {8, kCols}, {kCols, 1}),
            View(y, {kRows, kCols}, {kCols, 1}));
  const loop::Program padded = fuse::PadMatmulRows(p, 16);
  ASSERT_EQ(padded.buffers.size(), p.buffers.size() + 1);
  const int32_t result = static_cast<int32_t>(p.buffers.size());
  ASSERT_EQ(padded.steps.size(), 2u);
  const TensorRef& out = padded.steps[0].call.outputs[0];
  EXPECT_EQ(out.buffer, result);
  EXPECT_EQ(out.strides, (std::vector<IndexExpr>{C(kPadded), C(1)}));
  const loop::Kernel& copy = padded.kernels[padded.steps[1].kernel];
  EXPECT_EQ(copy.insts[0].buffer, result);
  EXPECT_EQ(copy.insts[0].index, V(0) * C(kPadded) + V(1));
  EXPECT_EQ(copy.insts[1].buffer, y);
  EXPECT_EQ(copy.insts[1].index, V(0) * C(kCols) + V(1));
  // The operand of rows of 8 elements is left alone: too short to matter.
  EXPECT_EQ(padded.steps[0].call.args[0].tensor.buffer, x);
}

// --- Padded extents -------------------------------------------------------------------------

int32_t AddBf16(int32_t buffer, loop::Program& p) {
  p.buffers[buffer].dtype = graph::DType::kBFloat16;
  return buffer;
}

// Kernel "%1" writing `rows` rows of kCols elements of `g`, row by row.
void WriteRows(loop::Program& p, int32_t g, int64_t rows) {
  Inst store = testing::StoreAt(g, 0);
  store.index = V(0) * C(kCols) + V(1);
  testing::AddKernel(p, "%1", rows, {testing::ConstF32(1), store});
  p.kernels.back().parallel = {C(rows), C(kCols)};
}

// The kernel steps' kernels, in order.
std::vector<const loop::Kernel*> KernelSteps(const loop::Program& p) {
  std::vector<const loop::Kernel*> kernels;
  for (const loop::Step& step : p.steps) {
    if (step.kind == loop::Step::Kind::kKernel) kernels.push_back(&p.kernels[step.kernel]);
  }
  return kernels;
}

const loop::Step& ExternStep(const loop::Program& p, int which) {
  int seen = 0;
  for (const loop::Step& step : p.steps) {
    if (step.kind == loop::Step::Kind::kExtern && seen++ == which) return step;
  }
  static const loop::Step none;
  return none;
}

bool StoresZero(const loop::Kernel& k) {
  return k.insts.size() == 2 && k.insts[0].op == Opcode::kConst && k.insts[0].fimm == 0 &&
         k.insts[1].op == Opcode::kStore;
}

// g (an intermediate kernel 0 writes, [4, 100] bf16) times weights w (an input, [100, 8]):
// K is 100, 200 bytes. The matmul runs with K = 104: g's padded rows hold the extra columns
// and w is copied into 104 rows; both extra parts are zeroed first.
TEST(PadMatmulExtents, AnUnalignedInnerExtentIsRoundedUpWithZeros) {
  loop::Program p;
  const int32_t w = AddBf16(testing::AddInput(p, kCols * 8), p);
  const int32_t g = AddBf16(testing::AddBuffer(p, kRows * kCols), p);
  const int32_t y = AddBf16(testing::AddOutput(p, kRows * 8), p);
  WriteRows(p, g, kRows);
  AddMatmul(p, View(g, {kRows, kCols}, {kCols, 1}), View(w, {kCols, 8}, {8, 1}),
            View(y, {kRows, 8}, {8, 1}));

  const loop::Program padded = fuse::PadMatmulRows(p, 16);
  const loop::Step& mm = ExternStep(padded, 0);
  const TensorRef& a = mm.call.args[0].tensor;
  EXPECT_EQ(a.buffer, g);
  EXPECT_EQ(a.sizes, (std::vector<IndexExpr>{C(kRows), C(kPadded)}));
  EXPECT_EQ(a.strides, (std::vector<IndexExpr>{C(kPadded), C(1)}));
  const TensorRef& b = mm.call.args[1].tensor;
  ASSERT_EQ(b.buffer, static_cast<int32_t>(p.buffers.size()));
  EXPECT_EQ(padded.buffers[b.buffer].elements, C(kPadded * 8));
  EXPECT_EQ(b.sizes, (std::vector<IndexExpr>{C(kPadded), C(8)}));
  EXPECT_EQ(b.strides, (std::vector<IndexExpr>{C(8), C(1)}));
  EXPECT_EQ(mm.call.outputs[0].sizes, (std::vector<IndexExpr>{C(kRows), C(8)}));

  // Kernel 0, zeros in g's extra columns, w's copy, zeros in its extra rows, the matmul.
  const std::vector<const loop::Kernel*> kernels = KernelSteps(padded);
  ASSERT_EQ(kernels.size(), 4u);
  EXPECT_TRUE(StoresZero(*kernels[1]));
  EXPECT_EQ(kernels[1]->insts[1].buffer, g);
  EXPECT_EQ(kernels[1]->parallel, (std::vector<IndexExpr>{C(kRows), C(kPadded - kCols)}));
  EXPECT_EQ(kernels[1]->insts[1].index, V(0) * C(kPadded) + V(1) + C(kCols));
  EXPECT_EQ(kernels[2]->insts[0].buffer, w);
  EXPECT_EQ(kernels[2]->insts[1].buffer, b.buffer);
  EXPECT_TRUE(StoresZero(*kernels[3]));
  EXPECT_EQ(kernels[3]->insts[1].buffer, b.buffer);
  EXPECT_EQ(kernels[3]->parallel, (std::vector<IndexExpr>{C(kPadded - kCols), C(8)}));
  EXPECT_EQ(kernels[3]->insts[1].index, V(0) * C(8) + V(1) + C(kCols * 8));
  EXPECT_EQ(padded.steps.back().kind, loop::Step::Kind::kExtern);
}

// z = g^T @ u with g's rows padded: M is 100, and the result z, an intermediate, grows by
// four rows at its end that nothing reads; no zeros are needed.
TEST(PadMatmulExtents, AnIntermediateResultGrowsPastItsEnd) {
  loop::Program p;
  const int32_t u = AddBf16(testing::AddInput(p, kRows * 8), p);
  const int32_t g = AddBf16(testing::AddBuffer(p, kRows * kCols), p);
  const int32_t z = AddBf16(testing::AddBuffer(p, kCols * 8), p);
  const int32_t s = testing::AddOutput(p, kCols * 8);
  WriteRows(p, g, kRows);
  AddMatmul(p, View(g, {kCols, kRows}, {1, kCols}), View(u, {kRows, 8}, {8, 1}),
            View(z, {kCols, 8}, {8, 1}));
  testing::AddKernel(p, "%3", kCols * 8, {testing::LoadAt(z), testing::StoreAt(s, 0)});

  const loop::Program padded = fuse::PadMatmulRows(p, 16);
  EXPECT_EQ(padded.buffers.size(), p.buffers.size());
  EXPECT_EQ(padded.buffers[z].elements, C(kPadded * 8));
  const loop::Step& mm = ExternStep(padded, 0);
  EXPECT_EQ(mm.call.args[0].tensor.sizes, (std::vector<IndexExpr>{C(kPadded), C(kRows)}));
  EXPECT_EQ(mm.call.args[0].tensor.strides, (std::vector<IndexExpr>{C(1), C(kPadded)}));
  EXPECT_EQ(mm.call.outputs[0].buffer, z);
  EXPECT_EQ(mm.call.outputs[0].sizes, (std::vector<IndexExpr>{C(kPadded), C(8)}));
  EXPECT_EQ(KernelSteps(padded).size(), 2u);  // no zeros, no copies
}

// The same result as a graph output keeps its size: the matmul writes a copy of the rounded
// extents, and a kernel copies the result's rows to their place.
TEST(PadMatmulExtents, AGraphOutputResultIsWrittenToACopyAndCopiedOut) {
  loop::Program p;
  const int32_t u = AddBf16(testing::AddInput(p, kRows * 8), p);
  const int32_t g = AddBf16(testing::AddBuffer(p, kRows * kCols), p);
  const int32_t z = AddBf16(testing::AddOutput(p, kCols * 8), p);
  WriteRows(p, g, kRows);
  AddMatmul(p, View(g, {kCols, kRows}, {1, kCols}), View(u, {kRows, 8}, {8, 1}),
            View(z, {kCols, 8}, {8, 1}));

  const loop::Program padded = fuse::PadMatmulRows(p, 16);
  EXPECT_EQ(padded.buffers[z].elements, C(kCols * 8));
  const TensorRef& out = ExternStep(padded, 0).call.outputs[0];
  ASSERT_EQ(out.buffer, static_cast<int32_t>(p.buffers.size()));
  EXPECT_EQ(out.sizes, (std::vector<IndexExpr>{C(kPadded), C(8)}));
  ASSERT_EQ(padded.steps.back().kind, loop::Step::Kind::kKernel);
  const loop::Kernel& copy = padded.kernels[padded.steps.back().kernel];
  EXPECT_EQ(copy.parallel, (std::vector<IndexExpr>{C(kCols), C(8)}));
  EXPECT_EQ(copy.insts[0].buffer, out.buffer);
  EXPECT_EQ(copy.insts[1].buffer, z);
}

// Two matmuls over the same weights with the same unaligned K share one copy of them (each
// zeroes its extra rows again); a write to the weights between them would take a new one.
TEST(PadMatmulExtents, MatmulsReadingTheSameOperandShareItsCopy) {
  loop::Program p;
  const int32_t w = AddBf16(testing::AddInput(p, kCols * 8), p);
  const int32_t x = AddBf16(testing::AddInput(p, kRows * kCols, kCols + 4), p);
  const int32_t y1 = AddBf16(testing::AddOutput(p, kRows * 8), p);
  const int32_t y2 = AddBf16(testing::AddOutput(p, kRows * 8), p);
  // x's rows are kCols + 4 apart (an input sliced by its producer): copied with the rest.
  AddMatmul(p, View(x, {kRows, kCols}, {kCols + 4, 1}), View(w, {kCols, 8}, {8, 1}),
            View(y1, {kRows, 8}, {8, 1}));
  AddMatmul(p, View(x, {kRows, kCols}, {kCols + 4, 1}), View(w, {kCols, 8}, {8, 1}),
            View(y2, {kRows, 8}, {8, 1}));
  const loop::Program padded = fuse::PadMatmulRows(p, 16);
  const loop::Step& first = ExternStep(padded, 0);
  const loop::Step& second = ExternStep(padded, 1);
  EXPECT_EQ(first.call.args[1].tensor.buffer, second.call.args[1].tensor.buffer);
  EXPECT_NE(first.call.args[1].tensor.buffer, w);
  EXPECT_NE(first.call.args[0].tensor.buffer, x);
  EXPECT_EQ(first.call.args[0].tensor.sizes, (std::vector<IndexExpr>{C(kRows), C(kPadded)}));
}

// y = x @ w^T with 100 columns of y: w^T's rows grow, in a copy of w that keeps w's layout.
// The copy walks w's rows innermost, so that adjacent threads move adjacent elements.
TEST(PadMatmulExtents, ACopyWalksTheContiguousDimensionInnermost) {
  loop::Program p;
  const int32_t x = AddBf16(testing::AddInput(p, kRows * 8), p);
  const int32_t w = AddBf16(testing::AddInput(p, kCols * 8), p);
  const int32_t y = AddBf16(testing::AddBuffer(p, kRows * kCols), p);
  const int32_t s = testing::AddOutput(p, kRows * kCols);
  AddMatmul(p, View(x, {kRows, 8}, {8, 1}), View(w, {8, kCols}, {1, 8}),
            View(y, {kRows, kCols}, {kCols, 1}));
  testing::AddKernel(p, "%3", kRows * kCols, {testing::LoadAt(y), testing::StoreAt(s, 0)});
  const loop::Program padded = fuse::PadMatmulRows(p, 16);
  const loop::Step& mm = ExternStep(padded, 0);
  const TensorRef& b = mm.call.args[1].tensor;
  EXPECT_EQ(b.sizes, (std::vector<IndexExpr>{C(8), C(kPadded)}));
  EXPECT_EQ(b.strides, (std::vector<IndexExpr>{C(1), C(8)}));
  const std::vector<const loop::Kernel*> kernels = KernelSteps(padded);
  ASSERT_GE(kernels.size(), 1u);
  EXPECT_EQ(kernels[0]->parallel, (std::vector<IndexExpr>{C(kCols), C(8)}));
  EXPECT_EQ(kernels[0]->insts[0].buffer, w);
  EXPECT_EQ(kernels[0]->insts[0].index, V(0) * C(8) + V(1));
  EXPECT_EQ(kernels[0]->insts[1].index, V(0) * C(8) + V(1));
}

// A batched matmul over two matrices of [4, 100] rows (an intermediate with rows padded)
// times weights [2, 100, 8] (an input): K grows in place in each matrix's padded rows and
// the weights are copied batch by batch into 104 rows each, the extra ones zeroed.
TEST(PadMatmulExtents, ABatchedMatmulGrowsEachMatrix) {
  loop::Program p;
  const int32_t w = AddBf16(testing::AddInput(p, 2 * kCols * 8), p);
  const int32_t g = AddBf16(testing::AddBuffer(p, 2 * kRows * kCols), p);
  const int32_t y = AddBf16(testing::AddOutput(p, 2 * kRows * 8), p);
  WriteRows(p, g, 2 * kRows);
  loop::Step step;
  step.kind = loop::Step::Kind::kExtern;
  step.call.op = "aten.bmm.default";
  step.call.args = {Tensor(View(g, {2, kRows, kCols}, {kRows * kCols, kCols, 1})),
                    Tensor(View(w, {2, kCols, 8}, {kCols * 8, 8, 1}))};
  step.call.outputs = {View(y, {2, kRows, 8}, {kRows * 8, 8, 1})};
  p.steps.push_back(std::move(step));

  const loop::Program padded = fuse::PadMatmulRows(p, 16);
  const loop::Step& mm = ExternStep(padded, 0);
  const TensorRef& a = mm.call.args[0].tensor;
  EXPECT_EQ(a.buffer, g);
  EXPECT_EQ(a.sizes, (std::vector<IndexExpr>{C(2), C(kRows), C(kPadded)}));
  EXPECT_EQ(a.strides, (std::vector<IndexExpr>{C(kRows * kPadded), C(kPadded), C(1)}));
  const TensorRef& b = mm.call.args[1].tensor;
  EXPECT_NE(b.buffer, w);
  EXPECT_EQ(b.sizes, (std::vector<IndexExpr>{C(2), C(kPadded), C(8)}));
  EXPECT_EQ(b.strides, (std::vector<IndexExpr>{C(kPadded * 8), C(8), C(1)}));
  // Zeros in g's extra columns (both matrices), w's copy, zeros in its extra rows.
  const std::vector<const loop::Kernel*> kernels = KernelSteps(padded);
  ASSERT_EQ(kernels.size(), 4u);
  EXPECT_TRUE(StoresZero(*kernels[1]));
  EXPECT_EQ(kernels[1]->parallel, (std::vector<IndexExpr>{C(2), C(kRows), C(kPadded - kCols)}));
  EXPECT_EQ(kernels[2]->insts[0].buffer, w);
  EXPECT_TRUE(StoresZero(*kernels[3]));
  EXPECT_EQ(kernels[3]->parallel, (std::vector<IndexExpr>{C(2), C(kPadded - kCols), C(8)}));
  EXPECT_EQ(kernels[3]->insts[1].index, V(0) * C(kPadded * 8) + V(1) * C(8) + V(2) + C(kCols * 8));
}

}  // namespace
}  // namespace kiln
