#include "compiler/tools/check/runtime_check.h"

#include <google/protobuf/text_format.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/strings/match.h"
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

// An artifact the runtime refuses is an error, not a report.
TEST(RuntimeCheckTest, ArtifactTheRuntimeRefusesIsAnError) {
  const v1::Graph graph = MulGraph(2);
  auto artifact = testing::CompileForCpu(graph);
  ASSERT_TRUE(artifact.ok()) << artifact.status();
  artifact->set_target("cuda:sm_90");
  auto report = CheckAgainstInterpreter(graph, *artifact);
  EXPECT_EQ(report.status().code(), absl::StatusCode::kInvalidArgument);
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
