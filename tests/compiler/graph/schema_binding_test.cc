// Binding calls to schemas on their own: which argument fills which parameter, type checks
// and their messages, defaults as arguments, and that a failed binding appends nothing.

#include "compiler/graph/schema_binding.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "compiler/graph/import.h"
#include "proto/error_detail.h"
#include "tests/compiler/graph_testing.h"

namespace kiln::graph {
namespace {

using ::testing::HasSubstr;

const ops::OpSchema& SchemaOf(absl::string_view target) {
  const ops::Op* op = ops::FindOp(target);
  if (op == nullptr) std::abort();
  return op->schema;
}

// The field a binding error names, and its description.
std::pair<std::string, std::string> FieldOf(const absl::Status& s) {
  std::optional<v1::ErrorDetail> d = ErrorDetailOf(s);
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  if (!d.has_value() || d->violations_size() != 1) return {};
  EXPECT_EQ(d->violations(0).node(), "n");
  return {d->violations(0).field(), d->violations(0).description()};
}

Arg Int(int64_t v) {
  Arg a;
  a.kind = ArgKind::kInt;
  a.int_value = v;
  return a;
}

Arg Bool(bool v) {
  Arg a;
  a.kind = ArgKind::kBool;
  a.int_value = v;
  return a;
}

Arg NoneArg() { return Arg(); }

Arg RefTo(uint32_t node) {
  Arg a;
  a.kind = ArgKind::kRef;
  a.ref = Ref{node, Ref::kWhole};
  return a;
}

TEST(BindParamsTest, PositionalThenKeywords) {
  const ops::OpSchema& addmm = SchemaOf("aten.addmm.default");  // self, mat1, mat2, *, beta, alpha
  const std::vector<std::string> keywords = {"alpha"};
  absl::StatusOr<std::vector<ParamSource>> s = BindParams("n", addmm, 3, keywords);
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_EQ(s->size(), 5u);
  EXPECT_EQ((*s)[2].from, ParamSource::From::kPositional);
  EXPECT_EQ((*s)[2].index, 2);
  EXPECT_EQ((*s)[2].field, "args[2]");
  EXPECT_EQ((*s)[3].from, ParamSource::From::kDefault);
  EXPECT_EQ((*s)[4].from, ParamSource::From::kKeyword);
  EXPECT_EQ((*s)[4].index, 0);
  EXPECT_EQ((*s)[4].field, "kwargs.alpha");
}

TEST(BindParamsTest, RefusesWhatTheSchemaDoesNotTake) {
  const ops::OpSchema& addmm = SchemaOf("aten.addmm.default");
  // beta and alpha are keyword-only.
  auto [field, why] = FieldOf(BindParams("n", addmm, 4, {}).status());
  EXPECT_EQ(field, "args[3]");
  EXPECT_THAT(why, HasSubstr("takes at most 3 positional arguments, got 4"));

  const std::vector<std::string> gamma = {"gamma"};
  std::tie(field, why) = FieldOf(BindParams("n", addmm, 3, gamma).status());
  EXPECT_EQ(field, "kwargs.gamma");
  EXPECT_THAT(why, HasSubstr("no parameter \"gamma\" (parameters: self, mat1, mat2, beta, alpha)"));

  const std::vector<std::string> mat1 = {"mat1"};
  std::tie(field, why) = FieldOf(BindParams("n", addmm, 2, mat1).status());
  EXPECT_EQ(field, "kwargs.mat1");
  EXPECT_THAT(why, HasSubstr("also given positionally"));
}

TEST(DefaultArgTest, EveryKindOfDefault) {
  std::vector<Arg> pool(3);
  std::vector<std::string> interned;
  auto intern = [&](const std::string& s) {
    interned.push_back(s);
    return static_cast<uint32_t>(interned.size());
  };
  // max_pool2d: int[2] padding=0 is the list [0, 0], appended to the pool.
  const ops::OpSchema& pool2d = SchemaOf("aten.max_pool2d_with_indices.default");
  const Arg padding = DefaultArg(pool2d.params[3], intern, pool);
  EXPECT_EQ(padding.kind, ArgKind::kList);
  EXPECT_EQ(padding.list.begin, 3u);
  ASSERT_EQ(padding.list.size, 2u);
  ASSERT_EQ(pool.size(), 5u);
  EXPECT_EQ(pool[3].kind, ArgKind::kInt);
  EXPECT_EQ(pool[4].int_value, 0);
  EXPECT_EQ(DefaultArg(pool2d.params[5], intern, pool).kind, ArgKind::kBool);  // ceil_mode

  const Arg approximate = DefaultArg(SchemaOf("aten.gelu.default").params[1], intern, pool);
  EXPECT_EQ(approximate.kind, ArgKind::kString);
  EXPECT_EQ(interned, std::vector<std::string>{"none"});
  EXPECT_EQ(approximate.string_id, 1u);

  const ops::OpSchema& contiguous = SchemaOf("aten.contiguous.default");
  const Arg format = DefaultArg(contiguous.params[1], intern, pool);
  EXPECT_EQ(format.kind, ArgKind::kMemoryFormat);
  EXPECT_EQ(format.int_value, v1::MEMORY_FORMAT_CONTIGUOUS);

  const ops::OpSchema& leaky = SchemaOf("aten.leaky_relu.default");
  const Arg slope = DefaultArg(leaky.params[1], intern, pool);
  EXPECT_EQ(slope.kind, ArgKind::kFloat);
  EXPECT_DOUBLE_EQ(slope.float_value, 0.01);
  // An integral default of a Scalar stays an int, as a caller writing it out would pass.
  EXPECT_EQ(DefaultArg(SchemaOf("aten.add.Tensor").params[2], intern, pool).kind, ArgKind::kInt);
  EXPECT_EQ(DefaultArg(SchemaOf("aten.sum.default").params[1], intern, pool).kind, ArgKind::kNone);
}

class CheckArgTypeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<Graph> g = Import(testing::SmallGraph());  // x, t, mm, s
    ASSERT_TRUE(g.ok()) << g.status();
    graph_ = *std::move(g);
  }
  absl::Status Check(absl::string_view target, size_t param, const Arg& a) {
    return CheckArgType(graph_, "n", "args[0]", SchemaOf(target).params[param], a);
  }
  Graph graph_;
};

