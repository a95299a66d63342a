#include "compiler/interp/op_registry.h"

#include <algorithm>

#include "absl/strings/str_join.h"

namespace kiln::interp {
namespace {

absl::string_view KindName(const Arg& a) {
  switch (a.v.index()) {
    case 0:
      return "None";
    case 1:
      return "Tensor";
    case 2:
      return "int";
    case 3:
      return "float";
    case 4:
      return "bool";
    case 5:
      return "str";
    case 6:
      return "dtype";
    case 7:
      return "device";
    case 8:
      return "layout";
    case 9:
      return "memory_format";
    default:
      return "list";
  }
}

std::string Where(int pos, absl::string_view name) {
  return absl::StrCat("argument ", pos, " (", name, ")");
}

std::optional<int64_t> AsInt(const Arg& a) {
  if (const auto* i = std::get_if<int64_t>(&a.v)) return *i;
  if (const auto* b = std::get_if<bool>(&a.v)) return *b ? 1 : 0;
  return std::nullopt;
}

}  // namespace

Arg Arg::Ints(std::vector<int64_t> ints) {
  List l;
  for (int64_t i : ints) l.emplace_back(i);
  return Arg(std::move(l));
}

Arg Arg::Bools(std::vector<bool> bools) {
  List l;
  for (bool b : bools) l.emplace_back(static_cast<bool>(b));
  return Arg(std::move(l));
}

Arg Arg::Tensors(std::vector<Tensor> tensors) {
  List l;
  for (Tensor& t : tensors) l.emplace_back(t.defined() ? Arg(std::move(t)) : Arg());
  return Arg(std::move(l));
}

Arg::Arg(const Value& value) : Arg(FromValue(value)) {}

Arg Arg::FromValue(const Value& value) {
  return std::visit([](const auto& x) { return Arg(x); }, value);
}

const Arg* OpCall::Find(int pos, absl::string_view name) const {
  for (const auto& [k, v] : kwargs_) {
    if (k == name) return std::holds_alternative<None>(v.v) ? nullptr : &v;
  }
  if (pos >= 0 && static_cast<size_t>(pos) < args_.size()) {
    const Arg& a = args_[static_cast<size_t>(pos)];
    return std::holds_alternative<None>(a.v) ? nullptr : &a;
  }
  return nullptr;
}

Tensor OpCall::GetTensor(int pos, absl::string_view name) const {
  Tensor t = GetOptTensor(pos, name);
  Check(t.defined(), Where(pos, name), " is required");
  return t;
}

Tensor OpCall::GetOptTensor(int pos, absl::string_view name) const {
  const Arg* a = Find(pos, name);
  if (a == nullptr) return Tensor();
  const auto* t = std::get_if<Tensor>(&a->v);
  Check(t != nullptr, Where(pos, name), " must be a Tensor, got ", KindName(*a));
  return *t;
}

int64_t OpCall::GetInt(int pos, absl::string_view name) const {
  auto v = GetOptInt(pos, name);
  Check(v.has_value(), Where(pos, name), " is required");
  return *v;
}

int64_t OpCall::GetInt(int pos, absl::string_view name, int64_t fallback) const {
  return GetOptInt(pos, name).value_or(fallback);
}

std::optional<int64_t> OpCall::GetOptInt(int pos, absl::string_view name) const {
  const Arg* a = Find(pos, name);
  if (a == nullptr) return std::nullopt;
  auto i = AsInt(*a);
  Check(i.has_value(), Where(pos, name), " must be an int, got ", KindName(*a));
  return i;
}

double OpCall::GetDouble(int pos, absl::string_view name) const {
  auto v = GetOptDouble(pos, name);
  Check(v.has_value(), Where(pos, name), " is required");
  return *v;
}

double OpCall::GetDouble(int pos, absl::string_view name, double fallback) const {
  return GetOptDouble(pos, name).value_or(fallback);
}

std::optional<double> OpCall::GetOptDouble(int pos, absl::string_view name) const {
  const Arg* a = Find(pos, name);
  if (a == nullptr) return std::nullopt;
  if (const auto* d = std::get_if<double>(&a->v)) return *d;
  auto i = AsInt(*a);
  Check(i.has_value(), Where(pos, name), " must be a number, got ", KindName(*a));
  return static_cast<double>(*i);
}

bool OpCall::GetBool(int pos, absl::string_view name, bool fallback) const {
  return GetOptBool(pos, name).value_or(fallback);
}

std::optional<bool> OpCall::GetOptBool(int pos, absl::string_view name) const {
  const Arg* a = Find(pos, name);
  if (a == nullptr) return std::nullopt;
  if (const auto* b = std::get_if<bool>(&a->v)) return *b;
  if (const auto* i = std::get_if<int64_t>(&a->v)) return *i != 0;
  Fail(Where(pos, name), " must be a bool, got ", KindName(*a));
}

std::vector<int64_t> OpCall::GetInts(int pos, absl::string_view name) const {
  auto v = GetOptInts(pos, name);
  Check(v.has_value(), Where(pos, name), " is required");
  return *v;
}

std::vector<int64_t> OpCall::GetInts(int pos, absl::string_view name,
                                     std::vector<int64_t> fallback) const {
  auto v = GetOptInts(pos, name);
  return v.has_value() ? *v : fallback;
}

std::optional<std::vector<int64_t>> OpCall::GetOptInts(int pos, absl::string_view name) const {
  const Arg* a = Find(pos, name);
  if (a == nullptr) return std::nullopt;
  if (auto i = AsInt(*a)) return std::vector<int64_t>{*i};
  const auto* l = std::get_if<Arg::List>(&a->v);
  Check(l != nullptr, Where(pos, name), " must be a list of ints, got ", KindName(*a));
  std::vector<int64_t> out;
  for (const Arg& e : *l) {
    auto i = AsInt(e);
    Check(i.has_value(), Where(pos, name), " must hold ints, found ", KindName(e));
    out.push_back(*i);
  }
  return out;
}

std::vector<bool> OpCall::GetBools(int pos, absl::string_view name,
                                   std::vector<bool> fallback) const {
  const Arg* a = Find(pos, name);
  if (a == nullptr) return fallback;
  const auto* l = std::get_if<Arg::List>(&a->v);
  Check(l != nullptr, Where(pos, name), " must be a list of bools, got ", KindName(*a));
  std::vector<bool> out;
  for (const Arg& e : *l) {
    auto i = AsInt(e);
    Check(i.has_value(), Where(pos, name), " must hold bools, found ", KindName(e));
    out.push_back(*i != 0);
  }
  return out;
}

std::vector<Tensor> OpCall::GetTensors(int pos, absl::string_view name) const {
  const Arg* a = Find(pos, name);
  Check(a != nullptr, Where(pos, name), " is required");
  const auto* l = std::get_if<Arg::List>(&a->v);
  Check(l != nullptr, Where(pos, name), " must be a list of tensors, got ", KindName(*a));
  std::vector<Tensor> out;
  for (const Arg& e : *l) {
    if (std::holds_alternative<None>(e.v)) {
      out.emplace_back();
      continue;
    }
    const auto* t = std::get_if<Tensor>(&e.v);
    Check(t != nullptr, Where(pos, name), " must hold tensors, found ", KindName(e));
    out.push_back(*t);
  }
  return out;
}

ScalarArg OpCall::GetScalar(int pos, absl::string_view name) const {
  auto s = GetOptScalar(pos, name);
  Check(s.has_value(), Where(pos, name), " is required");
  return *s;
}

std::optional<ScalarArg> OpCall::GetOptScalar(int pos, absl::string_view name) const {
  const Arg* a = Find(pos, name);
  if (a == nullptr) return std::nullopt;
  ScalarArg s;
  if (const auto* d = std::get_if<double>(&a->v)) {
    s.value = *d;
    s.kind = v1::DTYPE_FLOAT64;
  } else if (const auto* b = std::get_if<bool>(&a->v)) {
    s.int_value = *b ? 1 : 0;
    s.value = static_cast<double>(s.int_value);
    s.kind = v1::DTYPE_BOOL;
  } else if (const auto* i = std::get_if<int64_t>(&a->v)) {
    s.int_value = *i;
    s.value = static_cast<double>(*i);
    s.kind = v1::DTYPE_INT64;
  } else {
    Fail(Where(pos, name), " must be a number, got ", KindName(*a));
  }
  return s;
}

std::optional<DType> OpCall::GetOptDType(int pos, absl::string_view name) const {
  const Arg* a = Find(pos, name);
  if (a == nullptr) return std::nullopt;
  const auto* d = std::get_if<v1::DType>(&a->v);
  Check(d != nullptr, Where(pos, name), " must be a dtype, got ", KindName(*a));
  Check(IsSupported(*d), Where(pos, name), ": dtype ", v1::DType_Name(*d), " is not supported");
  return *d;
}

std::string OpCall::GetString(int pos, absl::string_view name, std::string fallback) const {
  const Arg* a = Find(pos, name);
  if (a == nullptr) return fallback;
  const auto* s = std::get_if<std::string>(&a->v);
  Check(s != nullptr, Where(pos, name), " must be a str, got ", KindName(*a));
  return *s;
}

void OpRegistry::Add(const std::string& name, OpFn fn) { ops_[name] = OpInfo{std::move(fn)}; }

void OpRegistry::AddView(const std::string& name, OpFn fn) {
  ops_[name] = OpInfo{std::move(fn), /*returns_views=*/true};
}

const OpInfo* OpRegistry::Find(absl::string_view name) const {
  auto it = ops_.find(name);
  return it == ops_.end() ? nullptr : &it->second;
}

std::vector<std::string> OpRegistry::Names() const {
  std::vector<std::string> out;
  for (const auto& [k, v] : ops_) out.push_back(k);
  return out;
}

const OpRegistry& DefaultOpRegistry() {
  static const OpRegistry* registry = [] {
    auto* r = new OpRegistry();
    RegisterPointwiseOps(*r);
    RegisterReductionOps(*r);
    RegisterViewOps(*r);
    RegisterFactoryOps(*r);
    RegisterIndexingOps(*r);
    RegisterNnOps(*r);
    RegisterLinalgOps(*r);
    RegisterRngOps(*r);
    RegisterMiscOps(*r);
    RegisterForeachOps(*r);
    return r;
  }();
  return *registry;
}

int64_t WrapDim(int64_t dim, int64_t rank) {
  const int64_t r = std::max<int64_t>(rank, 1);
  Check(dim >= -r && dim < r, "dim ", dim, " is out of range for a tensor of rank ", rank);
  return dim < 0 ? dim + r : dim;
}

std::vector<bool> ReductionMask(const std::optional<std::vector<int64_t>>& dims, int64_t rank) {
  std::vector<bool> mask(static_cast<size_t>(rank), false);
  if (!dims.has_value() || dims->empty()) {
    std::fill(mask.begin(), mask.end(), true);
    return mask;
  }
  for (int64_t d : *dims) {
    const int64_t w = WrapDim(d, rank);
    if (rank == 0) continue;
    Check(!mask[static_cast<size_t>(w)], "dim ", d, " appears more than once");
    mask[static_cast<size_t>(w)] = true;
  }
  return mask;
}

std::vector<int64_t> BroadcastShapes(absl::Span<const std::vector<int64_t>> shapes) {
  size_t rank = 0;
  for (const auto& s : shapes) rank = std::max(rank, s.size());
  std::vector<int64_t> out(rank, 1);
  for (const auto& s : shapes) {
    const size_t lead = rank - s.size();
    for (size_t d = 0; d < s.size(); ++d) {
      int64_t& o = out[lead + d];
      if (s[d] == o || s[d] == 1) continue;
      Check(o == 1, "shapes [", absl::StrJoin(s, ", "), "] and [", absl::StrJoin(out, ", "),
            "] do not broadcast");
      o = s[d];
    }
  }
  return out;
}

Tensor ExpandTo(const Tensor& t, const std::vector<int64_t>& sizes) {
  Check(static_cast<size_t>(t.dim()) <= sizes.size(), "cannot expand ", t.DebugString(),
        " to rank ", sizes.size());
  std::vector<int64_t> strides(sizes.size(), 0);
  const size_t lead = sizes.size() - static_cast<size_t>(t.dim());
  for (size_t d = 0; d < static_cast<size_t>(t.dim()); ++d) {
    const int64_t s = t.size(static_cast<int64_t>(d));
    if (s == sizes[lead + d]) {
      strides[lead + d] = t.stride(static_cast<int64_t>(d));
    } else {
      Check(s == 1, "cannot expand ", t.DebugString(), " to [", absl::StrJoin(sizes, ", "), "]");
    }
  }
  return t.AsStrided(sizes, std::move(strides), t.storage_offset());
}

DType FloatResultType(DType dtype) { return IsFloating(dtype) ? dtype : kDefaultFloat; }

Tensor MakeTensor(const std::vector<int64_t>& sizes, DType dtype, const std::vector<double>& v) {
  return Tensor::FromDoubles(sizes, dtype, v);
}

Tensor Operand::AsTensor() const {
  if (tensor.defined()) return tensor;
  if (scalar->is_int()) return Tensor::FromInts({}, v1::DTYPE_INT64, {scalar->int_value});
  return Tensor::FromDoubles({}, v1::DTYPE_FLOAT64, {scalar->value});
}

Operand GetOperand(const OpCall& call, int pos, absl::string_view name) {
  Operand o;
  const Arg* a = call.Find(pos, name);
  Check(a != nullptr, "argument ", pos, " (", name, ") is required");
  if (const auto* t = std::get_if<Tensor>(&a->v)) {
    o.tensor = *t;
  } else {
    o.scalar = call.GetScalar(pos, name);
  }
  return o;
}

DType ResultType(absl::Span<const Operand> operands) {
  ResultTypeState state;
  for (const Operand& o : operands) {
    if (o.tensor.defined()) {
      state.AddTensor(o.tensor.dtype(), o.tensor.dim() == 0);
    } else {
      state.AddScalar(o.scalar->kind);
    }
  }
  return state.Result();
}

Lanes::Lanes(const std::vector<int64_t>& sizes, int64_t dim) {
  const int64_t rank = static_cast<int64_t>(sizes.size());
  if (rank == 0) return;
  for (int64_t d = 0; d < rank; ++d) {
    const int64_t s = sizes[static_cast<size_t>(d)];
    if (d < dim) {
      outer *= s;
    } else if (d == dim) {
      n = s;
    } else {
      inner *= s;
    }
  }
}

std::vector<int64_t> StridesForFormat(const std::vector<int64_t>& sizes, v1::MemoryFormat format) {
  std::vector<size_t> order;  // dims from outermost to innermost
  if (format == v1::MEMORY_FORMAT_CHANNELS_LAST && sizes.size() == 4) {
    order = {0, 2, 3, 1};
  } else if (format == v1::MEMORY_FORMAT_CHANNELS_LAST_3D && sizes.size() == 5) {
    order = {0, 2, 3, 4, 1};
  } else {
    return ContiguousStrides(sizes);
  }
  std::vector<int64_t> strides(sizes.size());
  int64_t s = 1;
  for (size_t i = order.size(); i-- > 0;) {
    strides[order[i]] = s;
    s *= std::max<int64_t>(sizes[order[i]], 1);
  }
  return strides;
}

}  // namespace kiln::interp
