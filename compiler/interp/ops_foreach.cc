// The _foreach_* ops optimizers record (torch.optim with foreach=True): one op applied to
// each element of tensor lists. Result i is the plain op run on element i of every list
// argument and on the arguments all elements share (a scalar, a 0-d tensor, alpha), which
// is what PyTorch's reference ("slow") foreach kernels do; the fused CUDA kernels compute
// the same per-element math. The results, one tensor per element, are the node's outputs.

#include <set>
#include <string>
#include <utility>
#include <vector>

#include "compiler/interp/op_registry.h"

namespace kiln::interp {
namespace {

// One foreach overload: the op it applies per element, the foreach schema's positional
// parameters in order, and which of them are per-element lists. The applied op takes the
// same positional parameters; a name starting with '*' is handed to it by keyword instead.
// Keyword-only arguments (alpha) pass through unchanged.
struct ForeachDef {
  std::string name;
  std::string op;
  std::vector<std::string> params;
  std::set<size_t> lists;
};

std::string ParamName(const std::string& p) { return p[0] == '*' ? p.substr(1) : p; }

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

std::vector<Value> RunForeach(const ForeachDef& def, const OpFn& op, const OpCall& c) {
  // Arguments by foreach parameter, wherever the call gave them.
  std::vector<const Arg*> given(def.params.size(), nullptr);
  std::vector<std::pair<std::string, Arg>> shared_kwargs;
  for (size_t k = 0; k < def.params.size(); ++k) {
    given[k] = c.Find(static_cast<int>(k), ParamName(def.params[k]));
  }
  for (const auto& [name, value] : c.kwargs()) {
    bool is_param = false;
    for (const std::string& p : def.params) is_param = is_param || ParamName(p) == name;
    if (!is_param) shared_kwargs.emplace_back(name, value);
  }
  for (size_t k = def.params.size(); k < c.args().size(); ++k) {
    Check(std::holds_alternative<None>(c.args()[k].v), def.name, " takes ", def.params.size(),
          " positional arguments, got ", c.args().size());
  }
  const size_t first = *def.lists.begin();
  Check(given[first] != nullptr, def.name, ": argument ", ParamName(def.params[first]),
        " is required");
  const size_t n = ListSize(*given[first]);
  for (size_t k : def.lists) {
    Check(given[k] != nullptr, def.name, ": argument ", ParamName(def.params[k]), " is required");
  }
  std::vector<Value> out;
  for (size_t i = 0; i < n; ++i) {
    std::vector<Arg> args;
    std::vector<std::pair<std::string, Arg>> kwargs = shared_kwargs;
    for (size_t k = 0; k < def.params.size(); ++k) {
      Arg a;
      if (given[k] != nullptr) {
        a = def.lists.contains(k) ? Element(*given[k], i, n, ParamName(def.params[k])) : *given[k];
      }
      if (def.params[k][0] == '*') {
        if (given[k] != nullptr) kwargs.emplace_back(ParamName(def.params[k]), std::move(a));
      } else {
        args.push_back(std::move(a));
      }
    }
    OpCall element(def.op, std::move(args), std::move(kwargs), c.context());
    std::vector<Value> r = op(element);
    Check(r.size() == 1, def.op, " returned ", r.size(), " values");
    out.push_back(std::move(r[0]));
  }
  return out;
}

std::vector<ForeachDef> ForeachDefs() {
  std::vector<ForeachDef> defs;
  // Unary ops.
  for (const char* name :
       {"abs",   "acos", "asin",  "atan",       "ceil",  "cos",    "cosh",    "erf",
        "erfc",  "exp",  "expm1", "floor",      "frac",  "lgamma", "log",     "log10",
        "log1p", "log2", "neg",   "reciprocal", "round", "rsqrt",  "sigmoid", "sign",
        "sin",   "sinh", "sqrt",  "tan",        "tanh",  "trunc"}) {
    defs.push_back({absl::StrCat("_foreach_", name, ".default"),
                    absl::StrCat("aten.", name, ".default"),
                    {"self"},
                    {0}});
  }
  // Binary ops: a list with a shared scalar, with another list, with one scalar per
  // element, or with a shared 0-d tensor. alpha (add, sub) is keyword-only.
  for (const char* name : {"add", "sub", "mul", "div"}) {
    const std::string op = absl::StrCat("aten.", name, ".Tensor");
    const std::string f = absl::StrCat("_foreach_", name);
    defs.push_back({f + ".Scalar", op, {"self", "scalar"}, {0}});
    defs.push_back({f + ".List", op, {"self", "other"}, {0, 1}});
    defs.push_back({f + ".ScalarList", op, {"self", "scalars"}, {0, 1}});
  }
  for (const char* name : {"add", "mul", "div"}) {
    defs.push_back({absl::StrCat("_foreach_", name, ".Tensor"),
                    absl::StrCat("aten.", name, ".Tensor"),
                    {"self", "other"},
                    {0}});
  }
  // maximum and minimum are clamp_min and clamp_max, as PyTorch implements them.
  for (const auto& [name, clamp] :
       std::vector<std::pair<std::string, std::string>>{{"clamp_min", "clamp_min"},
                                                        {"clamp_max", "clamp_max"},
                                                        {"maximum", "clamp_min"},
                                                        {"minimum", "clamp_max"}}) {
    const std::string f = "_foreach_" + name;
    defs.push_back({f + ".Scalar", "aten." + clamp + ".default", {"self", "scalar"}, {0}});
    defs.push_back({f + ".List", "aten." + clamp + ".Tensor", {"self", "other"}, {0, 1}});
    defs.push_back({f + ".ScalarList", "aten." + clamp + ".default", {"self", "scalars"}, {0, 1}});
  }
  defs.push_back({"_foreach_pow.List", "aten.pow.Tensor_Tensor", {"self", "exponent"}, {0, 1}});
  defs.push_back({"_foreach_pow.Scalar", "aten.pow.Tensor_Scalar", {"self", "exponent"}, {0}});
  defs.push_back(
      {"_foreach_pow.ScalarList", "aten.pow.Tensor_Scalar", {"self", "exponent"}, {0, 1}});
  defs.push_back({"_foreach_pow.ScalarAndTensor", "aten.pow.Scalar", {"self", "exponent"}, {1}});
  // Ternary ops.
  for (const char* name : {"addcmul", "addcdiv"}) {
    const std::string op = absl::StrCat("aten.", name, ".default");
    const std::string f = absl::StrCat("_foreach_", name);
    defs.push_back({f + ".Scalar", op, {"self", "tensor1", "tensor2", "value"}, {0, 1, 2}});
    defs.push_back(
        {f + ".ScalarList", op, {"self", "tensor1", "tensor2", "scalars"}, {0, 1, 2, 3}});
    defs.push_back({f + ".Tensor", op, {"self", "tensor1", "tensor2", "scalars"}, {0, 1, 2, 3}});
  }
  defs.push_back(
      {"_foreach_lerp.List", "aten.lerp.Tensor", {"self", "tensors1", "weights"}, {0, 1, 2}});
  defs.push_back(
      {"_foreach_lerp.Scalar", "aten.lerp.Scalar", {"self", "tensors1", "weight"}, {0, 1}});
  defs.push_back(
      {"_foreach_lerp.ScalarList", "aten.lerp.Scalar", {"self", "tensors1", "weight"}, {0, 1, 2}});
  // Copies and norms.
  defs.push_back(
      {"_foreach_copy.default", "aten.copy.default", {"self", "src", "non_blocking"}, {0, 1}});
  defs.push_back(
      {"_foreach_norm.Scalar", "aten.linalg_vector_norm.default", {"self", "ord", "*dtype"}, {0}});
  return defs;
}

}  // namespace

void RegisterForeachOps(OpRegistry& r) {
  for (ForeachDef& def : ForeachDefs()) {
    const OpInfo* op = r.Find(def.op);
    Check(op != nullptr, def.name, " applies ", def.op, ", which is not registered");
    r.Add("aten." + def.name, [def, fn = op->fn](OpCall& c) { return RunForeach(def, fn, c); });
  }
}

}  // namespace kiln::interp
