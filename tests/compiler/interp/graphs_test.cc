// The interpreter on the shared real graphs: every graph runs end to end on random inputs
// and produces exactly the metadata it records; and for forward/backward pairs, the
// backward graph's gradients match finite differences of the forward graph.

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "compiler/interp/interpreter.h"
#include "compiler/interp/random_inputs.h"
#include "proto/base/int_expr.h"
#include "proto/fx/capture_import.h"
#include "tests/testing/test_env.h"

namespace kiln::interp {
namespace {

using SymbolMap = std::map<std::string, int64_t, std::less<>>;

v1::Graph Load(const std::string& path) {
  absl::StatusOr<std::string> text = kiln::testing::ReadFile(path);
  EXPECT_TRUE(text.ok()) << text.status();
  absl::StatusOr<v1::Graph> g = fx::ImportCapture(*text);
  EXPECT_TRUE(g.ok()) << path << ": " << g.status();
  return g.ok() ? *g : v1::Graph();
}

std::string GraphPath(const std::string& name) {
  return absl::StrCat(kiln::testing::GraphsDir(), "/", name);
}

// Symbol values small enough to keep the test fast, and satisfying the graphs' guards
// (s77 >= 2); they differ from the capture hints, so this also checks that nothing was
// specialized to the hints.
SymbolMap SmallSymbols(const v1::Graph& g) {
  SymbolMap s;
  for (const v1::Symbol& sym : g.symbols()) s[sym.name()] = 3;
  return s;
}

// The metadata of what an output argument refers to.
const v1::ValueMeta* MetaOf(const v1::Graph& g, const v1::Argument& a) {
  if (!a.has_ref()) return nullptr;
  for (const v1::GraphInput& in : g.inputs()) {
    if (in.name() == a.ref().node()) return &in.meta();
  }
  for (const v1::Node& n : g.nodes()) {
    if (n.name() != a.ref().node()) continue;
    const int i = a.ref().has_output() ? a.ref().output() : 0;
    return i < n.outputs_size() ? &n.outputs(i) : nullptr;
  }
  return nullptr;
}

int64_t Eval(const v1::SymInt& s, const SymbolMap& symbols) {
  if (s.kind_case() == v1::SymInt::kValue) return s.value();
  absl::StatusOr<int64_t> v = EvaluateIntExpr(s.expr(), symbols);
  EXPECT_TRUE(v.ok()) << v.status();
  return v.ok() ? *v : -1;
}

TEST(Graphs, EveryGraphRunsAndMatchesItsMetadata) {
  const std::vector<std::string> files = kiln::testing::GraphFiles();
  ASSERT_FALSE(files.empty());
  for (const std::string& path : files) {
    SCOPED_TRACE(path);
    const v1::Graph g = Load(path);
    RandomInputOptions ro;
    ro.seed = 7;
    ro.symbols = SmallSymbols(g);
    absl::StatusOr<std::vector<Value>> inputs = MakeRandomInputs(g, ro);
    ASSERT_TRUE(inputs.ok()) << inputs.status();
    RunOptions options;
    options.rng_seed = 1234;
    options.symbols = ro.symbols;
    absl::StatusOr<std::vector<Value>> out = interp::Run(g, *inputs, options);
    ASSERT_TRUE(out.ok()) << out.status();
    ASSERT_EQ(g.output().kind_case(), v1::Argument::kList);
    ASSERT_EQ(out->size(), static_cast<size_t>(g.output().list().items_size()));
    for (size_t i = 0; i < out->size(); ++i) {
      SCOPED_TRACE(absl::StrCat("output ", i));
      const v1::Argument& a = g.output().list().items(static_cast<int>(i));
      const v1::ValueMeta* meta = MetaOf(g, a);
      const Value& v = (*out)[i];
      if (meta == nullptr || meta->has_none()) {
        EXPECT_TRUE(std::holds_alternative<None>(v));
        continue;
      }
      if (meta->has_symbolic()) {
        ASSERT_TRUE(std::holds_alternative<int64_t>(v));
        absl::StatusOr<int64_t> want = EvaluateIntExpr(meta->symbolic().expr(), ro.symbols);
        ASSERT_TRUE(want.ok());
        EXPECT_EQ(std::get<int64_t>(v), *want);
        continue;
      }
      ASSERT_TRUE(std::holds_alternative<Tensor>(v));
      const Tensor& t = std::get<Tensor>(v);
      const v1::TensorMeta& m = meta->tensor();
      EXPECT_EQ(t.dtype(), m.dtype());
      ASSERT_EQ(t.dim(), m.sizes_size());
      for (int d = 0; d < m.sizes_size(); ++d) {
        EXPECT_EQ(t.size(d), Eval(m.sizes(d), ro.symbols)) << "size " << d;
        EXPECT_EQ(t.stride(d), Eval(m.strides(d), ro.symbols)) << "stride " << d;
      }
      EXPECT_EQ(t.storage_offset(), Eval(m.storage_offset(), ro.symbols));
      for (double x : t.ToDoubles()) {
        ASSERT_TRUE(std::isfinite(x));
      }
    }
  }
}

// Runs a forward graph in exact (unrounded) arithmetic.
std::vector<Value> RunExact(const v1::Graph& g, const std::vector<Value>& inputs,
                            const SymbolMap& symbols) {
  RunOptions options;
  options.rng_seed = 99;
  options.rng_offset = 5;
  options.round_to_dtype = false;
  options.symbols = symbols;
  absl::StatusOr<std::vector<Value>> out = Run(g, inputs, options);
  EXPECT_TRUE(out.ok()) << out.status();
  return out.ok() ? *out : std::vector<Value>();
}

double Dot(const Tensor& a, const Tensor& b) {
  const std::vector<double> x = a.ToDoubles();
  const std::vector<double> y = b.ToDoubles();
  EXPECT_EQ(x.size(), y.size());
  double s = 0;
  for (size_t i = 0; i < x.size() && i < y.size(); ++i) s += x[i] * y[i];
  return s;
}

Tensor Axpy(const Tensor& x, double a, const Tensor& d) {
  ExactFloatScope exact;
  const std::vector<double> xv = x.ToDoubles();
  const std::vector<double> dv = d.ToDoubles();
  std::vector<double> r(xv.size());
  for (size_t i = 0; i < r.size(); ++i) r[i] = xv[i] + a * dv[i];
  return Tensor::FromDoubles(x.sizes(), x.dtype(), r).CloneStrided(x.strides(), x.storage_offset());
}

// Checks a forward/backward pair: with the forward's saved values and a random tangent,
// the backward's gradients dotted with a random direction over every floating input must
// equal the central difference of <tangent, forward outputs> along that direction.
void CheckGradients(const std::string& fw_name, const std::string& bw_name) {
  const v1::Graph fw = Load(GraphPath(fw_name));
  const v1::Graph bw = Load(GraphPath(bw_name));
  const SymbolMap symbols = SmallSymbols(fw);
  RandomInputOptions ro;
  ro.seed = 3;
  ro.symbols = symbols;
  absl::StatusOr<std::vector<Value>> primals = MakeRandomInputs(fw, ro);
  ASSERT_TRUE(primals.ok()) << primals.status();
  const std::vector<Value> fw_out = RunExact(fw, *primals, symbols);
  ASSERT_EQ(fw_out.size(), static_cast<size_t>(fw.output().list().items_size()));

  // Forward outputs by the name of the value they return; the backward's saved inputs
  // carry the same names.
  std::map<std::string, Value> by_name;
  for (int i = 0; i < fw.output().list().items_size(); ++i) {
    const v1::Argument& a = fw.output().list().items(i);
    if (a.has_ref()) by_name[a.ref().node()] = fw_out[static_cast<size_t>(i)];
  }
  std::vector<Value> bw_in;
  std::vector<Tensor> tangents;
  ro.seed = 11;
  absl::StatusOr<std::vector<Value>> random_bw = MakeRandomInputs(bw, ro);
  ASSERT_TRUE(random_bw.ok()) << random_bw.status();
  for (int i = 0; i < bw.inputs_size(); ++i) {
    const std::string& name = bw.inputs(i).name();
    if (absl::StartsWith(name, "tangents_")) {
      tangents.push_back(std::get<Tensor>((*random_bw)[static_cast<size_t>(i)]));
      bw_in.push_back(tangents.back());
      continue;
    }
    auto it = by_name.find(name);
    ASSERT_NE(it, by_name.end()) << "the forward does not return " << name;
    bw_in.push_back(it->second);
  }
  RunOptions bw_options;
  bw_options.round_to_dtype = false;
  bw_options.symbols = symbols;
  absl::StatusOr<std::vector<Value>> grads = Run(bw, bw_in, bw_options);
  ASSERT_TRUE(grads.ok()) << grads.status();
  ASSERT_EQ(grads->size(), primals->size());

  // The tangents pair with the forward's first outputs (the user outputs).
  auto objective = [&](const std::vector<Value>& inputs) {
    const std::vector<Value> out = RunExact(fw, inputs, symbols);
    double s = 0;
    for (size_t i = 0; i < tangents.size(); ++i) s += Dot(std::get<Tensor>(out[i]), tangents[i]);
    return s;
  };
  ro.seed = 17;
  absl::StatusOr<std::vector<Value>> direction = MakeRandomInputs(fw, ro);
  ASSERT_TRUE(direction.ok());
  // Random weights make third derivatives large, so the central difference is
  // Richardson-extrapolated: (4 D(h/2) - D(h)) / 3 cancels its h^2 error term.
  const double h = 1e-4;
  std::vector<Value> plus = *primals;
  std::vector<Value> minus = *primals;
  std::vector<Value> half_plus = *primals;
  std::vector<Value> half_minus = *primals;
  double predicted = 0;
  int checked = 0;
  for (size_t i = 0; i < primals->size(); ++i) {
    const auto* x = std::get_if<Tensor>(&(*primals)[i]);
    if (x == nullptr || !IsFloating(x->dtype())) continue;
    const Tensor& d = std::get<Tensor>((*direction)[i]);
    const auto* g = std::get_if<Tensor>(&(*grads)[i]);
    ASSERT_NE(g, nullptr) << "no gradient for floating input " << i;
    ASSERT_EQ(g->sizes(), x->sizes()) << "gradient " << i;
    predicted += Dot(*g, d);
    plus[i] = Axpy(*x, h, d);
    minus[i] = Axpy(*x, -h, d);
    half_plus[i] = Axpy(*x, h / 2, d);
    half_minus[i] = Axpy(*x, -h / 2, d);
    ++checked;
  }
  ASSERT_GT(checked, 0);
  const double d_h = (objective(plus) - objective(minus)) / (2 * h);
  const double d_half = (objective(half_plus) - objective(half_minus)) / h;
  const double numeric = (4 * d_half - d_h) / 3;
  EXPECT_NEAR(numeric, predicted, 1e-6 * std::max(1.0, std::fabs(predicted)))
      << fw_name << ": " << checked << " inputs";
}

// Under sanitizers the dynamic MLP's check alone runs: the other two (4 and 2 minutes there)
// take the same interpreter paths, which EveryGraphRunsAndMatchesItsMetadata runs as well.
TEST(Graphs, MlpBackwardMatchesFiniteDifferences) {
  if (kiln::testing::kSanitized) GTEST_SKIP() << "the dynamic MLP's check covers it";
  CheckGradients("mlp_fp32.fw.json", "mlp_fp32.bw.json");
}

TEST(Graphs, DynamicMlpBackwardMatchesFiniteDifferences) {
  CheckGradients("mlp_automatic_dynamic2.fw.json", "mlp_automatic_dynamic2.bw.json");
}

TEST(Graphs, NanoGptBackwardMatchesFiniteDifferences) {
  if (kiln::testing::kSanitized) GTEST_SKIP() << "the dynamic MLP's check covers it";
  CheckGradients("nanogpt_fp32.fw.json", "nanogpt_fp32.bw.json");
}

// A graph with an op the interpreter does not implement fails naming the node and op.
TEST(Graphs, UnsupportedOpNamesNodeAndTarget) {
  v1::Graph g;
  v1::GraphInput* in = g.add_inputs();
  in->set_name("x");
  v1::TensorMeta* m = in->mutable_meta()->mutable_tensor();
  m->set_dtype(v1::DTYPE_FLOAT32);
  m->add_sizes()->set_value(2);
  m->add_strides()->set_value(1);
  v1::Node* n = g.add_nodes();
  n->set_name("weird");
  n->set_target("aten.not_an_op.default");
  n->add_args()->mutable_ref()->set_node("x");
  g.mutable_output()->mutable_list()->add_items()->mutable_ref()->set_node("weird");
  absl::StatusOr<std::vector<Value>> r =
      interp::Run(g, {Value(Tensor::Zeros({2}, v1::DTYPE_FLOAT32))});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_TRUE(absl::StrContains(r.status().message(), "weird"));
  EXPECT_TRUE(absl::StrContains(r.status().message(), "aten.not_an_op.default"));
}

// Size expressions in metadata are checked, never trusted: one nested too deeply is
// INVALID_ARGUMENT (not a stack overflow) and one that leaves int64 is OUT_OF_RANGE (not a
// wrapped size), naming the input.
TEST(Graphs, SizeExpressionsTooDeepOrOverflowingAreErrors) {
  auto graph = [](const std::string& y_size) {
    v1::Graph g;
    for (const char* name : {"x", "y"}) {
      v1::GraphInput* in = g.add_inputs();
      in->set_name(name);
      v1::TensorMeta* m = in->mutable_meta()->mutable_tensor();
      m->set_dtype(v1::DTYPE_FLOAT32);
      m->add_sizes()->set_expr(name == std::string("x") ? "s0" : y_size);
      m->add_strides()->set_value(1);
    }
    v1::Symbol* s0 = g.add_symbols();
    s0->set_name("s0");
    s0->set_kind(v1::SYM_KIND_INT);
    s0->set_int_hint(2);
    g.mutable_output()->mutable_list()->add_items()->mutable_ref()->set_node("x");
    return g;
  };
  const std::vector<Value> inputs = {Value(Tensor::Zeros({2}, v1::DTYPE_FLOAT32)),
                                     Value(Tensor::Zeros({2}, v1::DTYPE_FLOAT32))};
  ASSERT_TRUE(interp::Run(graph("s0"), inputs).ok());
  const std::string deep = std::string(100000, '(') + "s0" + std::string(100000, ')');
  absl::StatusOr<std::vector<Value>> r = interp::Run(graph(deep), inputs);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(r.status().message(), "input y")) << r.status();
  EXPECT_TRUE(absl::StrContains(r.status().message(), "nesting too deep")) << r.status();
  r = interp::Run(graph("s0*4611686018427387904"), inputs);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_TRUE(absl::StrContains(r.status().message(), "input y")) << r.status();
  EXPECT_TRUE(absl::StrContains(r.status().message(), "integer overflow")) << r.status();
}

// The size forms of the corpus's dynamic graphs (nanoGPT's and Llama's attention statistics,
// Llama's causal mask).
TEST(Graphs, SizeExpressionsOfDynamicGraphs) {
  const std::map<std::string, int64_t, std::less<>> s = {{"s50", 65}, {"s75", 64}};
  EXPECT_EQ(*EvaluateIntExpr("32*CeilToInt(IntTrueDiv(s50, 32))", s), 96);
  EXPECT_EQ(*EvaluateIntExpr("32*CeilToInt(IntTrueDiv(s75, 32))", s), 64);
  EXPECT_EQ(*EvaluateIntExpr("FloorToInt(IntTrueDiv(s50, 32))", s), 2);
  EXPECT_EQ(*EvaluateIntExpr("CeilToInt(IntTrueDiv(-s50, 32))", s), -2);
  EXPECT_EQ(*EvaluateIntExpr("4*Max(1, 32*CeilToInt(IntTrueDiv(s50, 32)))", s), 384);
  EXPECT_EQ(*EvaluateIntExpr("s50**2", s), 4225);
  EXPECT_EQ(*EvaluateIntExpr("2*s50**2 + 1", s), 8451);
  EXPECT_EQ(*EvaluateIntExpr("-2**2", s), -4);
  EXPECT_EQ(*EvaluateIntExpr("s50*Max(1, s50 - (Mod(s50, 8)) + 8)", s), 65 * 72);
  EXPECT_FALSE(EvaluateIntExpr("CeilToInt(IntTrueDiv(s50, 0))", s).ok());
  EXPECT_FALSE(EvaluateIntExpr("s50**-1", s).ok());
}

}  // namespace
}  // namespace kiln::interp
