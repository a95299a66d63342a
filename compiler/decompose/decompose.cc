// The driver of decompose: walks the graph in canonical order and hands each node to what
// decomposes it (an extern, a view, or the rule for its op), falling back where there is none.

#include "compiler/decompose/decompose.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "compiler/decompose/builder.h"
#include "compiler/decompose/rule_registry.h"
#include "proto/ops/registry.h"

namespace kiln::decompose {
namespace {

using graph::Arg;
using graph::ArgKind;
using loop::IndexExpr;

// Dispatches `node` to what decomposes it; returns UNIMPLEMENTED where it must fall back.
absl::Status Visit(Builder& d, uint32_t node) {
  const graph::Node& gn = d.N(node);
  const std::string& target = d.graph().target(gn);
  // Symbolic scalars carry their value in their metadata: nothing to compute.
  bool has_tensor = false;
  for (const graph::Value& v : d.graph().outputs(gn)) {
    if (v.kind == graph::ValueKind::kTensor) has_tensor = true;
  }
  if (target == "operator.getitem") {
    const Arg& a = d.A(node, 0);
    const int64_t k = d.Int(d.A(node, 1));
    for (const graph::Value& v : d.graph().outputs(gn)) {
      if (v.kind != graph::ValueKind::kTensor || a.kind != ArgKind::kRef) continue;
      const graph::Node& src = d.N(a.ref.node);
      if (k < 0 || static_cast<uint32_t>(k) >= src.num_outputs) {
        return absl::InternalError(
            absl::StrCat("getitem ", k, " out of range at ", d.NodeName(node)));
      }
      const graph::Value& sv = d.graph().outputs(src)[static_cast<size_t>(k)];
      d.Bind(v, d.TensorOf(sv));
    }
    return absl::OkStatus();
  }
  if (!has_tensor && !ops::IsCollective(target)) return absl::OkStatus();
  if (gn.schema == nullptr) return d.Fallback(node, absl::StrCat("Kiln does not know ", target));
  // Library calls (collectives among them) and views, as the op registry says.
  if (ops::IsExtern(target)) return d.Extern(node, target, false, "");
  if (ops::IsView(target) || target == "aten.reshape.default") return d.View(node);
  const Rule* rule = DefaultRuleRegistry().Find(target);
  if (rule == nullptr) return d.Fallback(node, absl::StrCat("no lowering for ", target));
  absl::Status s = (*rule)(d, node);
  if (absl::IsUnimplemented(s)) return d.Fallback(node, std::string(s.message()));
  return s;
}

// What the runtime is told about graph input `i`.
absl::StatusOr<loop::InputDesc> InputDescOf(const Builder& d, uint32_t i) {
  const graph::Node& gn = d.N(i);
  loop::InputDesc desc;
  desc.role = gn.role;
  desc.name = d.NodeName(i);
  if (gn.num_outputs == 1) {
    const graph::Value& v = d.graph().outputs(gn)[0];
    if (v.kind == graph::ValueKind::kTensor) {
      desc.kind = loop::InputDesc::Kind::kTensor;
      auto sizes = d.Syms(d.graph().sizes(v));
      auto strides = d.Syms(d.graph().strides(v));
      if (!sizes.ok()) return sizes.status();
      if (!strides.ok()) return strides.status();
      desc.sizes = *std::move(sizes);
      desc.strides = *std::move(strides);
      desc.dtype = v.dtype;
      desc.on_cpu = v.device.type == graph::DeviceType::kCpu;
    } else if (v.kind == graph::ValueKind::kSymInt) {
      auto e = d.Sym(v.scalar);
      if (e.ok()) {
        desc.kind = loop::InputDesc::Kind::kScalar;
        desc.scalar = *std::move(e);
      }
    }
  }
  return desc;
}

// Appends the graph's outputs below `a` to `outputs`, lists flattened.
absl::Status FlattenOutputs(const Builder& d, const Arg& a, std::vector<Output>& outputs) {
  if (a.kind == ArgKind::kList) {
    for (const Arg& x : d.graph().items(a)) {
      if (absl::Status s = FlattenOutputs(d, x, outputs); !s.ok()) return s;
    }
    return absl::OkStatus();
  }
  Output o;
  if (a.kind == ArgKind::kRef) {
    const graph::Value* v = d.graph().Resolve(a.ref);
    if (v != nullptr && v->kind == graph::ValueKind::kTensor) {
      o.kind = Output::Kind::kTensor;
      o.tensor = d.TensorOf(*v);
      if (o.tensor < 0) {
        return absl::InternalError(absl::StrCat("output ", d.ValueName(*v), " has no tensor"));
      }
    } else if (v != nullptr && v->kind == graph::ValueKind::kSymInt) {
      auto e = d.Sym(v->scalar);
      if (!e.ok()) return e.status();
      o.kind = Output::Kind::kSymbol;
      o.symbol = *e;
    }
  } else if (a.kind == ArgKind::kInt) {
    o.kind = Output::Kind::kSymbol;
    o.symbol = IndexExpr::Const(a.int_value);
  } else if (a.kind == ArgKind::kSymbolic) {
    auto e = d.Sym(a.sym);
    if (!e.ok()) return e.status();
    o.kind = Output::Kind::kSymbol;
    o.symbol = *e;
  }
  outputs.push_back(std::move(o));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<PrimGraph> Decompose(const graph::Graph& graph,
                                    const canon::CanonicalGraph& canonical) {
  std::vector<int64_t> rng_streams(graph.num_nodes(), -1);
  int64_t rng_ops = 0;
  for (uint32_t i = 0; i < graph.num_nodes(); ++i) {
    // Random ops take Philox streams in node order (see compiler/interp/philox.h).
    if (ops::DrawsRandom(graph.target(graph.node(i)))) rng_streams[i] = rng_ops++;
  }
  Builder d(graph, canonical, std::move(rng_streams));
  std::vector<loop::InputDesc> inputs;
  for (uint32_t i = 0; i < graph.num_inputs(); ++i) {
    auto desc = InputDescOf(d, i);
    if (!desc.ok()) return desc.status();
    inputs.push_back(*std::move(desc));
  }
  for (uint32_t node : canonical.order()) {
    if (graph.node(node).kind == graph::NodeKind::kInput) {
      if (absl::Status s = d.AddInput(node); !s.ok()) return s;
      continue;
    }
    if (absl::Status s = Visit(d, node); !s.ok()) {
      if (absl::IsUnimplemented(s)) {
        if (absl::Status f = d.Fallback(node, std::string(s.message())); !f.ok()) return f;
        continue;
      }
      return s;
    }
  }
  std::vector<Output> outputs;
  if (absl::Status s = FlattenOutputs(d, graph.output(), outputs); !s.ok()) return s;
  PrimGraph out = d.Take();
  out.inputs = std::move(inputs);
  out.outputs = std::move(outputs);
  out.rng_ops = rng_ops;
  return out;
}

bool HasLowering(absl::string_view target) {
  const std::string t(target);
  return ops::IsExtern(t) || ops::IsView(t) || t == "aten.reshape.default" ||
         ops::IsCollective(t) || t == "operator.getitem" ||
         DefaultRuleRegistry().Find(t) != nullptr;
}

std::vector<std::string> LoweredOps() {
  std::vector<std::string> lowered =
      ops::TargetsWhere([](const ops::Op& op) { return op.extern_call || op.is_view(); });
  lowered.insert(lowered.end(), {"aten.reshape.default", "operator.getitem"});
  for (const std::string& target : DefaultRuleRegistry().Targets()) lowered.push_back(target);
  std::sort(lowered.begin(), lowered.end());
  lowered.erase(std::unique(lowered.begin(), lowered.end()), lowered.end());
  return lowered;
}

}  // namespace kiln::decompose
