#include "compiler/graph/expand_foreach.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "proto/ops/foreach.h"
#include "proto/ops/registry.h"

namespace kiln::graph {
namespace {

using ops::ForeachOp;

// The argument a call gave for foreach parameter `k`, positionally or by keyword, or null.
const v1::Argument* Given(const v1::Node& n, const ForeachOp& op, size_t k) {
  if (k < static_cast<size_t>(n.args_size())) return &n.args(static_cast<int>(k));
  const std::string name = ForeachOp::Name(op.params[k]);
  for (const v1::NamedArgument& kw : n.kwargs()) {
    if (kw.name() == name) return &kw.value();
  }
  return nullptr;
}

bool TakesKeyword(const ops::Op& element, const std::string& name) {
  for (const ops::ParamSchema& p : element.schema.params) {
    if (p.name == name) return true;
  }
  return false;
}

bool IsParam(const ForeachOp& op, const std::string& name) {
  for (const std::string& p : op.params) {
    if (ForeachOp::Name(p) == name) return true;
  }
  return false;
}

// Whether `n`, a call of `op`, can be written out element by element (see the header), apart
// from how its result is used.
bool Expandable(const v1::Node& n, const ForeachOp& op, const ops::Op& element,
                const absl::flat_hash_set<std::string>& names) {
  const int count = n.outputs_size();
  if (!n.multi_output() || count == 0 || n.args_size() > static_cast<int>(op.params.size())) {
    return false;
  }
  for (const v1::NamedArgument& kw : n.kwargs()) {
    // A keyword the element op does not take would be lost.
    if (!IsParam(op, kw.name()) && !TakesKeyword(element, kw.name())) return false;
  }
  for (size_t k = 0; k < op.params.size(); ++k) {
    const v1::Argument* a = Given(n, op, k);
    if (!op.lists.contains(k)) continue;
    if (a == nullptr || !a->has_list() || a->list().items_size() != count) return false;
  }
  for (int i = 0; i < count; ++i) {
    if (names.contains(absl::StrCat(n.name(), "[", i, "]"))) return false;
  }
  return true;
}

// Element `i` of call `n`: a call of the element op with element i of each per-element
// argument and the shared arguments, placed as the element op's schema takes them.
v1::Node ElementCall(const v1::Node& n, const ForeachOp& op, const ops::Op& element, int i) {
  v1::Node e;
  e.set_name(absl::StrCat(n.name(), "[", i, "]"));
  e.set_target(op.element);
  *e.add_outputs() = n.outputs(i);
  *e.mutable_debug() = n.debug();
  const auto& params = element.schema.params;
  bool positional = true;  // until a parameter is missing, or the element op takes it by name
  for (size_t k = 0; k < op.params.size(); ++k) {
    const v1::Argument* a = Given(n, op, k);
    if (a == nullptr) {
      positional = false;
      continue;
    }
    v1::Argument value = op.lists.contains(k) ? a->list().items(i) : *a;
    const bool by_keyword = ForeachOp::ByKeyword(op.params[k]) || k >= params.size() ||
                            params[k].keyword_only || !positional;
    if (by_keyword) {
      v1::NamedArgument* kw = e.add_kwargs();
      kw->set_name(ForeachOp::ByKeyword(op.params[k]) || k >= params.size()
                       ? ForeachOp::Name(op.params[k])
                       : params[k].name);
      *kw->mutable_value() = std::move(value);
      positional = false;
    } else {
      *e.add_args() = std::move(value);
    }
  }
  for (const v1::NamedArgument& kw : n.kwargs()) {
    if (!IsParam(op, kw.name())) *e.add_kwargs() = kw;
  }
  return e;
}

// Calls `fn` on every reference below `a`.
template <typename Fn>
void ForEachRef(v1::Argument& a, const Fn& fn) {
  if (a.has_ref()) fn(*a.mutable_ref());
  if (a.has_list()) {
    for (v1::Argument& item : *a.mutable_list()->mutable_items()) ForEachRef(item, fn);
  }
}

template <typename Fn>
void ForEachRef(v1::Node& n, const Fn& fn) {
  for (v1::Argument& a : *n.mutable_args()) ForEachRef(a, fn);
  for (v1::NamedArgument& kw : *n.mutable_kwargs()) ForEachRef(*kw.mutable_value(), fn);
}

bool IsGetItemOf(const v1::Node& n, const absl::flat_hash_map<std::string, int>& calls) {
  return n.target() == "operator.getitem" && n.args_size() == 2 && n.args(0).has_ref() &&
         !n.args(0).ref().has_output() && calls.contains(n.args(0).ref().node()) &&
         n.args(1).has_int_value();
}

}  // namespace

std::optional<v1::Graph> ExpandForeach(const v1::Graph& proto) {
  // Every import asks: a graph without foreach calls costs one pass over its targets.
  bool any = false;
  for (const v1::Node& n : proto.nodes()) any = any || ops::FindForeach(n.target()) != nullptr;
  if (!any) return std::nullopt;
  absl::flat_hash_set<std::string> names;
  for (const v1::GraphInput& in : proto.inputs()) names.insert(in.name());
  for (const v1::Node& n : proto.nodes()) names.insert(n.name());

  // The calls that can be written out, by name, with their element count.
  absl::flat_hash_map<std::string, int> calls;
  for (const v1::Node& n : proto.nodes()) {
    const ForeachOp* op = ops::FindForeach(n.target());
    const ops::Op* element = op != nullptr ? ops::FindOp(op->element) : nullptr;
    if (element != nullptr && Expandable(n, *op, *element, names)) {
      calls[n.name()] = n.outputs_size();
    }
  }
  // A call whose whole result is used other than by getitem stays one call.
  auto drop_whole_uses = [&](v1::Argument a) {
    ForEachRef(a, [&](v1::ValueRef& r) {
      if (!r.has_output()) calls.erase(r.node());
    });
  };
  for (const v1::Node& n : proto.nodes()) {
    const bool getitem = IsGetItemOf(n, calls);
    for (int k = getitem ? 1 : 0; k < n.args_size(); ++k) drop_whole_uses(n.args(k));
    for (const v1::NamedArgument& kw : n.kwargs()) drop_whole_uses(kw.value());
  }
  drop_whole_uses(proto.output());
  if (calls.empty()) return std::nullopt;

  // Element i of a call, and the getitem nodes that stand for one.
  absl::flat_hash_map<std::string, std::string> renamed;
  auto rewrite = [&](v1::ValueRef& r) {
    if (auto it = renamed.find(r.node()); it != renamed.end()) {
      r.set_node(it->second);
    } else if (r.has_output() && calls.contains(r.node())) {
      r.set_node(absl::StrCat(r.node(), "[", r.output(), "]"));
      r.clear_output();
    }
  };
  v1::Graph out = proto;
  out.clear_nodes();
  for (const v1::Node& n : proto.nodes()) {
    if (IsGetItemOf(n, calls)) {
      const int64_t i = n.args(1).int_value();
      if (i >= 0 && i < calls.at(n.args(0).ref().node())) {
        renamed[n.name()] = absl::StrCat(n.args(0).ref().node(), "[", i, "]");
        continue;
      }
    }
    if (calls.contains(n.name())) {
      const ForeachOp& op = *ops::FindForeach(n.target());
      const ops::Op& element = *ops::FindOp(op.element);
      for (int i = 0; i < n.outputs_size(); ++i) {
        v1::Node e = ElementCall(n, op, element, i);
        ForEachRef(e, rewrite);
        *out.add_nodes() = std::move(e);
      }
      continue;
    }
    v1::Node copy = n;
    ForEachRef(copy, rewrite);
    *out.add_nodes() = std::move(copy);
  }
  ForEachRef(*out.mutable_output(), rewrite);
  return out;
}

}  // namespace kiln::graph
