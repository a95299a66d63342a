// The aten schema language as ParseOpSchema reads it: parameters, types, defaults,
// keyword-only parameters, alias annotations, results, and what it refuses.

#include "proto/ops/op_schema.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "kiln/v1/graph.pb.h"

namespace kiln::ops {
namespace {

using ::testing::HasSubstr;

OpSchema MustParse(absl::string_view text) {
  absl::StatusOr<OpSchema> s = ParseOpSchema(text);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *std::move(s) : OpSchema();
}

TEST(OpSchemaTest, ParametersTypesAndKeywords) {
  const OpSchema s = MustParse(
      "aten.addmm.default(Tensor self, Tensor mat1, Tensor mat2, *, Scalar beta=1, "
      "Scalar alpha=1) -> Tensor");
  EXPECT_EQ(s.target, "aten.addmm.default");
  ASSERT_EQ(s.params.size(), 5u);
  EXPECT_EQ(s.params[1].name, "mat1");
  EXPECT_EQ(s.params[1].type, ArgType::kTensor);
  EXPECT_FALSE(s.params[2].keyword_only);
  EXPECT_TRUE(s.params[3].keyword_only);
  EXPECT_EQ(s.params[3].type, ArgType::kScalar);
  EXPECT_TRUE(s.params[4].has_default);
  EXPECT_EQ(s.params[4].default_value.kind, DefaultValue::Kind::kInt);
  EXPECT_EQ(s.params[4].default_value.int_value, 1);
  EXPECT_EQ(s.ParamIndex("alpha"), 4);
  EXPECT_EQ(s.ParamIndex("gamma"), -1);
  EXPECT_EQ(s.returns, ReturnKind::kTensors);
  EXPECT_EQ(s.num_returns, 1);
  EXPECT_EQ(s.ReturnAliasParam(), -1);
}

TEST(OpSchemaTest, ListsOptionalsAndDefaults) {
  const OpSchema s = MustParse(
      "aten.max_pool2d_with_indices.default(Tensor self, int[2] kernel_size, int[2] stride=[], "
      "int[2] padding=0, int[2] dilation=1, bool ceil_mode=False, Tensor?[] indices, "
      "SymInt? start=None, str mode=\"none\", float eps=1e-05, "
      "MemoryFormat memory_format=contiguous_format) -> (Tensor, Tensor)");
  EXPECT_EQ(s.params[1].type, ArgType::kIntList);
  EXPECT_EQ(s.params[2].default_value.kind, DefaultValue::Kind::kIntList);
  EXPECT_TRUE(s.params[2].default_value.list.empty());
  // `int[2] padding=0` is [0, 0].
  EXPECT_EQ(s.params[3].default_value.list, (std::vector<int64_t>{0, 0}));
  EXPECT_EQ(s.params[4].default_value.list, (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(s.params[5].default_value.kind, DefaultValue::Kind::kBool);
  EXPECT_EQ(s.params[5].default_value.int_value, 0);
  EXPECT_EQ(s.params[6].type, ArgType::kOptTensorList);
  EXPECT_FALSE(s.params[6].optional) << "the elements are optional, not the list";
  EXPECT_EQ(s.params[7].type, ArgType::kSymInt);
  EXPECT_TRUE(s.params[7].optional);
  EXPECT_EQ(s.params[7].default_value.kind, DefaultValue::Kind::kNone);
  EXPECT_EQ(s.params[8].default_value.text, "none");
  EXPECT_EQ(s.params[9].default_value.kind, DefaultValue::Kind::kFloat);
  EXPECT_DOUBLE_EQ(s.params[9].default_value.float_value, 1e-05);
  EXPECT_EQ(s.params[10].default_value.kind, DefaultValue::Kind::kEnum);
  EXPECT_EQ(s.params[10].default_value.int_value, v1::MEMORY_FORMAT_CONTIGUOUS);
  EXPECT_EQ(s.num_returns, 2);
}

TEST(OpSchemaTest, AliasAnnotations) {
  const OpSchema view = MustParse("aten.view.default(Tensor(a) self, SymInt[] size) -> Tensor(a)");
  EXPECT_EQ(view.params[0].alias_set, "a");
  EXPECT_FALSE(view.params[0].mutated);
  EXPECT_EQ(view.return_alias_set, "a");
  EXPECT_EQ(view.ReturnAliasParam(), 0);

  const OpSchema copy = MustParse(
      "aten.copy_.default(Tensor(a!) self, Tensor src, bool non_blocking=False) -> Tensor(a!)");
  EXPECT_TRUE(copy.params[0].mutated);
  EXPECT_FALSE(copy.params[1].mutated);
  EXPECT_EQ(copy.ReturnAliasParam(), 0);

  const OpSchema split = MustParse(
      "aten.split.Tensor(Tensor(a -> *) self, SymInt split_size, int dim=0) -> Tensor(a)[]");
  EXPECT_EQ(split.params[0].alias_set, "a");
  EXPECT_FALSE(split.params[0].mutated);
  EXPECT_EQ(split.returns, ReturnKind::kTensorList);
  EXPECT_EQ(split.ReturnAliasParam(), 0);
}

TEST(OpSchemaTest, ResultsAndTheirNames) {
  const OpSchema attention = MustParse(
      "aten._scaled_dot_product_cudnn_attention.default(Tensor query) -> (Tensor output, "
      "Tensor logsumexp, SymInt max_q, Tensor)");
  EXPECT_EQ(attention.returns, ReturnKind::kTensors);
  EXPECT_EQ(attention.num_returns, 4);
  EXPECT_EQ(attention.return_names, (std::vector<std::string>{"output", "logsumexp", "max_q", ""}));
  EXPECT_EQ(attention.ReturnIndex("max_q"), 2);
  EXPECT_EQ(attention.ReturnIndex(""), -1);
  EXPECT_EQ(MustParse("aten.sym_size.int(Tensor self, int dim) -> SymInt").returns,
            ReturnKind::kScalar);
  EXPECT_EQ(MustParse("operator.getitem(Any a, int b) -> Tuple").returns, ReturnKind::kTuple);
  const OpSchema nothing = MustParse("aten._assert_scalar.default(Scalar self, str m) -> ()");
  EXPECT_EQ(nothing.returns, ReturnKind::kTensors);
  EXPECT_EQ(nothing.num_returns, 0);
  EXPECT_EQ(MustParse("x.coalesced.default(Tensor[] inputs) -> Tensor[]").returns,
            ReturnKind::kTensorList);
}

TEST(OpSchemaTest, RefusesMalformedSchemas) {
  const struct {
    const char* text;
    const char* why;
  } cases[] = {
      {"aten.x.default Tensor self", "expected NAME(PARAMS) -> RETURNS"},
      {"(Tensor self) -> Tensor", "without a name"},
      {"aten.x.default(Tensor) -> Tensor", "without a name"},
      {"aten.x.default(Tnesor self) -> Tensor", "unknown type \"Tnesor\""},
      {"aten.x.default(Tensor(a self) -> Tensor", "unclosed alias annotation"},
      {"aten.x.default(int?[] dims) -> Tensor", "only Tensor?[]"},
      {"aten.x.default(str[] names) -> Tensor", "unsupported list type"},
      {"aten.x.default(int[x] dims) -> Tensor", "bad list size"},
      {"aten.x.default(int[] dims=3) -> Tensor", "bad list default"},
      {"aten.x.default(int[2] dims=[1, a]) -> Tensor", "bad list default"},
      {"aten.x.default(float eps=tiny) -> Tensor", "unreadable default"},
      {"aten.x.default(Tensor self, Tensor self) -> Tensor", "named twice"},
      {"aten.x.default(Tensor self, *, int a, *, int b) -> Tensor", "`*` given twice"},
      {"aten.x.default(Tensor self) -> str", "unsupported result type"},
      {"aten.x.default(Tensor self) -> ", "no result type"},
      {"aten.x.default(Tensor self) -> (Tensor a, Tensor b", "unclosed result tuple"},
  };
  for (const auto& c : cases) {
    absl::StatusOr<OpSchema> s = ParseOpSchema(c.text);
    ASSERT_FALSE(s.ok()) << c.text;
    EXPECT_TRUE(absl::IsInvalidArgument(s.status())) << c.text;
    EXPECT_THAT(s.status().message(), HasSubstr(c.why)) << c.text;
  }
}

}  // namespace
}  // namespace kiln::ops
