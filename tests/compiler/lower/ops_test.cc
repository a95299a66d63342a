// Every lowered op, alone in a graph, compiled for x86-64 and compared with the reference
// interpreter on fresh random inputs: broadcasting, non-contiguous strides, storage offsets,
// sizes 0, 1 and odd, the dtypes each op supports. Outputs are poisoned before each run.

#include <algorithm>
#include <functional>
#include <limits>
#include <string>
#include <variant>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "compiler/codegen/target.h"
#include "compiler/compile.h"
#include "compiler/decompose/decompose.h"
#include "compiler/graph/import.h"
#include "compiler/interp/interpreter.h"
#include "compiler/tools/check/runtime_check.h"
#include "gtest/gtest.h"
#include "proto/ops/registry.h"
#include "tests/compiler/graph_testing.h"
#include "tests/compiler/training_ops.h"
#include "tests/testing/test_env.h"

namespace kiln {
namespace {

struct TensorSpec {
  std::vector<int64_t> sizes;
  v1::DType dtype = v1::DTYPE_FLOAT32;
  std::vector<int64_t> strides;  // empty: contiguous
  int64_t offset = 0;
};

// A Tensor[] argument.
using TensorList = std::vector<TensorSpec>;

using ArgSpec = std::variant<TensorSpec, v1::Argument, TensorList>;

TensorSpec T(std::vector<int64_t> sizes, v1::DType dtype = v1::DTYPE_FLOAT32,
             std::vector<int64_t> strides = {}, int64_t offset = 0) {
  return TensorSpec{std::move(sizes), dtype, std::move(strides), offset};
}
v1::Argument I(int64_t v) {
  v1::Argument a;
  a.set_int_value(v);
  return a;
}
v1::Argument F(double v) {
  v1::Argument a;
  a.set_float_value(v);
  return a;
}
v1::Argument B(bool v) {
  v1::Argument a;
  a.set_bool_value(v);
  return a;
}
v1::Argument S(const std::string& v) {
  v1::Argument a;
  a.set_string_value(v);
  return a;
}
v1::Argument D(v1::DType v) {
  v1::Argument a;
  a.set_dtype(v);
  return a;
}
v1::Argument None() {
  v1::Argument a;
  a.mutable_none();
  return a;
}
v1::Argument Ints(std::vector<int64_t> v) {
  v1::Argument a;
  a.mutable_list();  // an empty list is still a list
  for (int64_t x : v) a.mutable_list()->add_items()->set_int_value(x);
  return a;
}
v1::Argument Bools(std::vector<bool> v) {
  v1::Argument a;
  for (bool x : v) a.mutable_list()->add_items()->set_bool_value(x);
  return a;
}

std::vector<int64_t> Contiguous(const std::vector<int64_t>& sizes) {
  std::vector<int64_t> s(sizes.size());
  int64_t st = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    s[i] = st;
    st *= std::max<int64_t>(sizes[i], 1);
  }
  return s;
}

void SetMeta(v1::TensorMeta* m, const std::vector<int64_t>& sizes,
             const std::vector<int64_t>& strides, int64_t offset, v1::DType dtype) {
  for (int64_t s : sizes) m->add_sizes()->set_value(s);
  for (int64_t s : strides) m->add_strides()->set_value(s);
  m->mutable_storage_offset()->set_value(offset);
  m->set_dtype(dtype);
  m->mutable_device()->set_type("cuda");
  m->mutable_device()->set_index(0);
}

// A constant argument for the interpreter (the tensors are graph inputs, passed apart).
absl::StatusOr<interp::Arg> ToInterp(const v1::Argument& a) {
  return interp::ArgFromArgument(
      a, [](const v1::Argument&) -> absl::StatusOr<interp::Arg> { return interp::Arg(); });
}

// One node of `target` over the given arguments; its outputs' metadata come from running
// the op once in the interpreter.
absl::StatusOr<v1::Graph> OneOpGraph(
    const std::string& target, const std::vector<ArgSpec>& args,
    const std::vector<std::pair<std::string, v1::Argument>>& kwargs) {
  v1::Graph g;
  v1::Node node;
  node.set_name("op");
  node.set_target(target);
  std::vector<interp::Arg> iargs;
  int n = 0;
  // A graph input for `t`, referred to by `ref`; its value for the interpreter.
  auto input = [&](const TensorSpec& t, v1::Argument* ref) {
    const std::string name = absl::StrCat("x", n++);
    v1::GraphInput* in = g.add_inputs();
    in->set_name(name);
    const std::vector<int64_t> strides = t.strides.empty() ? Contiguous(t.sizes) : t.strides;
    SetMeta(in->mutable_meta()->mutable_tensor(), t.sizes, strides, t.offset, t.dtype);
    in->set_role(v1::INPUT_ROLE_USER_INPUT);
    ref->mutable_ref()->set_node(name);
    return interp::Tensor::ZerosStrided(t.sizes, strides, t.offset, t.dtype);
  };
  for (const ArgSpec& a : args) {
    if (const TensorSpec* t = std::get_if<TensorSpec>(&a)) {
      iargs.emplace_back(input(*t, node.add_args()));
    } else if (const TensorList* l = std::get_if<TensorList>(&a)) {
      v1::Argument* list = node.add_args();
      list->mutable_list();
      std::vector<interp::Tensor> ts;
      for (const TensorSpec& t : *l) ts.push_back(input(t, list->mutable_list()->add_items()));
      iargs.push_back(interp::Arg::Tensors(std::move(ts)));
    } else {
      *node.add_args() = std::get<v1::Argument>(a);
      auto ia = ToInterp(std::get<v1::Argument>(a));
      if (!ia.ok()) return ia.status();
      iargs.push_back(*ia);
    }
  }
  std::vector<std::pair<std::string, interp::Arg>> ikw;
  for (const auto& [name, v] : kwargs) {
    v1::NamedArgument* kw = node.add_kwargs();
    kw->set_name(name);
    *kw->mutable_value() = v;
    auto ia = ToInterp(v);
    if (!ia.ok()) return ia.status();
    ikw.emplace_back(name, *ia);
  }
  auto results = interp::RunOp(target, iargs, ikw);
  if (!results.ok()) return results.status();
  node.set_multi_output(results->size() > 1);
  v1::ArgumentList* outs = g.mutable_output()->mutable_list();
  for (size_t k = 0; k < results->size(); ++k) {
    const interp::Tensor* t = std::get_if<interp::Tensor>(&(*results)[k]);
    if (t == nullptr || !t->defined()) {
      node.add_outputs()->mutable_none();
      continue;
    }
    SetMeta(node.add_outputs()->mutable_tensor(), t->sizes(), t->strides(), t->storage_offset(),
            t->dtype());
    v1::ValueRef* ref = outs->add_items()->mutable_ref();
    ref->set_node("op");
    if (results->size() > 1) ref->set_output(static_cast<int32_t>(k));
  }
  *g.add_nodes() = std::move(node);
  return g;
}

struct OpCase {
  std::string name;
  std::string target;
  std::vector<ArgSpec> args;
  std::vector<std::pair<std::string, v1::Argument>> kwargs = {};
};

void PrintTo(const OpCase& c, std::ostream* os) { *os << c.name; }

class OpTest : public ::testing::TestWithParam<OpCase> {};

std::vector<OpCase> Cases();

// Under the sanitizers every other case runs (each compiles and links its own code, about a
// second and a half there); the release build runs them all.
bool SampledUnderSanitizers(const OpCase& c) {
  static const std::vector<OpCase> cases = Cases();
  for (size_t i = 0; i < cases.size(); ++i) {
    if (cases[i].name == c.name) return i % 2 == 0;
  }
  return true;
}

TEST_P(OpTest, MatchesInterpreter) {
  const OpCase& c = GetParam();
  if (testing::kSanitized && !SampledUnderSanitizers(c)) GTEST_SKIP() << "every other case";
  auto proto = OneOpGraph(c.target, c.args, c.kwargs);
  ASSERT_TRUE(proto.ok()) << proto.status();
  auto artifact = testing::CompileForCpu(*proto);
  ASSERT_TRUE(artifact.ok()) << artifact.status();
  EXPECT_EQ(artifact->summary().fallback_steps(), 0) << artifact->summary().fallbacks(0).reason();
  for (uint64_t seed : {3, 4}) {
    if (testing::kSanitized && seed > 3) break;
    check::CheckOptions co;
    co.input_seed = seed;
    auto report = check::CheckAgainstInterpreter(*proto, *artifact, co);
    ASSERT_TRUE(report.ok()) << report.status();
    EXPECT_TRUE(report->ok) << c.name << ": " << report->message;
  }
}

std::vector<OpCase> Cases() {
  std::vector<OpCase> cases;
  const v1::DType f32 = v1::DTYPE_FLOAT32, bf16 = v1::DTYPE_BFLOAT16, f16 = v1::DTYPE_FLOAT16,
                  f64 = v1::DTYPE_FLOAT64, i64 = v1::DTYPE_INT64, i32 = v1::DTYPE_INT32,
                  boolean = v1::DTYPE_BOOL;
  const struct {
    v1::DType d;
    const char* n;
  } floats[] = {{f32, "f32"}, {bf16, "bf16"}, {f16, "f16"}, {f64, "f64"}};
  // Unary ops over layouts: contiguous odd sizes, transposed with an offset, size 0 and 1.
  for (const char* op :
       {"abs",    "neg",         "exp",       "log",   "sqrt",  "rsqrt",   "sin",        "cos",
        "tanh",   "sigmoid",     "erf",       "relu",  "silu",  "gelu",    "reciprocal", "floor",
        "expm1",  "log1p",       "sign",      "round", "trunc", "exp2",    "atan",       "frac",
        "lgamma", "hardsigmoid", "hardswish", "mish",  "elu",   "softplus"}) {
    for (const auto& f : floats) {
      cases.push_back(
          {absl::StrCat(op, "_", f.n), absl::StrCat("aten.", op, ".default"), {T({5, 7}, f.d)}});
    }
    cases.push_back({absl::StrCat(op, "_strided"),
                     absl::StrCat("aten.", op, ".default"),
                     {T({3, 4}, f32, {1, 5}, 2)}});
    cases.push_back(
        {absl::StrCat(op, "_empty"), absl::StrCat("aten.", op, ".default"), {T({0, 3}, f32)}});
    cases.push_back(
        {absl::StrCat(op, "_scalar"), absl::StrCat("aten.", op, ".default"), {T({}, f32)}});
  }
  cases.push_back({"gelu_tanh", "aten.gelu.default", {T({9, 5})}, {{"approximate", S("tanh")}}});
  cases.push_back({"isnan", "aten.isnan.default", {T({6})}});
  cases.push_back({"logical_not_bool", "aten.logical_not.default", {T({6}, boolean)}});
  cases.push_back({"neg_i64", "aten.neg.default", {T({4, 3}, i64)}});
  cases.push_back({"abs_i32", "aten.abs.default", {T({7}, i32)}});
  // Binary ops with broadcasting, mixed dtypes and scalars.
  for (const char* op : {"add.Tensor", "sub.Tensor", "mul.Tensor", "div.Tensor", "maximum.default",
                         "minimum.default", "atan2.default", "pow.Tensor_Tensor"}) {
    cases.push_back(
        {absl::StrCat(op, "_bcast"), absl::StrCat("aten.", op), {T({3, 1, 5}), T({4, 5})}});
    cases.push_back(
        {absl::StrCat(op, "_bf16"), absl::StrCat("aten.", op), {T({2, 9}, bf16), T({9}, bf16)}});
    cases.push_back({absl::StrCat(op, "_strided"),
                     absl::StrCat("aten.", op),
                     {T({4, 3}, f32, {1, 4}), T({4, 3}, f32, {3, 1}, 5)}});
  }
  cases.push_back({"add_alpha", "aten.add.Tensor", {T({5, 4}), T({5, 4})}, {{"alpha", F(2.5)}}});
  cases.push_back({"add_mixed", "aten.add.Tensor", {T({5, 4}, f32), T({4}, i64)}});
  cases.push_back({"add_i64", "aten.add.Tensor", {T({5, 4}, i64), T({5, 4}, i64)}});
  cases.push_back({"add_scalar", "aten.add.Tensor", {T({5, 4}, f64), T({}, f32)}});
  cases.push_back({"sub_scalar", "aten.sub.Scalar", {T({6}), F(1.5)}});
  cases.push_back({"mul_scalar", "aten.mul.Scalar", {T({6}, bf16), F(0.3)}});
  cases.push_back({"div_scalar", "aten.div.Scalar", {T({6}), F(3.0)}});
  cases.push_back(
      {"div_floor", "aten.div.Tensor_mode", {T({7}), T({7})}, {{"rounding_mode", S("floor")}}});
  cases.push_back({"rsub", "aten.rsub.Scalar", {T({7}), F(2.0)}});
  cases.push_back({"pow_scalar2", "aten.pow.Tensor_Scalar", {T({3, 5}), F(2.0)}});
  cases.push_back({"pow_scalar3.5", "aten.pow.Tensor_Scalar", {T({3, 5}), F(-1.5)}});
  cases.push_back({"remainder", "aten.remainder.Tensor", {T({9}), T({9})}});
  for (const char* op : {"eq", "ne", "lt", "le", "gt", "ge"}) {
    cases.push_back(
        {absl::StrCat(op, "_tensor"), absl::StrCat("aten.", op, ".Tensor"), {T({4, 5}), T({5})}});
    cases.push_back(
        {absl::StrCat(op, "_scalar"), absl::StrCat("aten.", op, ".Scalar"), {T({4, 5}), F(0.1)}});
    cases.push_back({absl::StrCat(op, "_int"),
                     absl::StrCat("aten.", op, ".Tensor"),
                     {T({4}, i64), T({4}, i64)}});
  }
  cases.push_back({"where", "aten.where.self", {T({4, 5}, boolean), T({4, 5}), T({5})}});
  cases.push_back(
      {"where_scalar", "aten.where.ScalarOther", {T({4, 5}, boolean), T({4, 5}), F(-1.0)}});
  cases.push_back(
      {"masked_fill", "aten.masked_fill.Scalar", {T({3, 6}), T({3, 6}, boolean), F(-1e9)}});
  cases.push_back({"logical_and", "aten.logical_and.default", {T({6}, boolean), T({6}, boolean)}});
  cases.push_back({"clamp", "aten.clamp.default", {T({9}), F(-0.2), F(0.3)}});
  cases.push_back({"hardtanh", "aten.hardtanh.default", {T({9})}});
  cases.push_back({"leaky_relu", "aten.leaky_relu.default", {T({9})}});
  // Backward pointwise ops.
  cases.push_back({"gelu_backward", "aten.gelu_backward.default", {T({5, 7}), T({5, 7})}});
  cases.push_back({"gelu_backward_tanh",
                   "aten.gelu_backward.default",
                   {T({5, 7}), T({5, 7})},
                   {{"approximate", S("tanh")}}});
  cases.push_back({"silu_backward", "aten.silu_backward.default", {T({5, 7}), T({5, 7})}});
  cases.push_back({"tanh_backward", "aten.tanh_backward.default", {T({5, 7}), T({5, 7})}});
  cases.push_back({"sigmoid_backward", "aten.sigmoid_backward.default", {T({5, 7}), T({5, 7})}});
  cases.push_back(
      {"threshold_backward", "aten.threshold_backward.default", {T({5, 7}), T({5, 7}), F(0.0)}});
  cases.push_back({"dropout_backward",
                   "aten.native_dropout_backward.default",
                   {T({5, 7}), T({5, 7}, boolean), F(1.25)}});
  // Casts and copies.
  cases.push_back({"to_bf16", "aten._to_copy.default", {T({5, 3})}, {{"dtype", [] {
                                                                        v1::Argument a;
                                                                        a.set_dtype(
                                                                            v1::DTYPE_BFLOAT16);
                                                                        return a;
                                                                      }()}}});
  cases.push_back({"to_i64", "aten._to_copy.default", {T({5, 3})}, {{"dtype", [] {
                                                                       v1::Argument a;
                                                                       a.set_dtype(v1::DTYPE_INT64);
                                                                       return a;
                                                                     }()}}});
  cases.push_back({"clone_strided", "aten.clone.default", {T({4, 6}, f32, {1, 4})}});
  cases.push_back({"convert_element_type",
                   "prims.convert_element_type.default",
                   {T({5, 3}), D(v1::DTYPE_BFLOAT16)}});
  cases.push_back(
      {"hardswish_backward", "aten.hardswish_backward.default", {T({5, 7}), T({5, 7})}});
  cases.push_back(
      {"hardsigmoid_backward", "aten.hardsigmoid_backward.default", {T({5, 7}), T({5, 7})}});
  // Views (index maps) feeding a computation through the graph output.
  cases.push_back({"t", "aten.t.default", {T({3, 5})}});
  cases.push_back({"permute", "aten.permute.default", {T({2, 3, 4}), Ints({2, 0, 1})}});
  cases.push_back({"slice", "aten.slice.Tensor", {T({6, 5}), I(1), I(1), I(4)}});
  cases.push_back({"expand", "aten.expand.default", {T({3, 1}), Ints({3, 4})}});
  // Factories.
  cases.push_back({"arange", "aten.arange.start_step", {I(2), I(20), I(3)}});
  cases.push_back({"full", "aten.full.default", {Ints({3, 4}), F(1.5)}});
  cases.push_back({"zeros", "aten.zeros.default", {Ints({2, 5})}});
  // new_*: the dtype is self's (T5 and BERT write new_zeros and new_ones).
  cases.push_back({"new_zeros_bf16", "aten.new_zeros.default", {T({3}, bf16), Ints({2, 5})}});
  cases.push_back({"new_ones", "aten.new_ones.default", {T({3}), Ints({4})}});
  cases.push_back({"new_full_i64", "aten.new_full.default", {T({3}, i64), Ints({2, 2}), I(7)}});
  cases.push_back({"new_empty", "aten.new_empty.default", {T({3}), Ints({3, 3})}});
  // Reductions.
  for (const auto& f : floats) {
    cases.push_back(
        {absl::StrCat("sum_dim_", f.n), "aten.sum.dim_IntList", {T({4, 7, 5}, f.d), Ints({1})}});
  }
  cases.push_back({"sum_keepdim", "aten.sum.dim_IntList", {T({4, 7, 5}), Ints({0, 2}), B(true)}});
  cases.push_back({"sum_all", "aten.sum.default", {T({13, 3})}});
  cases.push_back({"sum_strided", "aten.sum.dim_IntList", {T({4, 6}, f32, {1, 4}), Ints({1})}});
  cases.push_back({"sum_empty", "aten.sum.dim_IntList", {T({0, 6}), Ints({0})}});
  cases.push_back({"sum_i64", "aten.sum.dim_IntList", {T({5, 6}, i64), Ints({1})}});
  cases.push_back({"mean", "aten.mean.dim", {T({4, 9}), Ints({-1}), B(true)}});
  cases.push_back({"amax", "aten.amax.default", {T({4, 9}), Ints({1})}});
  cases.push_back({"amin", "aten.amin.default", {T({4, 9}), Ints({0})}});
  cases.push_back({"max_dim", "aten.max.dim", {T({4, 9}), I(1)}});
  cases.push_back({"argmax", "aten.argmax.default", {T({4, 9}), I(1)}});
  cases.push_back({"var_mean",
                   "aten.var_mean.correction",
                   {T({4, 9}), Ints({1})},
                   {{"correction", I(1)}, {"keepdim", B(true)}}});
  // Normalization and losses.
  cases.push_back({"softmax", "aten._softmax.default", {T({3, 11}), I(-1), B(false)}});
  cases.push_back({"softmax_dim0", "aten._softmax.default", {T({5, 4}), I(0), B(false)}});
  cases.push_back({"log_softmax", "aten._log_softmax.default", {T({3, 11}), I(1), B(false)}});
  cases.push_back({"softmax_backward",
                   "aten._softmax_backward_data.default",
                   {T({3, 11}), T({3, 11}), I(1), [] {
                      v1::Argument a;
                      a.set_dtype(v1::DTYPE_FLOAT32);
                      return a;
                    }()}});
  cases.push_back({"log_softmax_backward",
                   "aten._log_softmax_backward_data.default",
                   {T({3, 11}), T({3, 11}), I(1), [] {
                      v1::Argument a;
                      a.set_dtype(v1::DTYPE_FLOAT32);
                      return a;
                    }()}});
  cases.push_back({"layer_norm",
                   "aten.native_layer_norm.default",
                   {T({2, 3, 33}), Ints({33}), T({33}), T({33}), F(1e-5)}});
  cases.push_back({"layer_norm_bf16",
                   "aten.native_layer_norm.default",
                   {T({4, 16}, bf16), Ints({16}), T({16}, bf16), T({16}, bf16), F(1e-5)}});
  cases.push_back({"layer_norm_backward",
                   "aten.native_layer_norm_backward.default",
                   {T({2, 3, 17}), T({2, 3, 17}), Ints({17}), T({2, 3, 1}), T({2, 3, 1}), T({17}),
                    T({17}), Bools({true, true, true})}});
  cases.push_back({"batch_norm",
                   "aten._native_batch_norm_legit_functional.default",
                   {T({2, 3, 4, 5}), T({3}), T({3}), T({3}), T({3}), B(true), F(0.1), F(1e-5)}});
  cases.push_back({"batch_norm_backward",
                   "aten.native_batch_norm_backward.default",
                   {T({2, 3, 4, 5}), T({2, 3, 4, 5}), T({3}), T({3}), T({3}), T({3}), T({3}),
                    B(true), F(1e-5), Bools({true, true, true})}});
  cases.push_back({"dropout", "aten.native_dropout.default", {T({7, 33}), F(0.3), B(true)}});
  cases.push_back({"dropout_p0", "aten.native_dropout.default", {T({7, 33}), F(0.0), B(true)}});
  cases.push_back({"nll_loss",
                   "aten.nll_loss_forward.default",
                   {T({6, 10}), T({6}, i64), None(), I(1), I(-100)}});
  cases.push_back({"nll_loss_sum",
                   "aten.nll_loss_forward.default",
                   {T({6, 10}), T({6}, i64), T({10}), I(2), I(-100)}});
  cases.push_back({"nll_loss_backward",
                   "aten.nll_loss_backward.default",
                   {T({}), T({6, 10}), T({6}, i64), None(), I(1), I(-100), T({})}});
  cases.push_back({"embedding", "aten.embedding.default", {T({11, 6}), T({2, 5}, i64)}});
  cases.push_back({"embedding_backward",
                   "aten.embedding_dense_backward.default",
                   {T({2, 5, 6}), T({2, 5}, i64), I(11), I(-1), B(false)}});
  cases.push_back({"embedding_backward_padding_scaled",
                   "aten.embedding_dense_backward.default",
                   {T({4, 9, 6}, f32, {1, 24, 4}), T({4, 9}, i32), I(7), I(2), B(true)}});
  cases.push_back({"embedding_backward_bf16",
                   "aten.embedding_dense_backward.default",
                   {T({30, 6}, bf16), T({30}, i64), I(11), I(0), B(false)}});
  cases.push_back({"slice_backward",
                   "aten.slice_backward.default",
                   {T({2, 3}), Ints({2, 9}), I(1), I(1), I(7), I(2)}});
  cases.push_back(
      {"select_backward", "aten.select_backward.default", {T({4}), Ints({3, 4}), I(0), I(1)}});
  cases.push_back({"slice_scatter",
                   "aten.slice_scatter.default",
                   {T({6, 9}), T({6, 3}), I(1), I(1), I(7), I(2)}});
  cases.push_back({"slice_scatter_defaults", "aten.slice_scatter.default", {T({4, 3}), T({4, 3})}});
  cases.push_back(
      {"select_scatter", "aten.select_scatter.default", {T({3, 4}), T({4}), I(0), I(-1)}});
  cases.push_back({"fill_scalar", "aten.fill.Scalar", {T({3, 4}), F(2.5)}});
  cases.push_back({"fill_tensor", "aten.fill.Tensor", {T({3, 4}), T({})}});
  cases.push_back({"index_select", "aten.index_select.default", {T({7, 4}), I(0), T({5}, i64)}});
  cases.push_back({"gather", "aten.gather.default", {T({4, 6}), I(1), T({4, 3}, i64)}});
  // One position per row, as nll_loss_backward's decomposition scatters -1 into zeros.
  cases.push_back(
      {"scatter_value", "aten.scatter.value", {T({5, 7}), I(1), T({5, 1}, i64), F(-1)}});
  cases.push_back(
      {"scatter_value_dim0", "aten.scatter.value", {T({3, 4}, bf16), I(-2), T({1, 4}, i64), F(2)}});
  // Advanced indexing: indices of leading dims, broadcast against each other, int32.
  cases.push_back(
      {"index_tensor", "aten.index.Tensor", {T({5, 6, 7}), TensorList{T({4}, i64), T({4}, i64)}}});
  cases.push_back({"index_tensor_broadcast",
                   "aten.index.Tensor",
                   {T({5, 6}), TensorList{T({3, 1}, i64), T({1, 4}, i64)}}});
  cases.push_back(
      {"unsafe_index", "aten._unsafe_index.Tensor", {T({5, 6}), TensorList{T({2, 3}, i32)}}});
  cases.push_back({"addmm", "aten.addmm.default", {T({6}), T({4, 5}), T({5, 6})}});
  cases.push_back({"bmm", "aten.bmm.default", {T({2, 3, 4}), T({2, 4, 5})}});
  // 0-d tensors with a dim argument of 0 or -1.
  cases.push_back({"sum_dim_scalar", "aten.sum.dim_IntList", {T({}), Ints({0})}});
  cases.push_back({"amax_scalar", "aten.amax.default", {T({}), Ints({-1}), B(true)}});
  cases.push_back({"any_dim_scalar", "aten.any.dim", {T({}, boolean), I(0)}});
  cases.push_back({"max_dim_scalar", "aten.max.dim", {T({}), I(0)}});
  cases.push_back({"argmax_scalar", "aten.argmax.default", {T({}), I(-1)}});
  cases.push_back(
      {"var_mean_scalar", "aten.var_mean.correction", {T({}), Ints({0})}, {{"correction", I(0)}}});
  cases.push_back({"softmax_scalar", "aten._softmax.default", {T({}), I(0), B(false)}});
  cases.push_back({"safe_softmax", "aten._safe_softmax.default", {T({4, 7}), I(1)}});
  cases.push_back({"group_norm",
                   "aten.native_group_norm.default",
                   {T({2, 6, 3, 5}), T({6}), T({6}), I(2), I(6), I(15), I(3), F(1e-5)}});
  cases.push_back({"group_norm_no_affine",
                   "aten.native_group_norm.default",
                   {T({3, 4, 7}), None(), None(), I(3), I(4), I(7), I(2), F(1e-5)}});
  cases.push_back({"mse_loss_mean", "aten.mse_loss.default", {T({4, 7}), T({4, 7})}});
  cases.push_back({"mse_loss_sum", "aten.mse_loss.default", {T({4, 7}), T({4, 7}), I(2)}});
  cases.push_back({"mse_loss_none", "aten.mse_loss.default", {T({4, 7}), T({4, 7}), I(0)}});
  cases.push_back(
      {"mse_loss_backward", "aten.mse_loss_backward.default", {T({}), T({4, 7}), T({4, 7}), I(1)}});
  cases.push_back({"mse_loss_backward_none",
                   "aten.mse_loss_backward.default",
                   {T({4, 7}), T({4, 7}), T({4, 7}), I(0)}});
  cases.push_back({"log_softmax_scalar", "aten._log_softmax.default", {T({}), I(-1), B(false)}});
  cases.push_back({"index_select_scalar", "aten.index_select.default", {T({}), I(0), T({1}, i64)}});
  cases.push_back({"gather_scalar", "aten.gather.default", {T({}), I(-1), T({}, i64)}});
  cases.push_back({"prod_dim_scalar", "aten.prod.dim_int", {T({}), I(0)}});
  cases.push_back({"prod_dim_scalar_neg", "aten.prod.dim_int", {T({}, i64), I(-1), B(true)}});
  cases.push_back({"flip_scalar", "aten.flip.default", {T({}), Ints({0})}});
  // Ternary pointwise ops: broadcasting, strides, dtypes, scalar and 0-d weights.
  cases.push_back({"lerp_scalar", "aten.lerp.Scalar", {T({5, 7}), T({5, 7}), F(0.3)}});
  cases.push_back({"lerp_scalar_far", "aten.lerp.Scalar", {T({5, 7}), T({7}), F(0.8)}});
  cases.push_back({"lerp_scalar_bf16", "aten.lerp.Scalar", {T({9}, bf16), T({9}, bf16), F(0.6)}});
  cases.push_back({"lerp_tensor_bcast", "aten.lerp.Tensor", {T({3, 1, 5}), T({4, 5}), T({5})}});
  cases.push_back({"lerp_tensor_strided",
                   "aten.lerp.Tensor",
                   {T({4, 3}, f32, {1, 4}), T({4, 3}, f32, {3, 1}, 5), T({4, 3})}});
  cases.push_back({"lerp_tensor_0d_f64", "aten.lerp.Tensor", {T({6}), T({6}), T({}, f64)}});
  cases.push_back(
      {"lerp_tensor_f16", "aten.lerp.Tensor", {T({2, 9}, f16), T({9}, f16), T({2, 9}, f16)}});
  cases.push_back({"lerp_scalar_int_weight", "aten.lerp.Scalar", {T({5}), T({5}), I(1)}});
  cases.push_back(
      {"lerp_tensor_0d_bf16_f64", "aten.lerp.Tensor", {T({9}, bf16), T({9}, bf16), T({}, f64)}});
  cases.push_back({"lerp_empty", "aten.lerp.Scalar", {T({0, 3}), T({0, 3}), F(0.5)}});
  for (const char* op : {"addcmul", "addcdiv"}) {
    const std::string target = absl::StrCat("aten.", op, ".default");
    cases.push_back({absl::StrCat(op, "_bcast"),
                     target,
                     {T({4, 5}), T({3, 1, 5}), T({5})},
                     {{"value", F(0.5)}}});
    cases.push_back({absl::StrCat(op, "_default"), target, {T({7}), T({7}), T({7})}});
    cases.push_back({absl::StrCat(op, "_strided"),
                     target,
                     {T({4, 3}, f32, {1, 4}), T({4, 3}, f32, {3, 1}, 5), T({3})},
                     {{"value", F(-2.0)}}});
    cases.push_back({absl::StrCat(op, "_bf16"),
                     target,
                     {T({2, 9}, bf16), T({9}, bf16), T({2, 9}, bf16)},
                     {{"value", F(0.25)}}});
    cases.push_back({absl::StrCat(op, "_mixed"),
                     target,
                     {T({3, 4}, i64), T({3, 4}, f32), T({4}, f64)},
                     {{"value", I(3)}}});
    cases.push_back({absl::StrCat(op, "_0d"), target, {T({}), T({}), T({})}});
  }
  cases.push_back({"addcmul_i64_float_value",
                   "aten.addcmul.default",
                   {T({5}, i64), T({5}, i64), T({5}, i64)},
                   {{"value", F(2.5)}}});
  cases.push_back(
      {"addcmul_i32_i64", "aten.addcmul.default", {T({5}, i32), T({5}, i64), T({}, i64)}});
  cases.push_back({"addcmul_i64",
                   "aten.addcmul.default",
                   {T({5}, i64), T({5}, i64), T({5}, i64)},
                   {{"value", I(2)}}});
  // The activations above with their arguments.
  cases.push_back({"lgamma_i64", "aten.lgamma.default", {T({6}, i64)}});
  cases.push_back({"elu_args", "aten.elu.default", {T({9}), F(2.0), F(1.5), F(0.5)}});
  cases.push_back({"softplus_args", "aten.softplus.default", {T({9}), F(2.0), F(0.5)}});
  cases.push_back({"softplus_backward",
                   "aten.softplus_backward.default",
                   {T({5, 7}), T({5, 7}), F(1.0), F(20.0)}});
  cases.push_back({"softplus_backward_args",
                   "aten.softplus_backward.default",
                   {T({5, 7}), T({7}), F(2.0), F(0.5)}});
  // prod.
  cases.push_back({"prod_all", "aten.prod.default", {T({3, 4})}});
  cases.push_back({"prod_all_i64", "aten.prod.default", {T({2, 3}, i64)}});
  for (const auto& f : floats) {
    cases.push_back(
        {absl::StrCat("prod_dim_", f.n), "aten.prod.dim_int", {T({4, 7, 5}, f.d), I(1)}});
  }
  cases.push_back({"prod_dim_neg_keepdim", "aten.prod.dim_int", {T({4, 7, 5}), I(-1), B(true)}});
  cases.push_back({"prod_dim_strided", "aten.prod.dim_int", {T({4, 6}, f32, {1, 4}), I(1)}});
  cases.push_back({"prod_dim_empty", "aten.prod.dim_int", {T({3, 0}), I(1)}});
  cases.push_back({"prod_dim_i64", "aten.prod.dim_int", {T({5, 6}, i64), I(0)}});
  cases.push_back({"prod_dim_bool", "aten.prod.dim_int", {T({5, 6}, boolean), I(1)}});
  cases.push_back(
      {"prod_dim_dtype", "aten.prod.dim_int", {T({5, 6}, bf16), I(1)}, {{"dtype", D(f32)}}});
  // Padding, cropping, flips and triangles.
  cases.push_back({"pad_last", "aten.constant_pad_nd.default", {T({3, 4}), Ints({1, 2}), F(0.5)}});
  cases.push_back(
      {"pad_two_dims", "aten.constant_pad_nd.default", {T({3, 5}), Ints({1, 2, 0, 1})}});
  cases.push_back(
      {"pad_crop", "aten.constant_pad_nd.default", {T({4, 5}), Ints({-1, 2, 1, -2}), F(-1.0)}});
  cases.push_back({"pad_crop_only", "aten.constant_pad_nd.default", {T({4, 5}), Ints({-2, -1})}});
  cases.push_back(
      {"pad_crop_to_empty", "aten.constant_pad_nd.default", {T({4, 5}), Ints({0, 0, -4, 1})}});
  cases.push_back({"pad_strided",
                   "aten.constant_pad_nd.default",
                   {T({3, 4}, f32, {1, 5}, 2), Ints({2, 1, 1, 1}), F(3.0)}});
  cases.push_back(
      {"pad_empty", "aten.constant_pad_nd.default", {T({0, 3}), Ints({1, 1, 1, 1}), F(2.0)}});
  cases.push_back(
      {"pad_i64", "aten.constant_pad_nd.default", {T({2, 3, 4}, i64), Ints({1, 1}), I(7)}});
  cases.push_back(
      {"pad_bf16", "aten.constant_pad_nd.default", {T({2, 3, 4}, bf16), Ints({0, 3}), F(1.5)}});
  cases.push_back(
      {"pad_i64_float_value", "aten.constant_pad_nd.default", {T({3}, i64), Ints({2, 1}), F(2.7)}});
  cases.push_back({"pad_i64_negative_value",
                   "aten.constant_pad_nd.default",
                   {T({3}, i64), Ints({2, 1}), F(-2.7)}});
  cases.push_back(
      {"pad_bool", "aten.constant_pad_nd.default", {T({2, 3}, boolean), Ints({1, 1}), B(true)}});
  cases.push_back({"pad_0d_zero_pads", "aten.constant_pad_nd.default", {T({}), Ints({})}});
  cases.push_back({"flip_two", "aten.flip.default", {T({3, 4, 5}), Ints({0, 2})}});
  cases.push_back({"flip_neg", "aten.flip.default", {T({3, 4, 5}), Ints({-2})}});
  cases.push_back({"flip_strided", "aten.flip.default", {T({3, 4}, f32, {1, 5}, 2), Ints({0, 1})}});
  cases.push_back({"flip_empty", "aten.flip.default", {T({0, 3}), Ints({0, 1})}});
  cases.push_back({"flip_one", "aten.flip.default", {T({1, 7}, i64), Ints({0, 1})}});
  cases.push_back({"flip_bool", "aten.flip.default", {T({6}, boolean), Ints({0})}});
  cases.push_back({"flip_bf16", "aten.flip.default", {T({5, 3}, bf16), Ints({-1})}});
  for (const char* op : {"tril", "triu"}) {
    const std::string target = absl::StrCat("aten.", op, ".default");
    cases.push_back({absl::StrCat(op, "_square"), target, {T({5, 5})}});
    cases.push_back({absl::StrCat(op, "_batched_neg"), target, {T({2, 3, 4}), I(-1)}});
    cases.push_back({absl::StrCat(op, "_wide_pos"), target, {T({3, 7}), I(2)}});
    cases.push_back({absl::StrCat(op, "_beyond"), target, {T({3, 4}), I(-5)}});
    cases.push_back({absl::StrCat(op, "_strided"), target, {T({4, 3}, f32, {1, 4}, 0), I(1)}});
    cases.push_back({absl::StrCat(op, "_empty"), target, {T({0, 3})}});
    cases.push_back({absl::StrCat(op, "_one"), target, {T({1, 1})}});
    cases.push_back({absl::StrCat(op, "_i64"), target, {T({4, 4}, i64), I(1)}});
    cases.push_back({absl::StrCat(op, "_bool"), target, {T({4, 4}, boolean)}});
  }
  // Views that split, walk diagonals and take windows.
  cases.push_back({"chunk", "aten.chunk.default", {T({7, 4}), I(3)}});
  cases.push_back({"chunk_last", "aten.chunk.default", {T({3, 5}), I(2), I(-1)}});
  cases.push_back({"diagonal", "aten.diagonal.default", {T({4, 5}), I(1)}});
  cases.push_back({"diagonal_neg", "aten.diagonal.default", {T({2, 3, 3}), I(-1), I(-1), I(-2)}});
  cases.push_back({"unfold", "aten.unfold.default", {T({9, 4}), I(0), I(3), I(2)}});
  // Collectives are the identity with one rank; the runtime calls them.
  cases.push_back({"all_to_all_single",
                   "_c10d_functional.all_to_all_single.default",
                   {T({4, 3}), Ints({4}), Ints({4}), S("0")}});
  cases.push_back({"all_gather_coalesced",
                   "_c10d_functional.all_gather_into_tensor_coalesced.default",
                   {TensorList{T({4, 3}), T({5})}, I(1), S("0")}});
  cases.push_back({"broadcast", "_c10d_functional.broadcast.default", {T({4, 3}), I(0), S("0")}});
  cases.push_back({"reduce_scatter_coalesced",
                   "_c10d_functional.reduce_scatter_tensor_coalesced.default",
                   {TensorList{T({4, 3}), T({2}, bf16)}, S("sum"), I(1), S("0")}});
  // max_pool2d: windows with stride, padding, dilation and ceil_mode, 3-d and 4-d inputs,
  // strided layouts, half types (compared in float, indices exactly).
  const std::string pool = "aten.max_pool2d_with_indices.default";
  cases.push_back({"max_pool2d", pool, {T({2, 3, 8, 9}), Ints({2, 2})}});
  cases.push_back(
      {"max_pool2d_3d", pool, {T({3, 7, 7}), Ints({3, 3}), Ints({2, 2}), Ints({1, 1})}});
  cases.push_back({"max_pool2d_pad_dilate",
                   pool,
                   {T({1, 2, 11, 10}), Ints({3, 2}), Ints({2, 1}), Ints({1, 1}), Ints({2, 1})}});
  cases.push_back(
      {"max_pool2d_ceil",
       pool,
       {T({2, 2, 7, 8}), Ints({3, 3}), Ints({2, 2}), Ints({0, 0}), Ints({1, 1}), B(true)}});
  cases.push_back({"max_pool2d_strided", pool, {T({2, 3, 6, 6}, f32, {1, 2, 36, 6}), Ints({2})}});
  cases.push_back({"max_pool2d_bf16", pool, {T({1, 4, 6, 6}, bf16), Ints({3, 3}), Ints({1, 1})}});
  cases.push_back({"max_pool2d_f64", pool, {T({1, 1, 5, 5}, f64), Ints({5, 5})}});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Ops, OpTest, ::testing::ValuesIn(Cases()),
                         [](const ::testing::TestParamInfo<OpCase>& info) {
                           std::string n = info.param.name;
                           for (char& ch : n) {
                             if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           }
                           return n;
                         });

// Each reduce kind, its reduction cut into parts (fuse/split_reductions.h) and combined
// again: the same results as the interpreter's, along rows and down columns, over bf16 and
// bool.
TEST(CutReductionTest, EveryReduceKindMatchesTheInterpreter) {
  const v1::DType bf16 = v1::DTYPE_BFLOAT16, boolean = v1::DTYPE_BOOL;
  const std::vector<OpCase> cases = {
      {"sum_cols", "aten.sum.dim_IntList", {T({96, 40}), Ints({0})}},
      {"sum_rows_bf16", "aten.sum.dim_IntList", {T({6, 128}, bf16), Ints({1})}},
      {"mean_all", "aten.mean.default", {T({12, 32})}},
      {"prod", "aten.prod.dim_int", {T({24, 5}), I(0)}},
      {"amax", "aten.amax.default", {T({64, 9}), Ints({0})}},
      {"amin_strided", "aten.amin.default", {T({9, 64}, v1::DTYPE_FLOAT32, {1, 9}), Ints({1})}},
      {"any", "aten.any.dim", {T({48, 6}, boolean), I(0)}},
      {"all", "aten.all.dim", {T({6, 48}, boolean), I(1)}},
  };
  for (const OpCase& c : cases) {
    SCOPED_TRACE(c.name);
    auto proto = OneOpGraph(c.target, c.args, c.kwargs);
    ASSERT_TRUE(proto.ok()) << proto.status();
    auto artifact = testing::CompileForCpuCut(*proto, 4);
    ASSERT_TRUE(artifact.ok()) << artifact.status();
    EXPECT_EQ(artifact->kernels_size(), 2);
    check::CheckOptions co;
    co.input_seed = 5;
    auto report = check::CheckAgainstInterpreter(*proto, *artifact, co);
    ASSERT_TRUE(report.ok()) << report.status();
    EXPECT_TRUE(report->ok) << report->message;
  }
}

// cat takes a list of tensors: built by hand.
TEST(OpListTest, CatMatchesInterpreter) {
  v1::Graph g;
  std::vector<std::vector<int64_t>> shapes = {{2, 3}, {2, 0}, {2, 5}, {2, 1}};
  v1::Node node;
  node.set_name("cat");
  node.set_target("aten.cat.default");
  v1::ArgumentList* list = node.add_args()->mutable_list();
  for (size_t i = 0; i < shapes.size(); ++i) {
    v1::GraphInput* in = g.add_inputs();
    in->set_name(absl::StrCat("x", i));
    SetMeta(in->mutable_meta()->mutable_tensor(), shapes[i], Contiguous(shapes[i]), 0,
            v1::DTYPE_FLOAT32);
    list->add_items()->mutable_ref()->set_node(in->name());
  }
  node.add_args()->set_int_value(1);
  SetMeta(node.add_outputs()->mutable_tensor(), {2, 9}, {9, 1}, 0, v1::DTYPE_FLOAT32);
  *g.add_nodes() = node;
  g.mutable_output()->mutable_list()->add_items()->mutable_ref()->set_node("cat");
  auto artifact = testing::CompileForCpu(g);
  ASSERT_TRUE(artifact.ok()) << artifact.status();
  auto report = check::CheckAgainstInterpreter(g, *artifact);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_TRUE(report->ok) << report->message;
}

// `g` compiles for x86-64 without a fallback and its artifact matches the interpreter.
void ExpectLoweredAndMatching(const v1::Graph& g) {
  auto artifact = testing::CompileForCpu(g);
  ASSERT_TRUE(artifact.ok()) << artifact.status();
  EXPECT_EQ(artifact->summary().fallbacks_size(), 0);
  auto report = check::CheckAgainstInterpreter(g, *artifact);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_TRUE(report->ok) << report->message;
}

// _safe_softmax gives 0s for a row that is all -inf (a fully masked attention row), where
// softmax gives NaNs: rows of x stacked on rows of x * 0 - inf.
TEST(OpListTest, SafeSoftmaxOfAMaskedRowIsZero) {
  v1::Graph g;
  v1::GraphInput* x = g.add_inputs();
  x->set_name("x");
  SetMeta(x->mutable_meta()->mutable_tensor(), {3, 5}, Contiguous({3, 5}), 0, v1::DTYPE_FLOAT32);
  auto node = [&](const std::string& name, const std::string& target,
                  std::vector<v1::Argument> args, std::vector<int64_t> sizes) {
    v1::Node* n = g.add_nodes();
    n->set_name(name);
    n->set_target(target);
    for (v1::Argument& a : args) *n->add_args() = std::move(a);
    SetMeta(n->add_outputs()->mutable_tensor(), sizes, Contiguous(sizes), 0, v1::DTYPE_FLOAT32);
  };
  auto ref = [](const std::string& name) {
    v1::Argument a;
    a.mutable_ref()->set_node(name);
    return a;
  };
  v1::Argument both;
  *both.mutable_list()->add_items() = ref("x");
  *both.mutable_list()->add_items() = ref("masked");
  node("zero", "aten.mul.Tensor", {ref("x"), F(0)}, {3, 5});
  node("masked", "aten.add.Tensor", {ref("zero"), F(-std::numeric_limits<double>::infinity())},
       {3, 5});
  node("rows", "aten.cat.default", {both, I(0)}, {6, 5});
  node("y", "aten._safe_softmax.default", {ref("rows"), I(1)}, {6, 5});
  g.mutable_output()->mutable_list()->add_items()->mutable_ref()->set_node("y");
  ExpectLoweredAndMatching(g);
}

// Advanced indexing with None among the indices: indices apart put their broadcast dims first
// (x[i, :, j] of [4, 5, 6] is [3, 5]); a None before adjacent indices keeps its place
// (x[:, i] of [4, 5, 6] with i of [3, 2] is [4, 3, 2, 6]).
TEST(OpListTest, AdvancedIndexingWithNoneMatchesInterpreter) {
  struct Case {
    std::vector<int> items;  // input number per index, -1 for None
    std::vector<std::vector<int64_t>> index_shapes;
    std::vector<int64_t> out;
  };
  for (const Case& c : {Case{{0, -1, 1}, {{3}, {3}}, {3, 5}}, Case{{-1, 0}, {{3, 2}}, {4, 3, 2, 6}},
                        Case{{-1, 0, 1}, {{2, 1}, {3}}, {4, 2, 3}}}) {
    v1::Graph g;
    v1::GraphInput* x = g.add_inputs();
    x->set_name("x");
    SetMeta(x->mutable_meta()->mutable_tensor(), {4, 5, 6}, Contiguous({4, 5, 6}), 0,
            v1::DTYPE_FLOAT32);
    for (size_t k = 0; k < c.index_shapes.size(); ++k) {
      v1::GraphInput* in = g.add_inputs();
      in->set_name(absl::StrCat("i", k));
      SetMeta(in->mutable_meta()->mutable_tensor(), c.index_shapes[k],
              Contiguous(c.index_shapes[k]), 0, v1::DTYPE_INT64);
    }
    v1::Node node;
    node.set_name("index");
    node.set_target("aten.index.Tensor");
    node.add_args()->mutable_ref()->set_node("x");
    v1::ArgumentList* list = node.add_args()->mutable_list();
    for (int item : c.items) {
      if (item < 0) {
        list->add_items()->mutable_none();
      } else {
        list->add_items()->mutable_ref()->set_node(absl::StrCat("i", item));
      }
    }
    SetMeta(node.add_outputs()->mutable_tensor(), c.out, Contiguous(c.out), 0, v1::DTYPE_FLOAT32);
    *g.add_nodes() = node;
    g.mutable_output()->mutable_list()->add_items()->mutable_ref()->set_node("index");
    ExpectLoweredAndMatching(g);
  }
}

// max_pool2d's backward gathers gradients by the forward's indices, which must come from a
// real forward (random indices could name a position outside the window): the pair is one
// graph.
TEST(OpListTest, MaxPoolBackwardMatchesInterpreter) {
  struct Window {
    std::vector<int64_t> x, kernel, stride, padding, dilation;
    bool ceil_mode;
  };
  for (const Window& w : std::vector<Window>{{{2, 3, 8, 9}, {2, 2}, {2, 2}, {0, 0}, {1, 1}, false},
                                             {{2, 3, 8, 9}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, false},
                                             {{3, 9, 8}, {3, 2}, {2, 3}, {1, 1}, {2, 1}, true}}) {
    const std::vector<v1::Argument> window = {Ints(w.kernel), Ints(w.stride), Ints(w.padding),
                                              Ints(w.dilation), B(w.ceil_mode)};
    std::vector<ArgSpec> args = {T(w.x)};
    args.insert(args.end(), window.begin(), window.end());
    auto g = OneOpGraph("aten.max_pool2d_with_indices.default", args, {});
    ASSERT_TRUE(g.ok()) << g.status();
    // grad_output: an input shaped like the pooled output.
    const v1::TensorMeta pooled = g->nodes(0).outputs(0).tensor();
    v1::GraphInput* grad = g->add_inputs();
    grad->set_name("grad");
    *grad->mutable_meta()->mutable_tensor() = pooled;
    v1::Node bw;
    bw.set_name("bw");
    bw.set_target("aten.max_pool2d_with_indices_backward.default");
    bw.add_args()->mutable_ref()->set_node("grad");
    bw.add_args()->mutable_ref()->set_node("x0");
    for (const v1::Argument& a : window) *bw.add_args() = a;
    v1::ValueRef* indices = bw.add_args()->mutable_ref();
    indices->set_node("op");
    indices->set_output(1);
    *bw.add_outputs()->mutable_tensor() = g->inputs(0).meta().tensor();
    *g->add_nodes() = bw;
    g->mutable_output()->mutable_list()->add_items()->mutable_ref()->set_node("bw");
    auto artifact = testing::CompileForCpu(*g);
    ASSERT_TRUE(artifact.ok()) << artifact.status();
    EXPECT_EQ(artifact->summary().fallback_steps(), 0);
    for (uint64_t seed : {1, 2}) {
      if (testing::kSanitized && seed > 1) break;
      check::CheckOptions co;
      co.input_seed = seed;
      auto report = check::CheckAgainstInterpreter(*g, *artifact, co);
      ASSERT_TRUE(report.ok()) << report.status();
      EXPECT_TRUE(report->ok) << report->message;
    }
  }
}

// Every op of the training graphs Kiln targets compiles: lowered, or an extern step the
// runtime implements; none falls back. (operator.mul multiplies symbolic sizes, whose values
// the compiler takes from the node's metadata: it computes nothing.)
TEST(OpListTest, EveryTrainingOpHasALowering) {
  for (const std::string op : testing::kTrainingOps) {
    if (op != "operator.mul") EXPECT_TRUE(decompose::HasLowering(op)) << op;
  }
}

// Every op Kiln lowers can be run by the interpreter, so that a lowering can be checked
// against it and a graph using it can be checked end to end.
TEST(OpListTest, EveryLoweredOpRunsInTheInterpreter) {
  const std::vector<std::string> lowered = decompose::LoweredOps();
  ASSERT_FALSE(lowered.empty());
  EXPECT_TRUE(std::is_sorted(lowered.begin(), lowered.end()));
  EXPECT_EQ(lowered, decompose::LoweredOps());
  std::vector<std::string> missing;
  for (const std::string& op : lowered) {
    EXPECT_TRUE(decompose::HasLowering(op)) << op;
    if (!interp::IsSupportedOp(op)) missing.push_back(op);
  }
  EXPECT_TRUE(missing.empty()) << "lowered but not in the interpreter: "
                               << absl::StrJoin(missing, ", ");
}

// Pointwise ops and reductions are what Kiln compiles itself: every one the registry lists
// has a lowering, but for the known gaps named here (they run as fallbacks). A new op
// without a lowering fails this test; so does filling a gap without updating it.
TEST(OpListTest, EveryRegistryPointwiseOpAndReductionHasALowering) {
  std::vector<std::string> missing;
  for (const ops::Op* op : ops::AllOps()) {
    if ((op->pointwise || op->reduction) && !decompose::HasLowering(op->target())) {
      missing.push_back(op->target());
    }
  }
  EXPECT_EQ(missing, (std::vector<std::string>{"aten.erfinv.default", "aten.logsumexp.default"}))
      << "no lowering: " << absl::StrJoin(missing, ", ");
}

// The embedding gradient is one extern step on every target, with or without
// scale_grad_by_freq, and does not keep a plan from being captured.
TEST(OpListTest, EmbeddingBackwardIsAnExternStepOnEveryTarget) {
  for (const bool scale : {false, true}) {
    SCOPED_TRACE(::testing::Message() << "scale_grad_by_freq " << scale);
    auto proto =
        OneOpGraph("aten.embedding_dense_backward.default",
                   {T({4, 8, 16}), T({4, 8}, v1::DTYPE_INT64), I(50), I(-1), B(scale)}, {});
    ASSERT_TRUE(proto.ok()) << proto.status();
    auto g = graph::Import(*proto);
    ASSERT_TRUE(g.ok()) << g.status();
    std::vector<std::string> targets = {std::string(codegen::kTargetX86_64)};
#ifdef KILN_HAVE_CUDA
    targets.push_back(std::string(codegen::kTargetCudaSm90));
#endif
    for (const std::string& target : targets) {
      v1::CompileOptions options;
      options.set_target(target);
      options.set_require_cudagraph(true);
      auto artifact = compiler::Compile(*g, options, "embedding");
      ASSERT_TRUE(artifact.ok()) << target << ": " << artifact.status();
      EXPECT_EQ(artifact->summary().fallback_steps(), 0) << target;
      std::vector<std::string> externs;
      for (const v1::PlanStep& step : artifact->steps()) {
        if (step.has_extern_call()) externs.push_back(step.extern_call().op());
      }
      EXPECT_EQ(externs, std::vector<std::string>{"aten.embedding_dense_backward.default"})
          << target;
      EXPECT_TRUE(artifact->cudagraph().capturable()) << target;
    }
  }
}

// Dropout draws Philox bits only when it can drop something: with p = 0 (a model built with
// dropout off still calls it) no kernel takes the RNG seed and offset, so a CUDA graph can
// replay the plan without repeating one run's masks.
TEST(OpListTest, DropoutWithPZeroDrawsNoRandomBits) {
  for (const double p : {0.0, 0.1}) {
    SCOPED_TRACE(::testing::Message() << "p " << p);
    auto proto = OneOpGraph("aten.native_dropout.default", {T({16, 32}), F(p), B(true)}, {});
    ASSERT_TRUE(proto.ok()) << proto.status();
    auto artifact = testing::CompileForCpu(*proto);
    ASSERT_TRUE(artifact.ok()) << artifact.status();
    bool takes_rng = false;
    for (const v1::Kernel& k : artifact->kernels()) {
      for (const v1::KernelParam& param : k.params()) {
        takes_rng |=
            param.kind() == v1::PARAM_KIND_RNG_SEED || param.kind() == v1::PARAM_KIND_RNG_OFFSET;
      }
    }
    EXPECT_EQ(takes_rng, p > 0.0);
  }
}

// An op without a lowering falls back; the compile succeeds and says why.
TEST(OpListTest, UnknownOpFallsBack) {
  auto proto = OneOpGraph("aten.cumsum.default", {T({4, 5}), I(1)}, {});
  ASSERT_TRUE(proto.ok()) << proto.status();
  auto g = graph::Import(*proto);
  ASSERT_TRUE(g.ok()) << g.status();
  v1::CompileOptions options;
  options.set_target(std::string(codegen::kTargetX86_64));
  auto artifact = compiler::Compile(*g, options, "fallback");
  ASSERT_TRUE(artifact.ok()) << artifact.status();
  ASSERT_EQ(artifact->summary().fallback_steps(), 1);
  EXPECT_EQ(artifact->summary().fallbacks(0).op(), "aten.cumsum.default");
  EXPECT_FALSE(artifact->cudagraph().capturable());
  auto report = check::CheckAgainstInterpreter(*proto, *artifact);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_TRUE(report->ok) << report->message;
  options.set_require_cudagraph(true);
  EXPECT_EQ(compiler::Compile(*g, options, "fallback").status().code(),
            absl::StatusCode::kFailedPrecondition);
  options.set_target(std::string(codegen::kTargetCudaSm90));
#ifdef KILN_HAVE_CUDA
  // The fallback stays a fallback on sm_90, and the plan still cannot be captured.
  const absl::Status sm90 = compiler::Compile(*g, options, "x").status();
  EXPECT_EQ(sm90.code(), absl::StatusCode::kFailedPrecondition) << sm90;
  options.set_require_cudagraph(false);
  auto gpu = compiler::Compile(*g, options, "x");
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  EXPECT_EQ(gpu->target(), codegen::kTargetCudaSm90);
  ASSERT_EQ(gpu->summary().fallback_steps(), 1);
  EXPECT_EQ(gpu->summary().fallbacks(0).op(), "aten.cumsum.default");
  EXPECT_FALSE(gpu->cudagraph().capturable());
  ASSERT_GT(gpu->modules_size(), 0);
  EXPECT_EQ(gpu->modules(0).kind(), v1::BINARY_KIND_CUBIN);
#else
  // cuda:sm_90 is a known target without a backend in this build: the backend registry
  // answers for it, and nothing is compiled.
  const absl::Status sm90 = compiler::Compile(*g, options, "x").status();
  EXPECT_EQ(sm90.code(), absl::StatusCode::kUnimplemented) << sm90;
  EXPECT_TRUE(absl::StrContains(sm90.message(), "no backend registered for target cuda:sm_90"))
      << sm90;
#endif
}

// A scatter that writes several positions of a line is not a comparison with one index: it
// falls back, saying why, and still computes what PyTorch does.
TEST(OpListTest, AScatterOfSeveralPositionsPerLineFallsBack) {
  auto proto =
      OneOpGraph("aten.scatter.value", {T({4, 5}), I(1), T({4, 2}, v1::DTYPE_INT64), F(3)}, {});
  ASSERT_TRUE(proto.ok()) << proto.status();
  auto g = graph::Import(*proto);
  ASSERT_TRUE(g.ok()) << g.status();
  v1::CompileOptions options;
  options.set_target(std::string(codegen::kTargetX86_64));
  auto artifact = compiler::Compile(*g, options, "scatter");
  ASSERT_TRUE(artifact.ok()) << artifact.status();
  ASSERT_EQ(artifact->summary().fallback_steps(), 1);
  EXPECT_EQ(artifact->summary().fallbacks(0).op(), "aten.scatter.value");
  EXPECT_TRUE(
      absl::StrContains(artifact->summary().fallbacks(0).reason(), "not one position per line"))
      << artifact->summary().fallbacks(0).reason();
  auto report = check::CheckAgainstInterpreter(*proto, *artifact);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_TRUE(report->ok) << report->message;
}

}  // namespace
}  // namespace kiln
