#include "proto/fx/capture_import.h"

#include <google/protobuf/util/json_util.h>
#include <google/protobuf/util/message_differencer.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "proto/fx/nonfinite.h"
#include "tests/testing/test_env.h"

namespace kiln::fx {
namespace {

using Json = nlohmann::ordered_json;
using ::kiln::testing::GraphFiles;
using ::kiln::testing::ReadFile;

// Checks one converted value against the JSON it came from, independently of the
// importer's own code paths.
void ExpectSymInt(const Json& j, const v1::SymInt& s, const std::string& where) {
  if (j.is_number_integer()) {
    ASSERT_EQ(s.kind_case(), v1::SymInt::kValue) << where;
    EXPECT_EQ(s.value(), j.get<int64_t>()) << where;
  } else {
    ASSERT_EQ(s.kind_case(), v1::SymInt::kExpr) << where;
    EXPECT_EQ(s.expr(), j.at("sym").get<std::string>()) << where;
  }
}

void ExpectValueMeta(const Json& j, const v1::ValueMeta& m, const std::string& where) {
  if (j.is_null()) {
    EXPECT_TRUE(m.has_none()) << where;
    return;
  }
  if (j.contains("sym")) {
    ASSERT_TRUE(m.has_symbolic()) << where;
    EXPECT_EQ(m.symbolic().expr(), j["sym"].get<std::string>()) << where;
    return;
  }
  ASSERT_TRUE(m.has_tensor()) << where;
  const v1::TensorMeta& t = m.tensor();
  ASSERT_EQ(static_cast<size_t>(t.sizes_size()), j["shape"].size()) << where;
  ASSERT_EQ(static_cast<size_t>(t.strides_size()), j["stride"].size()) << where;
  for (size_t i = 0; i < j["shape"].size(); ++i) {
    ExpectSymInt(j["shape"][i], t.sizes(static_cast<int>(i)),
                 absl::StrCat(where, ".shape[", i, "]"));
    ExpectSymInt(j["stride"][i], t.strides(static_cast<int>(i)),
                 absl::StrCat(where, ".stride[", i, "]"));
  }
  ExpectSymInt(j["storage_offset"], t.storage_offset(), where + ".storage_offset");
  EXPECT_EQ(TorchNameOfDType(t.dtype()), j["dtype"].get<std::string>()) << where;
  const std::string device = j["device"].get<std::string>();
  std::string rebuilt = t.device().type();
  if (t.device().has_index()) rebuilt += absl::StrCat(":", t.device().index());
  EXPECT_EQ(rebuilt, device) << where;
}

void ExpectArgument(const Json& j, const v1::Argument& a, const std::string& where) {
  switch (j.type()) {
    case Json::value_t::null:
      EXPECT_TRUE(a.has_none()) << where;
      break;
    case Json::value_t::boolean:
      ASSERT_EQ(a.kind_case(), v1::Argument::kBoolValue) << where;
      EXPECT_EQ(a.bool_value(), j.get<bool>()) << where;
      break;
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned:
      ASSERT_EQ(a.kind_case(), v1::Argument::kIntValue) << where;
      EXPECT_EQ(a.int_value(), j.get<int64_t>()) << where;
      break;
    case Json::value_t::number_float:
      ASSERT_EQ(a.kind_case(), v1::Argument::kFloatValue) << where;
      EXPECT_EQ(a.float_value(), j.get<double>()) << where;
      break;
    case Json::value_t::string:
      ASSERT_EQ(a.kind_case(), v1::Argument::kStringValue) << where;
      EXPECT_EQ(a.string_value(), j.get<std::string>()) << where;
      break;
    case Json::value_t::array:
      ASSERT_TRUE(a.has_list()) << where;
      ASSERT_EQ(static_cast<size_t>(a.list().items_size()), j.size()) << where;
      for (size_t i = 0; i < j.size(); ++i) {
        ExpectArgument(j[i], a.list().items(static_cast<int>(i)), absl::StrCat(where, "[", i, "]"));
      }
      break;
    case Json::value_t::object:
      if (j.contains("node")) {
        ASSERT_TRUE(a.has_ref()) << where;
        EXPECT_EQ(a.ref().node(), j["node"].get<std::string>()) << where;
        EXPECT_FALSE(a.ref().has_output()) << where;
      } else if (j.contains("sym")) {
        ASSERT_TRUE(a.has_symbolic()) << where;
        EXPECT_EQ(a.symbolic().expr(), j["sym"].get<std::string>()) << where;
      } else {
        const std::string c = j.at("const").get<std::string>();
        if (a.kind_case() == v1::Argument::kDtype) {
          EXPECT_EQ(TorchNameOfDType(a.dtype()), c) << where;
        } else if (a.kind_case() == v1::Argument::kDevice) {
          std::string rebuilt = a.device().type();
          if (a.device().has_index()) rebuilt += absl::StrCat(":", a.device().index());
          EXPECT_EQ(rebuilt, c) << where;
        } else {
          EXPECT_TRUE(a.kind_case() == v1::Argument::kLayout ||
                      a.kind_case() == v1::Argument::kMemoryFormat)
              << where << " const " << c;
        }
      }
      break;
    default:
      FAIL() << where << ": unexpected JSON";
  }
}

class RealGraphTest : public ::testing::TestWithParam<std::string> {};

TEST_P(RealGraphTest, ConvertsLosslesslyAndRoundTrips) {
  absl::StatusOr<std::string> text = ReadFile(GetParam());
  ASSERT_TRUE(text.ok()) << text.status();
  absl::StatusOr<v1::Graph> graph = ImportCapture(*text);
  ASSERT_TRUE(graph.ok()) << graph.status();

  // Binary and protobuf-JSON round trips are exact.
  std::string binary;
  ASSERT_TRUE(graph->SerializeToString(&binary));
  v1::Graph parsed;
  ASSERT_TRUE(parsed.ParseFromString(binary));
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(*graph, parsed));
  std::string json;
  ASSERT_TRUE(google::protobuf::util::MessageToJsonString(*graph, &json).ok());
  v1::Graph from_json;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(json, &from_json).ok());
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(*graph, from_json));

  // Field by field against the source file.
  const Json doc = Json::parse(*text);
  EXPECT_EQ(parsed.info().model(), doc["model"].get<std::string>());
  EXPECT_EQ(parsed.info().kind(), doc["kind"].get<std::string>());
  EXPECT_EQ(parsed.info().source(), doc["code"].get<std::string>());
  int next_input = 0, next_node = 0;
  for (const Json& n : doc["nodes"]) {
    const std::string name = n["name"].get<std::string>();
    const std::string op = n["op"].get<std::string>();
    const std::string stack = n.contains("stack_trace") && n["stack_trace"].is_string()
                                  ? n["stack_trace"].get<std::string>()
                                  : "";
    if (op == "placeholder") {
      ASSERT_LT(next_input, parsed.inputs_size());
      const v1::GraphInput& in = parsed.inputs(next_input++);
      EXPECT_EQ(in.name(), name);
      EXPECT_EQ(in.debug().stack_trace(), stack) << name;
      ExpectValueMeta(n["meta"], in.meta(), name + ".meta");
    } else if (op == "output") {
      ASSERT_EQ(n["args"].size(), 1u);
      ExpectArgument(n["args"][0], parsed.output(), "output");
    } else {
      ASSERT_LT(next_node, parsed.nodes_size());
      const v1::Node& node = parsed.nodes(next_node++);
      EXPECT_EQ(node.name(), name);
      std::string target = n["target"].get<std::string>();
      if (target.starts_with("<built-in function ")) {
        target = "operator." + target.substr(19, target.size() - 20);
      }
      EXPECT_EQ(node.target(), target) << name;
      EXPECT_EQ(node.debug().stack_trace(), stack) << name;
      ASSERT_EQ(static_cast<size_t>(node.args_size()), n["args"].size()) << name;
      for (size_t i = 0; i < n["args"].size(); ++i) {
        ExpectArgument(n["args"][i], node.args(static_cast<int>(i)),
                       absl::StrCat(name, ".args[", i, "]"));
      }
      ASSERT_EQ(static_cast<size_t>(node.kwargs_size()), n["kwargs"].size()) << name;
      int k = 0;
      for (const auto& [key, value] : n["kwargs"].items()) {
        EXPECT_EQ(node.kwargs(k).name(), key) << name;
        ExpectArgument(value, node.kwargs(k).value(), absl::StrCat(name, ".kwargs.", key));
        ++k;
      }
      if (n["meta"].is_array()) {
        EXPECT_TRUE(node.multi_output()) << name;
        ASSERT_EQ(static_cast<size_t>(node.outputs_size()), n["meta"].size()) << name;
        for (size_t i = 0; i < n["meta"].size(); ++i) {
          ExpectValueMeta(n["meta"][i], node.outputs(static_cast<int>(i)),
                          absl::StrCat(name, ".meta[", i, "]"));
        }
      } else {
        EXPECT_FALSE(node.multi_output()) << name;
        ASSERT_EQ(node.outputs_size(), 1) << name;
        ExpectValueMeta(n["meta"], node.outputs(0), name + ".meta");
      }
    }
  }
  EXPECT_EQ(next_input, parsed.inputs_size());
  EXPECT_EQ(next_node, parsed.nodes_size());

  // Guards: hints, ranges and expressions.
  if (doc.contains("guards")) {
    const Json& g = doc["guards"];
    EXPECT_EQ(parsed.guards().python_expr(),
              g["guards_expr"].is_null() ? "" : g["guards_expr"].get<std::string>());
    ASSERT_EQ(static_cast<size_t>(parsed.guards().shape_env_size()), g["all_guards"].size());
    for (const auto& [sym, val] : g["var_to_val"].items()) {
      auto it = std::find_if(parsed.symbols().begin(), parsed.symbols().end(),
                             [&](const v1::Symbol& s) { return s.name() == sym; });
      ASSERT_NE(it, parsed.symbols().end()) << sym;
      EXPECT_EQ(it->int_hint(), val.get<int64_t>()) << sym;
      const Json& range = g["var_to_range"][sym];
      EXPECT_EQ(it->lower().int_value(), std::stoll(range[0].get<std::string>())) << sym;
      EXPECT_EQ(it->upper().infinite(), range[1].get<std::string>() == "int_oo") << sym;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(SharedGraphs, RealGraphTest, ::testing::ValuesIn(GraphFiles()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string name = info.param.substr(info.param.rfind('/') + 1);
                           for (char& c : name) {
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           }
                           return name;
                         });

TEST(CaptureImportTest, EveryMentionedSymbolIsListed) {
  absl::StatusOr<std::string> text =
      ReadFile(::kiln::testing::GraphsDir() + "/mlp_automatic_dynamic2.bw.json");
  ASSERT_TRUE(text.ok());
  absl::StatusOr<v1::Graph> graph = ImportCapture(*text);
  ASSERT_TRUE(graph.ok()) << graph.status();
  ASSERT_EQ(graph->symbols_size(), 1);
  EXPECT_EQ(graph->symbols(0).name(), "s77");
  EXPECT_EQ(graph->symbols(0).int_hint(), 16);
  EXPECT_EQ(graph->symbols(0).lower().int_value(), 2);
  EXPECT_TRUE(graph->symbols(0).upper().infinite());
  EXPECT_EQ(graph->guards().python_expr(), "L['t1'] == 128*L['t0'] and 2 <= L['t0']");
}

// A small valid graph that the bad-input cases below break one field at a time.
Json SmallGraph() {
  return Json::parse(R"({
    "model": "small", "kind": "fw",
    "nodes": [
      {"name": "x", "op": "placeholder", "target": "x", "args": [], "kwargs": {},
       "meta": {"shape": [4, 8], "stride": [8, 1], "dtype": "torch.float32",
                "device": "cuda:0", "storage_offset": 0}},
      {"name": "relu", "op": "call_function", "target": "aten.relu.default",
       "args": [{"node": "x"}], "kwargs": {},
       "meta": {"shape": [4, 8], "stride": [8, 1], "dtype": "torch.float32",
                "device": "cuda:0", "storage_offset": 0}},
      {"name": "output", "op": "output", "target": "output", "args": [[{"node": "relu"}]],
       "kwargs": {}, "meta": null}
    ]})");
}

absl::Status ImportJson(const Json& j) { return ImportCapture(j.dump()).status(); }

TEST(CaptureImportTest, SmallGraphImports) {
  absl::StatusOr<v1::Graph> g = ImportCapture(SmallGraph().dump());
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->inputs_size(), 1);
  EXPECT_EQ(g->nodes_size(), 1);
  EXPECT_EQ(g->nodes(0).outputs(0).tensor().device().index(), 0);
}