TEST_F(CheckArgTypeTest, AcceptsWhatPythonAccepts) {
  EXPECT_TRUE(Check("aten.mm.default", 0, RefTo(0)).ok());
  EXPECT_TRUE(Check("aten.clamp.default", 1, NoneArg()).ok()) << "Scalar? min takes None";
  EXPECT_TRUE(Check("aten.sum.dim_IntList", 1, Int(1)).ok()) << "int[1] dim takes a bare int";
  EXPECT_TRUE(Check("aten.add.Tensor", 2, Bool(true)).ok()) << "a Scalar takes a bool";
  EXPECT_TRUE(Check("aten.elu.default", 1, Int(2)).ok()) << "a Scalar takes an int";
}

TEST_F(CheckArgTypeTest, NamesTheParameterAndWhatItGot) {
  auto [field, why] = FieldOf(Check("aten.sym_size.int", 1, RefTo(0)));
  EXPECT_EQ(field, "args[0]");
  EXPECT_THAT(why, HasSubstr("parameter \"dim\" expects int, got a tensor (\"x\")"));
  std::tie(field, why) = FieldOf(Check("aten.mm.default", 1, Int(3)));
  EXPECT_THAT(why, HasSubstr("parameter \"mat2\" expects Tensor, got int 3"));
  std::tie(field, why) = FieldOf(Check("aten.mm.default", 1, NoneArg()));
  EXPECT_THAT(why, HasSubstr("expects Tensor, got None"));
  // A Generator is accepted only as None.
  std::tie(field, why) = FieldOf(Check("aten.bernoulli.default", 1, Int(0)));
  EXPECT_THAT(why, HasSubstr("expects Generator?, got int 0"));
}

