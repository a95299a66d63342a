// Extents of tensor metadata in their storage: the int64 index range every tensor must stay
// in, and views that must stay within their base.

#include "compiler/graph/extent.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <limits>

#include "compiler/graph/import.h"
#include "proto/error_detail.h"
#include "tests/compiler/graph_testing.h"

namespace kiln::graph {
namespace {

using ::testing::HasSubstr;

std::vector<SymInt> Consts(std::vector<int64_t> values) {
  std::vector<SymInt> out;
  for (int64_t v : values) out.push_back(SymInt::Constant(v));
  return out;
}

TEST(ExtentTest, FirstAndLastElement) {
  const Extent e = ExtentOf(Consts({2, 3}), Consts({3, 1}), SymInt::Constant(4));
  EXPECT_TRUE(e.known);
  EXPECT_FALSE(e.empty);
  EXPECT_EQ(e.first, 4);
  EXPECT_EQ(e.last, 9);
  // A broadcast (stride 0) dim reaches nothing new; a scalar reaches its offset.
  EXPECT_EQ(ExtentOf(Consts({5, 3}), Consts({0, 1}), SymInt::Constant(0)).last, 2);
  EXPECT_EQ(ExtentOf({}, {}, SymInt::Constant(7)).last, 7);
  EXPECT_TRUE(ExtentOf(Consts({0, 3}), Consts({3, 1}), SymInt::Constant(0)).empty);
  std::vector<SymInt> symbolic = Consts({2, 3});
  symbolic[0] = SymInt::Symbolic(0);
  EXPECT_FALSE(ExtentOf(symbolic, Consts({3, 1}), SymInt::Constant(0)).known);
  EXPECT_FALSE(ExtentOf(Consts({2}), Consts({1}), SymInt::Symbolic(0)).known);
}

TEST(ExtentTest, ByteSizesAndOffsetsAreInt64) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  // 2^62 elements: a count that fits, 2^65 bytes of float64 that do not.
  absl::Status s = CheckIndexRange("n", "meta", Consts({int64_t{1} << 31, int64_t{1} << 31}),
                                   Consts({int64_t{1} << 31, 1}), SymInt::Constant(0), 8);
  std::optional<v1::ErrorDetail> d = ErrorDetailOf(s);
  ASSERT_TRUE(d.has_value()) << s;
  EXPECT_EQ(d->violations(0).field(), "meta.sizes");
  EXPECT_THAT(d->violations(0).description(), HasSubstr("of 8 bytes overflow int64 byte sizes"));
  // Two elements, the last at an index whose byte offset does not fit.
  s = CheckIndexRange("n", "meta", Consts({2}), Consts({kMax / 4}), SymInt::Constant(0), 8);
  d = ErrorDetailOf(s);
  ASSERT_TRUE(d.has_value()) << s;
  EXPECT_EQ(d->violations(0).field(), "meta.strides[0]");
  // The same metadata of bytes fits, and an empty tensor has no bytes to overflow.
  EXPECT_TRUE(
      CheckIndexRange("n", "meta", Consts({2}), Consts({kMax / 4}), SymInt::Constant(0), 1).ok());
  EXPECT_TRUE(
      CheckIndexRange("n", "meta", Consts({0, kMax}), Consts({1, 1}), SymInt::Constant(0), 8).ok());
}

TEST(ExtentTest, IndexRangeIsInt64) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  EXPECT_TRUE(
      CheckIndexRange("n", "meta", Consts({4, 8}), Consts({8, 1}), SymInt::Constant(0)).ok());
  absl::Status s =
      CheckIndexRange("n", "meta", Consts({kMax / 2, 4}), Consts({1, 1}), SymInt::Constant(0));
  std::optional<v1::ErrorDetail> d = ErrorDetailOf(s);
  ASSERT_TRUE(d.has_value()) << s;
  EXPECT_EQ(d->violations(0).field(), "meta.sizes[1]");
  EXPECT_THAT(d->violations(0).description(), HasSubstr("element count overflows"));
  s = CheckIndexRange("n", "meta", Consts({3}), Consts({kMax / 2}), SymInt::Constant(2));
  d = ErrorDetailOf(s);
  ASSERT_TRUE(d.has_value()) << s;
  EXPECT_EQ(d->violations(0).node(), "n");
  EXPECT_EQ(d->violations(0).field(), "meta.strides[0]");
  // Empty and symbolic metadata reach nothing that can be checked here.
  EXPECT_TRUE(
      CheckIndexRange("n", "meta", Consts({0, 3}), Consts({kMax, 1}), SymInt::Constant(0)).ok());
  EXPECT_TRUE(CheckIndexRange("n", "meta", Consts({3}), Consts({kMax}), SymInt::Symbolic(0)).ok());
}

// x [4, 8] and an as_strided view of it with `sizes`, `strides` and `offset`. Import does
// not hold as_strided to its base (it may reach anywhere in the storage), so the graph
// imports either way and CheckViewInBase can be asked directly.
absl::StatusOr<Graph> AsStrided(std::vector<int64_t> sizes, std::vector<int64_t> strides,
                                int64_t offset) {
  v1::Graph g = testing::SmallGraph();
  v1::Node* n = g.add_nodes();
  n->set_name("v");
  n->set_target("aten.as_strided.default");
  n->add_args()->mutable_ref()->set_node("x");
  v1::TensorMeta* t = n->add_outputs()->mutable_tensor();
  *t = g.inputs(0).meta().tensor();
  t->clear_sizes();
  t->clear_strides();
  for (int64_t v : sizes) t->add_sizes()->set_value(v);
  for (int64_t v : strides) t->add_strides()->set_value(v);
  t->mutable_storage_offset()->set_value(offset);
  v1::Argument* size_arg = n->add_args();
  for (int64_t v : sizes) size_arg->mutable_list()->add_items()->set_int_value(v);
  v1::Argument* stride_arg = n->add_args();
  for (int64_t v : strides) stride_arg->mutable_list()->add_items()->set_int_value(v);
  n->add_args()->set_int_value(offset);
  return Import(g);
}

TEST(ExtentTest, ViewsStayWithinTheirBase) {
  absl::StatusOr<Graph> inside = AsStrided({4, 4}, {8, 2}, 1);
  ASSERT_TRUE(inside.ok()) << inside.status();
  const Node& view = inside->node(inside->num_nodes() - 1);
  ASSERT_NE(view.op, nullptr);
  EXPECT_TRUE(CheckViewInBase(*inside, view).ok());

  absl::StatusOr<Graph> outside = AsStrided({4, 4}, {8, 2}, 2);  // reaches element 32
  ASSERT_TRUE(outside.ok()) << outside.status();
  const absl::Status s = CheckViewInBase(*outside, outside->node(outside->num_nodes() - 1));
  std::optional<v1::ErrorDetail> d = ErrorDetailOf(s);
  ASSERT_TRUE(d.has_value()) << s;
  EXPECT_EQ(d->violations(0).node(), "v");
  EXPECT_EQ(d->violations(0).field(), "outputs[0]");
  EXPECT_THAT(d->violations(0).description(),
              HasSubstr("reaches elements [2, 32] of the storage, outside [0, 31] that its base "
                        "\"x\" reaches"));

  // Empty views reach nothing.
  absl::StatusOr<Graph> empty = AsStrided({0, 4}, {8, 2}, 100);
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_TRUE(CheckViewInBase(*empty, empty->node(empty->num_nodes() - 1)).ok());
}

}  // namespace
}  // namespace kiln::graph
