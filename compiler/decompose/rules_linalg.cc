// Linear algebra with an epilogue: addmm and baddbmm, a matmul extern plus a pointwise bias.

#include <utility>

#include "compiler/decompose/rule_registry.h"

namespace kiln::decompose {
namespace {

using loop::ScalarType;

absl::Status Addmm(Builder& d, uint32_t node, bool batched) {
  // addmm(bias, a, b, beta, alpha) = beta * bias + alpha * mm(a, b): the product is an extern,
  // the bias an epilogue that fusion folds into a neighbouring kernel.
  const graph::Value* o = d.Out(node, 0);
  const int32_t bias = d.In(node, 0);
  auto sizes = d.Syms(d.graph().sizes(*o));
  if (!sizes.ok()) return sizes.status();
  const int32_t prod = d.TempTensor(node, o->dtype, *sizes);
  Node n;
  n.kind = Node::Kind::kExtern;
  n.name = d.NodeName(node);
  n.stack_trace = d.graph().str(d.N(node).stack_trace);
  n.op = batched ? "aten.bmm.default" : "aten.mm.default";
  for (size_t i = 1; i <= 2; ++i) {
    auto a = d.ConvertArg(d.A(node, i));
    if (!a.ok()) return a.status();
    n.args.push_back(*std::move(a));
  }
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