TEST_F(CheckArgTypeTest, BindingAppendsOnlyWhenEveryCheckPasses) {
  const ops::OpSchema& sum = SchemaOf("aten.sum.dim_IntList");  // self, dim, keepdim, *, dtype
  std::vector<Arg> pool;
  auto intern = [](const std::string&) { return uint32_t{0}; };
  const std::vector<Arg> positional = {RefTo(2), Int(1)};
  ASSERT_TRUE(BindToSchema(graph_, "n", sum, CallArgs{positional, {}, {}}, intern, pool).ok());
  ASSERT_EQ(pool.size(), 4u);
  EXPECT_EQ(pool[0].kind, ArgKind::kRef);
  EXPECT_EQ(pool[1].int_value, 1);
  EXPECT_EQ(pool[2].kind, ArgKind::kBool);  // keepdim=False
  EXPECT_EQ(pool[3].kind, ArgKind::kNone);  // dtype=None

  pool.clear();
  const std::vector<Arg> wrong = {Int(1), Int(1)};
  auto [field, why] =
      FieldOf(BindToSchema(graph_, "n", sum, CallArgs{wrong, {}, {}}, intern, pool));
  EXPECT_EQ(field, "args[0]");
  EXPECT_TRUE(pool.empty());
  const std::vector<Arg> missing = {RefTo(2)};
  std::tie(field, why) =
      FieldOf(BindToSchema(graph_, "n", sum, CallArgs{missing, {}, {}}, intern, pool));
  EXPECT_EQ(field, "args[1]");
  EXPECT_THAT(why, HasSubstr("needs argument \"dim\" (int[]?)"));
  EXPECT_TRUE(pool.empty());
}

Arg Float(double v) {
  Arg a;
  a.kind = ArgKind::kFloat;
  a.float_value = v;
  return a;
}

const ops::Op& OpOf(absl::string_view target) {
  const ops::Op* op = ops::FindOp(target);
  if (op == nullptr) std::abort();
  return *op;
}

std::string ScalarOverloadOf(absl::string_view target, std::vector<Arg> positional,
                             std::vector<Arg> keyword = {},
                             std::vector<std::string> keyword_names = {}) {
  const ops::Op* op =
      ScalarOverload(OpOf(target), CallArgs{positional, keyword, keyword_names});
  return op == nullptr ? "" : op->target();
}

// A Python number where the schema says Tensor binds to the op's Scalar overload, whose type
// promotion is PyTorch's for wrapped numbers.
TEST(ScalarOverloadTest, NumbersForTensorsPickTheScalarOverload) {
  EXPECT_EQ(ScalarOverloadOf("aten.mul.Tensor", {RefTo(0), Float(0.5)}), "aten.mul.Scalar");
  EXPECT_EQ(ScalarOverloadOf("aten.add.Tensor", {RefTo(0), Int(1)}, {Int(2)}, {"alpha"}),
            "aten.add.Scalar");
  EXPECT_EQ(ScalarOverloadOf("aten.div.Tensor", {RefTo(0), Float(8.0)}), "aten.div.Scalar");
  EXPECT_EQ(ScalarOverloadOf("aten.eq.Tensor", {RefTo(0), Bool(true)}), "aten.eq.Scalar");
  EXPECT_EQ(ScalarOverloadOf("aten.pow.Tensor_Tensor", {RefTo(0), Float(2.0)}),
            "aten.pow.Tensor_Scalar");
  EXPECT_EQ(ScalarOverloadOf("aten.where.self", {RefTo(0), RefTo(1), Float(0.0)}),
            "aten.where.ScalarOther");
  EXPECT_EQ(ScalarOverloadOf("aten.where.self", {RefTo(0), Float(0.0), RefTo(1)}),
            "aten.where.ScalarSelf");
}

TEST(ScalarOverloadTest, TensorsAndOpsWithoutAScalarOverloadStay) {
  EXPECT_EQ(ScalarOverloadOf("aten.mul.Tensor", {RefTo(0), RefTo(1)}), "");
  EXPECT_EQ(ScalarOverloadOf("aten.mul.Scalar", {RefTo(0), Float(0.5)}), "");
  // Self as a number: no overload of mul takes a Scalar self.
  EXPECT_EQ(ScalarOverloadOf("aten.mul.Tensor", {Float(0.5), RefTo(0)}), "");
  // A call that does not bind is left for binding to report.
  EXPECT_EQ(ScalarOverloadOf("aten.mul.Tensor", {RefTo(0), Float(0.5), Int(3)}), "");
}

}  // namespace
}  // namespace kiln::graph
