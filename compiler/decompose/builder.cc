#include "compiler/decompose/builder.h"
#include "proto/ops/registry.h"

#include <algorithm>

#include "absl/strings/match.h"

namespace kiln::decompose {

using graph::Arg;
using graph::ArgKind;
using graph::DType;
using loop::IndexExpr;
using loop::ReduceKind;
using loop::ScalarType;

ScalarType PromoteScalarTypes(ScalarType a, ScalarType b) {
  if (a == b) return a;
  const bool fa = loop::IsFloat(a), fb = loop::IsFloat(b);
  if (fa && fb) {
    if (a == ScalarType::kF64 || b == ScalarType::kF64) return ScalarType::kF64;
    return ScalarType::kF32;
  }
  if (fa) return a;
  if (fb) return b;
  if (a == ScalarType::kBool) return b;
  if (b == ScalarType::kBool) return a;
  if (a == ScalarType::kU8 || b == ScalarType::kU8) {
    ScalarType o = a == ScalarType::kU8 ? b : a;
    return o == ScalarType::kI8 ? ScalarType::kI16 : o;
  }
  return loop::ByteSize(a) >= loop::ByteSize(b) ? a : b;
}

int Category(ScalarType t) { return t == ScalarType::kBool ? 0 : loop::IsFloat(t) ? 2 : 1; }

int64_t WrapDim(int64_t d, size_t rank) {
  const int64_t r = static_cast<int64_t>(std::max<size_t>(rank, 1));
  return d < 0 ? d + r : d;
}

Builder::Builder(const graph::Graph& g, const canon::CanonicalGraph& c,
                 std::vector<int64_t> rng_streams)
    : g_(g), c_(c), rng_streams_(std::move(rng_streams)) {
  std::map<std::string, int64_t> hints;
  for (const graph::Symbol& s : g_.symbols()) {
    auto it = c_.symbol_names().find(s.name);
    if (it == c_.symbol_names().end()) continue;
    hints[it->second] = s.has_hint ? s.int_hint : 0;
  }
  for (const auto& [name, hint] : hints) {
    sym_ids_[name] = static_cast<int32_t>(out_.symbols.size());
    out_.symbols.push_back(name);
    out_.symbol_hints.push_back(hint);
  }
  value_tensor_.assign(g_.values().size(), -1);
}

absl::StatusOr<IndexExpr> Builder::Sym(const graph::SymInt& s) const {
  if (!s.is_symbolic()) return IndexExpr::Const(s.value());
  const std::function<int32_t(absl::string_view)> sym_id = [this](absl::string_view name) {
    auto it = c_.symbol_names().find(std::string(name));
    if (it == c_.symbol_names().end()) return -1;
    auto id = sym_ids_.find(it->second);
    return id == sym_ids_.end() ? -1 : id->second;
  };
  const sym::Expr& expr = g_.expr(s.expr());
  absl::StatusOr<IndexExpr> e = loop::IndexExprFromSym(expr, sym_id);
  if (!absl::IsUnimplemented(e.status())) return e;
  // Outside the IR's forms: carried as an opaque size, which views, externs and fallbacks
  // take as it is and which makes a Compute that needs it fall back (see Computable).
  absl::StatusOr<IndexExpr> opaque = IndexExpr::Opaque(expr, sym_id);
  if (!opaque.ok()) return e.status();
  return opaque;
}

absl::Status Builder::Computable(const IndexExpr& e) const {
  if (e.Computable()) return absl::OkStatus();
  return absl::UnimplementedError(
      absl::StrCat("the loop IR cannot compute `", e.ToString(out_.symbols), "`"));
}

absl::Status Builder::ComputableLayout(int32_t t) const {
  const Tensor& x = Tn(t);
  for (const IndexExpr& e : x.strides) {
    if (absl::Status s = Computable(e); !s.ok()) return s;
  }
  return Computable(x.offset);
}

absl::Status Builder::ComputableBody(const Body& b) const {
  const Compute& c = b.compute();
  for (const IndexExpr& e : c.dims) {
    if (absl::Status s = Computable(e); !s.ok()) return s;
  }
  for (const LoadSite& site : c.loads) {
    for (const IndexExpr& e : site.coords) {
      if (absl::Status s = Computable(e); !s.ok()) return s;
    }
    if (absl::Status s = ComputableLayout(site.tensor); !s.ok()) return s;
  }
  for (const loop::Inst& in : c.body) {
    if (absl::Status s = Computable(in.index); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<IndexExpr>> Builder::Syms(absl::Span<const graph::SymInt> v) const {
  std::vector<IndexExpr> out;
  for (const graph::SymInt& s : v) {
    auto e = Sym(s);
    if (!e.ok()) return e.status();
    out.push_back(*std::move(e));
  }
  return out;
}

std::string Builder::ValueName(const graph::Value& v) const {
  const graph::Node& n = g_.node(v.node);
  return n.num_outputs > 1 || n.multi_output ? absl::StrCat(NodeName(v.node), ".", v.output)
                                             : NodeName(v.node);
}

int32_t Builder::NewTensor(DType dtype, std::vector<IndexExpr> sizes, const std::string& name) {
  Tensor t;
  t.dtype = dtype;
  t.strides.resize(sizes.size());
  IndexExpr stride = IndexExpr::Const(1);
  for (size_t i = sizes.size(); i-- > 0;) {
    t.strides[i] = stride;
    stride = stride * sizes[i];
  }
  t.sizes = std::move(sizes);
  t.name = name;
  out_.tensors.push_back(std::move(t));
  const int32_t id = static_cast<int32_t>(out_.tensors.size() - 1);
  out_.tensors.back().storage = id;
  return id;
}

absl::StatusOr<int32_t> Builder::TensorOfValue(const graph::Value& v) {
  Tensor t;
  t.dtype = v.dtype;
  auto sizes = Syms(g_.sizes(v));
  if (!sizes.ok()) return sizes.status();
  auto strides = Syms(g_.strides(v));
  if (!strides.ok()) return strides.status();
  auto offset = Sym(v.storage_offset);
  if (!offset.ok()) return offset.status();
  t.sizes = *std::move(sizes);
  t.strides = *std::move(strides);
  t.offset = *std::move(offset);
  t.name = ValueName(v);
  out_.tensors.push_back(std::move(t));
  const int32_t id = static_cast<int32_t>(out_.tensors.size() - 1);
  out_.tensors.back().storage = id;
  return id;
}

const graph::Value* Builder::Out(uint32_t node, size_t k) const {
  const graph::Node& n = N(node);
  if (k >= n.num_outputs) return nullptr;
  const graph::Value& v = g_.outputs(n)[k];
  return v.kind == graph::ValueKind::kTensor ? &v : nullptr;
}

int32_t Builder::TensorArg(const Arg& a) const {
  if (a.kind != ArgKind::kRef) return -1;
  const graph::Value* v = g_.Resolve(a.ref);
  if (v == nullptr) return -1;
  return TensorOf(*v);
}

double Builder::Num(const Arg& a, double dflt) {
  switch (a.kind) {
    case ArgKind::kInt:
    case ArgKind::kBool:
      return static_cast<double>(a.int_value);
    case ArgKind::kFloat:
      return a.float_value;
    default:
      return dflt;
  }
}

std::vector<int64_t> Builder::Ints(const Arg& a) const {
  std::vector<int64_t> out;
  if (a.kind == ArgKind::kInt) out.push_back(a.int_value);
  if (a.kind == ArgKind::kList) {
    for (const Arg& x : g_.items(a)) out.push_back(Int(x));
  }
  return out;
}

absl::StatusOr<int32_t> Builder::ScalarValue(Body& b, const Arg& a, ScalarType t) const {
  if (a.kind == ArgKind::kSymbolic) {
    auto e = Sym(a.sym);
    if (!e.ok()) return e.status();
    return b.Cast(b.Idx(*e), t);
  }
  if (a.kind == ArgKind::kRef) {
    const graph::Value* v = g_.Resolve(a.ref);
    if (v != nullptr && v->kind == graph::ValueKind::kSymInt) {
      auto e = Sym(v->scalar);
      if (!e.ok()) return e.status();
      return b.Cast(b.Idx(*e), t);
    }
    return absl::UnimplementedError("a scalar argument refers to a non-integer value");
  }
  return b.Const(Num(a), t);
}

std::vector<IndexExpr> Builder::BroadcastCoords(const Body& b, int32_t t, size_t ndims) const {
  const Tensor& x = Tn(t);
  const size_t n = ndims ? ndims : b.rank();
  std::vector<IndexExpr> coords;
  for (size_t i = 0; i < x.sizes.size(); ++i) {
    const size_t d = n - x.sizes.size() + i;
    if (x.sizes[i].is_const() && x.sizes[i].const_value() == 1) {
      coords.push_back(IndexExpr());
    } else {
      coords.push_back(Body::V(d));
    }
  }
  return coords;
}

absl::StatusOr<int32_t> Builder::Operand(Body& b, const Arg& a, ScalarType scalar_type) const {
  const int32_t t = TensorArg(a);
  if (t >= 0) return LoadB(b, t);
  return ScalarValue(b, a, scalar_type);
}

namespace {

// Whether a size an op computes and the size the graph's metadata records provably differ.
// IndexExprs are kept in a normal form, so equal keys are provably equal sizes. Two sizes whose
// difference is a non-zero constant (s0 and s0 + 1, 4 and 5), or of which one is provably below
// the other for every value of the symbols (s0 and 2*s0 + 1), provably differ. Anything else
// cannot be decided from the expressions alone: s0 against s1 may be equal under the graph's
// guards or ranges, and opaque or divided sizes do not compare; those sizes are taken as they
// were before this check, the tensor keeping the metadata's size.
bool ProvablyDiffer(const IndexExpr& computed, const IndexExpr& recorded) {
  if (computed == recorded) return false;
  const IndexExpr difference = computed - recorded;
  if (difference.is_zero()) return false;
  if (difference.is_const()) return true;
  return computed.ProvablyBelow(recorded, nullptr) || recorded.ProvablyBelow(computed, nullptr);
}

}  // namespace

absl::Status Builder::CheckMetadata(uint32_t node, const graph::Value& value,
                                    const std::vector<IndexExpr>& computed) const {
  auto recorded = Syms(g_.sizes(value));
  if (!recorded.ok()) return recorded.status();
  const graph::Node& n = N(node);
  // Names the node as the graph does (its name and op) and as kiln explain does (%N).
  const std::string where = absl::StrCat("node `", g_.str(n.name), "` (", g_.target(n), ", ",
                                         NodeName(node), "): output ", value.output);
  if (recorded->size() != computed.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, " has rank ", recorded->size(), " in the graph's metadata, but ",
                     g_.target(n), " computes rank ", computed.size(), " from its inputs"));
  }
  for (size_t i = 0; i < computed.size(); ++i) {
    if (!ProvablyDiffer(computed[i], (*recorded)[i])) continue;
    // Sizes print with the graph's own symbol names, not the canonical ones.
    std::vector<std::string> names = out_.symbols;
    for (const auto& [original, canonical] : c_.symbol_names()) {
      if (auto id = sym_ids_.find(canonical); id != sym_ids_.end()) names[id->second] = original;
    }
    return absl::InvalidArgumentError(
        absl::StrCat(where, " has size ", (*recorded)[i].ToString(names), " at dim ", i,
                     " in the graph's metadata, but ", g_.target(n), " computes ",
                     computed[i].ToString(names), " from its inputs"));
  }
  return absl::OkStatus();
}

absl::StatusOr<int32_t> Builder::Finish(uint32_t node, Body& b, int32_t result, DType dtype,
                                        const graph::Value* value, std::vector<int32_t> out_dims,
                                        std::vector<IndexExpr> out_sizes) {
  // Before anything else, so a graph at fault is told so rather than falling back.
  if (value != nullptr) {
    if (absl::Status s = CheckMetadata(node, *value, out_sizes); !s.ok()) return s;
  }
  if (absl::Status s = ComputableBody(b); !s.ok()) return s;
  int32_t t;
  if (value != nullptr) {
    auto tv = TensorOfValue(*value);
    if (!tv.ok()) return tv.status();
    t = *tv;
    if (absl::Status s = ComputableLayout(t); !s.ok()) {
      out_.tensors.pop_back();
      return s;
    }
    Bind(*value, t);
  } else {
    t = TempTensor(node, dtype, std::move(out_sizes));
  }
  Node n;
  n.kind = Node::Kind::kCompute;
  n.name = NodeName(node);
  n.stack_trace = g_.str(N(node).stack_trace);
  n.compute = b.Take(result, std::move(out_dims));
  n.outputs = {t};
  AddNode(std::move(n));
  return t;
}

absl::StatusOr<int32_t> Builder::FinishPointwise(uint32_t node, Body& b, int32_t result,
                                                 DType dtype, int k, bool temp) {
  std::vector<int32_t> out_dims;
  std::vector<IndexExpr> sizes;
  for (size_t i = 0; i < b.rank(); ++i) {
    out_dims.push_back(static_cast<int32_t>(i));
    sizes.push_back(b.dim(i));
  }
  const graph::Value* v = temp ? nullptr : Out(node, static_cast<size_t>(k));
  if (v != nullptr) dtype = v->dtype;
  // The value is the tensor's (bernoulli's comparison is a float tensor): a consumer fused
  // with the node reads the value where it would have loaded the tensor.
  result = b.Cast(result, loop::ScalarTypeOf(dtype));
  return Finish(node, b, result, dtype, v, std::move(out_dims), std::move(sizes));
}

absl::StatusOr<int32_t> Builder::FinishReduce(uint32_t node, Body& b, int32_t result,
                                              ReduceKind kind, DType dtype, bool keepdim, int k,
                                              bool temp, int32_t index, bool store_index) {
  b.SetReduce(kind, index, store_index);
  std::vector<int32_t> out_dims;
  std::vector<IndexExpr> sizes;
  const std::vector<bool>& red = b.reduced();
  for (size_t i = 0; i < b.rank(); ++i) {
    if (!red[i]) {
      out_dims.push_back(static_cast<int32_t>(i));
      sizes.push_back(b.dim(i));
    } else if (keepdim) {
      out_dims.push_back(-1);
      sizes.push_back(IndexExpr::Const(1));
    }
  }
  const graph::Value* v = temp ? nullptr : Out(node, static_cast<size_t>(k));
  return Finish(node, b, result, v ? v->dtype : dtype, v, std::move(out_dims), std::move(sizes));
}

Body Builder::ReduceBody(int32_t t, const std::vector<int64_t>& dims) const {
  const size_t r = Rank(t);
  std::vector<bool> red(r, dims.empty());
  // A 0-d tensor takes dim 0 or -1, which name no dim of its (empty) iteration space.
  if (r == 0) return Body(Tn(t).sizes, red);
  for (int64_t d : dims) red[static_cast<size_t>(WrapDim(d, r))] = true;
  return Body(Tn(t).sizes, red);
}

absl::StatusOr<int32_t> Builder::SumTemp(uint32_t node, Body& b, int32_t v, ReduceKind kind,
                                         ScalarType acc) {
  return FinishReduce(node, b, b.Cast(v, acc), kind, loop::DTypeOf(acc), true, 0, true);
}

IndexExpr Builder::NumelOf(const std::vector<IndexExpr>& dims, const std::vector<bool>& red) {
  IndexExpr n = IndexExpr::Const(1);
  for (size_t i = 0; i < dims.size(); ++i) {
    if (red[i]) n = n * dims[i];
  }
  return n;
}

absl::Status Builder::Alias(uint32_t node, size_t k, int32_t t) {
  const graph::Value* v = Out(node, k);
  if (v == nullptr) return absl::OkStatus();
  // A graph value must keep its metadata's layout: copy when the tensor differs.
  const Tensor& x = Tn(t);
  auto sizes = Syms(g_.sizes(*v));
  auto strides = Syms(g_.strides(*v));
  if (sizes.ok() && strides.ok() && *sizes == x.sizes && *strides == x.strides &&
      x.offset.is_zero() && x.dtype == v->dtype) {
    Bind(*v, t);
    return absl::OkStatus();
  }
  Body b(x.sizes);
  auto r = FinishPointwise(node, b, LoadB(b, t), v->dtype, static_cast<int>(k));
  return r.status();
}

absl::Status Builder::Pointwise(
    uint32_t node, const std::function<absl::StatusOr<int32_t>(Body&, ScalarType)>& fn) {
  const graph::Value* out = Out(node, 0);
  if (out == nullptr) return absl::InternalError("pointwise op without a tensor output");
  auto sizes = Syms(g_.sizes(*out));
  if (!sizes.ok()) return sizes.status();
  Body b(*sizes);
  const ScalarType ct = loop::ComputeType(loop::ScalarTypeOf(out->dtype));
  auto r = fn(b, ct);
  if (!r.ok()) return r.status();
  return FinishPointwise(node, b, *r, out->dtype).status();
}

int32_t Builder::AddNode(Node n) {
  const int32_t self = static_cast<int32_t>(out_.nodes.size());
  for (int32_t t : n.outputs) {
    if (t >= 0) out_.tensors[static_cast<size_t>(t)].producer = self;
  }
  out_.nodes.push_back(std::move(n));
  return self;
}

absl::Status Builder::AddInput(uint32_t node) {
  for (const graph::Value& v : g_.outputs(N(node))) {
    if (v.kind != graph::ValueKind::kTensor) continue;
    auto t = TensorOfValue(v);
    if (!t.ok()) return t.status();
    // An input's buffer starts at the tensor's first element (the runtime is handed the
    // tensor, not its storage), so views of it count their offsets from there.
    out_.tensors[static_cast<size_t>(*t)].offset = IndexExpr::Const(0);
    Node n;
    n.kind = Node::Kind::kInput;
    n.name = NodeName(node);
    n.input_index = static_cast<int32_t>(node);
    n.outputs = {*t};
    AddNode(std::move(n));
    Bind(v, *t);
  }
  return absl::OkStatus();
}

absl::Status Builder::View(uint32_t node) {
  const int32_t src = In(node, 0);
  const graph::Node& gn = N(node);
  const std::string& target = g_.target(gn);
  const Tensor x = Tn(src);  // a copy: new tensors below may move the tensor array
  // reshape copies unless its input is laid out contiguously.
  for (size_t k = 0; k < gn.num_outputs; ++k) {
    const graph::Value& v = g_.outputs(gn)[k];
    if (v.kind != graph::ValueKind::kTensor) continue;
    auto t = TensorOfValue(v);
    if (!t.ok()) return t.status();
    if (target == "aten.reshape.default") {
      IndexExpr stride = IndexExpr::Const(1);
      bool contiguous = true;
      for (size_t i = x.sizes.size(); i-- > 0;) {
        if (!(x.sizes[i].is_const() && x.sizes[i].const_value() == 1) && x.strides[i] != stride) {
          contiguous = false;
        }
        stride = stride * x.sizes[i];
      }
      if (!contiguous) {
        out_.tensors.pop_back();
        return Pointwise(node, [&](Body& b, ScalarType ct) -> absl::StatusOr<int32_t> {
          IndexExpr lin = b.Linear();
          std::vector<IndexExpr> coords(x.sizes.size());
          IndexExpr st = IndexExpr::Const(1);
          std::vector<IndexExpr> strides(x.sizes.size());
          for (size_t i = x.sizes.size(); i-- > 0;) {
            strides[i] = st;
            st = st * x.sizes[i];
          }
          for (size_t i = 0; i < x.sizes.size(); ++i) {
            IndexExpr q = IndexExpr::FloorDiv(lin, strides[i], nullptr);
            coords[i] = i == 0 ? q : IndexExpr::Mod(q, x.sizes[i], nullptr);
          }
          return b.Cast(b.Load(src, ST(src), coords), ct);
        });
      }
    }
    out_.tensors[static_cast<size_t>(*t)].storage = x.storage;
    Node n;
    n.kind = Node::Kind::kView;
    n.name = NodeName(node);
    n.view_of = src;
    n.outputs = {*t};
    AddNode(std::move(n));
    Bind(v, *t);
  }
  return absl::OkStatus();
}

absl::StatusOr<CallArg> Builder::ConvertArg(const Arg& a) const {
  CallArg out;
  switch (a.kind) {
    case ArgKind::kRef: {
      const graph::Value* v = g_.Resolve(a.ref);
      if (v != nullptr && v->kind == graph::ValueKind::kTensor) {
        out.kind = CallArg::Kind::kTensor;
        out.tensor = TensorOf(*v);
        if (out.tensor < 0) return absl::InternalError("a tensor argument has no value yet");
        return out;
      }
      if (v != nullptr &&
          (v->kind == graph::ValueKind::kSymInt || v->kind == graph::ValueKind::kSymFloat ||
           v->kind == graph::ValueKind::kSymBool)) {
        auto e = Sym(v->scalar);
        if (!e.ok()) return e.status();
        out.value.mutable_symbolic()->set_expr(e->ToString(out_.symbols));
        out.value.mutable_symbolic()->set_kind(v1::SYM_KIND_INT);
        return out;
      }
      out.kind = CallArg::Kind::kNoneTensor;
      return out;
    }
    case ArgKind::kAbsent:
    case ArgKind::kNone:
      out.value.mutable_none();
      return out;
    case ArgKind::kInt:
      out.value.set_int_value(a.int_value);
      return out;
    case ArgKind::kFloat:
      out.value.set_float_value(a.float_value);
      return out;
    case ArgKind::kBool:
      out.value.set_bool_value(a.int_value != 0);
      return out;
    case ArgKind::kString:
      out.value.set_string_value(g_.str(a.string_id));
      return out;
    case ArgKind::kDType:
      out.value.set_dtype(static_cast<v1::DType>(a.int_value));
      return out;
    case ArgKind::kDevice: {
      out.value.mutable_device()->set_type(std::string(graph::DeviceTypeName(a.device.type)));
      return out;
    }
    case ArgKind::kLayout:
      out.value.set_layout(static_cast<v1::Layout>(a.int_value));
      return out;
    case ArgKind::kMemoryFormat:
      out.value.set_memory_format(static_cast<v1::MemoryFormat>(a.int_value));
      return out;
    case ArgKind::kList: {
      out.kind = CallArg::Kind::kList;
      for (const Arg& x : g_.items(a)) {
        auto item = ConvertArg(x);
        if (!item.ok()) return item.status();
        out.items.push_back(*std::move(item));
      }
      return out;
    }
    case ArgKind::kSymbolic: {
      auto e = Sym(a.sym);
      if (!e.ok()) return e.status();
      out.value.mutable_symbolic()->set_expr(e->ToString(out_.symbols));
      out.value.mutable_symbolic()->set_kind(
          a.sym_kind == graph::ValueKind::kSymFloat ? v1::SYM_KIND_FLOAT : v1::SYM_KIND_INT);
      return out;
    }
  }
  return out;
}

Node Builder::CallOf(uint32_t node, const std::string& op) const {
  Node n;
  n.kind = Node::Kind::kExtern;
  n.name = NodeName(node);
  n.stack_trace = g_.str(N(node).stack_trace);
  n.op = op;
  return n;
}

absl::Status Builder::AddArgs(uint32_t node, size_t first, size_t last, Node& n) const {
  for (size_t i = first; i <= last; ++i) {
    auto a = ConvertArg(A(node, i));
    if (!a.ok()) return a.status();
    n.args.push_back(*std::move(a));
  }
  return absl::OkStatus();
}

absl::Status Builder::Extern(uint32_t node, const std::string& op, bool fallback,
                             const std::string& reason) {
  const graph::Node& gn = N(node);
  Node n = CallOf(node, op);
  n.fallback = fallback;
  n.reason = reason;
  n.collective = ops::IsCollective(op);
  n.rng_stream = rng_stream(node);
  const auto args = g_.args(gn);
  for (size_t i = 0; i < args.size(); ++i) {
    auto ca = ConvertArg(args[i]);
    if (!ca.ok()) return ca.status();
    // Keys ignore process-group names, so artifacts carry canonical ones ("pg0", ...) that
    // every requester's runtime binds to its own groups.
    if (std::string pg = c_.ProcessGroupName(node, static_cast<uint32_t>(i)); !pg.empty()) {
      ca->value.set_string_value(pg);
    }
    std::string kw;
    if (gn.schema != nullptr && i < gn.schema->params.size() && gn.schema->params[i].keyword_only) {
      kw = gn.schema->params[i].name;
    } else if (args[i].name != 0) {
      kw = g_.str(args[i].name);
    }
    if (kw.empty()) {
      n.args.push_back(*std::move(ca));
    } else {
      n.kwargs.emplace_back(kw, *std::move(ca));
    }
  }
  for (size_t k = 0; k < gn.num_outputs; ++k) {
    const graph::Value& v = g_.outputs(gn)[k];
    if (v.kind != graph::ValueKind::kTensor) {
      n.outputs.push_back(-1);
      continue;
    }
    auto t = TensorOfValue(v);
    if (!t.ok()) return t.status();
    Bind(v, *t);
    n.outputs.push_back(*t);
  }
  AddNode(std::move(n));
  return absl::OkStatus();
}

absl::Status Builder::Fallback(uint32_t node, const std::string& reason) {
  return Extern(node, g_.target(N(node)), true, reason);
}

}  // namespace kiln::decompose