TEST(CaptureImportTest, PlaceholderRolesImport) {
  Json j = SmallGraph();
  absl::StatusOr<v1::Graph> g = ImportCapture(j.dump());
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->inputs(0).role(), v1::INPUT_ROLE_UNSPECIFIED);
  j["nodes"][0]["role"] = "buffer";
  g = ImportCapture(j.dump());
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->inputs(0).role(), v1::INPUT_ROLE_BUFFER);
  j["nodes"][0]["role"] = "weights";
  absl::Status s = ImportJson(j);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "node \"x\" role: unknown input role \"weights\" (expected parameter, buffer, "
            "user_input, tangent, saved, rng_state)");
}

TEST(CaptureImportTest, MissingReferenceNamesNodeAndField) {
  Json j = SmallGraph();
  j["nodes"][1]["args"][0]["node"] = "nowhere";
  absl::Status s = ImportJson(j);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "node \"relu\" args[0]: refers to unknown node \"nowhere\"");
}

TEST(CaptureImportTest, SelfReferenceIsRejected) {
  Json j = SmallGraph();
  j["nodes"][1]["args"][0]["node"] = "relu";
  absl::Status s = ImportJson(j);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("refers to unknown node \"relu\""), std::string::npos) << s;
}

TEST(CaptureImportTest, UnknownDTypeNamesNodeAndField) {
  Json j = SmallGraph();
  j["nodes"][1]["meta"]["dtype"] = "torch.float33";
  absl::Status s = ImportJson(j);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "node \"relu\" meta.dtype: unknown dtype \"torch.float33\"");
}

