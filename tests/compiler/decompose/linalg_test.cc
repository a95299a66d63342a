// addmm and baddbmm: a library product with an epilogue that fuses, or one library call where
// the result is stored anyway.

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compiler/canon/canonical_graph.h"
#include "compiler/decompose/decompose.h"
#include "compiler/graph/import.h"

namespace kiln::decompose {
namespace {

v1::ValueMeta Meta(const std::vector<int64_t>& sizes, v1::DType dtype) {
  v1::ValueMeta meta;
  v1::TensorMeta* t = meta.mutable_tensor();
  int64_t stride = 1;
  std::vector<int64_t> strides(sizes.size());
  for (size_t d = sizes.size(); d-- > 0;) {
    strides[d] = stride;
    stride *= sizes[d];
  }
  for (size_t d = 0; d < sizes.size(); ++d) {
    t->add_sizes()->set_value(sizes[d]);
    t->add_strides()->set_value(strides[d]);
  }
  t->mutable_storage_offset()->set_value(0);
  t->set_dtype(dtype);
  t->mutable_device()->set_type("cuda");
  return meta;
}

// bias[n], a[m, k], b[k, n] -> y = addmm(bias, a, b, beta=`beta`), then `after` (an op on y
// alone, or "" for none), whose result the graph returns.
class AddmmGraph {
 public:
  AddmmGraph(int64_t m, int64_t k, int64_t n, v1::DType dtype, double beta = 1)
      : m_(m), n_(n), dtype_(dtype) {
    Input("bias", {n}), Input("a", {m, k}), Input("b", {k, n});
    v1::Node* y = Node("y", "aten.addmm.default", {"bias", "a", "b"}, {m, n});
    if (beta != 1) {
      v1::NamedArgument* kw = y->add_kwargs();
      kw->set_name("beta");
      kw->mutable_value()->set_float_value(beta);
    }
    last_ = "y";
  }
  // Applies `target` to the last value (a view when `sizes` differ).
  AddmmGraph& Then(const std::string& target, const std::vector<std::string>& more_args = {},
                   std::vector<int64_t> sizes = {}) {
    std::vector<std::string> args = {last_};
    args.insert(args.end(), more_args.begin(), more_args.end());
    const std::string name = absl::StrCat("n", graph_.nodes_size());
    Node(name, target, args, sizes.empty() ? std::vector<int64_t>{m_, n_} : sizes);
    last_ = name;
    return *this;
  }
  AddmmGraph& Input(const std::string& name, const std::vector<int64_t>& sizes) {
    v1::GraphInput* in = graph_.add_inputs();
    in->set_name(name);
    *in->mutable_meta() = Meta(sizes, dtype_);
    return *this;
  }
  // The decomposition of the graph returning its last value.
  PrimGraph Decomposed() {
    v1::Graph g = graph_;
    g.mutable_output()->mutable_list()->add_items()->mutable_ref()->set_node(last_);
    absl::StatusOr<graph::Graph> imported = graph::Import(g);
    EXPECT_TRUE(imported.ok()) << imported.status();
    if (!imported.ok()) return {};
    const canon::CanonicalGraph canonical(*imported);
    absl::StatusOr<PrimGraph> p = Decompose(*imported, canonical);
    EXPECT_TRUE(p.ok()) << p.status();
    return p.ok() ? *std::move(p) : PrimGraph{};
  }

 private:
  v1::Node* Node(const std::string& name, const std::string& target,
                 const std::vector<std::string>& args, const std::vector<int64_t>& sizes) {
    v1::Node* node = graph_.add_nodes();
    node->set_name(name);
    node->set_target(target);
    for (const std::string& a : args) node->add_args()->mutable_ref()->set_node(a);
    *node->add_outputs() = Meta(sizes, dtype_);
    return node;
  }

  int64_t m_, n_;
  v1::DType dtype_;
  v1::Graph graph_;
  std::string last_;
};

// The ops of the graph's extern steps, in order.
std::vector<std::string> Externs(const PrimGraph& p) {
  std::vector<std::string> out;
  for (const Node& n : p.nodes) {
    if (n.kind == Node::Kind::kExtern) out.push_back(n.op);
  }
  return out;
}

using Ops = std::vector<std::string>;

TEST(LinalgTest, AnAddmmTheGraphReturnsIsOneLibraryCall) {
  const PrimGraph p = AddmmGraph(16, 32, 24, v1::DTYPE_FLOAT32).Decomposed();
  EXPECT_EQ(Externs(p), Ops{"aten.addmm.default"});
  for (const Node& n : p.nodes) {
    if (n.kind != Node::Kind::kExtern) continue;
    EXPECT_EQ(n.args.size(), 3u);
    EXPECT_TRUE(n.kwargs.empty()) << "beta and alpha of 1 are left to their defaults";
  }
}

TEST(LinalgTest, ABetaOtherThanOneIsPassedOn) {
  const PrimGraph p = AddmmGraph(16, 32, 24, v1::DTYPE_FLOAT32, 0.5).Decomposed();
  ASSERT_EQ(Externs(p), Ops{"aten.addmm.default"});
  for (const Node& n : p.nodes) {
    if (n.kind != Node::Kind::kExtern) continue;
    ASSERT_EQ(n.kwargs.size(), 1u);
    EXPECT_EQ(n.kwargs[0].first, "beta");
    EXPECT_EQ(n.kwargs[0].second.value.float_value(), 0.5);
  }
}

TEST(LinalgTest, AnAddmmOnlyAPointwiseOpReadsKeepsItsBiasInTheEpilogue) {
  const PrimGraph p =
      AddmmGraph(16, 32, 24, v1::DTYPE_FLOAT32).Then("aten.relu.default").Decomposed();
  EXPECT_EQ(Externs(p), Ops{"aten.mm.default"});
}

TEST(LinalgTest, AnAddmmALibraryCallReadsThroughAViewIsOneLibraryCall) {
  AddmmGraph g(16, 32, 24, v1::DTYPE_FLOAT32);
  g.Input("w", {16, 8});
  g.Then("aten.t.default", {}, {24, 16}).Then("aten.mm.default", {"w"}, {24, 8});
  EXPECT_EQ(Externs(g.Decomposed()), (Ops{"aten.addmm.default", "aten.mm.default"}));
}

TEST(LinalgTest, A16BitAddmmWithRowsTheLibraryWouldHavePaddedIsAProduct) {
  // 24 bf16 elements are 48 bytes, a multiple of 16; 20 are not.
  EXPECT_EQ(Externs(AddmmGraph(16, 32, 24, v1::DTYPE_BFLOAT16).Decomposed()),
            Ops{"aten.addmm.default"});
  EXPECT_EQ(Externs(AddmmGraph(16, 32, 20, v1::DTYPE_BFLOAT16).Decomposed()),
            Ops{"aten.mm.default"});
  EXPECT_EQ(Externs(AddmmGraph(16, 36, 24, v1::DTYPE_BFLOAT16).Decomposed()),
            Ops{"aten.mm.default"});
  EXPECT_EQ(Externs(AddmmGraph(16, 36, 20, v1::DTYPE_FLOAT32).Decomposed()),
            Ops{"aten.addmm.default"});
}

}  // namespace
}  // namespace kiln::decompose
