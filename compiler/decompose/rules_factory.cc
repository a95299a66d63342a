// Factories: full, zeros, ones and empty tensors, arange, and the random ones (rand, rand_like,
// bernoulli) drawing from their node's stream.

#include <cmath>
#include <string>

#include "compiler/decompose/rule_registry.h"

namespace kiln::decompose {
namespace {

using loop::Opcode;
using loop::ScalarType;

absl::Status Arange(Builder& d, uint32_t node) {
  const std::string& t = d.graph().target(d.N(node));
  // The output's metadata gives the length: only start and step matter.
  double start = 0, step = 1;
  if (t != "aten.arange.default") {
    start = d.Num(d.A(node, 0));
    if (t == "aten.arange.start_step") step = d.Num(d.A(node, 2), 1);
  }
  return d.Pointwise(node, [&](Body& b, ScalarType ct) -> absl::StatusOr<int32_t> {
    int32_t i = b.Idx(Body::V(0));
    if (!loop::IsFloat(ct) && start == std::floor(start) && step == std::floor(step)) {
      return b.Add(b.IConst(static_cast<int64_t>(start), ct),
                   b.Mul(b.Cast(i, ct), b.IConst(static_cast<int64_t>(step), ct)));
    }
    int32_t v = b.Add(b.Const(start, ScalarType::kF64),
                      b.Mul(b.Cast(i, ScalarType::kF64), b.Const(step, ScalarType::kF64)));
    return b.Cast(v, ct);
  });
}

absl::Status Random(Builder& d, uint32_t node) {
  const std::string& target = d.graph().target(d.N(node));
  const graph::Value* o = d.Out(node, 0);
  auto sizes = d.Syms(d.graph().sizes(*o));
  if (!sizes.ok()) return sizes.status();
  Body b(*sizes);
  int32_t bits = b.RandBits(d.rng_stream(node), b.Idx(b.Linear()));
  int32_t u = b.MulC(b.Cast(bits, ScalarType::kF64), std::ldexp(1.0, -24));
  int32_t r = u;
  if (target == "aten.bernoulli.p") {
    r = b.Bin(Opcode::kLt, u, b.Const(d.Num(d.A(node, 1), 0.5), ScalarType::kF64));
  }
  return d.FinishPointwise(node, b, r, o->dtype).status();
}

}  // namespace

void RegisterFactoryRules(RuleRegistry& r) {
  auto fill_arg = [](size_t arg) {
    return [arg](Builder& d, uint32_t n) {
      return d.Pointwise(n, [&](Body& b, ScalarType ct) -> absl::StatusOr<int32_t> {
        return d.ScalarValue(b, d.A(n, arg), ct);
      });
    };
  };
  auto fill_const = [](double v) {
    return [v](Builder& d, uint32_t n) {
      return d.Pointwise(
          n, [&](Body& b, ScalarType ct) -> absl::StatusOr<int32_t> { return b.Const(v, ct); });
    };
  };
  r.Add("aten.full.default", fill_arg(1));
  r.Add("aten.full_like.default", fill_arg(1));
  r.Add("aten.scalar_tensor.default", fill_arg(0));
  // fill.Tensor's value is a 0-d tensor, read at every point.
  r.Add("aten.fill.Scalar", fill_arg(1));
  r.Add("aten.fill.Tensor", [](Builder& d, uint32_t n) {
    return d.Pointwise(n, [&](Body& b, ScalarType ct) -> absl::StatusOr<int32_t> {
      auto v = d.Operand(b, d.A(n, 1), ct);
      if (!v.ok()) return v.status();
      return b.Cast(*v, ct);
    });
  });
  r.Add("aten.zeros.default", fill_const(0));
  r.Add("aten.zeros_like.default", fill_const(0));
  r.Add("aten.empty.memory_format", fill_const(0));
  r.Add("aten.empty_strided.default", fill_const(0));
  r.Add("aten.empty_like.default", fill_const(0));
  r.Add("aten.ones.default", fill_const(1));
  r.Add("aten.ones_like.default", fill_const(1));
  // new_*: `self` gives only the dtype and device, which the output's metadata already says.
  r.Add("aten.new_zeros.default", fill_const(0));
  r.Add("aten.new_ones.default", fill_const(1));
  r.Add("aten.new_full.default", fill_arg(2));
  r.Add("aten.new_empty.default", fill_const(0));
  r.Add("aten.new_empty_strided.default", fill_const(0));
  for (const char* t : {"aten.arange.default", "aten.arange.start", "aten.arange.start_step"}) {
    r.Add(t, [](Builder& d, uint32_t n) { return Arange(d, n); });
  }
  for (const char* t : {"aten.rand_like.default", "aten.rand.default", "aten.bernoulli.p"}) {
    r.Add(t, [](Builder& d, uint32_t n) { return Random(d, n); });
  }
}

}  // namespace kiln::decompose