// Python's json writes infinities and NaN as bare words (attention masks, scalar_tensor(-inf)).
TEST(CaptureImportTest, InfinitiesAndNaNImport) {
  const std::string text = R"({
    "model": "small", "kind": "fw",
    "nodes": [
      {"name": "x", "op": "placeholder", "target": "x", "args": [], "kwargs": {},
       "meta": {"shape": [4], "stride": [1], "dtype": "torch.float32", "device": "cuda:0",
                "storage_offset": 0}},
      {"name": "clamp", "op": "call_function", "target": "aten.clamp.default",
       "args": [{"node": "x"}, -Infinity, Infinity], "kwargs": {"note": "NaN -Infinity"},
       "meta": {"shape": [4], "stride": [1], "dtype": "torch.float32", "device": "cuda:0",
                "storage_offset": 0}},
      {"name": "output", "op": "output", "target": "output", "args": [[{"node": "clamp"}]],
       "kwargs": {}, "meta": null}
    ]})";
  absl::StatusOr<v1::Graph> g = ImportCapture(text);
  ASSERT_TRUE(g.ok()) << g.status();
  const v1::Node& clamp = g->nodes(0);
  EXPECT_EQ(clamp.args(1).float_value(), -std::numeric_limits<double>::infinity());
  EXPECT_EQ(clamp.args(2).float_value(), std::numeric_limits<double>::infinity());
  EXPECT_EQ(clamp.kwargs(0).value().string_value(), "NaN -Infinity");
}

