// Symbolic sizes in decompose: a size outside the loop IR's forms, even in a graph input's or
// output's metadata, makes only the nodes that would compute with it fall back; the compile
// still succeeds and the artifact runs. (tests/compiler/loop/index_expr_test.cc covers the
// forms the IR takes; the corpus test the real graphs that carry them.)

#include <cstdint>

#include "compiler/canon/canonical_graph.h"
#include "compiler/decompose/decompose.h"
#include "compiler/graph/import.h"
#include "compiler/tools/check/runtime_check.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/fx/capture_import.h"
#include "tests/compiler/graph_testing.h"

namespace kiln {
namespace {

using ::testing::HasSubstr;

// y's size, 2**s0, is no form of the loop IR (a symbolic exponent); it is an input's size, a
// node's and an output's. relu(y) must fall back; x's kernel must not.
constexpr char kGraph[] = R"({
  "model": "synthetic", "kind": "fw",
  "nodes": [
    {"name": "n", "op": "placeholder", "target": "n", "args": [], "kwargs": {},
     "meta": {"sym": "s0"}},
    {"name": "x", "op": "placeholder", "target": "x", "args": [], "kwargs": {},
     "meta": {"shape": [{"sym": "s0"}], "stride": [1], "dtype": "torch.float32",
              "device": "cpu", "storage_offset": 0}},
    {"name": "y", "op": "placeholder", "target": "y", "args": [], "kwargs": {},
     "meta": {"shape": [{"sym": "2**s0"}], "stride": [1], "dtype": "torch.float32",
              "device": "cpu", "storage_offset": 0}},
    {"name": "relu", "op": "call_function", "target": "aten.relu.default",
     "args": [{"node": "y"}], "kwargs": {},
     "meta": {"shape": [{"sym": "2**s0"}], "stride": [1], "dtype": "torch.float32",
              "device": "cpu", "storage_offset": 0}},
    {"name": "neg", "op": "call_function", "target": "aten.neg.default",
     "args": [{"node": "x"}], "kwargs": {},
     "meta": {"shape": [{"sym": "s0"}], "stride": [1], "dtype": "torch.float32",
              "device": "cpu", "storage_offset": 0}},
    {"name": "output", "op": "output", "target": "output",
     "args": [[{"node": "relu"}, {"node": "neg"}]], "kwargs": {}, "meta": null}
  ],
  "guards": {"var_to_val": {"s0": 3}, "var_to_range": {"s0": ["2", "int_oo"]},
             "all_guards": [], "guards_expr": "2 <= L['t0']"}
})";

TEST(SymbolicSizesTest, ASizeOutsideTheIrFallsBackOnlyWhereAKernelNeedsIt) {
  auto proto = fx::ImportCapture(kGraph);
  ASSERT_TRUE(proto.ok()) << proto.status();
  auto g = graph::Import(*proto);
  ASSERT_TRUE(g.ok()) << g.status();
  const canon::CanonicalGraph canonical(*g);
  auto prims = decompose::Decompose(*g, canonical);
  ASSERT_TRUE(prims.ok()) << prims.status();
  int fallbacks = 0, computes = 0;
  for (const decompose::Node& n : prims->nodes) {
    if (n.kind == decompose::Node::Kind::kExtern && n.fallback) {
      ++fallbacks;
      EXPECT_EQ(n.op, "aten.relu.default");
      EXPECT_THAT(n.reason, HasSubstr("cannot compute `(2**s0)`"));
    }
    computes += n.kind == decompose::Node::Kind::kCompute;
  }
  EXPECT_EQ(fallbacks, 1);
  EXPECT_EQ(computes, 1);  // -x
  ASSERT_EQ(prims->inputs.size(), 3u);
  ASSERT_EQ(prims->inputs[2].sizes.size(), 1u);
  EXPECT_FALSE(prims->inputs[2].sizes[0].Computable());
  EXPECT_EQ(prims->inputs[2].sizes[0].ToString(prims->symbols), "(2**s0)");

  auto artifact = testing::CompileForCpu(*proto);
  ASSERT_TRUE(artifact.ok()) << artifact.status();
  EXPECT_EQ(artifact->summary().fallback_steps(), 1);
  EXPECT_EQ(artifact->inputs(2).sizes(0).expr(), "(2**s0)");
  EXPECT_EQ(artifact->outputs(0).view().sizes(0).expr(), "(2**s0)");
  // The runtime evaluates the opaque size, the fallback runs relu eagerly, and both outputs
  // match the interpreter at the hint and at other values of s0.
  for (int64_t s0 : {3, 2, 6}) {
    check::CheckOptions options;
    options.symbols = {{"s0", s0}};
    auto report = check::CheckAgainstInterpreter(*proto, *artifact, options);
    ASSERT_TRUE(report.ok()) << report.status();
    EXPECT_TRUE(report->ok) << "s0=" << s0 << ": " << report->message;
    EXPECT_EQ(report->outputs, 2);
  }
}

