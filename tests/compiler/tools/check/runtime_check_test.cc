#include "compiler/tools/check/runtime_check.h"

#include <google/protobuf/text_format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "proto/fx/capture_import.h"
#include "tests/compiler/graph_testing.h"

namespace kiln::check {
namespace {

// y = x * factor, x a float32 [6].
v1::Graph MulGraph(double factor) {
  v1::Graph g;
  const std::string text = R"pb(
                             inputs {
                               name: "x"
                               meta {
                                 tensor {
                                   sizes { value: 6 }
                                   strides { value: 1 }
                                   storage_offset { value: 0 }
                                   dtype: DTYPE_FLOAT32
                                   device { type: "cpu" }
                                 }
                               }
                             }
                             nodes { name: "mul" target: "aten.mul.Scalar"
                                     args { ref { node: "x" } }
                                     args { float_value:)pb" +
                           std::to_string(factor) + R"pb(}
                                                         outputs {
        tensor {
          sizes { value: 6 }
          strides { value: 1 }
          storage_offset { value: 0 }
          dtype: DTYPE_FLOAT32
          device { type: "cpu" }
        }
      }
    }
    output { list { items { ref { node: "mul" } } } }
  )pb";
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &g));
  return g;
}

TEST(RuntimeCheckTest, AgreeingArtifactPasses) {
  const v1::Graph graph = MulGraph(2);
  auto artifact = testing::CompileForCpu(graph);
  ASSERT_TRUE(artifact.ok()) << artifact.status();
  for (int threads : {1, 3}) {
    CheckOptions options;
    options.threads = threads;
    auto report = CheckAgainstInterpreter(graph, *artifact, options);
    ASSERT_TRUE(report.ok()) << report.status();
    EXPECT_TRUE(report->ok) << report->message;
    EXPECT_EQ(report->outputs, 1);
    EXPECT_LE(report->worst, 1);
  }
}

// The artifact computes x * 2, the graph says x * 3: a mismatch, reported with where.
TEST(RuntimeCheckTest, DifferingArtifactIsAMismatch) {
  auto artifact = testing::CompileForCpu(MulGraph(2));
  ASSERT_TRUE(artifact.ok()) << artifact.status();
  auto report = CheckAgainstInterpreter(MulGraph(3), *artifact);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_FALSE(report->ok);
  EXPECT_TRUE(absl::StrContains(report->message, "output 0")) << report->message;
  EXPECT_GT(report->worst, 1);
}

// A CPU tensor's metadata: `dtype` of `sizes` (contiguous), or int64 [] when empty.
v1::ValueMeta Meta(const std::vector<int64_t>& sizes, v1::DType dtype = v1::DTYPE_FLOAT32) {
  v1::ValueMeta meta;
  v1::TensorMeta* t = meta.mutable_tensor();
  int64_t stride = 1;
  for (size_t d = sizes.size(); d-- > 0;) {
    t->add_sizes()->set_value(sizes[d]);
    t->add_strides()->set_value(stride);
    stride *= sizes[d];
  }
  std::reverse(t->mutable_sizes()->begin(), t->mutable_sizes()->end());
  std::reverse(t->mutable_strides()->begin(), t->mutable_strides()->end());
  t->mutable_storage_offset()->set_value(0);
  t->set_dtype(sizes.empty() ? v1::DTYPE_INT64 : dtype);
  t->mutable_device()->set_type("cpu");
  return meta;
}

v1::Argument Ref(const std::string& node) {
  v1::Argument a;
  a.mutable_ref()->set_node(node);
  return a;
}

