// Strided tensors and view ops: views share storage and only change metadata.

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "absl/strings/match.h"
#include "tests/compiler/interp/test_util.h"

namespace kiln::interp {
namespace {

using testing::I;
using testing::Is;
using testing::Run1;
using testing::RunAll;
using testing::T;

Tensor Iota(std::vector<int64_t> sizes, v1::DType dtype = v1::DTYPE_FLOAT32) {
  std::vector<double> v(static_cast<size_t>(NumElements(sizes)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>(i);
  return T(std::move(sizes), v, dtype);
}

TEST(Tensor, ContiguityAndElementOrder) {
  const Tensor x = Iota({2, 3});
  EXPECT_TRUE(x.is_contiguous());
  const Tensor t = x.AsStrided({3, 2}, {1, 3}, 0);
  EXPECT_FALSE(t.is_contiguous());
  EXPECT_TRUE(t.is_non_overlapping_and_dense());
  EXPECT_EQ(t.ToDoubles(), (std::vector<double>{0, 3, 1, 4, 2, 5}));
  const Tensor e = x.AsStrided({2, 3, 4}, {3, 1, 0}, 0);
  EXPECT_FALSE(e.is_non_overlapping_and_dense());
  EXPECT_EQ(Tensor::Zeros({0, 3}, v1::DTYPE_FLOAT32).numel(), 0);
}

TEST(Tensor, IntegerStorageIsExact) {
  const int64_t big = (int64_t{1} << 62) + 1;
  const Tensor t = I({2}, {big, -big});
  EXPECT_EQ(t.ToInts(), (std::vector<int64_t>{big, -big}));
  const Tensor s = Run1("aten.add.Tensor", {t, I({}, {1})});
  EXPECT_EQ(s.ToInts(), (std::vector<int64_t>{big + 1, -big + 1}));
}

// Bytes as PyTorch stores a contiguous tensor (little-endian), as captures record them.
TEST(Tensor, FromBytes) {
  const float f[3] = {1.5f, -0.1f, 3e38f};
  absl::StatusOr<Tensor> t = TensorFromBytes(
      {3}, v1::DTYPE_FLOAT32, absl::string_view(reinterpret_cast<const char*>(f), 12));
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->ToDoubles(), (std::vector<double>{1.5, static_cast<double>(-0.1f), 3e38f}));
  // float16: 1.0, the smallest subnormal 2^-24, -inf and 65504; bfloat16: 1.0 and -2.5.
  const uint16_t h[4] = {0x3C00, 0x0001, 0xFC00, 0x7BFF};
  t = TensorFromBytes({2, 2}, v1::DTYPE_FLOAT16,
                      absl::string_view(reinterpret_cast<const char*>(h), 8));
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->ToDoubles(), (std::vector<double>{1, std::ldexp(1.0, -24),
                                                 -std::numeric_limits<double>::infinity(), 65504}));
  const uint16_t bf[2] = {0x3F80, 0xC020};
  t = TensorFromBytes({2}, v1::DTYPE_BFLOAT16,
                      absl::string_view(reinterpret_cast<const char*>(bf), 4));
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->ToDoubles(), (std::vector<double>{1, -2.5}));
  const int64_t big[2] = {(int64_t{1} << 62) + 1, -7};
  t = TensorFromBytes({2}, v1::DTYPE_INT64,
                      absl::string_view(reinterpret_cast<const char*>(big), 16));
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->ToInts(), (std::vector<int64_t>{big[0], -7}));
  t = TensorFromBytes({3}, v1::DTYPE_BOOL, absl::string_view("\x01\x00\x01", 3));
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->ToInts(), (std::vector<int64_t>{1, 0, 1}));
  EXPECT_EQ(t->dtype(), v1::DTYPE_BOOL);
  EXPECT_FALSE(TensorFromBytes({2}, v1::DTYPE_FLOAT32, "abc").ok());
  EXPECT_FALSE(TensorFromBytes({1}, v1::DTYPE_COMPLEX64, "abcdefgh").ok());
}