// Kernels that index with every new form: a row stride padded to 32 (CeilDiv, as attention
// statistics are), one that is at least 16 (Max), a row length clipped to 4 (Min) and one
// padded to the next multiple of 8 (Mod, as Llama's causal mask is).
constexpr char kFormsGraph[] = R"json({
  "model": "synthetic", "kind": "fw",
  "nodes": [
    {"name": "n", "op": "placeholder", "target": "n", "args": [], "kwargs": {},
     "meta": {"sym": "s0"}},
    {"name": "a", "op": "placeholder", "target": "a", "args": [], "kwargs": {},
     "meta": {"shape": [2, {"sym": "s0"}],
              "stride": [{"sym": "32*CeilToInt(IntTrueDiv(s0, 32))"}, 1],
              "dtype": "torch.float32", "device": "cpu", "storage_offset": 0}},
    {"name": "b", "op": "placeholder", "target": "b", "args": [], "kwargs": {},
     "meta": {"shape": [2, {"sym": "s0"}], "stride": [{"sym": "Max(16, s0)"}, 1],
              "dtype": "torch.float32", "device": "cpu", "storage_offset": 0}},
    {"name": "c", "op": "placeholder", "target": "c", "args": [], "kwargs": {},
     "meta": {"shape": [2, {"sym": "Min(4, s0)"}], "stride": [{"sym": "s0"}, 1],
              "dtype": "torch.float32", "device": "cpu", "storage_offset": 0}},
    {"name": "d", "op": "placeholder", "target": "d", "args": [], "kwargs": {},
     "meta": {"shape": [2, {"sym": "s0 - (Mod(s0, 8)) + 8"}],
              "stride": [{"sym": "Max(1, s0 - (Mod(s0, 8)) + 8)"}, 1],
              "dtype": "torch.float32", "device": "cpu", "storage_offset": 0}},
    {"name": "add", "op": "call_function", "target": "aten.add.Tensor",
     "args": [{"node": "a"}, {"node": "b"}], "kwargs": {},
     "meta": {"shape": [2, {"sym": "s0"}], "stride": [{"sym": "s0"}, 1],
              "dtype": "torch.float32", "device": "cpu", "storage_offset": 0}},
    {"name": "neg", "op": "call_function", "target": "aten.neg.default",
     "args": [{"node": "c"}], "kwargs": {},
     "meta": {"shape": [2, {"sym": "Min(4, s0)"}], "stride": [{"sym": "Min(4, s0)"}, 1],
              "dtype": "torch.float32", "device": "cpu", "storage_offset": 0}},
    {"name": "relu", "op": "call_function", "target": "aten.relu.default",
     "args": [{"node": "d"}], "kwargs": {},
     "meta": {"shape": [2, {"sym": "s0 - (Mod(s0, 8)) + 8"}],
              "stride": [{"sym": "s0 - (Mod(s0, 8)) + 8"}, 1],
              "dtype": "torch.float32", "device": "cpu", "storage_offset": 0}},
    {"name": "output", "op": "output", "target": "output",
     "args": [[{"node": "add"}, {"node": "neg"}, {"node": "relu"}]], "kwargs": {}, "meta": null}
  ],
  "guards": {"var_to_val": {"s0": 40}, "var_to_range": {"s0": ["2", "int_oo"]},
             "all_guards": [], "guards_expr": "2 <= L['t0']"}
})json";

TEST(SymbolicSizesTest, KernelsIndexWithEveryForm) {
  auto proto = fx::ImportCapture(kFormsGraph);
  ASSERT_TRUE(proto.ok()) << proto.status();
  auto artifact = testing::CompileForCpu(*proto);
  ASSERT_TRUE(artifact.ok()) << artifact.status();
  EXPECT_EQ(artifact->summary().fallback_steps(), 0);
  EXPECT_GE(artifact->summary().kernels(), 1);
  for (int64_t s0 : {40, 2, 5, 8, 31, 33, 64}) {
    check::CheckOptions options;
    options.symbols = {{"s0", s0}};
    auto report = check::CheckAgainstInterpreter(*proto, *artifact, options);
    ASSERT_TRUE(report.ok()) << report.status();
    EXPECT_TRUE(report->ok) << "s0=" << s0 << ": " << report->message;
    EXPECT_EQ(report->outputs, 3);
  }
}

}  // namespace
}  // namespace kiln
