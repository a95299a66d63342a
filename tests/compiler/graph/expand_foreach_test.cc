// Foreach calls written out per element: the optimizer step of the corpus imports without
// one foreach call left, computes what the foreach calls did, and calls that cannot be
// written out stay as they are.

#include "compiler/graph/expand_foreach.h"

#include <gtest/gtest.h>

#include <cmath>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "compiler/graph/import.h"
#include "compiler/interp/interpreter.h"
#include "compiler/interp/random_inputs.h"
#include "tests/testing/test_env.h"

namespace kiln::graph {
namespace {

v1::ValueMeta Vector(int64_t n) {
  v1::ValueMeta m;
  v1::TensorMeta* t = m.mutable_tensor();
  t->add_sizes()->set_value(n);
  t->add_strides()->set_value(1);
  t->set_dtype(v1::DTYPE_FLOAT32);
  t->mutable_device()->set_type("cuda");
  return m;
}

v1::Argument Ref(const std::string& node, int output = -1) {
  v1::Argument a;
  a.mutable_ref()->set_node(node);
  if (output >= 0) a.mutable_ref()->set_output(output);
  return a;
}

v1::Argument List(const std::vector<v1::Argument>& items) {
  v1::Argument a;
  for (const v1::Argument& x : items) *a.mutable_list()->add_items() = x;
  return a;
}

v1::Argument Float(double v) {
  v1::Argument a;
  a.set_float_value(v);
  return a;
}

// Inputs a (4 elements) and b (8 elements), and the two-element foreach call `target` named
// "f" over lists of them, followed by getitems "f0" and "f1" and an output of both.
v1::Graph TwoElementCall(const std::string& target, std::vector<v1::Argument> args) {
  v1::Graph g;
  for (const auto& [name, n] : {std::pair<const char*, int64_t>{"a", 4}, {"b", 8}}) {
    v1::GraphInput* in = g.add_inputs();
    in->set_name(name);
    *in->mutable_meta() = Vector(n);
  }
  v1::Node* f = g.add_nodes();
  f->set_name("f");
  f->set_target(target);
  f->set_multi_output(true);
  for (v1::Argument& a : args) *f->add_args() = std::move(a);
  *f->add_outputs() = Vector(4);
  *f->add_outputs() = Vector(8);
  for (int i = 0; i < 2; ++i) {
    v1::Node* get = g.add_nodes();
    get->set_name("f" + std::to_string(i));
    get->set_target("operator.getitem");
    *get->add_args() = Ref("f");
    get->add_args()->set_int_value(i);
    *get->add_outputs() = f->outputs(i);
  }
  *g.mutable_output() = List({Ref("f0"), Ref("f1")});
  return g;
}

TEST(ExpandForeachTest, EachElementIsACallOfTheElementOp) {
  v1::Graph g = TwoElementCall("aten._foreach_addcmul.Scalar",
                               {List({Ref("a"), Ref("b")}), List({Ref("a"), Ref("b")}),
                                List({Ref("a"), Ref("b")}), Float(0.5)});
  std::optional<v1::Graph> e = ExpandForeach(g);
  ASSERT_TRUE(e.has_value());
  ASSERT_EQ(e->nodes_size(), 2);  // the getitems are gone
  for (int i = 0; i < 2; ++i) {
    const v1::Node& n = e->nodes(i);
    EXPECT_EQ(n.name(), "f[" + std::to_string(i) + "]");
    EXPECT_EQ(n.target(), "aten.addcmul.default");
    EXPECT_FALSE(n.multi_output());
    ASSERT_EQ(n.outputs_size(), 1);
    EXPECT_EQ(n.outputs(0).tensor().sizes(0).value(), i == 0 ? 4 : 8);
    ASSERT_EQ(n.args_size(), 3);
    for (const v1::Argument& a : n.args()) EXPECT_EQ(a.ref().node(), i == 0 ? "a" : "b");
    // addcmul takes its value by keyword only.
    ASSERT_EQ(n.kwargs_size(), 1);
    EXPECT_EQ(n.kwargs(0).name(), "value");
    EXPECT_EQ(n.kwargs(0).value().float_value(), 0.5);
  }
  EXPECT_EQ(e->output().list().items(0).ref().node(), "f[0]");
  EXPECT_EQ(e->output().list().items(1).ref().node(), "f[1]");
  absl::StatusOr<Graph> imported = Import(g);
  ASSERT_TRUE(imported.ok()) << imported.status();
  for (const Node& n : imported->nodes()) {
    if (n.kind == NodeKind::kCall) EXPECT_EQ(imported->target(n), "aten.addcmul.default");
  }
}

TEST(ExpandForeachTest, SharedScalarsAndKeywordsPassToEveryElement) {
  v1::Graph g = TwoElementCall("aten._foreach_add.List",
                               {List({Ref("a"), Ref("b")}), List({Ref("a"), Ref("b")})});
  v1::NamedArgument* alpha = g.mutable_nodes(0)->add_kwargs();
  alpha->set_name("alpha");
  *alpha->mutable_value() = Float(2);
  std::optional<v1::Graph> e = ExpandForeach(g);
  ASSERT_TRUE(e.has_value());
  for (const v1::Node& n : e->nodes()) {
    EXPECT_EQ(n.target(), "aten.add.Tensor");
    ASSERT_EQ(n.kwargs_size(), 1);
    EXPECT_EQ(n.kwargs(0).name(), "alpha");
  }
  // A reference to an element of the call, without getitem, names the element's call.
  *g.mutable_output() = List({Ref("f", 1)});
  e = ExpandForeach(g);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->output().list().items(0).ref().node(), "f[1]");
  EXPECT_FALSE(e->output().list().items(0).ref().has_output());
}

TEST(ExpandForeachTest, CallsThatCannotBeWrittenOutStay) {
  const v1::Graph add =
      TwoElementCall("aten._foreach_add.Scalar", {List({Ref("a"), Ref("b")}), Float(1)});
  ASSERT_TRUE(ExpandForeach(add).has_value());
  // The whole result used other than by getitem.
  v1::Graph whole = add;
  *whole.mutable_output() = List({Ref("f")});
  EXPECT_FALSE(ExpandForeach(whole).has_value());
  // A list shorter than the results.
  v1::Graph short_list = TwoElementCall("aten._foreach_add.Scalar", {List({Ref("a")}), Float(1)});
  EXPECT_FALSE(ExpandForeach(short_list).has_value());
  // An element call's name already taken.
  v1::Graph taken = add;
  taken.mutable_nodes(1)->set_name("f[1]");
  taken.mutable_output()->mutable_list()->mutable_items(0)->mutable_ref()->set_node("f[1]");
  EXPECT_FALSE(ExpandForeach(taken).has_value());
  // Not a foreach op.
  v1::Graph other = add;
  other.mutable_nodes(0)->set_target("aten.split.Tensor");
  EXPECT_FALSE(ExpandForeach(other).has_value());
}

// The compiled AdamW step of the corpus (28 parameters): no foreach call and no getitem
// remains, and the written-out graph computes exactly what the foreach calls did.
TEST(ExpandForeachTest, TheOptimizerStepComputesWhatItsForeachCallsDid) {
  const v1::Graph step = testing::LoadSharedGraph("adamw_step.infer.json.gz");
  ASSERT_GT(step.nodes_size(), 0);
  std::optional<v1::Graph> e = ExpandForeach(step);
  ASSERT_TRUE(e.has_value());
  for (const v1::Node& n : e->nodes()) {
    EXPECT_FALSE(absl::StartsWith(n.target(), "aten._foreach_")) << n.name();
    EXPECT_NE(n.target(), "operator.getitem") << n.name();
  }
  absl::StatusOr<Graph> imported = Import(step);
  ASSERT_TRUE(imported.ok()) << imported.status();
  EXPECT_EQ(imported->num_nodes(), static_cast<uint32_t>(e->inputs_size() + e->nodes_size()));

  absl::StatusOr<std::vector<interp::Value>> inputs = interp::MakeRandomInputs(step);
  ASSERT_TRUE(inputs.ok()) << inputs.status();
  absl::StatusOr<std::vector<interp::Value>> want = interp::Run(step, *inputs);
  absl::StatusOr<std::vector<interp::Value>> got = interp::Run(*e, *inputs);
  ASSERT_TRUE(want.ok()) << want.status();
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), want->size());
  for (size_t i = 0; i < want->size(); ++i) {
    const auto* w = std::get_if<interp::Tensor>(&(*want)[i]);
    const auto* g = std::get_if<interp::Tensor>(&(*got)[i]);
    ASSERT_TRUE(w != nullptr && g != nullptr) << "output " << i;
    ASSERT_EQ(w->numel(), g->numel()) << "output " << i;
    const std::vector<int64_t> wi = w->ElementIndices(), gi = g->ElementIndices();
    for (size_t k = 0; k < wi.size(); ++k) {
      const double a = w->ReadDouble(wi[k]), b = g->ReadDouble(gi[k]);
      ASSERT_TRUE(a == b || (std::isnan(a) && std::isnan(b))) << "output " << i << "[" << k << "]";
    }
  }
}

}  // namespace
}  // namespace kiln::graph