TEST(CaptureImportTest, NaNArgumentImports) {
  Json j = SmallGraph();
  j["nodes"][1]["target"] = "aten.clamp.default";
  j["nodes"][1]["args"] = Json::array({{{"node", "x"}}, 0.0, 1.0});
  std::string text = j.dump();
  const std::string one = "1.0]";
  text.replace(text.find(one), one.size(), "NaN]");
  absl::StatusOr<v1::Graph> g = ImportCapture(text);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_TRUE(std::isnan(g->nodes(0).args(2).float_value()));
}

TEST(NonFiniteTest, OnlyBareWordsOutsideStringsAreTagged) {
  EXPECT_EQ(TagNonFiniteNumbers(R"([1, -Infinity, "NaN", "a\"Infinity", NaN])"),
            R"([1, {"$float":"-inf"}, "NaN", "a\"Infinity", {"$float":"nan"}])");
  EXPECT_EQ(TagNonFiniteNumbers(R"({"k":Infinity})"), R"({"k":{"$float":"inf"}})");
  // Not words of their own: left alone (the parser then reports them).
  EXPECT_EQ(TagNonFiniteNumbers("[NaNa, xInfinity]"), "[NaNa, xInfinity]");
  EXPECT_EQ(TagNonFiniteNumbers("[1e5, -2]"), "[1e5, -2]");
}

