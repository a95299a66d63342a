// Python builtins FX records (operator.getitem on tuples, arithmetic on SymInts), size
// queries (sym_size, sym_numel, ...) and functional collectives, which are the identity
// for a world size of 1.

#include <cmath>

#include "compiler/interp/op_registry.h"

namespace kiln::interp {
namespace {

Value ToValue(const Arg& a) {
  if (const auto* t = std::get_if<Tensor>(&a.v)) return *t;
  if (const auto* i = std::get_if<int64_t>(&a.v)) return *i;
  if (const auto* d = std::get_if<double>(&a.v)) return *d;
  if (const auto* b = std::get_if<bool>(&a.v)) return *b;
  if (std::holds_alternative<None>(a.v)) return None{};
  Fail("operator.getitem: the element is not a value");
}

// Python arithmetic on ints and floats: ints stay exact, anything with a float is float.
template <typename IntF, typename FloatF>
void AddPythonBinary(OpRegistry& r, const std::string& name, IntF int_f, FloatF float_f) {
  r.Add(name, [int_f, float_f](OpCall& c) -> std::vector<Value> {
    const ScalarArg a = c.GetScalar(0, "a");
    const ScalarArg b = c.GetScalar(1, "b");
    if (a.is_int() && b.is_int()) return {int_f(a.int_value, b.int_value)};
    return {float_f(a.value, b.value)};
  });
}

int64_t PyFloorDiv(int64_t a, int64_t b) {
  Check(b != 0, "integer division by zero");
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

void CheckWorldSize(const OpCall& c) {
  Check(c.options().world_size == 1, "collectives are only supported for a world size of 1, not ",
        c.options().world_size);
}

}  // namespace

void RegisterMiscOps(OpRegistry& r) {
  r.Add("operator.getitem", [](OpCall& c) -> std::vector<Value> {
    const Arg* seq = c.Find(0, "a");
    Check(seq != nullptr, "operator.getitem: missing sequence");
    const auto* list = std::get_if<Arg::List>(&seq->v);
    Check(list != nullptr, "operator.getitem: only tuples and lists are supported");
    int64_t i = c.GetInt(1, "b");
    const int64_t n = static_cast<int64_t>(list->size());
    Check(i >= -n && i < n, "operator.getitem: index ", i, " out of range for ", n, " elements");
    if (i < 0) i += n;
    return {ToValue((*list)[static_cast<size_t>(i)])};
  });
  AddPythonBinary(
      r, "operator.mul", [](int64_t a, int64_t b) { return a * b; },
      [](double a, double b) { return a * b; });
  AddPythonBinary(
      r, "operator.add", [](int64_t a, int64_t b) { return a + b; },
      [](double a, double b) { return a + b; });
  AddPythonBinary(
      r, "operator.sub", [](int64_t a, int64_t b) { return a - b; },
      [](double a, double b) { return a - b; });
  AddPythonBinary(r, "operator.floordiv", PyFloorDiv,
                  [](double a, double b) { return std::floor(a / b); });
  AddPythonBinary(
      r, "operator.mod", [](int64_t a, int64_t b) { return a - PyFloorDiv(a, b) * b; },
      [](double a, double b) { return a - std::floor(a / b) * b; });
  r.Add("operator.truediv", [](OpCall& c) -> std::vector<Value> {
    return {c.GetScalar(0, "a").value / c.GetScalar(1, "b").value};
  });
  r.Add("operator.neg", [](OpCall& c) -> std::vector<Value> {
    const ScalarArg a = c.GetScalar(0, "a");
    if (a.is_int()) return {-a.int_value};
    return {-a.value};
  });

  r.Add("aten.sym_size.int", [](OpCall& c) -> std::vector<Value> {
    const Tensor self = c.GetTensor(0, "self");
    return {self.size(WrapDim(c.GetInt(1, "dim"), self.dim()))};
  });
  r.Add("aten.sym_stride.int", [](OpCall& c) -> std::vector<Value> {
    const Tensor self = c.GetTensor(0, "self");
    return {self.stride(WrapDim(c.GetInt(1, "dim"), self.dim()))};
  });
  r.Add("aten.sym_numel.default",
        [](OpCall& c) -> std::vector<Value> { return {c.GetTensor(0, "self").numel()}; });
  r.Add("aten.sym_storage_offset.default",
        [](OpCall& c) -> std::vector<Value> { return {c.GetTensor(0, "self").storage_offset()}; });

  // Functional collectives return a new tensor holding the result; with one rank that is
  // a copy of the input.
  auto identity_copy = [](OpCall& c) {
    CheckWorldSize(c);
    const Tensor in = c.GetTensor(0, "input");
    return One(in.ClonePreserve(in.dtype()));
  };
  r.Add("_c10d_functional.all_reduce.default", identity_copy);
  r.Add("_c10d_functional.broadcast.default", identity_copy);
  r.Add("_c10d_functional.all_gather_into_tensor.default", identity_copy);
  r.Add("_c10d_functional.reduce_scatter_tensor.default", identity_copy);
  r.Add("_c10d_functional.all_to_all_single.default", identity_copy);
  auto coalesced_copy = [](OpCall& c) {
    CheckWorldSize(c);
    std::vector<Value> out;
    for (const Tensor& t : c.GetTensors(0, "inputs")) out.emplace_back(t.ClonePreserve(t.dtype()));
    return out;
  };
  r.Add("_c10d_functional.all_reduce_coalesced.default", coalesced_copy);
  r.Add("_c10d_functional.all_gather_into_tensor_coalesced.default", coalesced_copy);
  r.Add("_c10d_functional.reduce_scatter_tensor_coalesced.default", coalesced_copy);
  r.AddView("_c10d_functional.wait_tensor.default",
            [](OpCall& c) { return One(c.GetTensor(0, "tensor")); });
}

}  // namespace kiln::interp