// As a training forward with keep_inference_input_mutations mutates a batch norm's
// buffers: state += mean(x, 0) and count += 1 (copy_ into the inputs), returning the mean.
// With `wrong`, the state is written back from the mean alone; with `bf16`, x and its mean
// are bfloat16 and the mean is cast to float32 before the add, as under autocast.
v1::Graph MutatingGraph(bool wrong, bool bf16 = false) {
  v1::Graph g;
  auto input = [&](const std::string& name, v1::InputRole role, const v1::ValueMeta& meta) {
    v1::GraphInput* in = g.add_inputs();
    in->set_name(name);
    in->set_role(role);
    *in->mutable_meta() = meta;
  };
  auto node = [&](const std::string& name, const std::string& target,
                  std::vector<v1::Argument> args, const v1::ValueMeta& meta) {
    v1::Node* n = g.add_nodes();
    n->set_name(name);
    n->set_target(target);
    for (v1::Argument& a : args) *n->add_args() = std::move(a);
    *n->add_outputs() = meta;
  };
  v1::Argument dims, one;
  dims.mutable_list()->add_items()->set_int_value(0);
  one.set_int_value(1);
  const v1::DType low = bf16 ? v1::DTYPE_BFLOAT16 : v1::DTYPE_FLOAT32;
  input("x", v1::INPUT_ROLE_USER_INPUT, Meta({4, 8}, low));
  input("state", v1::INPUT_ROLE_BUFFER, Meta({8}));
  input("count", v1::INPUT_ROLE_BUFFER, Meta({}));
  node("mean", "aten.mean.dim", {Ref("x"), dims}, Meta({8}, low));
  std::string mean = "mean";
  if (bf16) {
    node("cast", "aten._to_copy.default", {Ref("mean")}, Meta({8}));
    v1::NamedArgument* dtype = g.mutable_nodes(g.nodes_size() - 1)->add_kwargs();
    dtype->set_name("dtype");
    dtype->mutable_value()->set_dtype(v1::DTYPE_FLOAT32);
    mean = "cast";
  }
  node("add", "aten.add.Tensor", {Ref("state"), Ref(mean)}, Meta({8}));
  node("copy_", "aten.copy_.default", {Ref("state"), Ref(wrong ? "mean" : "add")}, Meta({8}));
  node("add_1", "aten.add.Tensor", {Ref("count"), one}, Meta({}));
  node("copy__1", "aten.copy_.default", {Ref("count"), Ref("add_1")}, Meta({}));
  *g.mutable_output()->mutable_list()->add_items() = Ref("mean");
  return g;
}

// The inputs a plan writes back are compared as outputs are.
TEST(RuntimeCheckTest, InputsThePlanWritesBackAreCompared) {
  const v1::Graph graph = MutatingGraph(false);
  auto artifact = testing::CompileForCpu(graph);
  ASSERT_TRUE(artifact.ok()) << artifact.status();
  // One kernel stores both new values into the inputs (fuse/batch_write_backs.h); the
  // write-back steps after it name the inputs' own buffers.
  int write_backs = 0;
  for (int i = 0; i < artifact->steps_size(); ++i) {
    const v1::PlanStep& step = artifact->steps(i);
    if (!step.has_write_back()) continue;
    ++write_backs;
    const v1::Buffer& src = artifact->buffers(step.write_back().src().buffer());
    EXPECT_EQ(src.kind(), v1::BUFFER_KIND_INPUT);
    EXPECT_EQ(src.input_index(), step.write_back().input_index());
    int before = i - write_backs;
    while (before > 0 && artifact->steps(before).has_free()) --before;
    EXPECT_TRUE(artifact->steps(before).has_launch());
  }
  EXPECT_EQ(write_backs, 2);
  auto report = CheckAgainstInterpreter(graph, *artifact);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_TRUE(report->ok) << report->message;
  EXPECT_EQ(report->outputs, 3);  // the mean, the state and the count
  auto wrong = testing::CompileForCpu(MutatingGraph(true));
  ASSERT_TRUE(wrong.ok()) << wrong.status();
  report = CheckAgainstInterpreter(graph, *wrong);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_FALSE(report->ok);
  EXPECT_TRUE(absl::StrContains(report->message, "input 1 (written back)")) << report->message;
}

// Under autocast a buffer's new value (float32) comes from bfloat16 values, which eager
// rounds and a fused kernel does not: a written-back input is held to the unrounded run too,
// as an output is.
TEST(RuntimeCheckTest, WrittenBackInputsOfLowPrecisionGraphsMayMatchTheUnroundedRun) {
  const v1::Graph graph = MutatingGraph(false, /*bf16=*/true);
  auto artifact = testing::CompileForCpu(graph);
  ASSERT_TRUE(artifact.ok()) << artifact.status();
  auto report = CheckAgainstInterpreter(graph, *artifact);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_TRUE(report->ok) << report->message;
  EXPECT_EQ(report->outputs, 3);
  auto wrong = testing::CompileForCpu(MutatingGraph(true, /*bf16=*/true));
  ASSERT_TRUE(wrong.ok()) << wrong.status();
  report = CheckAgainstInterpreter(graph, *wrong);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_FALSE(report->ok);
  EXPECT_TRUE(absl::StrContains(report->message, "input 1 (written back)")) << report->message;
}

// An artifact the runtime refuses is an error, not a report.
TEST(RuntimeCheckTest, ArtifactTheRuntimeRefusesIsAnError) {
  const v1::Graph graph = MulGraph(2);
  auto artifact = testing::CompileForCpu(graph);
  ASSERT_TRUE(artifact.ok()) << artifact.status();
  artifact->set_target("cuda:sm_90");
  auto report = CheckAgainstInterpreter(graph, *artifact);
  EXPECT_EQ(report.status().code(), absl::StatusCode::kInvalidArgument);
}

