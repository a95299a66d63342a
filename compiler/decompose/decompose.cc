// The driver of decompose: walks the graph in canonical order and hands each node to what
// decomposes it (an extern, a view, or the rule for its op), falling back where there is none.

#include "compiler/decompose/decompose.h"

#include <algorithm>
#include <functional>
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

// Whether Visit passes `target`'s operand through to its results without computing: views,
// reshapes and getitem.
bool PassesThrough(const std::string& target) {
  return target == "operator.getitem" || target == "aten.reshape.default" || ops::IsView(target);
}

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
  if (PassesThrough(target)) return d.View(node);
  const Rule* rule = DefaultRuleRegistry().Find(target);
  if (rule == nullptr) return d.Fallback(node, absl::StrCat("no lowering for ", target));
  absl::Status s = (*rule)(d, node);
  if (absl::IsUnimplemented(s)) return d.Fallback(node, std::string(s.message()));
  return s;
}

// By value id, the values a run stores whatever computes them (Builder::Stored): the graph's
// outputs and what library calls (collectives among them) and ops without a lowering read,
// and through views, reshapes and getitem, what those pass through. Users come after their
// operands in canonical order, so one walk back from the end sees each value's users first.
std::vector<bool> StoredValues(const graph::Graph& graph, const canon::CanonicalGraph& canonical) {
  std::vector<bool> stored(graph.values().size(), false);
  auto id = [&](const graph::Value& v) { return static_cast<size_t>(&v - graph.values().data()); };
  const std::function<void(const Arg&)> mark = [&](const Arg& a) {
    if (a.kind == ArgKind::kList) {
      for (const Arg& x : graph.items(a)) mark(x);
    } else if (a.kind == ArgKind::kRef) {
      const graph::Node& src = graph.node(a.ref.node);
      const absl::Span<const graph::Value> values = graph.outputs(src);
      if (a.ref.output >= 0 && static_cast<size_t>(a.ref.output) < values.size()) {
        stored[id(values[static_cast<size_t>(a.ref.output)])] = true;
      } else {
        for (const graph::Value& v : values) stored[id(v)] = true;
      }
    }
  };
  mark(graph.output());
  const absl::Span<const uint32_t> order = canonical.order();
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    const graph::Node& gn = graph.node(*it);
    if (gn.kind != graph::NodeKind::kCall) continue;
    const std::string& target = graph.target(gn);
    const absl::Span<const Arg> args = graph.args(gn);
    if (target == "operator.getitem") {
      // Its one result is item k of its operand.
      if (args.size() < 2 || args[0].kind != ArgKind::kRef || args[1].kind != ArgKind::kInt) {
        continue;
      }
      const graph::Node& src = graph.node(args[0].ref.node);
      const int64_t k = args[1].int_value;
      for (const graph::Value& v : graph.outputs(gn)) {
        if (stored[id(v)] && k >= 0 && static_cast<uint32_t>(k) < src.num_outputs) {
          stored[id(graph.outputs(src)[static_cast<size_t>(k)])] = true;
        }
      }
      continue;
    }
    bool reads_stored = false;
    if (PassesThrough(target)) {
      for (const graph::Value& v : graph.outputs(gn)) reads_stored = reads_stored || stored[id(v)];
    } else {
      reads_stored = gn.schema == nullptr || ops::IsExtern(target) || ops::IsCollective(target) ||
                     DefaultRuleRegistry().Find(target) == nullptr;
    }
    if (reads_stored) {
      for (const Arg& a : args) mark(a);
    }
  }
  return stored;
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
  d.SetStored(StoredValues(graph, canonical));
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