// Attention ops return plain ints (max_seqlen) among their tensors.
TEST(CaptureImportTest, IntAndNoneOutputsOfMultiOutputNodesImport) {
  Json j = SmallGraph();
  Json meta = j["nodes"][1]["meta"];
  j["nodes"][1]["meta"] = Json::array({meta, nullptr, 128, meta});
  absl::StatusOr<v1::Graph> g = ImportCapture(j.dump());
  ASSERT_TRUE(g.ok()) << g.status();
  const v1::Node& n = g->nodes(0);
  ASSERT_EQ(n.outputs_size(), 4);
  EXPECT_TRUE(n.multi_output());
  EXPECT_TRUE(n.outputs(1).has_none());
  EXPECT_EQ(n.outputs(2).int_value(), 128);
  EXPECT_TRUE(n.outputs(3).has_tensor());
}

Json ConstantNode(const Json& shape, const char* dtype, const Json& value) {
  Json stride = Json::array();
  for (size_t i = 0; i < shape.size(); ++i) stride.push_back(1);
  Json n = {{"name", "_tensor_constant0"},
            {"op", "get_attr"},
            {"target", "_tensor_constant0"},
            {"args", Json::array()},
            {"kwargs", Json::object()},
            {"meta",
             {{"shape", shape},
              {"stride", stride},
              {"dtype", dtype},
              {"device", "cuda:0"},
              {"storage_offset", 0}}}};
  if (!value.is_null()) n["value"] = {{"b64", value}};
  return n;
}

absl::StatusOr<v1::Graph> ImportWithConstant(const Json& constant) {
  Json j = SmallGraph();
  j["nodes"].insert(j["nodes"].begin() + 1, constant);
  return ImportCapture(j.dump());
}