// out = b + (a * a * a) * factor with a bfloat16 and b float32 [512], as autocast writes it:
// eager PyTorch rounds each product to bfloat16, a fused kernel keeps them in float32.
v1::Graph AutocastGraph(double factor) {
  const std::string meta_bf16 =
      R"("meta": {"shape": [512], "stride": [1], "dtype": "torch.bfloat16", "device": "cpu",
                  "storage_offset": 0})";
  const std::string meta_f32 =
      R"("meta": {"shape": [512], "stride": [1], "dtype": "torch.float32", "device": "cpu",
                  "storage_offset": 0})";
  const std::string capture = R"({"model": "synthetic", "kind": "fw", "nodes": [
    {"name": "a", "op": "placeholder", "target": "a", "args": [], "kwargs": {}, )" +
                              meta_bf16 + R"(},
    {"name": "b", "op": "placeholder", "target": "b", "args": [], "kwargs": {}, )" +
                              meta_f32 + R"(},
    {"name": "sq", "op": "call_function", "target": "aten.mul.Tensor",
     "args": [{"node": "a"}, {"node": "a"}], "kwargs": {}, )" +
                              meta_bf16 + R"(},
    {"name": "cube", "op": "call_function", "target": "aten.mul.Tensor",
     "args": [{"node": "sq"}, {"node": "a"}], "kwargs": {}, )" +
                              meta_bf16 + R"(},
    {"name": "scaled", "op": "call_function", "target": "aten.mul.Tensor",
     "args": [{"node": "cube"}, )" +
                              std::to_string(factor) + R"(], "kwargs": {}, )" + meta_bf16 + R"(},
    {"name": "out", "op": "call_function", "target": "aten.add.Tensor",
     "args": [{"node": "b"}, {"node": "scaled"}], "kwargs": {}, )" +
                              meta_f32 + R"(},
    {"name": "output", "op": "output", "target": "output", "args": [[{"node": "out"}]],
     "kwargs": {}, "meta": null}]})";
  absl::StatusOr<v1::Graph> g = fx::ImportCapture(capture);
  EXPECT_TRUE(g.ok()) << g.status();
  return g.ok() ? *g : v1::Graph();
}

// The float32 output differs from the interpreter's by bfloat16 roundings, far past float32's
// tolerance, and is as close to the exact value as eager rounding is: it passes.
TEST(RuntimeCheckTest, AutocastGraphIsAsAccurateAsEager) {
  const v1::Graph graph = AutocastGraph(1.5);
  auto artifact = testing::CompileForCpu(graph);
  ASSERT_TRUE(artifact.ok()) << artifact.status();
  ASSERT_EQ(artifact->summary().kernels(), 1) << "the three products fused into one kernel";
  auto report = CheckAgainstInterpreter(graph, *artifact);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_TRUE(report->ok) << report->message;
  EXPECT_LE(report->worst, 1);
}

// 3% off is a wrong kernel, not rounding: a mismatch, which says how far from the exact
// value each side is.
TEST(RuntimeCheckTest, AutocastGraphComputedWrongIsAMismatch) {
  auto artifact = testing::CompileForCpu(AutocastGraph(1.5 * 1.03));
  ASSERT_TRUE(artifact.ok()) << artifact.status();
  auto report = CheckAgainstInterpreter(AutocastGraph(1.5), *artifact);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_FALSE(report->ok);
  EXPECT_TRUE(absl::StrContains(report->message, "from the exact value")) << report->message;
  EXPECT_GT(report->worst, 1);
}

// softmax(x * slope + 150) over rows of 16, x float32 [8, 16] in [-1, 1): logits near 150
// whose probabilities spread over the row.
v1::Graph SoftmaxGraph(double slope) {
  const std::string meta =
      R"("meta": {"shape": [8, 16], "stride": [16, 1], "dtype": "torch.float32", "device": "cpu",
                  "storage_offset": 0})";
  const std::string capture = R"({"model": "synthetic", "kind": "fw", "nodes": [
    {"name": "x", "op": "placeholder", "target": "x", "args": [], "kwargs": {}, )" +
                              meta + R"(},
    {"name": "scaled", "op": "call_function", "target": "aten.mul.Tensor",
     "args": [{"node": "x"}, )" +
                              std::to_string(slope) + R"(], "kwargs": {}, )" + meta + R"(},
    {"name": "logits", "op": "call_function", "target": "aten.add.Tensor",
     "args": [{"node": "scaled"}, 150.0], "kwargs": {}, )" +
                              meta + R"(},
    {"name": "p", "op": "call_function", "target": "aten._softmax.default",
     "args": [{"node": "logits"}, -1, false], "kwargs": {}, )" +
                              meta + R"(},
    {"name": "view", "op": "call_function", "target": "aten.view.default",
     "args": [{"node": "p"}, [128]], "kwargs": {},
     "meta": {"shape": [128], "stride": [1], "dtype": "torch.float32", "device": "cpu",
              "storage_offset": 0}},
    {"name": "output", "op": "output", "target": "output", "args": [[{"node": "view"}]],
     "kwargs": {}, "meta": null}]})";
  absl::StatusOr<v1::Graph> g = fx::ImportCapture(capture);
  EXPECT_TRUE(g.ok()) << g.status();
  return g.ok() ? *g : v1::Graph();
}

