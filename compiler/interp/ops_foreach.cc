// The _foreach_* ops (proto/ops/foreach.h): result i is the element op run on element i of
// every per-element argument and on the arguments all elements share; the results, one
// tensor per element, are the node's outputs.

#include <set>
#include <string>
#include <utility>
#include <vector>

#include "compiler/interp/op_registry.h"
#include "proto/ops/foreach.h"

namespace kiln::interp {
namespace {

using ops::ForeachOp;

// Element `i` of a per-element argument: of a list (Tensor[] or Scalar[]), or of a 1-d tensor
// holding one scalar per element (the .Tensor overloads of addcmul and addcdiv).
Arg Element(const Arg& a, size_t i, size_t n, const std::string& name) {
  if (const auto* l = std::get_if<Arg::List>(&a.v)) {
    Check(l->size() == n, name, " has ", l->size(), " elements, the first list ", n);
    return (*l)[i];
  }
  if (const auto* t = std::get_if<Tensor>(&a.v)) {
    Check(t->dim() == 1 && t->numel() == static_cast<int64_t>(n), name, " must be a 1-d tensor of ",
          n, " scalars, got ", t->DebugString());
    const int64_t at = t->ElementIndices()[i];
    if (StoresInts(t->dtype())) return Arg(t->ReadInt(at));
    return Arg(t->ReadDouble(at));
  }
  Fail(name, " must be a list");
}

size_t ListSize(const Arg& a) {
  if (const auto* l = std::get_if<Arg::List>(&a.v)) return l->size();
  Fail("the first per-element argument must be a list");
}

std::vector<Value> RunForeach(const ForeachOp& def, const OpFn& op, const OpCall& c) {
  // Arguments by foreach parameter, wherever the call gave them.
  std::vector<const Arg*> given(def.params.size(), nullptr);
  std::vector<std::pair<std::string, Arg>> shared_kwargs;
  for (size_t k = 0; k < def.params.size(); ++k) {
    given[k] = c.Find(static_cast<int>(k), ForeachOp::Name(def.params[k]));
  }
  for (const auto& [name, value] : c.kwargs()) {
    bool is_param = false;
    for (const std::string& p : def.params) is_param = is_param || ForeachOp::Name(p) == name;
    if (!is_param) shared_kwargs.emplace_back(name, value);
  }
  for (size_t k = def.params.size(); k < c.args().size(); ++k) {
    Check(std::holds_alternative<None>(c.args()[k].v), def.target, " takes ", def.params.size(),
          " positional arguments, got ", c.args().size());
  }
  const size_t first = *def.lists.begin();
  Check(given[first] != nullptr, def.target, ": argument ", ForeachOp::Name(def.params[first]),
        " is required");
  const size_t n = ListSize(*given[first]);
  for (size_t k : def.lists) {
    Check(given[k] != nullptr, def.target, ": argument ", ForeachOp::Name(def.params[k]),
          " is required");
  }
  std::vector<Value> out;
  for (size_t i = 0; i < n; ++i) {
    std::vector<Arg> args;
    std::vector<std::pair<std::string, Arg>> kwargs = shared_kwargs;
    for (size_t k = 0; k < def.params.size(); ++k) {
      Arg a;
      if (given[k] != nullptr) {
        a = def.lists.contains(k) ? Element(*given[k], i, n, ForeachOp::Name(def.params[k]))
                                  : *given[k];
      }
      if (ForeachOp::ByKeyword(def.params[k])) {
        if (given[k] != nullptr) kwargs.emplace_back(ForeachOp::Name(def.params[k]), std::move(a));
      } else {
        args.push_back(std::move(a));
      }
    }
    OpCall element(def.element, std::move(args), std::move(kwargs), c.context());
    std::vector<Value> r = op(element);
    Check(r.size() == 1, def.element, " returned ", r.size(), " values");
    out.push_back(std::move(r[0]));
  }
  return out;
}

}  // namespace

void RegisterForeachOps(OpRegistry& r) {
  for (const ForeachOp& def : ops::ForeachOps()) {
    const OpInfo* op = r.Find(def.element);
    Check(op != nullptr, def.target, " applies ", def.element, ", which is not registered");
    r.Add(def.target, [&def, fn = op->fn](OpCall& c) { return RunForeach(def, fn, c); });
  }
}

}  // namespace kiln::interp