TEST(CaptureImportTest, GetAttrConstantsBecomeFactoryCalls) {
  // float32 -3.5 is 0xc0600000: little-endian bytes 00 00 60 c0.
  absl::StatusOr<v1::Graph> g =
      ImportWithConstant(ConstantNode(Json::array(), "torch.float32", "AABgwA=="));
  ASSERT_TRUE(g.ok()) << g.status();
  const v1::Node& scalar = g->nodes(0);
  EXPECT_EQ(scalar.name(), "_tensor_constant0");
  EXPECT_EQ(scalar.target(), "aten.scalar_tensor.default");
  EXPECT_EQ(scalar.args(0).float_value(), -3.5);
  EXPECT_EQ(scalar.kwargs(0).value().dtype(), v1::DTYPE_FLOAT32);
  EXPECT_EQ(scalar.kwargs(1).value().device().type(), "cuda");

  // int64 -2 and bfloat16 1.5 (0x3fc0).
  g = ImportWithConstant(ConstantNode(Json::array(), "torch.int64", "/v////////8="));
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->nodes(0).args(0).int_value(), -2);
  g = ImportWithConstant(ConstantNode(Json::array(), "torch.bfloat16", "wD8="));
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->nodes(0).args(0).float_value(), 1.5);

  g = ImportWithConstant(ConstantNode(Json::array({0}), "torch.float16", nullptr));
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->nodes(0).target(), "aten.empty.memory_format");
  EXPECT_EQ(g->nodes(0).args(0).list().items(0).int_value(), 0);
}

TEST(CaptureImportTest, BadConstantsAreNamed) {
  absl::Status s =
      ImportWithConstant(ConstantNode(Json::array(), "torch.float32", "AAA=")).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("node \"_tensor_constant0\" value: holds 2 bytes"), std::string::npos)
      << s;
  s = ImportWithConstant(ConstantNode(Json::array(), "torch.float32", nullptr)).status();
  EXPECT_NE(s.message().find("needs its value"), std::string::npos) << s;
  s = ImportWithConstant(ConstantNode(Json::array({2}), "torch.float32", "AAAAAAAAAAA=")).status();
  EXPECT_NE(s.message().find("a constant tensor of 2 elements"), std::string::npos) << s;
  s = ImportWithConstant(ConstantNode(Json::array(), "torch.float32", "!!")).status();
  EXPECT_NE(s.message().find("not valid base64"), std::string::npos) << s;
}

TEST(CaptureImportTest, TruncatedJsonIsReported) {
  std::string text = SmallGraph().dump();
  absl::Status s = ImportCapture(text.substr(0, text.size() / 2)).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("not valid JSON"), std::string::npos) << s;
}

TEST(CaptureImportTest, BadFieldsAreNamed) {
  struct Case {
    const char* pointer;
    Json value;
    const char* expected;
  };
  const Case cases[] = {
      {"/nodes/1/meta/shape", "x", "node \"relu\" meta.shape: missing or not a list"},
      {"/nodes/1/meta/stride", Json::array({1}),
       "node \"relu\" meta.stride: has 1 entries but shape has 2"},
      {"/nodes/1/meta/shape/0", 1.5, "node \"relu\" meta.shape[0]: expected an integer"},
      {"/nodes/1/meta/device", "tpu:0", "node \"relu\" meta.device: missing or not a device"},
      {"/nodes/1/op", "call_module", "node \"relu\" op: unsupported op \"call_module\""},
      {"/nodes/1/target", 7, "node \"relu\" target: missing or not a non-empty string"},
      {"/nodes/1/args/0", Json::parse(R"({"const": "torch.nonsense"})"),
       "node \"relu\" args[0]: unknown constant \"torch.nonsense\""},
      {"/nodes/1/name", "x", "node \"x\" name: defined twice"},
      {"/nodes", Json::array(), "nodes: the graph has no output node"},
  };
  for (const Case& c : cases) {
    Json j = SmallGraph();
    j[Json::json_pointer(c.pointer)] = c.value;
    absl::Status s = ImportJson(j);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.pointer;
    EXPECT_TRUE(absl::StartsWith(s.message(), c.expected))
        << c.pointer << ": got \"" << s.message() << "\"";
  }
}

}  // namespace
}  // namespace kiln::fx
