// Import of kiln.v1.Graph into the IR: real graphs import, and each kind of bad input is
// INVALID_ARGUMENT naming the node and field at fault.

#include "compiler/graph/import.h"

#include <gmock/gmock.h>
#include <google/protobuf/text_format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>

#include "proto/error_detail.h"
#include "tests/compiler/graph_testing.h"

namespace kiln::graph {
namespace {

using ::testing::HasSubstr;

TEST(ImportTest, EverySharedGraphImports) {
  for (const auto& [name, proto] : testing::LoadSharedGraphs()) {
    absl::StatusOr<Graph> g = Import(proto);
    ASSERT_TRUE(g.ok()) << name << ": " << g.status();
    EXPECT_EQ(g->num_inputs(), static_cast<uint32_t>(proto.inputs_size())) << name;
    EXPECT_EQ(g->num_nodes(), static_cast<uint32_t>(proto.inputs_size() + proto.nodes_size()));
    for (uint32_t i = g->num_inputs(); i < g->num_nodes(); ++i) {
      const Node& n = g->node(i);
      EXPECT_NE(n.schema, nullptr) << name << ": " << g->target(n) << " has no schema";
      if (n.schema != nullptr) EXPECT_EQ(n.num_args, n.schema->params.size());
    }
  }
}

TEST(ImportTest, BindsKeywordsAndFillsDefaults) {
  absl::StatusOr<Graph> g = Import(testing::LoadSharedGraph("nanogpt_fp32.fw.json"));
  ASSERT_TRUE(g.ok()) << g.status();
  bool saw_gelu = false, saw_arange = false;
  for (const Node& n : g->nodes()) {
    if (n.kind != NodeKind::kCall) continue;
    auto args = g->args(n);
    if (g->target(n) == "aten.gelu.default") {
      ASSERT_EQ(args.size(), 2u);
      EXPECT_EQ(args[1].kind, ArgKind::kString);
      EXPECT_EQ(g->str(args[1].string_id), "tanh");
      saw_gelu = true;
    }
    if (g->target(n) == "aten.arange.default") {
      ASSERT_EQ(args.size(), 5u);  // end, dtype, layout, device, pin_memory
      EXPECT_EQ(args[1].kind, ArgKind::kNone);
      EXPECT_EQ(args[3].kind, ArgKind::kDevice);
      EXPECT_EQ(args[3].device.type, DeviceType::kCuda);
      EXPECT_EQ(args[4].kind, ArgKind::kBool);
      saw_arange = true;
    }
  }
  EXPECT_TRUE(saw_gelu);
  EXPECT_TRUE(saw_arange);
}

// Omitted list defaults (max_pool2d's padding and dilation, as FX graphs write it) are filled
// in after the node's own arguments, which stay in place.
TEST(ImportTest, ListDefaultsFollowTheArguments) {
  v1::Graph proto;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(
      R"pb(
        inputs {
          name: "x"
          meta {
            tensor {
              sizes { value: 1 }
              sizes { value: 1 }
              sizes { value: 4 }
              sizes { value: 4 }
              strides { value: 16 }
              strides { value: 16 }
              strides { value: 4 }
              strides { value: 1 }
              dtype: DTYPE_FLOAT32
              device { type: "cuda" }
            }
          }
        }
        nodes {
          name: "pool"
          target: "aten.max_pool2d_with_indices.default"
          multi_output: true
          args { ref { node: "x" } }
          args {
            list {
              items { int_value: 2 }
              items { int_value: 2 }
            }
          }
          outputs {
            tensor {
              sizes { value: 1 }
              sizes { value: 1 }
              sizes { value: 2 }
              sizes { value: 2 }
              strides { value: 4 }
              strides { value: 4 }
              strides { value: 2 }
              strides { value: 1 }
              dtype: DTYPE_FLOAT32
              device { type: "cuda" }
            }
          }
        }
        output { list { items { ref { node: "pool" output: 0 } } } }
      )pb",
      &proto));
  // The indices: shaped like the values, int64.
  *proto.mutable_nodes(0)->add_outputs() = proto.nodes(0).outputs(0);
  proto.mutable_nodes(0)->mutable_outputs(1)->mutable_tensor()->set_dtype(v1::DTYPE_INT64);
  absl::StatusOr<Graph> g = Import(proto);
  ASSERT_TRUE(g.ok()) << g.status();
  const Node& pool = g->node(1);
  ASSERT_EQ(pool.num_args, 6u);
  auto args = g->args(pool);
  auto ints = [&](const Arg& a) {
    std::vector<int64_t> v;
    EXPECT_EQ(a.kind, ArgKind::kList);
    for (const Arg& item : g->items(a)) v.push_back(item.int_value);
    return v;
  };
  EXPECT_EQ(args[0].kind, ArgKind::kRef);
  EXPECT_EQ(ints(args[1]), (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(ints(args[2]), (std::vector<int64_t>{}));
  EXPECT_EQ(ints(args[3]), (std::vector<int64_t>{0, 0}));
  EXPECT_EQ(ints(args[4]), (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(args[5].kind, ArgKind::kBool);
}

TEST(ImportTest, SymbolicSizesParse) {
  absl::StatusOr<Graph> g = Import(testing::LoadSharedGraph("mlp_automatic_dynamic2.fw.json"));
  ASSERT_TRUE(g.ok()) << g.status();
  bool symbolic = false;
  for (const Value& v : g->values()) {
    if (v.kind != ValueKind::kTensor) continue;
    for (const SymInt& s : g->sizes(v)) {
      if (s.is_symbolic()) {
        symbolic = true;
        EXPECT_FALSE(sym::FreeSymbols(g->expr(s.expr())).empty());
      }
    }
  }
  EXPECT_TRUE(symbolic);
  EXPECT_EQ(g->python_guard(), "2 <= L['t0']");
}

TEST(ImportTest, SmallGraphImports) {
  absl::StatusOr<Graph> g = Import(testing::SmallGraph());
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->num_nodes(), 4u);
  EXPECT_EQ(g->output().kind, ArgKind::kList);
}

// ---- validation ----

struct Violation {
  std::string node;
  std::string field;
  std::string description;
};

// Imports `g`, expecting INVALID_ARGUMENT with a field violation.
Violation ExpectInvalid(const v1::Graph& g) {
  absl::StatusOr<Graph> result = Import(g);
  EXPECT_FALSE(result.ok());
  if (result.ok()) return {};
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument) << result.status();
  auto detail = ErrorDetailOf(result.status());
  EXPECT_TRUE(detail.has_value() && detail->violations_size() == 1) << result.status();
  if (!detail.has_value() || detail->violations_size() != 1) return {};
  const v1::FieldViolation& v = detail->violations(0);
  return {v.node(), v.field(), v.description()};
}

v1::Node* NodeNamed(v1::Graph& g, const std::string& name) {
  for (v1::Node& n : *g.mutable_nodes()) {
    if (n.name() == name) return &n;
  }
  ADD_FAILURE() << "no node " << name;
  return g.add_nodes();
}

struct BadCase {
  std::string what;
  std::function<void(v1::Graph&)> mutate;
  std::string node;
  std::string field;
  std::string description;  // a substring
};

class ValidationTest : public ::testing::TestWithParam<BadCase> {};

TEST_P(ValidationTest, NamesNodeAndField) {
  v1::Graph g = testing::SmallGraph();
  GetParam().mutate(g);
  Violation v = ExpectInvalid(g);
  EXPECT_EQ(v.node, GetParam().node);
  EXPECT_EQ(v.field, GetParam().field);
  EXPECT_THAT(v.description, HasSubstr(GetParam().description));
}

std::vector<BadCase> BadCases() {
  auto tensor = [](v1::Graph& g, const std::string& node) {
    return NodeNamed(g, node)->mutable_outputs(0)->mutable_tensor();
  };
  return {
      {"unknown_ref",
       [](v1::Graph& g) { NodeNamed(g, "mm")->mutable_args(1)->mutable_ref()->set_node("nope"); },
       "mm", "args[1]", "unknown node \"nope\""},
      {"later_ref",
       [](v1::Graph& g) {
         v1::Node* late = g.add_nodes();
         late->set_name("late");
         late->set_target("aten.neg.default");
         late->add_args()->mutable_ref()->set_node("x");
         *late->add_outputs() = g.inputs(0).meta();
         NodeNamed(g, "t")->mutable_args(0)->mutable_ref()->set_node("late");
       },
       "t", "args[0]", "\"late\", which comes later"},
      {"cycle",
       [](v1::Graph& g) { NodeNamed(g, "t")->mutable_args(0)->mutable_ref()->set_node("mm"); }, "t",
       "args[0]", "cycle: t -> mm -> t"},
      {"self_ref",
       [](v1::Graph& g) { NodeNamed(g, "mm")->mutable_args(0)->mutable_ref()->set_node("mm"); },
       "mm", "args[0]", "itself"},
      {"duplicate_name", [](v1::Graph& g) { NodeNamed(g, "s")->set_name("t"); }, "t", "name",
       "defined twice"},
      {"empty_name", [](v1::Graph& g) { NodeNamed(g, "s")->set_name(""); }, "nodes[2]", "name",
       "must not be empty"},
      {"missing_output", [](v1::Graph& g) { g.clear_output(); }, "", "output", "no output"},
      {"output_unknown_ref",
       [](v1::Graph& g) {
         g.mutable_output()->mutable_list()->mutable_items(1)->mutable_ref()->set_node("zz");
       },
       "", "output[1]", "unknown node \"zz\""},
      {"missing_node_outputs", [](v1::Graph& g) { NodeNamed(g, "mm")->clear_outputs(); }, "mm",
       "outputs", "exactly one output entry"},
      {"negative_size", [&](v1::Graph& g) { tensor(g, "mm")->mutable_sizes(1)->set_value(-4); },
       "mm", "outputs[0].sizes[1]", "must not be negative"},
      {"negative_stride", [&](v1::Graph& g) { tensor(g, "mm")->mutable_strides(0)->set_value(-4); },
       "mm", "outputs[0].strides[0]", "must not be negative"},
      {"negative_offset",
       [&](v1::Graph& g) { tensor(g, "mm")->mutable_storage_offset()->set_value(-1); }, "mm",
       "outputs[0].storage_offset", "must not be negative"},
      {"stride_count", [&](v1::Graph& g) { tensor(g, "mm")->add_strides()->set_value(1); }, "mm",
       "outputs[0].strides", "one stride per dimension"},
      {"missing_size", [&](v1::Graph& g) { tensor(g, "mm")->mutable_sizes(0)->Clear(); }, "mm",
       "outputs[0].sizes[0]", "missing size"},
      {"extent_overflow",
       [&](v1::Graph& g) {
         tensor(g, "mm")->mutable_strides(0)->set_value(std::numeric_limits<int64_t>::max() / 2);
       },
       "mm", "outputs[0].strides[0]", "beyond the int64 index range"},
      {"numel_overflow",
       [&](v1::Graph& g) {
         tensor(g, "mm")->mutable_sizes(0)->set_value(std::numeric_limits<int64_t>::max() / 2);
       },
       "mm", "outputs[0].sizes[1]", "element count overflows"},
      // 2^62 float32 elements fit an int64 count but not their 2^64 bytes.
      {"bytes_overflow",
       [&](v1::Graph& g) { tensor(g, "mm")->mutable_sizes(0)->set_value(int64_t{1} << 59); }, "mm",
       "outputs[0].sizes", "elements of 4 bytes overflow int64 byte sizes"},
      {"view_outside_base",
       [&](v1::Graph& g) { tensor(g, "t")->mutable_storage_offset()->set_value(8); }, "t",
       "outputs[0]", "outside [0, 31]"},
      {"unspecified_dtype",
       [&](v1::Graph& g) { tensor(g, "mm")->set_dtype(v1::DTYPE_UNSPECIFIED); }, "mm",
       "outputs[0].dtype", "needs a dtype"},
      {"unknown_dtype",
       [&](v1::Graph& g) { tensor(g, "mm")->set_dtype(static_cast<v1::DType>(99)); }, "mm",
       "outputs[0].dtype", "unknown dtype 99"},
      // Computed as float32 and sized at 4 bytes an element, a complex tensor came out wrong.
      {"complex_dtype", [&](v1::Graph& g) { tensor(g, "mm")->set_dtype(v1::DTYPE_COMPLEX64); },
       "mm", "outputs[0].dtype", "complex64 tensors are not supported"},
      {"float8_dtype", [&](v1::Graph& g) { tensor(g, "mm")->set_dtype(v1::DTYPE_FLOAT8_E4M3FN); },
       "mm", "outputs[0].dtype", "float8_e4m3fn tensors are not supported"},
      {"unknown_device",
       [](v1::Graph& g) {
         g.mutable_inputs(0)->mutable_meta()->mutable_tensor()->mutable_device()->set_type("tpu");
       },
       "x", "meta.device", "unknown device type \"tpu\""},
      {"negative_device_index",
       [&](v1::Graph& g) { tensor(g, "mm")->mutable_device()->set_index(-1); }, "mm",
       "outputs[0].device.index", "out of range"},
      {"unknown_layout",
       [&](v1::Graph& g) { tensor(g, "mm")->set_layout(static_cast<v1::Layout>(42)); }, "mm",
       "outputs[0].layout", "unknown layout"},
      {"input_without_meta", [](v1::Graph& g) { g.mutable_inputs(0)->clear_meta(); }, "x", "meta",
       "tensor or symbolic-scalar metadata"},
      {"unparseable_expr",
       [&](v1::Graph& g) {
         g.add_symbols()->set_name("s0");
         tensor(g, "mm")->mutable_sizes(0)->set_expr("s0 +* 2");
       },
       "mm", "outputs[0].sizes[0]", "cannot parse symbolic expression \"s0 +* 2\""},
      {"undeclared_symbol",
       [&](v1::Graph& g) { tensor(g, "mm")->mutable_sizes(0)->set_expr("2*s9"); }, "mm",
       "outputs[0].sizes[0]", "mentions symbol \"s9\""},
      {"bad_guard", [](v1::Graph& g) { g.mutable_guards()->add_shape_env("Eq(s0,"); }, "",
       "guards.shape_env[0]", "cannot parse guard"},
      {"guard_unknown_input",
       [](v1::Graph& g) { g.mutable_guards()->set_python_expr("L['t3'] >= 2"); }, "",
       "guards.python_expr", "0 symbolic inputs"},
      {"too_many_args", [](v1::Graph& g) { NodeNamed(g, "mm")->add_args()->set_int_value(3); },
       "mm", "args[2]", "at most 2 positional arguments"},
      {"missing_arg", [](v1::Graph& g) { NodeNamed(g, "mm")->mutable_args()->RemoveLast(); }, "mm",
       "args[1]", "needs argument \"mat2\" (Tensor)"},
      {"wrong_type", [](v1::Graph& g) { NodeNamed(g, "mm")->mutable_args(1)->set_int_value(2); },
       "mm", "args[1]", "parameter \"mat2\" expects Tensor, got int 2"},
      {"wrong_list_type",
       [](v1::Graph& g) {
         NodeNamed(g, "s")->mutable_args(1)->mutable_list()->mutable_items(0)->set_string_value(
             "a");
       },
       "s", "args[1]", "expects int[]?"},
      {"unknown_kwarg",
       [](v1::Graph& g) {
         v1::NamedArgument* kw = NodeNamed(g, "s")->add_kwargs();
         kw->set_name("dimension");
         kw->mutable_value()->set_int_value(1);
       },
       "s", "kwargs.dimension", "has no parameter \"dimension\""},
      {"kwarg_twice",
       [](v1::Graph& g) {
         v1::NamedArgument* kw = NodeNamed(g, "s")->add_kwargs();
         kw->set_name("keepdim");
         kw->mutable_value()->set_bool_value(false);
       },
       "s", "kwargs.keepdim", "also given positionally"},
      {"float_for_dtype",
       [](v1::Graph& g) {
         v1::NamedArgument* kw = NodeNamed(g, "s")->add_kwargs();
         kw->set_name("dtype");
         kw->mutable_value()->set_float_value(std::nan(""));
       },
       "s", "kwargs.dtype", "expects ScalarType?, got float nan"},
      {"tuple_for_single_op", [](v1::Graph& g) { NodeNamed(g, "mm")->set_multi_output(true); },
       "mm", "multi_output", "returns one tensor"},
      {"unknown_op_without_meta",
       [](v1::Graph& g) {
         v1::Node* n = NodeNamed(g, "s");
         n->set_target("mylib.custom.default");
         n->mutable_outputs(0)->mutable_none();
       },
       "s", "outputs[0]", "not an op Kiln knows"},
      {"tensor_meta_for_scalar_op",
       [](v1::Graph& g) { NodeNamed(g, "s")->set_target("aten.sym_numel.default"); }, "s",
       "outputs[0]", "returns a scalar"},
  };
}

INSTANTIATE_TEST_SUITE_P(BadInputs, ValidationTest, ::testing::ValuesIn(BadCases()),
                         [](const auto& info) { return info.param.what; });

TEST(ImportTest, UnknownOpWithMetadataIsAccepted) {
  v1::Graph g = testing::SmallGraph();
  v1::Node* n = NodeNamed(g, "s");
  n->set_target("mylib.custom.default");
  v1::NamedArgument* kw = n->add_kwargs();
  kw->set_name("mode");
  kw->mutable_value()->set_string_value("fast");
  absl::StatusOr<Graph> imported = Import(g);
  ASSERT_TRUE(imported.ok()) << imported.status();
  const Node& node = imported->node(3);
  EXPECT_EQ(node.schema, nullptr);
  ASSERT_EQ(node.num_args, 4u);
  EXPECT_EQ(imported->str(imported->args(node)[3].name), "mode");
}

TEST(ImportTest, MultiOutputCountsAndGetItem) {
  v1::Graph g = testing::LoadSharedGraph("mlp_fp32.fw.json");
  for (v1::Node& n : *g.mutable_nodes()) {
    if (n.target() == "aten.native_layer_norm.default") {
      v1::Graph dropped = g;
      for (v1::Node& d : *dropped.mutable_nodes()) {
        if (d.name() == n.name()) d.mutable_outputs()->RemoveLast();
      }
      Violation v = ExpectInvalid(dropped);
      EXPECT_EQ(v.node, n.name());
      EXPECT_EQ(v.field, "outputs");
      EXPECT_THAT(v.description, HasSubstr("tuple of 3 values"));
      break;
    }
  }
  for (v1::Node& n : *g.mutable_nodes()) {
    if (n.target() == "operator.getitem") {
      n.mutable_args(1)->set_int_value(7);
      Violation v = ExpectInvalid(g);
      EXPECT_EQ(v.node, n.name());
      EXPECT_EQ(v.field, "args[1]");
      EXPECT_THAT(v.description, HasSubstr("out of range"));
      break;
    }
  }
}

}  // namespace
}  // namespace kiln::graph