// Logits near 150 off by 1e-6 of their magnitude (1.5e-4: the float32 rounding a few layers
// leave) move the probabilities by up to 3e-4 of themselves, within the bound the logits'
// magnitude sets, far past one relative to the probabilities alone. Off by 10%, they are
// wrong.
TEST(RuntimeCheckTest, SoftmaxOfLargeLogitsIsBoundedByTheirMagnitude) {
  const v1::Graph graph = SoftmaxGraph(1);
  auto rounded = testing::CompileForCpu(SoftmaxGraph(1 + 1.5e-4));
  ASSERT_TRUE(rounded.ok()) << rounded.status();
  auto report = CheckAgainstInterpreter(graph, *rounded);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_TRUE(report->ok) << report->message;
  EXPECT_LE(report->worst, 1);

  auto wrong = testing::CompileForCpu(SoftmaxGraph(1.1));
  ASSERT_TRUE(wrong.ok()) << wrong.status();
  report = CheckAgainstInterpreter(graph, *wrong);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_FALSE(report->ok);
  EXPECT_TRUE(absl::StrContains(report->message, "output 0: float32[128]")) << report->message;
}

TEST(RuntimeCheckTest, RelativeTolerancePerDtype) {
  EXPECT_EQ(RelativeTolerance(v1::DTYPE_FLOAT32), 1e-5);
  EXPECT_EQ(RelativeTolerance(v1::DTYPE_BFLOAT16), 1e-2);
  EXPECT_EQ(RelativeTolerance(v1::DTYPE_FLOAT64), 1e-9);
  EXPECT_EQ(RelativeTolerance(v1::DTYPE_INT64), 0);
  EXPECT_EQ(RelativeTolerance(v1::DTYPE_BOOL), 0);
}

TEST(GuardedCheckPointsTest, GraphWithoutSymbolsHasTheHintsOnly) {
  EXPECT_EQ(GuardedCheckPoints(testing::LoadSharedGraph("mlp_fp32.fw.json")),
            std::vector<SymbolValues>{{}});
}

// s77: hint 16, range [2, oo): the hints, then 15, 17 and 19.
TEST(GuardedCheckPointsTest, HintsThenNearbyValues) {
  const v1::Graph g = testing::LoadSharedGraph("mlp_automatic_dynamic2.fw.json");
  ASSERT_EQ(g.symbols_size(), 1);
  ASSERT_EQ(g.symbols(0).int_hint(), 16);
  const std::vector<SymbolValues> want = {{}, {{"s77", 15}}, {{"s77", 17}}, {{"s77", 19}}};
  EXPECT_EQ(GuardedCheckPoints(g), want);
}

TEST(GuardedCheckPointsTest, RangesAndGuardsRuleValuesOut) {
  const v1::Graph base = testing::LoadSharedGraph("mlp_automatic_dynamic2.fw.json");
  ASSERT_EQ(base.symbols_size(), 1);

  v1::Graph bounded = base;
  bounded.mutable_symbols(0)->mutable_upper()->set_int_value(17);
  EXPECT_EQ(GuardedCheckPoints(bounded),
            (std::vector<SymbolValues>{{}, {{"s77", 15}}, {{"s77", 17}}}));

  v1::Graph guarded = base;
  guarded.mutable_guards()->add_shape_env("s77 <= 16");
  EXPECT_EQ(GuardedCheckPoints(guarded), (std::vector<SymbolValues>{{}, {{"s77", 15}}}));

  // A guard that does not parse says nothing about other values: the hints only.
  v1::Graph unreadable = base;
  unreadable.mutable_guards()->add_shape_env("s77 >=");
  EXPECT_EQ(GuardedCheckPoints(unreadable), std::vector<SymbolValues>{{}});
}

}  // namespace
}  // namespace kiln::check
