// Linear algebra with an epilogue: addmm and baddbmm, a matmul extern plus a pointwise bias, or
// one library call where the result is stored anyway.

#include <optional>
#include <string>
#include <utility>

#include "compiler/decompose/rule_registry.h"

namespace kiln::decompose {
namespace {

using loop::ScalarType;

// beta or alpha of addmm: its number, or nullopt for a symbolic scalar.
std::optional<double> Scale(const graph::Arg& a) {
  if (Builder::IsNone(a)) return 1.0;
  if (a.kind != graph::ArgKind::kInt && a.kind != graph::ArgKind::kFloat &&
      a.kind != graph::ArgKind::kBool) {
    return std::nullopt;
  }
  return Builder::Num(a, 1);
}

// Whether the product's rows suit the library as they are: a 16-bit product whose inner or
// output rows are not a multiple of 16 bytes is padded first (fuse/pad_rows.h), which only
// a plain matmul gets.
bool RowsAligned(const Builder& d, uint32_t node, const graph::Value& out, bool batched) {
  if (out.dtype != graph::DType::kFloat16 && out.dtype != graph::DType::kBFloat16) return true;
  if (d.A(node, 1).kind != graph::ArgKind::kRef) return false;
  const graph::Value* a = d.graph().Resolve(d.A(node, 1).ref);
  if (a == nullptr) return false;
  const size_t off = batched ? 1 : 0;
  if (d.graph().sizes(*a).size() != off + 2 || d.graph().sizes(out).size() != off + 2) return false;
  const graph::SymInt& k = d.graph().sizes(*a)[off + 1];
  const graph::SymInt& n = d.graph().sizes(out)[off + 1];
  return !k.is_symbolic() && !n.is_symbolic() && k.value() % 8 == 0 && n.value() % 8 == 0;
}

// addmm as one library call, its result written where the graph's value lives; beta and
// alpha passed only where they are not 1, so that the runtime makes a plain call.
absl::Status AddmmCall(Builder& d, uint32_t node, double beta, double alpha) {
  Node n = d.CallOf(node, d.graph().target(d.N(node)));
  if (absl::Status s = d.AddArgs(node, 0, 2, n); !s.ok()) return s;
  for (auto [name, value] : {std::pair<const char*, double>{"beta", beta}, {"alpha", alpha}}) {
    if (value == 1) continue;
    CallArg c;
    c.value.set_float_value(value);
    n.kwargs.emplace_back(name, std::move(c));
  }
  const graph::Value* o = d.Out(node, 0);
  auto t = d.TensorOfValue(*o);
  if (!t.ok()) return t.status();
  d.Bind(*o, *t);
  n.outputs = {*t};
  d.AddNode(std::move(n));
  return absl::OkStatus();
}

absl::Status Addmm(Builder& d, uint32_t node, bool batched) {
  // addmm(bias, a, b, beta, alpha) = beta * bias + alpha * mm(a, b): the product is an extern,
  // the bias an epilogue that fusion folds into a neighbouring kernel. Where the result is
  // stored anyway (saved for the backward, read by attention), that kernel would read the
  // product and write the sum: the library adds the bias as it writes, for nothing.
  const graph::Value* o = d.Out(node, 0);
  const std::optional<double> beta_arg = Scale(d.A(node, 3)), alpha_arg = Scale(d.A(node, 4));
  if (o != nullptr && beta_arg && alpha_arg && d.Stored(*o) && RowsAligned(d, node, *o, batched)) {
    return AddmmCall(d, node, *beta_arg, *alpha_arg);
  }
  const int32_t bias = d.In(node, 0);
  auto sizes = d.Syms(d.graph().sizes(*o));
  if (!sizes.ok()) return sizes.status();
  const int32_t prod = d.TempTensor(node, o->dtype, *sizes);
  Node n = d.CallOf(node, batched ? "aten.bmm.default" : "aten.mm.default");
  if (absl::Status s = d.AddArgs(node, 1, 2, n); !s.ok()) return s;
  n.outputs = {prod};
  d.AddNode(std::move(n));
  const double beta = d.Num(d.A(node, 3), 1), alpha = d.Num(d.A(node, 4), 1);
  Body b(*sizes);
  const ScalarType ct = loop::ComputeType(loop::ScalarTypeOf(o->dtype));
  int32_t p = d.LoadB(b, prod);
  if (alpha != 1) p = b.MulC(p, alpha);
  int32_t bv = b.Cast(d.LoadB(b, bias), ct);
  if (beta != 1) bv = beta == 0 ? b.Const(0, ct) : b.MulC(bv, beta);
  return d.FinishPointwise(node, b, b.Add(bv, p), o->dtype).status();
}

}  // namespace

void RegisterLinalgRules(RuleRegistry& r) {
  r.Add("aten.addmm.default", [](Builder& d, uint32_t n) { return Addmm(d, n, false); });
  r.Add("aten.baddbmm.default", [](Builder& d, uint32_t n) { return Addmm(d, n, true); });
}

}  // namespace kiln::decompose
