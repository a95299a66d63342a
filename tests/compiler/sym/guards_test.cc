#include "compiler/sym/guards.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "absl/strings/match.h"
#include "proto/fx/capture_import.h"
#include "tests/testing/test_env.h"

namespace kiln::sym {
namespace {

using ::kiln::testing::LoadSharedGraph;

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(SymGuardsTest, AutomaticDynamicBackwardGraph) {
  const v1::Graph graph = LoadSharedGraph("mlp_automatic_dynamic2.bw.json");
  absl::StatusOr<Bindings> bindings = BindingsFromGraph(graph);
  ASSERT_TRUE(bindings.ok()) << bindings.status();
  // t0 is primals_3 (s77); t1 is mul_10 (128*s77), bound to its value at the hint.
  EXPECT_THAT(bindings->python_inputs, ElementsAre("s77", ""));
  EXPECT_EQ(bindings->symbols.at("s77"), Value(int64_t{16}));
  EXPECT_EQ(bindings->symbols.at("L['t1']"), Value(int64_t{2048}));

  absl::StatusOr<CompiledGuards> guards = CompiledGuards::Compile(graph.guards());
  ASSERT_TRUE(guards.ok()) << guards.status();
  EXPECT_EQ(guards->size(), 1u);
  GuardCheck at_hints = guards->Check(*bindings);
  EXPECT_TRUE(at_hints.holds) << at_hints.message;
  EXPECT_TRUE(CheckSymbolRanges(graph, *bindings).holds);

  Bindings wrong = *bindings;
  wrong.symbols["L['t1']"] = Value(int64_t{2047});
  GuardCheck miss = guards->Check(wrong);
  EXPECT_FALSE(miss.holds);
  EXPECT_TRUE(miss.error.ok());
  EXPECT_EQ(miss.field, "guards.python_expr");
  EXPECT_EQ(miss.guard, "L['t1'] == 128*L['t0'] and 2 <= L['t0']");
  EXPECT_EQ(miss.message,
            "guard miss: `L['t1'] == 128*L['t0'] and 2 <= L['t0']` is false at L['t1']=2047, "
            "L['t0']=16");

  Bindings small = *bindings;
  small.symbols["s77"] = Value(int64_t{1});
  small.symbols["L['t1']"] = Value(int64_t{128});
  GuardCheck too_small = guards->Check(small);
  EXPECT_FALSE(too_small.holds);
  EXPECT_THAT(too_small.message, HasSubstr("L['t0']=1"));
  GuardCheck range = CheckSymbolRanges(graph, small);
  EXPECT_FALSE(range.holds);
  EXPECT_EQ(range.message, "symbol s77=1 is below its lower bound 2");
  EXPECT_EQ(range.field, "symbols[0].lower");
}

TEST(SymGuardsTest, AutomaticDynamicForwardGraph) {
  const v1::Graph graph = LoadSharedGraph("mlp_automatic_dynamic2.fw.json");
  absl::StatusOr<Bindings> bindings = BindingsFromGraph(graph);
  ASSERT_TRUE(bindings.ok()) << bindings.status();
  EXPECT_THAT(bindings->python_inputs, ElementsAre("s77"));
  absl::StatusOr<CompiledGuards> guards = CompiledGuards::Compile(graph.guards());
  ASSERT_TRUE(guards.ok()) << guards.status();
  EXPECT_TRUE(guards->Check(*bindings).holds);
  Bindings one = *bindings;
  one.symbols["s77"] = Value(int64_t{1});
  GuardCheck miss = guards->Check(one);
  EXPECT_FALSE(miss.holds);
  EXPECT_EQ(miss.message, "guard miss: `2 <= L['t0']` is false at L['t0']=1");
}

TEST(SymGuardsTest, EveryRealGraphHoldsAtItsHints) {
  int graphs = 0;
  for (const std::string& path : kiln::testing::GraphFiles()) {
    absl::StatusOr<std::string> text = kiln::testing::ReadFile(path);
    ASSERT_TRUE(text.ok()) << path;
    absl::StatusOr<v1::Graph> graph = fx::ImportCapture(*text);
    ASSERT_TRUE(graph.ok()) << path << ": " << graph.status();
    absl::StatusOr<Bindings> bindings = BindingsFromGraph(*graph);
    ASSERT_TRUE(bindings.ok()) << path << ": " << bindings.status();
    absl::StatusOr<CompiledGuards> guards = CompiledGuards::Compile(graph->guards());
    ASSERT_TRUE(guards.ok()) << path << ": " << guards.status();
    GuardCheck check = guards->Check(*bindings);
    EXPECT_TRUE(check.holds) << path << ": " << check.message;
    EXPECT_TRUE(CheckSymbolRanges(*graph, *bindings).holds) << path;

    // Every symbolic size and stride in the graph parses and evaluates at the hints.
    for (const v1::Node& node : graph->nodes()) {
      for (const v1::ValueMeta& meta : node.outputs()) {
        if (!meta.has_tensor()) continue;
        for (const auto* list : {&meta.tensor().sizes(), &meta.tensor().strides()}) {
          for (const v1::SymInt& s : *list) {
            if (s.kind_case() != v1::SymInt::kExpr) continue;
            absl::StatusOr<ExprPtr> e = Parse(s.expr());
            ASSERT_TRUE(e.ok()) << path << " " << node.name() << ": " << e.status();
            absl::StatusOr<int64_t> v = EvaluateInt(**e, *bindings);
            ASSERT_TRUE(v.ok()) << path << " " << node.name() << ": " << v.status();
            EXPECT_GT(*v, 0) << s.expr();
          }
        }
      }
    }
    ++graphs;
  }
  EXPECT_GE(graphs, 8);
}

TEST(SymGuardsTest, ShapeEnvGuardsReportTheFirstFailure) {
  v1::Guards proto;
  proto.add_shape_env("s1 >= 2");
  proto.add_shape_env("Eq(s0, 128)");
  proto.add_shape_env("Eq(Mod(s0, 8), 0)");
  proto.set_python_expr("L['t0'] == 128");
  absl::StatusOr<CompiledGuards> guards = CompiledGuards::Compile(proto);
  ASSERT_TRUE(guards.ok()) << guards.status();
  EXPECT_EQ(guards->size(), 4u);

  Bindings b;
  b.symbols = {{"s0", Value(int64_t{128})}, {"s1", Value(int64_t{4})}};
  b.python_inputs = {"s0"};
  EXPECT_TRUE(guards->Check(b).holds);

  b.symbols["s0"] = Value(int64_t{64});
  GuardCheck miss = guards->Check(b);
  EXPECT_FALSE(miss.holds);
  EXPECT_EQ(miss.field, "guards.shape_env[1]");
  EXPECT_EQ(miss.guard, "Eq(s0, 128)");
  EXPECT_EQ(miss.message, "guard miss: `Eq(s0, 128)` is false at s0=64");
}

TEST(SymGuardsTest, UnevaluableGuardIsAMissWithItsError) {
  v1::Guards proto;
  proto.add_shape_env("s0 // s1 == 2");
  proto.add_shape_env("Eq(u0, 3)");
  absl::StatusOr<CompiledGuards> guards = CompiledGuards::Compile(proto);
  ASSERT_TRUE(guards.ok());
  Bindings b;
  b.symbols = {{"s0", Value(int64_t{4})}, {"s1", Value(int64_t{0})}};
  GuardCheck zero = guards->Check(b);
  EXPECT_FALSE(zero.holds);
  EXPECT_EQ(zero.error.code(), absl::StatusCode::kOutOfRange);
  EXPECT_THAT(zero.message, HasSubstr("`s0 // s1 == 2` cannot be evaluated at s0=4, s1=0"));
  b.symbols["s1"] = Value(int64_t{2});
  GuardCheck unbound = guards->Check(b);
  EXPECT_FALSE(unbound.holds);
  EXPECT_EQ(unbound.field, "guards.shape_env[1]");
  EXPECT_EQ(unbound.error.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(unbound.message, HasSubstr("u0=<unbound>"));
}

TEST(SymGuardsTest, ParseErrorsNameTheField) {
  v1::Guards proto;
  proto.add_shape_env("Eq(s0, 1)");
  proto.add_shape_env("Ne(s1, 1)");
  proto.add_shape_env("Eq(s0,");
  absl::StatusOr<CompiledGuards> bad = CompiledGuards::Compile(proto);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("guards.shape_env[2]"));
  EXPECT_THAT(bad.status().message(), HasSubstr("unexpected end of input"));

  v1::Guards python;
  python.set_python_expr("L['t0'] === 3");
  absl::StatusOr<CompiledGuards> bad_python = CompiledGuards::Compile(python);
  ASSERT_FALSE(bad_python.ok());
  EXPECT_THAT(bad_python.status().message(), HasSubstr("guards.python_expr"));
  EXPECT_THAT(bad_python.status().message(),
              HasSubstr("position 10: no token starts with this character: '='"));
}

TEST(SymGuardsTest, RangesWithFloatAndInfiniteBounds) {
  v1::Graph graph;
  v1::Symbol* s = graph.add_symbols();
  s->set_name("zf1");
  s->mutable_lower()->set_float_value(0.5);
  s->mutable_upper()->set_infinite(true);
  v1::Symbol* t = graph.add_symbols();
  t->set_name("s2");
  t->mutable_lower()->set_int_value(2);
  t->mutable_upper()->set_int_value(64);
  Bindings b;
  b.symbols = {{"zf1", Value(0.5)}, {"s2", Value(int64_t{64})}};
  EXPECT_TRUE(CheckSymbolRanges(graph, b).holds);
  b.symbols["zf1"] = Value(0.25);
  EXPECT_EQ(CheckSymbolRanges(graph, b).message, "symbol zf1=0.25 is below its lower bound 0.5");
  b.symbols["zf1"] = Value(1e300);
  b.symbols["s2"] = Value(int64_t{65});
  GuardCheck above = CheckSymbolRanges(graph, b);
  EXPECT_EQ(above.message, "symbol s2=65 is above its upper bound 64");
  EXPECT_EQ(above.field, "symbols[1].upper");
  b.symbols.erase("s2");  // unbound symbols are not checked
  EXPECT_TRUE(CheckSymbolRanges(graph, b).holds);
}

TEST(SymGuardsTest, BindingsFromGraphRejectsBadInputExpressions) {
  v1::Graph graph;
  v1::GraphInput* in = graph.add_inputs();
  in->set_name("x");
  in->mutable_meta()->mutable_symbolic()->set_expr("s0 +");
  absl::StatusOr<Bindings> b = BindingsFromGraph(graph);
  ASSERT_FALSE(b.ok());
  EXPECT_THAT(b.status().message(), HasSubstr("inputs[0] (\"x\") meta.symbolic.expr"));
}

}  // namespace
}  // namespace kiln::sym