TEST(Views, ShareStorageAndFollowPyTorchStrides) {
  const Tensor x = Iota({2, 3, 4});
  const Tensor tr = Run1("aten.transpose.int", {x, 0, 2});
  EXPECT_TRUE(tr.SharesStorageWith(x));
  EXPECT_EQ(tr.sizes(), (std::vector<int64_t>{4, 3, 2}));
  EXPECT_EQ(tr.strides(), (std::vector<int64_t>{1, 4, 12}));
  const Tensor p = Run1("aten.permute.default", {x, Arg::Ints({2, 0, -2})});
  EXPECT_EQ(p.strides(), (std::vector<int64_t>{1, 12, 4}));
  const Tensor sl = Run1("aten.slice.Tensor", {x, 2, 1, 100, 2});
  EXPECT_EQ(sl.sizes(), (std::vector<int64_t>{2, 3, 2}));
  EXPECT_EQ(sl.strides(), (std::vector<int64_t>{12, 4, 2}));
  EXPECT_EQ(sl.storage_offset(), 1);
  EXPECT_TRUE(Is(Run1("aten.slice.Tensor", {x, 0, -1}), {1, 3, 4},
                 Run1("aten.select.int", {x, 0, 1}).ToDoubles()));
  const Tensor sel = Run1("aten.select.int", {x, 1, -1});
  EXPECT_EQ(sel.storage_offset(), 8);
  EXPECT_EQ(sel.strides(), (std::vector<int64_t>{12, 1}));
  const Tensor ex = Run1("aten.expand.default", {Iota({3, 1}), Arg::Ints({2, -1, 4})});
  EXPECT_EQ(ex.strides(), (std::vector<int64_t>{0, 1, 0}));
  const Tensor un = Run1("aten.unsqueeze.default", {x, -1});
  EXPECT_EQ(un.sizes(), (std::vector<int64_t>{2, 3, 4, 1}));
  EXPECT_EQ(un.strides(), (std::vector<int64_t>{12, 4, 1, 1}));
  const Tensor sq = Run1("aten.squeeze.dim", {un, 3});
  EXPECT_EQ(sq.sizes(), x.sizes());
  EXPECT_EQ(Run1("aten.squeeze.dim", {x, 0}).sizes(), x.sizes());  // size 2: no-op
  EXPECT_EQ(Run1("aten.t.default", {Iota({5})}).sizes(), (std::vector<int64_t>{5}));
  // Empty slices.
  EXPECT_EQ(Run1("aten.slice.Tensor", {x, 1, 2, 1}).sizes(), (std::vector<int64_t>{2, 0, 4}));
}

TEST(Views, ViewComputesStridesOrRefuses) {
  const Tensor x = Iota({4, 6});
  const Tensor v = Run1("aten.view.default", {x, Arg::Ints({2, -1, 3})});
  EXPECT_EQ(v.sizes(), (std::vector<int64_t>{2, 4, 3}));
  EXPECT_TRUE(v.SharesStorageWith(x));
  // A transposed tensor can split a dim but not merge non-adjacent ones.
  const Tensor t = Run1("aten.t.default", {x});
  const Tensor split = Run1("aten.view.default", {t, Arg::Ints({2, 3, 4})});
  EXPECT_EQ(split.strides(), (std::vector<int64_t>{3, 1, 6}));
  absl::StatusOr<std::vector<Value>> bad = RunOp("aten.view.default", {t, Arg::Ints({24})});
  EXPECT_FALSE(bad.ok());
  EXPECT_TRUE(absl::StrContains(bad.status().message(), "reshape"));
  const Tensor r = Run1("aten.reshape.default", {t, Arg::Ints({24})});
  EXPECT_FALSE(r.SharesStorageWith(x));
  EXPECT_EQ(r.ToDoubles(), t.ToDoubles());
  EXPECT_TRUE(Run1("aten._unsafe_view.default", {x, Arg::Ints({24})}).SharesStorageWith(x));
  EXPECT_FALSE(RunOp("aten.view.default", {x, Arg::Ints({5, -1})}).ok());
}

