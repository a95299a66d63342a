#include "tests/compiler/codegen/nvptx/pointwise_graphs.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace kiln::testing {
namespace {

void SetDim(v1::SymInt* out, const Dim& d) {
  if (d.expr.empty()) {
    out->set_value(d.value);
  } else {
    out->set_expr(d.expr);
  }
}

// The strides of a contiguous tensor of `sizes`: each the product of the sizes after it.
std::vector<Dim> ContiguousStrides(const std::vector<Dim>& sizes) {
  std::vector<Dim> strides(sizes.size(), Dim(int64_t{1}));
  int64_t constant = 1;
  std::vector<std::string> factors;
  for (size_t i = sizes.size(); i-- > 0;) {
    if (!factors.empty()) {
      strides[i].expr = absl::StrCat(constant, "*", absl::StrJoin(factors, "*"));
    } else {
      strides[i].value = constant;
    }
    if (sizes[i].expr.empty()) {
      constant *= sizes[i].value;
    } else {
      factors.push_back(sizes[i].expr);
    }
  }
  return strides;
}

void SetMeta(v1::TensorMeta* m, const TensorDesc& t) {
  for (const Dim& d : t.sizes) SetDim(m->add_sizes(), d);
  for (const Dim& d : t.strides.empty() ? ContiguousStrides(t.sizes) : t.strides) {
    SetDim(m->add_strides(), d);
  }
  m->mutable_storage_offset()->set_value(0);
  m->set_dtype(t.dtype);
  m->mutable_device()->set_type("cuda");
  m->mutable_device()->set_index(0);
}

}  // namespace

void GraphBuilder::Symbol(const std::string& name, int64_t hint) {
  v1::Symbol* s = graph_.add_symbols();
  s->set_name(name);
  s->set_kind(v1::SYM_KIND_INT);
  s->set_int_hint(hint);
}

std::string GraphBuilder::Input(const TensorDesc& t) {
  const std::string name = absl::StrCat("x", names_++);
  v1::GraphInput* in = graph_.add_inputs();
  in->set_name(name);
  in->set_role(v1::INPUT_ROLE_USER_INPUT);
  SetMeta(in->mutable_meta()->mutable_tensor(), t);
  return name;
}

std::string GraphBuilder::Node(const std::string& target, std::vector<v1::Argument> args,
                               const TensorDesc& out, std::vector<v1::NamedArgument> kwargs) {
  const std::string name = absl::StrCat("n", names_++);
  v1::Node* n = graph_.add_nodes();
  n->set_name(name);
  n->set_target(target);
  for (v1::Argument& a : args) *n->add_args() = std::move(a);
  for (v1::NamedArgument& k : kwargs) *n->add_kwargs() = std::move(k);
  SetMeta(n->add_outputs()->mutable_tensor(), out);
  return name;
}

v1::Graph GraphBuilder::Finish(const std::vector<std::string>& outputs) {
  for (const std::string& o : outputs) {
    graph_.mutable_output()->mutable_list()->add_items()->mutable_ref()->set_node(o);
  }
  return graph_;
}

v1::Argument Ref(const std::string& name) {
  v1::Argument a;
  a.mutable_ref()->set_node(name);
  return a;
}

v1::Argument Float(double value) {
  v1::Argument a;
  a.set_float_value(value);
  return a;
}

v1::Graph AddGraph(const std::vector<Dim>& sizes) {
  GraphBuilder g;
  for (const Dim& d : sizes) {
    if (!d.expr.empty()) g.Symbol(d.expr, 1000);
  }
  const TensorDesc t{sizes};
  const std::string a = g.Input(t), b = g.Input(t);
  return g.Finish({g.Node("aten.add.Tensor", {Ref(a), Ref(b)}, t)});
}

v1::Graph GeluBf16Graph(int64_t n) {
  GraphBuilder g;
  const TensorDesc t{{n}, v1::DTYPE_BFLOAT16};
  const std::string x = g.Input(t);
  return g.Finish({g.Node("aten.gelu.default", {Ref(x)}, t)});
}

v1::Graph ScaleBf16ToF32Graph(int64_t n) {
  GraphBuilder g;
  const std::string x = g.Input({{n}, v1::DTYPE_BFLOAT16});
  v1::NamedArgument dtype;
  dtype.set_name("dtype");
  dtype.mutable_value()->set_dtype(v1::DTYPE_FLOAT32);
  const std::string wide = g.Node("aten._to_copy.default", {Ref(x)}, {{n}}, {dtype});
  return g.Finish({g.Node("aten.mul.Tensor", {Ref(wide), Float(2.0)}, {{n}})});
}

v1::Graph RowBroadcastAddGraph(int64_t rows, int64_t cols) {
  GraphBuilder g;
  const std::string x = g.Input({{rows, cols}});
  const std::string b = g.Input({{rows, 1}});
  return g.Finish({g.Node("aten.add.Tensor", {Ref(x), Ref(b)}, {{rows, cols}})});
}

v1::Graph TransposedAddGraph(int64_t rows, int64_t cols) {
  GraphBuilder g;
  const std::string x = g.Input({{rows, cols}, v1::DTYPE_FLOAT32, {1, rows}});
  const std::string y = g.Input({{rows, cols}});
  return g.Finish({g.Node("aten.add.Tensor", {Ref(x), Ref(y)}, {{rows, cols}})});
}

}  // namespace kiln::testing