TEST(Views, SplitUnbindAsStridedAndAliases) {
  const Tensor x = Iota({7, 2});
  const std::vector<Value> parts = RunAll("aten.split.Tensor", {x, 3});
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(std::get<Tensor>(parts[2]).sizes(), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(std::get<Tensor>(parts[2]).storage_offset(), 12);
  const std::vector<Value> ws = RunAll("aten.split_with_sizes.default", {x, Arg::Ints({1, 1}), 1});
  ASSERT_EQ(ws.size(), 2u);
  EXPECT_EQ(std::get<Tensor>(ws[1]).ToDoubles(), (std::vector<double>{1, 3, 5, 7, 9, 11, 13}));
  EXPECT_FALSE(RunOp("aten.split_with_sizes.default", {x, Arg::Ints({3, 3})}).ok());
  const Tensor as = Run1("aten.as_strided.default", {x, Arg::Ints({2, 2}), Arg::Ints({1, 2}), 3});
  EXPECT_EQ(as.ToDoubles(), (std::vector<double>{3, 5, 4, 6}));
  EXPECT_FALSE(RunOp("aten.as_strided.default", {x, Arg::Ints({20}), Arg::Ints({1})}).ok());
  EXPECT_TRUE(Run1("aten.detach.default", {x}).SharesStorageWith(x));
  EXPECT_TRUE(Run1("aten.alias.default", {x}).SharesStorageWith(x));
  EXPECT_EQ(RunAll("aten.unbind.int", {x, 1}).size(), 2u);
}

TEST(Views, Chunk) {
  const Tensor x = Iota({7, 2});
  const std::vector<Value> parts = RunAll("aten.chunk.default", {x, 3});
  ASSERT_EQ(parts.size(), 3u);  // pieces of ceil(7 / 3) = 3 rows
  EXPECT_EQ(std::get<Tensor>(parts[1]).sizes(), (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(std::get<Tensor>(parts[1]).storage_offset(), 6);
  EXPECT_EQ(std::get<Tensor>(parts[2]).sizes(), (std::vector<int64_t>{1, 2}));
  EXPECT_TRUE(std::get<Tensor>(parts[2]).SharesStorageWith(x));
  const std::vector<Value> cols = RunAll("aten.chunk.default", {x, 2, -1});
  ASSERT_EQ(cols.size(), 2u);
  EXPECT_EQ(std::get<Tensor>(cols[1]).ToDoubles(), (std::vector<double>{1, 3, 5, 7, 9, 11, 13}));
  // Fewer pieces than asked when the dim is short; as many empty ones when it is empty.
  EXPECT_EQ(RunAll("aten.chunk.default", {Iota({2}), 5}).size(), 2u);
  const std::vector<Value> empty =
      RunAll("aten.chunk.default", {Tensor::Zeros({0, 2}, v1::DTYPE_FLOAT32), 3});
  ASSERT_EQ(empty.size(), 3u);
  EXPECT_EQ(std::get<Tensor>(empty[2]).sizes(), (std::vector<int64_t>{0, 2}));
  EXPECT_FALSE(RunOp("aten.chunk.default", {x, 0}).ok());
  EXPECT_FALSE(RunOp("aten.chunk.default", {T({}, {1}), 1}).ok());
}

TEST(Views, Diagonal) {
  const Tensor x = Iota({3, 4});  // element (r, c) is 4r + c
  const Tensor d = Run1("aten.diagonal.default", {x});
  EXPECT_TRUE(d.SharesStorageWith(x));
  EXPECT_EQ(d.strides(), (std::vector<int64_t>{5}));
  EXPECT_EQ(d.ToDoubles(), (std::vector<double>{0, 5, 10}));
  const Tensor above = Run1("aten.diagonal.default", {x, 1});
  EXPECT_EQ(above.storage_offset(), 1);
  EXPECT_EQ(above.ToDoubles(), (std::vector<double>{1, 6, 11}));
  const Tensor below = Run1("aten.diagonal.default", {x, -1});
  EXPECT_EQ(below.storage_offset(), 4);
  EXPECT_EQ(below.ToDoubles(), (std::vector<double>{4, 9}));
  const Tensor off = Run1("aten.diagonal.default", {x, 5});
  EXPECT_EQ(off.sizes(), (std::vector<int64_t>{0}));
  EXPECT_EQ(off.storage_offset(), 0);
  // Negative dims; the diagonal becomes the last dim, after the batch dim.
  const Tensor b = Run1("aten.diagonal.default", {Iota({2, 3, 3}), 0, -1, -2});
  EXPECT_EQ(b.sizes(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(b.strides(), (std::vector<int64_t>{9, 4}));
  EXPECT_EQ(b.ToDoubles(), (std::vector<double>{0, 4, 8, 9, 13, 17}));
  // dim1 = columns, dim2 = rows: offset 1 walks row = column + 1.
  EXPECT_EQ(Run1("aten.diagonal.default", {Iota({2, 3}), 1, 1, 0}).ToDoubles(),
            (std::vector<double>{3}));
  EXPECT_FALSE(RunOp("aten.diagonal.default", {x, 0, 1, -1}).ok());
}

TEST(Views, Unfold) {
  const Tensor u = Run1("aten.unfold.default", {Iota({7}), 0, 3, 2});
  EXPECT_EQ(u.sizes(), (std::vector<int64_t>{3, 3}));
  EXPECT_EQ(u.strides(), (std::vector<int64_t>{2, 1}));
  EXPECT_EQ(u.ToDoubles(), (std::vector<double>{0, 1, 2, 2, 3, 4, 4, 5, 6}));
  const Tensor rows = Run1("aten.unfold.default", {Iota({2, 5}), -1, 2, 3});
  EXPECT_EQ(rows.sizes(), (std::vector<int64_t>{2, 2, 2}));
  EXPECT_EQ(rows.strides(), (std::vector<int64_t>{5, 3, 1}));
  EXPECT_EQ(rows.ToDoubles(), (std::vector<double>{0, 1, 3, 4, 5, 6, 8, 9}));
  const Tensor scalar = Run1("aten.unfold.default", {T({}, {4}), 0, 1, 1});
  EXPECT_EQ(scalar.sizes(), (std::vector<int64_t>{1}));
  EXPECT_EQ(scalar.ToDoubles(), (std::vector<double>{4}));
  EXPECT_FALSE(RunOp("aten.unfold.default", {Iota({3}), 0, 4, 1}).ok());
  EXPECT_FALSE(RunOp("aten.unfold.default", {Iota({3}), 0, 2, 0}).ok());
}

TEST(Views, CopyWritesThroughViews) {
  Tensor x = Iota({2, 3});
  const Tensor col = Run1("aten.select.int", {x, 1, 1});
  const Tensor r = Run1("aten.copy_.default", {col, T({}, {9.0})});
  EXPECT_TRUE(r.SharesStorageWith(x));
  EXPECT_EQ(x.ToDoubles(), (std::vector<double>{0, 9, 2, 3, 9, 5}));
}

TEST(Views, ClonePreservesDenseLayouts) {
  const Tensor x = Run1("aten.t.default", {Iota({2, 3})});
  const Tensor c = Run1("aten.clone.default", {x});
  EXPECT_EQ(c.strides(), x.strides());
  EXPECT_FALSE(c.SharesStorageWith(x));
  const Tensor cc =
      Run1("aten.clone.default", {x}, {{"memory_format", Arg(v1::MEMORY_FORMAT_CONTIGUOUS)}});
  EXPECT_TRUE(cc.is_contiguous());
  const Tensor nhwc = Run1("aten._to_copy.default", {Iota({1, 2, 2, 2})},
                           {{"memory_format", Arg(v1::MEMORY_FORMAT_CHANNELS_LAST)}});
  EXPECT_EQ(nhwc.strides(), (std::vector<int64_t>{8, 1, 4, 2}));
  const Tensor sliced = Run1("aten.slice.Tensor", {Iota({4}), 0, 0, 4, 2});
  EXPECT_TRUE(Run1("aten.clone.default", {sliced}).is_contiguous());
}

}  // namespace
}  // namespace kiln::interp
