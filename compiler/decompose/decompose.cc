#include "compiler/decompose/decompose.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "proto/ops/registry.h"

namespace kiln::decompose {
namespace {

using graph::Arg;
using graph::ArgKind;
using graph::DType;
using loop::IndexExpr;
using loop::Inst;
using loop::Opcode;
using loop::ReduceKind;
using loop::ScalarType;

double kSqrt1_2 = 0.70710678118654752440;
double kSqrt2OverPi = 0.79788456080286535588;

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

// Builds the body of one Compute.
class Body {
 public:
  explicit Body(std::vector<IndexExpr> dims, std::vector<bool> reduced = {}) {
    c_.dims = std::move(dims);
    c_.reduced = reduced.empty() ? std::vector<bool>(c_.dims.size(), false) : std::move(reduced);
  }
  size_t rank() const { return c_.dims.size(); }
  const IndexExpr& dim(size_t i) const { return c_.dims[i]; }
  static IndexExpr V(size_t d) { return IndexExpr::Var(static_cast<int32_t>(d)); }

  ScalarType T(int32_t v) const { return c_.body[static_cast<size_t>(v)].type; }

  int32_t Emit(Inst in) {
    c_.body.push_back(std::move(in));
    return static_cast<int32_t>(c_.body.size() - 1);
  }
  int32_t Load(int32_t tensor, ScalarType storage, std::vector<IndexExpr> coords, int32_t mask = -1,
               std::vector<int32_t> dyn = {}) {
    LoadSite site;
    site.tensor = tensor;
    if (dyn.empty()) dyn.assign(coords.size(), -1);
    site.coords = std::move(coords);
    site.dyn = std::move(dyn);
    c_.loads.push_back(std::move(site));
    Inst in;
    in.op = Opcode::kLoad;
    in.type = loop::ComputeType(storage);
    in.iimm = static_cast<int64_t>(c_.loads.size() - 1);
    in.mask = mask;
    return Emit(std::move(in));
  }
  int32_t Const(double v, ScalarType t) {
    Inst in;
    in.op = Opcode::kConst;
    in.type = loop::ComputeType(t);
    if (loop::IsFloat(in.type)) {
      in.fimm = v;
    } else if (t == ScalarType::kBool) {
      in.iimm = v != 0;
    } else {
      in.iimm = static_cast<int64_t>(v);
    }
    return Emit(std::move(in));
  }
  int32_t IConst(int64_t v, ScalarType t = ScalarType::kI64) {
    Inst in;
    in.op = Opcode::kConst;
    in.type = t;
    in.iimm = v;
    if (loop::IsFloat(t)) in.fimm = static_cast<double>(v);
    return Emit(std::move(in));
  }
  int32_t Idx(IndexExpr e) {
    Inst in;
    in.op = Opcode::kIndex;
    in.type = ScalarType::kI64;
    in.index = std::move(e);
    return Emit(std::move(in));
  }
  int32_t Cast(int32_t v, ScalarType t) {
    t = loop::ComputeType(t);
    if (T(v) == t) return v;
    Inst in;
    in.op = Opcode::kCast;
    in.type = t;
    in.a = v;
    return Emit(std::move(in));
  }
  int32_t Un(Opcode op, int32_t a) {
    Inst in;
    in.op = op;
    in.type = (op == Opcode::kIsNan || op == Opcode::kIsInf || op == Opcode::kNot)
                  ? ScalarType::kBool
                  : T(a);
    in.a = a;
    return Emit(std::move(in));
  }
  static bool IsCompare(Opcode op) {
    return op == Opcode::kEq || op == Opcode::kNe || op == Opcode::kLt || op == Opcode::kLe ||
           op == Opcode::kGt || op == Opcode::kGe;
  }
  int32_t Bin(Opcode op, int32_t a, int32_t b) {
    ScalarType t = PromoteScalarTypes(T(a), T(b));
    if (op == Opcode::kAnd || op == Opcode::kOr || op == Opcode::kXor) {
      if (T(a) == ScalarType::kBool && T(b) == ScalarType::kBool) t = ScalarType::kBool;
    }
    a = Cast(a, t);
    b = Cast(b, t);
    Inst in;
    in.op = op;
    in.type = IsCompare(op) ? ScalarType::kBool : t;
    in.a = a;
    in.b = b;
    return Emit(std::move(in));
  }
  int32_t Sel(int32_t c, int32_t a, int32_t b) {
    ScalarType t = PromoteScalarTypes(T(a), T(b));
    a = Cast(a, t);
    b = Cast(b, t);
    Inst in;
    in.op = Opcode::kSelect;
    in.type = t;
    in.a = ToBool(c);
    in.b = a;
    in.c = b;
    return Emit(std::move(in));
  }
  int32_t ToBool(int32_t v) {
    if (T(v) == ScalarType::kBool) return v;
    return Bin(Opcode::kNe, v, Const(0, T(v)));
  }
  int32_t RandBits(int64_t stream, int32_t element) {
    Inst in;
    in.op = Opcode::kRandBits;
    in.type = ScalarType::kI64;
    in.iimm = stream;
    in.a = element;
    return Emit(std::move(in));
  }
  // Convenience arithmetic.
  int32_t Add(int32_t a, int32_t b) { return Bin(Opcode::kAdd, a, b); }
  int32_t Sub(int32_t a, int32_t b) { return Bin(Opcode::kSub, a, b); }
  int32_t Mul(int32_t a, int32_t b) { return Bin(Opcode::kMul, a, b); }
  int32_t Div(int32_t a, int32_t b) { return Bin(Opcode::kDiv, a, b); }
  int32_t MulC(int32_t a, double c) { return Mul(a, Const(c, T(a))); }
  int32_t AddC(int32_t a, double c) { return Add(a, Const(c, T(a))); }

  // The row-major position of the current point among the non-reduced dims (or all dims).
  IndexExpr Linear() const {
    IndexExpr lin, stride = IndexExpr::Const(1);
    for (size_t i = c_.dims.size(); i-- > 0;) {
      lin = lin + V(i) * stride;
      stride = stride * c_.dims[i];
    }
    return lin;
  }

  Compute Take(int32_t result, std::vector<int32_t> out_dims) {
    c_.result = result;
    c_.out_dims = std::move(out_dims);
    return std::move(c_);
  }
  void SetReduce(ReduceKind k, int32_t index = -1) {
    c_.reduce = k;
    c_.reduce_index = index;
  }

 private:
  Compute c_;
};

// max_pool2d's window, from the op's kernel_size, stride, padding and dilation arguments.
struct PoolWindow {
  int64_t kh = 1, kw = 1, sh = 1, sw = 1, ph = 0, pw = 0, dh = 1, dw = 1;
};

class Decomposer {
 public:
  Decomposer(const graph::Graph& g, const canon::CanonicalGraph& c) : g_(g), c_(c) {}

  absl::StatusOr<PrimGraph> Run();

  using Rule = std::function<absl::Status(Decomposer&, uint32_t)>;
  static const absl::flat_hash_map<std::string, Rule>& Rules();

 private:
  // --- Symbols and metadata.
  absl::StatusOr<IndexExpr> Sym(const graph::SymInt& s) {
    if (!s.is_symbolic()) return IndexExpr::Const(s.value());
    const std::string& text = g_.expr_text(s.expr());
    return loop::ParseIndexExpr(text, [this](absl::string_view name) -> int32_t {
      auto it = c_.symbol_names().find(std::string(name));
      if (it == c_.symbol_names().end()) return -1;
      auto id = sym_ids_.find(it->second);
      return id == sym_ids_.end() ? -1 : id->second;
    });
  }
  absl::StatusOr<std::vector<IndexExpr>> Syms(absl::Span<const graph::SymInt> v) {
    std::vector<IndexExpr> out;
    for (const graph::SymInt& s : v) {
      auto e = Sym(s);
      if (!e.ok()) return e.status();
      out.push_back(*std::move(e));
    }
    return out;
  }

  std::string NodeName(uint32_t node) const { return absl::StrCat("%", c_.position(node)); }
  std::string ValueName(const graph::Value& v) const {
    const graph::Node& n = g_.node(v.node);
    return n.num_outputs > 1 || n.multi_output ? absl::StrCat(NodeName(v.node), ".", v.output)
                                               : NodeName(v.node);
  }
  uint32_t ValueId(const graph::Value& v) const {
    return static_cast<uint32_t>(&v - g_.values().data());
  }

  // --- Tensors.
  int32_t NewTensor(DType dtype, std::vector<IndexExpr> sizes, const std::string& name) {
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
  absl::StatusOr<int32_t> TensorOfValue(const graph::Value& v) {
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
  const Tensor& Tn(int32_t t) const { return out_.tensors[static_cast<size_t>(t)]; }
  ScalarType ST(int32_t t) const { return loop::ScalarTypeOf(Tn(t).dtype); }
  size_t Rank(int32_t t) const { return Tn(t).sizes.size(); }

  // --- Nodes and arguments.
  const graph::Node& N(uint32_t node) const { return g_.node(node); }
  const Arg& A(uint32_t node, size_t i) const { return g_.args(N(node))[i]; }
  size_t NumArgs(uint32_t node) const { return N(node).num_args; }
  const graph::Value* Out(uint32_t node, size_t k) const {
    const graph::Node& n = N(node);
    if (k >= n.num_outputs) return nullptr;
    const graph::Value& v = g_.outputs(n)[k];
    return v.kind == graph::ValueKind::kTensor ? &v : nullptr;
  }
  // The tensor an argument refers to, or -1.
  int32_t TensorArg(const Arg& a) const {
    if (a.kind != ArgKind::kRef) return -1;
    const graph::Value* v = g_.Resolve(a.ref);
    if (v == nullptr) return -1;
    return value_tensor_[ValueId(*v)];
  }
  int32_t In(uint32_t node, size_t i) const { return TensorArg(A(node, i)); }
  bool IsNone(const Arg& a) const { return a.kind == ArgKind::kNone || a.kind == ArgKind::kAbsent; }
  double Num(const Arg& a, double dflt = 0) const {
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
  int64_t Int(const Arg& a, int64_t dflt = 0) const {
    return a.kind == ArgKind::kInt || a.kind == ArgKind::kBool ? a.int_value : dflt;
  }
  bool IsFloatScalar(const Arg& a) const { return a.kind == ArgKind::kFloat; }
  std::vector<int64_t> Ints(const Arg& a) const {
    std::vector<int64_t> out;
    if (a.kind == ArgKind::kInt) out.push_back(a.int_value);
    if (a.kind == ArgKind::kList) {
      for (const Arg& x : g_.items(a)) out.push_back(Int(x));
    }
    return out;
  }
  static int64_t WrapDim(int64_t d, size_t rank) {
    const int64_t r = static_cast<int64_t>(std::max<size_t>(rank, 1));
    return d < 0 ? d + r : d;
  }

  // A scalar argument as an SSA value of type `t` (symbolic ints through their expression).
  absl::StatusOr<int32_t> ScalarValue(Body& b, const Arg& a, ScalarType t) {
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

  // Coordinates of tensor `t` broadcast against the trailing dims of `b`.
  std::vector<IndexExpr> BroadcastCoords(const Body& b, int32_t t, size_t ndims = 0) const {
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
  int32_t LoadB(Body& b, int32_t t) { return b.Load(t, ST(t), BroadcastCoords(b, t)); }
  // A tensor argument or a scalar argument as a value broadcast over `b`.
  absl::StatusOr<int32_t> Operand(Body& b, const Arg& a, ScalarType scalar_type) {
    const int32_t t = TensorArg(a);
    if (t >= 0) return LoadB(b, t);
    return ScalarValue(b, a, scalar_type);
  }

  // Adds a Compute producing a tensor; `value` (may be null) gives its layout and name.
  absl::StatusOr<int32_t> Finish(uint32_t node, Body& b, int32_t result, DType dtype,
                                 const graph::Value* value, std::vector<int32_t> out_dims,
                                 std::vector<IndexExpr> out_sizes) {
    int32_t t;
    if (value != nullptr) {
      auto tv = TensorOfValue(*value);
      if (!tv.ok()) return tv.status();
      t = *tv;
      value_tensor_[ValueId(*value)] = t;
      if (Tn(t).sizes.size() != out_sizes.size()) {
        return absl::InternalError(absl::StrCat("decompose: ", g_.target(N(node)), " at ",
                                                NodeName(node), " made rank ", out_sizes.size(),
                                                " but the metadata says ", Tn(t).sizes.size()));
      }
    } else {
      t = NewTensor(dtype, std::move(out_sizes), absl::StrCat(NodeName(node), "~", ++temp_));
    }
    Node n;
    n.kind = Node::Kind::kCompute;
    n.name = NodeName(node);
    n.stack_trace = g_.str(N(node).stack_trace);
    n.compute = b.Take(result, std::move(out_dims));
    n.compute.store_index = store_index_;
    store_index_ = false;
    n.outputs = {t};
    out_.tensors[static_cast<size_t>(t)].producer = static_cast<int32_t>(out_.nodes.size());
    out_.nodes.push_back(std::move(n));
    return t;
  }
  // A pointwise Compute over all dims of `b` producing output `k` of `node` (or a temporary).
  absl::StatusOr<int32_t> FinishPointwise(uint32_t node, Body& b, int32_t result, DType dtype,
                                          int k = 0, bool temp = false) {
    std::vector<int32_t> out_dims;
    std::vector<IndexExpr> sizes;
    for (size_t i = 0; i < b.rank(); ++i) {
      out_dims.push_back(static_cast<int32_t>(i));
      sizes.push_back(b.dim(i));
    }
    const graph::Value* v = temp ? nullptr : Out(node, static_cast<size_t>(k));
    return Finish(node, b, result, v ? v->dtype : dtype, v, std::move(out_dims), std::move(sizes));
  }
  // A reducing Compute; the output keeps size-1 dims at reduced positions when `keepdim`.
  absl::StatusOr<int32_t> FinishReduce(uint32_t node, Body& b, int32_t result, ReduceKind kind,
                                       DType dtype, bool keepdim, int k, bool temp,
                                       int32_t index = -1) {
    b.SetReduce(kind, index);
    std::vector<int32_t> out_dims;
    std::vector<IndexExpr> sizes;
    const std::vector<bool>& red = reduced_;
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
  // A Body over `t`'s dims reducing the dims in `dims` (empty: all).
  Body ReduceBody(int32_t t, std::vector<int64_t> dims) {
    const size_t r = Rank(t);
    reduced_.assign(r, dims.empty());
    // A 0-d tensor takes dim 0 or -1, which name no dim of its (empty) iteration space.
    if (r == 0) return Body(Tn(t).sizes, reduced_);
    for (int64_t d : dims) reduced_[static_cast<size_t>(WrapDim(d, r))] = true;
    return Body(Tn(t).sizes, reduced_);
  }
  // Sum over the reduced dims of `b` into a keepdim temporary of type `acc`.
  absl::StatusOr<int32_t> SumTemp(uint32_t node, Body& b, int32_t v, ReduceKind kind,
                                  ScalarType acc) {
    return FinishReduce(node, b, b.Cast(v, acc), kind, loop::DTypeOf(acc), true, 0, true);
  }
  IndexExpr NumelOf(const std::vector<IndexExpr>& dims, const std::vector<bool>& red) const {
    IndexExpr n = IndexExpr::Const(1);
    for (size_t i = 0; i < dims.size(); ++i) {
      if (red[i]) n = n * dims[i];
    }
    return n;
  }

  absl::Status Alias(uint32_t node, size_t k, int32_t t) {
    const graph::Value* v = Out(node, k);
    if (v == nullptr) return absl::OkStatus();
    // A graph value must keep its metadata's layout: copy when the tensor differs.
    const Tensor& x = Tn(t);
    auto sizes = Syms(g_.sizes(*v));
    auto strides = Syms(g_.strides(*v));
    if (sizes.ok() && strides.ok() && *sizes == x.sizes && *strides == x.strides &&
        x.offset.is_zero() && x.dtype == v->dtype) {
      value_tensor_[ValueId(*v)] = t;
      return absl::OkStatus();
    }
    Body b(x.sizes);
    auto r = FinishPointwise(node, b, LoadB(b, t), v->dtype, static_cast<int>(k));
    return r.status();
  }

  absl::Status Fallback(uint32_t node, const std::string& reason);
  absl::Status Extern(uint32_t node, const std::string& op, bool fallback,
                      const std::string& reason);
  absl::StatusOr<CallArg> ConvertArg(const Arg& a);
  absl::Status Visit(uint32_t node);

  // Rules.
  absl::Status Unary(uint32_t node, Opcode op);
  absl::Status Pointwise(uint32_t node,
                         const std::function<absl::StatusOr<int32_t>(Body&, ScalarType)>& fn,
                         bool compare_type = false);
  absl::Status Binary(uint32_t node, Opcode op);
  absl::Status Compare(uint32_t node, Opcode op);
  absl::Status Reduction(uint32_t node, ReduceKind kind, std::vector<int64_t> dims, bool keepdim,
                         bool mean);
  absl::Status ArgReduction(uint32_t node, bool is_max, std::vector<int64_t> dims, bool keepdim,
                            int value_output, int index_output);
  absl::Status Variance(uint32_t node, std::vector<int64_t> dims, double correction, bool keepdim,
                        int var_out, int mean_out, bool std_dev);
  absl::Status Softmax(uint32_t node, bool log);
  absl::Status SoftmaxBackward(uint32_t node, bool log);
  absl::Status LayerNorm(uint32_t node);
  absl::Status LayerNormBackward(uint32_t node);
  absl::Status BatchNorm(uint32_t node, bool training_arg);
  absl::Status BatchNormBackward(uint32_t node);
  absl::Status Dropout(uint32_t node);
  absl::Status NllLoss(uint32_t node);
  absl::Status NllLossBackward(uint32_t node);
  absl::Status Embedding(uint32_t node);
  absl::Status EmbeddingBackward(uint32_t node);
  absl::Status Cat(uint32_t node, bool stack);
  absl::Status SliceBackward(uint32_t node);
  absl::Status SelectBackward(uint32_t node);
  absl::Status Addmm(uint32_t node, bool batched);
  absl::Status Full(uint32_t node, std::function<absl::StatusOr<int32_t>(Body&, ScalarType)> fill);
  absl::Status Arange(uint32_t node);
  absl::Status IndexSelect(uint32_t node, bool gather);
  absl::StatusOr<PoolWindow> Window(uint32_t node, size_t first, int32_t x) const;
  Body PoolBody(std::vector<IndexExpr> lead, const PoolWindow& w);
  int32_t LoadPlane(Body& b, int32_t t, int32_t row, int32_t col, int32_t mask);
  absl::Status MaxPool2d(uint32_t node);
  absl::Status MaxPool2dBackward(uint32_t node);
  absl::Status Copy(uint32_t node, int src_arg);
  absl::Status View(uint32_t node);
  absl::Status Random(uint32_t node);
  absl::Status ConstantPad(uint32_t node);
  absl::Status Flip(uint32_t node);
  absl::Status TriangleMask(uint32_t node, bool lower);
  absl::Status CopyInPlace(uint32_t node);

  const graph::Graph& g_;
  const canon::CanonicalGraph& c_;
  PrimGraph out_;
  std::vector<int32_t> value_tensor_;
  std::map<std::string, int32_t> sym_ids_;
  std::vector<int64_t> rng_stream_;
  std::vector<bool> reduced_;
  bool store_index_ = false;
  int temp_ = 0;
};

absl::StatusOr<CallArg> Decomposer::ConvertArg(const Arg& a) {
  CallArg out;
  switch (a.kind) {
    case ArgKind::kRef: {
      const graph::Value* v = g_.Resolve(a.ref);
      if (v != nullptr && v->kind == graph::ValueKind::kTensor) {
        out.kind = CallArg::Kind::kTensor;
        out.tensor = value_tensor_[ValueId(*v)];
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

absl::Status Decomposer::Extern(uint32_t node, const std::string& op, bool fallback,
                                const std::string& reason) {
  const graph::Node& gn = N(node);
  Node n;
  n.kind = Node::Kind::kExtern;
  n.name = NodeName(node);
  n.stack_trace = g_.str(gn.stack_trace);
  n.op = op;
  n.fallback = fallback;
  n.reason = reason;
  n.collective = ops::IsCollective(op);
  n.rng_stream = rng_stream_[node];
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
  const int32_t self = static_cast<int32_t>(out_.nodes.size());
  for (size_t k = 0; k < gn.num_outputs; ++k) {
    const graph::Value& v = g_.outputs(gn)[k];
    if (v.kind != graph::ValueKind::kTensor) {
      n.outputs.push_back(-1);
      continue;
    }
    auto t = TensorOfValue(v);
    if (!t.ok()) return t.status();
    out_.tensors[static_cast<size_t>(*t)].producer = self;
    value_tensor_[ValueId(v)] = *t;
    n.outputs.push_back(*t);
  }
  out_.nodes.push_back(std::move(n));
  return absl::OkStatus();
}

absl::Status Decomposer::Fallback(uint32_t node, const std::string& reason) {
  return Extern(node, g_.target(N(node)), true, reason);
}

// ---------------------------------------------------------------------------------------------
// Pointwise rules.

absl::Status Decomposer::Pointwise(
    uint32_t node, const std::function<absl::StatusOr<int32_t>(Body&, ScalarType)>& fn, bool) {
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

absl::Status Decomposer::Unary(uint32_t node, Opcode op) {
  return Pointwise(node, [&](Body& b, ScalarType ct) -> absl::StatusOr<int32_t> {
    int32_t x = LoadB(b, In(node, 0));
    if (op == Opcode::kIsNan || op == Opcode::kIsInf) {
      if (!loop::IsFloat(b.T(x))) return b.Const(0, ScalarType::kBool);
      return b.Un(op, x);
    }
    if (op == Opcode::kNot) return b.Un(Opcode::kNot, b.ToBool(x));
    if (!loop::IsFloat(ct) && (op == Opcode::kFloor || op == Opcode::kCeil ||
                               op == Opcode::kRound || op == Opcode::kTrunc)) {
      return b.Cast(x, ct);
    }
    return b.Un(op, b.Cast(x, ct));
  });
}

absl::Status Decomposer::Binary(uint32_t node, Opcode op) {
  return Pointwise(node, [&](Body& b, ScalarType ct) -> absl::StatusOr<int32_t> {
    auto x = Operand(b, A(node, 0), ct);
    if (!x.ok()) return x;
    auto y = Operand(b, A(node, 1), ct);
    if (!y.ok()) return y;
    return b.Bin(op, b.Cast(*x, ct), b.Cast(*y, ct));
  });
}

absl::Status Decomposer::Compare(uint32_t node, Opcode op) {
  // Compare in the promoted type of the operands (tensors with dims first, then 0-dim
  // tensors and Python scalars when they raise the category).
  ScalarType dimmed = ScalarType::kBool, zero_dim = ScalarType::kBool;
  bool has_dimmed = false, has_zero = false;
  int scalar_cat = -1;
  for (size_t i = 0; i < 2; ++i) {
    const int32_t t = In(node, i);
    if (t >= 0) {
      if (Rank(t) > 0) {
        dimmed = has_dimmed ? PromoteScalarTypes(dimmed, ST(t)) : ST(t);
        has_dimmed = true;
      } else {
        zero_dim = has_zero ? PromoteScalarTypes(zero_dim, ST(t)) : ST(t);
        has_zero = true;
      }
    } else {
      scalar_cat = std::max(scalar_cat, IsFloatScalar(A(node, i))           ? 2
                                        : A(node, i).kind == ArgKind::kBool ? 0
                                                                            : 1);
    }
  }
  ScalarType ct = has_dimmed ? dimmed : zero_dim;
  if (has_dimmed && has_zero && Category(zero_dim) > Category(ct)) ct = zero_dim;
  if (!has_dimmed && !has_zero) ct = ScalarType::kF64;
  if (scalar_cat > Category(ct)) ct = scalar_cat == 2 ? ScalarType::kF32 : ScalarType::kI64;
  ct = loop::ComputeType(ct);
  return Pointwise(node, [&](Body& b, ScalarType) -> absl::StatusOr<int32_t> {
    auto x = Operand(b, A(node, 0), ct);
    if (!x.ok()) return x;
    auto y = Operand(b, A(node, 1), ct);
    if (!y.ok()) return y;
    return b.Bin(op, b.Cast(*x, ct), b.Cast(*y, ct));
  });
}

// ---------------------------------------------------------------------------------------------
// Reductions.

absl::Status Decomposer::Reduction(uint32_t node, ReduceKind kind, std::vector<int64_t> dims,
                                   bool keepdim, bool mean) {
  const int32_t x = In(node, 0);
  const graph::Value* out = Out(node, 0);
  if (out == nullptr) return absl::InternalError("reduction without a tensor output");
  Body b = ReduceBody(x, dims);
  ScalarType acc = loop::ComputeType(loop::ScalarTypeOf(out->dtype));
  if (kind == ReduceKind::kAny || kind == ReduceKind::kAll) acc = ScalarType::kBool;
  int32_t v = b.Load(x, ST(x), BroadcastCoords(b, x));
  if (kind == ReduceKind::kAny || kind == ReduceKind::kAll) {
    v = b.ToBool(v);
  } else {
    v = b.Cast(v, acc);
  }
  if (!mean) {
    return FinishReduce(node, b, v, kind, out->dtype, keepdim, 0, false).status();
  }
  const std::vector<bool> red = reduced_;
  const IndexExpr n = NumelOf(Tn(x).sizes, red);
  auto s = FinishReduce(node, b, v, kind, loop::DTypeOf(acc), keepdim, 0, true);
  if (!s.ok()) return s.status();
  Body e(Tn(*s).sizes);
  int32_t r = e.Div(LoadB(e, *s), e.Cast(e.Idx(n), acc));
  return FinishPointwise(node, e, r, out->dtype).status();
}

absl::Status Decomposer::ArgReduction(uint32_t node, bool is_max, std::vector<int64_t> dims,
                                      bool keepdim, int value_output, int index_output) {
  const int32_t x = In(node, 0);
  Body probe = ReduceBody(x, dims);
  const std::vector<bool> red = reduced_;
  // The flat index over the reduced dims, row-major.
  auto make = [&](bool want_index, int k) -> absl::Status {
    Body b(Tn(x).sizes, red);
    reduced_ = red;
    int32_t v = b.Load(x, ST(x), BroadcastCoords(b, x));
    IndexExpr lin, stride = IndexExpr::Const(1);
    for (size_t i = b.rank(); i-- > 0;) {
      if (!red[i]) continue;
      lin = lin + Body::V(i) * stride;
      stride = stride * b.dim(i);
    }
    int32_t idx = b.Idx(lin);
    ReduceKind kind = is_max ? ReduceKind::kArgMax : ReduceKind::kArgMin;
    const graph::Value* o = Out(node, static_cast<size_t>(k));
    if (o == nullptr) return absl::OkStatus();
    // The reduce yields the value for value outputs and the index for index outputs.
    b.SetReduce(kind, idx);
    std::vector<int32_t> out_dims;
    std::vector<IndexExpr> sizes;
    for (size_t i = 0; i < b.rank(); ++i) {
      if (!red[i]) {
        out_dims.push_back(static_cast<int32_t>(i));
        sizes.push_back(b.dim(i));
      } else if (keepdim) {
        out_dims.push_back(-1);
        sizes.push_back(IndexExpr::Const(1));
      }
    }
    const int32_t result = v;
    store_index_ = want_index;
    return Finish(node, b, result, o->dtype, o, std::move(out_dims), std::move(sizes)).status();
  };
  (void)probe;
  if (value_output >= 0) {
    if (auto s = make(false, value_output); !s.ok()) return s;
  }
  if (index_output >= 0) {
    if (auto s = make(true, index_output); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status Decomposer::Variance(uint32_t node, std::vector<int64_t> dims, double correction,
                                  bool keepdim, int var_out, int mean_out, bool std_dev) {
  const int32_t x = In(node, 0);
  const ScalarType acc = loop::ComputeType(ST(x));
  Body b1 = ReduceBody(x, dims);
  const std::vector<bool> red = reduced_;
  const IndexExpr n = NumelOf(Tn(x).sizes, red);
  auto s1 = SumTemp(node, b1, b1.Load(x, ST(x), BroadcastCoords(b1, x)), ReduceKind::kSum, acc);
  if (!s1.ok()) return s1.status();
  Body bm(Tn(*s1).sizes);
  auto mean = FinishPointwise(node, bm, bm.Div(LoadB(bm, *s1), bm.Cast(bm.Idx(n), acc)),
                              loop::DTypeOf(acc), 0, true);
  if (!mean.ok()) return mean.status();
  Body b2(Tn(x).sizes, red);
  reduced_ = red;
  int32_t d = b2.Sub(b2.Cast(LoadB(b2, x), acc), LoadB(b2, *mean));
  auto s2 = SumTemp(node, b2, b2.Mul(d, d), ReduceKind::kSum, acc);
  if (!s2.ok()) return s2.status();
  // Outputs drop or keep the reduced dims.
  std::vector<IndexExpr> out_sizes;
  std::vector<IndexExpr> coords;
  for (size_t i = 0; i < red.size(); ++i) {
    if (!red[i] || keepdim) out_sizes.push_back(red[i] ? IndexExpr::Const(1) : Tn(x).sizes[i]);
  }
  auto emit = [&](int k, bool is_var) -> absl::Status {
    const graph::Value* o = Out(node, static_cast<size_t>(k));
    if (o == nullptr) return absl::OkStatus();
    Body e(out_sizes);
    // Read the keepdim temporaries at the output's coordinates.
    std::vector<IndexExpr> c;
    size_t od = 0;
    for (size_t i = 0; i < red.size(); ++i) {
      if (red[i]) {
        c.push_back(IndexExpr());
        if (keepdim) ++od;
      } else {
        c.push_back(Body::V(od++));
      }
    }
    int32_t r;
    if (is_var) {
      int32_t denom = e.Sub(e.Cast(e.Idx(n), acc), e.Const(correction, acc));
      r = e.Div(e.Load(*s2, acc, c), denom);
      if (std_dev) r = e.Un(Opcode::kSqrt, r);
    } else {
      r = e.Load(*mean, acc, c);
    }
    return FinishPointwise(node, e, r, o->dtype, k).status();
  };
  if (var_out >= 0) {
    if (auto s = emit(var_out, true); !s.ok()) return s;
  }
  if (mean_out >= 0) return emit(mean_out, false);
  return absl::OkStatus();
}

absl::Status Decomposer::Softmax(uint32_t node, bool log) {
  const int32_t x = In(node, 0);
  const graph::Value* out = Out(node, 0);
  const int64_t dim = Int(A(node, 1));
  const ScalarType acc = loop::ComputeType(loop::ScalarTypeOf(out->dtype));
  Body b1 = ReduceBody(x, {dim});
  const std::vector<bool> red = reduced_;
  auto m = SumTemp(node, b1, b1.Cast(LoadB(b1, x), acc), ReduceKind::kMax, acc);
  if (!m.ok()) return m.status();
  Body b2(Tn(x).sizes, red);
  reduced_ = red;
  int32_t e2 = b2.Un(Opcode::kExp, b2.Sub(b2.Cast(LoadB(b2, x), acc), LoadB(b2, *m)));
  auto s = SumTemp(node, b2, e2, ReduceKind::kSum, acc);
  if (!s.ok()) return s.status();
  Body b3(Tn(x).sizes);
  int32_t shifted = b3.Sub(b3.Cast(LoadB(b3, x), acc), LoadB(b3, *m));
  int32_t r = log ? b3.Sub(shifted, b3.Un(Opcode::kLog, LoadB(b3, *s)))
                  : b3.Div(b3.Un(Opcode::kExp, shifted), LoadB(b3, *s));
  return FinishPointwise(node, b3, r, out->dtype).status();
}

absl::Status Decomposer::SoftmaxBackward(uint32_t node, bool log) {
  const int32_t g = In(node, 0), y = In(node, 1);
  const graph::Value* out = Out(node, 0);
  const int64_t dim = Int(A(node, 2));
  const ScalarType acc = loop::ComputeType(loop::ScalarTypeOf(out->dtype));
  Body b1 = ReduceBody(g, {dim});
  const std::vector<bool> red = reduced_;
  int32_t v = b1.Cast(LoadB(b1, g), acc);
  if (!log) v = b1.Mul(v, b1.Cast(LoadB(b1, y), acc));
  auto s = SumTemp(node, b1, v, ReduceKind::kSum, acc);
  if (!s.ok()) return s.status();
  Body b2(Tn(g).sizes);
  int32_t gv = b2.Cast(LoadB(b2, g), acc), yv = b2.Cast(LoadB(b2, y), acc);
  int32_t r = log ? b2.Sub(gv, b2.Mul(b2.Un(Opcode::kExp, yv), LoadB(b2, *s)))
                  : b2.Mul(yv, b2.Sub(gv, LoadB(b2, *s)));
  return FinishPointwise(node, b2, r, out->dtype).status();
}

// ---------------------------------------------------------------------------------------------
// Normalization.

absl::Status Decomposer::LayerNorm(uint32_t node) {
  const int32_t x = In(node, 0);
  const size_t k = Ints(A(node, 1)).size();
  const int32_t w = In(node, 2), bias = In(node, 3);
  const double eps = Num(A(node, 4));
  const size_t r = Rank(x);
  std::vector<int64_t> dims;
  for (size_t i = r - k; i < r; ++i) dims.push_back(static_cast<int64_t>(i));
  const ScalarType acc =
      loop::ComputeType(ST(x)) == ScalarType::kF64 ? ScalarType::kF64 : ScalarType::kF32;
  Body b1 = ReduceBody(x, dims);
  const std::vector<bool> red = reduced_;
  const IndexExpr n = NumelOf(Tn(x).sizes, red);
  auto s1 = SumTemp(node, b1, b1.Cast(LoadB(b1, x), acc), ReduceKind::kSum, acc);
  if (!s1.ok()) return s1.status();
  // mean: output 1 when the graph uses it (its metadata has the keepdim shape).
  Body bm(Tn(*s1).sizes);
  auto mean = FinishPointwise(node, bm, bm.Div(LoadB(bm, *s1), bm.Cast(bm.Idx(n), acc)),
                              loop::DTypeOf(acc), 1, Out(node, 1) == nullptr);
  if (!mean.ok()) return mean.status();
  Body b2(Tn(x).sizes, red);
  reduced_ = red;
  int32_t d = b2.Sub(b2.Cast(LoadB(b2, x), acc), b2.Cast(LoadB(b2, *mean), acc));
  auto s2 = SumTemp(node, b2, b2.Mul(d, d), ReduceKind::kSum, acc);
  if (!s2.ok()) return s2.status();
  Body br(Tn(*s2).sizes);
  int32_t var = br.Div(LoadB(br, *s2), br.Cast(br.Idx(n), acc));
  auto rstd = FinishPointwise(node, br, br.Un(Opcode::kRsqrt, br.AddC(var, eps)),
                              loop::DTypeOf(acc), 2, Out(node, 2) == nullptr);
  if (!rstd.ok()) return rstd.status();
  if (Out(node, 0) == nullptr) return absl::OkStatus();
  Body b3(Tn(x).sizes);
  int32_t y = b3.Mul(b3.Sub(b3.Cast(LoadB(b3, x), acc), b3.Cast(LoadB(b3, *mean), acc)),
                     b3.Cast(LoadB(b3, *rstd), acc));
  if (w >= 0) y = b3.Mul(y, b3.Cast(LoadB(b3, w), acc));
  if (bias >= 0) y = b3.Add(y, b3.Cast(LoadB(b3, bias), acc));
  return FinishPointwise(node, b3, y, Tn(x).dtype, 0).status();
}

absl::Status Decomposer::LayerNormBackward(uint32_t node) {
  const int32_t g = In(node, 0), x = In(node, 1);
  const size_t k = Ints(A(node, 2)).size();
  const int32_t mean = In(node, 3), rstd = In(node, 4), w = In(node, 5);
  const size_t r = Rank(x);
  const ScalarType acc =
      loop::ComputeType(ST(x)) == ScalarType::kF64 ? ScalarType::kF64 : ScalarType::kF32;
  std::vector<int64_t> inner, outer;
  for (size_t i = 0; i < r; ++i) (i >= r - k ? inner : outer).push_back(static_cast<int64_t>(i));
  auto xhat = [&](Body& b) {
    return b.Mul(b.Sub(b.Cast(LoadB(b, x), acc), b.Cast(LoadB(b, mean), acc)),
                 b.Cast(LoadB(b, rstd), acc));
  };
  auto gw = [&](Body& b) {
    int32_t v = b.Cast(LoadB(b, g), acc);
    return w >= 0 ? b.Mul(v, b.Cast(LoadB(b, w), acc)) : v;
  };
  if (Out(node, 0) != nullptr) {
    Body b1 = ReduceBody(x, inner);
    const std::vector<bool> red = reduced_;
    const IndexExpr n = NumelOf(Tn(x).sizes, red);
    auto s1 = SumTemp(node, b1, gw(b1), ReduceKind::kSum, acc);
    if (!s1.ok()) return s1.status();
    Body b2(Tn(x).sizes, red);
    reduced_ = red;
    auto s2 = SumTemp(node, b2, b2.Mul(gw(b2), xhat(b2)), ReduceKind::kSum, acc);
    if (!s2.ok()) return s2.status();
    Body b3(Tn(x).sizes);
    int32_t nn = b3.Cast(b3.Idx(n), acc);
    int32_t t =
        b3.Sub(b3.Sub(b3.Mul(nn, gw(b3)), LoadB(b3, *s1)), b3.Mul(xhat(b3), LoadB(b3, *s2)));
    int32_t gi = b3.Mul(b3.Div(b3.Cast(LoadB(b3, rstd), acc), nn), t);
    if (auto s = FinishPointwise(node, b3, gi, Tn(x).dtype, 0); !s.ok()) return s.status();
  }
  for (int out = 1; out <= 2; ++out) {
    const graph::Value* o = Out(node, static_cast<size_t>(out));
    if (o == nullptr) continue;
    Body b = ReduceBody(x, outer);
    int32_t v = b.Cast(LoadB(b, g), acc);
    if (out == 1) v = b.Mul(v, xhat(b));
    if (auto s = FinishReduce(node, b, v, ReduceKind::kSum, o->dtype, false, out, false); !s.ok()) {
      return s.status();
    }
  }
  return absl::OkStatus();
}

absl::Status Decomposer::BatchNorm(uint32_t node, bool training_arg) {
  // _native_batch_norm_legit_functional(input, weight, bias, running_mean, running_var,
  // training, momentum, eps) -> (out, save_mean, save_rstd, new_running_mean, new_running_var)
  // _native_batch_norm_legit_no_training(input, weight, bias, rm, rv, momentum, eps)
  const int32_t x = In(node, 0), w = In(node, 1), bias = In(node, 2), rm = In(node, 3),
                rv = In(node, 4);
  const bool training = training_arg ? Int(A(node, 5)) != 0 : false;
  const double momentum = Num(A(node, training_arg ? 6 : 5));
  const double eps = Num(A(node, training_arg ? 7 : 6));
  const size_t r = Rank(x);
  const ScalarType acc =
      loop::ComputeType(ST(x)) == ScalarType::kF64 ? ScalarType::kF64 : ScalarType::kF32;
  std::vector<int64_t> dims;
  for (size_t i = 0; i < r; ++i) {
    if (i != 1) dims.push_back(static_cast<int64_t>(i));
  }
  // Per-channel [C] tensors broadcast over x as [C, 1, 1, ...].
  auto channel = [&](Body& b, int32_t t) {
    std::vector<IndexExpr> c = {Body::V(1)};
    return b.Cast(b.Load(t, ST(t), c), acc);
  };
  int32_t mean_t = -1, rstd_t = -1;
  if (training) {
    Body b1 = ReduceBody(x, dims);
    const std::vector<bool> red = reduced_;
    const IndexExpr n = NumelOf(Tn(x).sizes, red);
    auto s1 = FinishReduce(node, b1, b1.Cast(LoadB(b1, x), acc), ReduceKind::kSum,
                           loop::DTypeOf(acc), false, 0, true);
    if (!s1.ok()) return s1.status();
    Body bm({Tn(x).sizes[1]});
    auto mean = FinishPointwise(node, bm, bm.Div(LoadB(bm, *s1), bm.Cast(bm.Idx(n), acc)),
                                loop::DTypeOf(acc), 1, Out(node, 1) == nullptr);
    if (!mean.ok()) return mean.status();
    Body b2(Tn(x).sizes, red);
    reduced_ = red;
    int32_t d = b2.Sub(b2.Cast(LoadB(b2, x), acc), channel(b2, *mean));
    auto s2 =
        FinishReduce(node, b2, b2.Mul(d, d), ReduceKind::kSum, loop::DTypeOf(acc), false, 0, true);
    if (!s2.ok()) return s2.status();
    Body br({Tn(x).sizes[1]});
    int32_t var = br.Div(LoadB(br, *s2), br.Cast(br.Idx(n), acc));
    auto rstd = FinishPointwise(node, br, br.Un(Opcode::kRsqrt, br.AddC(var, eps)),
                                loop::DTypeOf(acc), 2, Out(node, 2) == nullptr);
    if (!rstd.ok()) return rstd.status();
    mean_t = *mean;
    rstd_t = *rstd;
    if (training_arg) {
      // New running statistics: (1 - m) * old + m * batch (unbiased variance).
      for (int out = 3; out <= 4; ++out) {
        const graph::Value* o = Out(node, static_cast<size_t>(out));
        if (o == nullptr) continue;
        Body bu({Tn(x).sizes[1]});
        int32_t old = bu.Cast(LoadB(bu, out == 3 ? rm : rv), acc);
        int32_t batch;
        if (out == 3) {
          batch = LoadB(bu, mean_t);
        } else {
          int32_t nn = bu.Cast(bu.Idx(n), acc);
          batch = bu.Div(LoadB(bu, *s2), bu.Sub(nn, bu.Const(1, acc)));
        }
        int32_t v = bu.Add(bu.MulC(old, 1 - momentum), bu.MulC(batch, momentum));
        if (auto s = FinishPointwise(node, bu, v, o->dtype, out); !s.ok()) return s.status();
      }
    }
  } else {
    Body bm({Tn(x).sizes[1]});
    auto mean = FinishPointwise(node, bm, bm.Cast(LoadB(bm, rm), acc), loop::DTypeOf(acc), 1,
                                Out(node, 1) == nullptr);
    if (!mean.ok()) return mean.status();
    Body br({Tn(x).sizes[1]});
    auto rstd =
        FinishPointwise(node, br, br.Un(Opcode::kRsqrt, br.AddC(br.Cast(LoadB(br, rv), acc), eps)),
                        loop::DTypeOf(acc), 2, Out(node, 2) == nullptr);
    if (!rstd.ok()) return rstd.status();
    mean_t = *mean;
    rstd_t = *rstd;
    if (training_arg) {
      for (int out = 3; out <= 4; ++out) {
        if (Out(node, static_cast<size_t>(out)) == nullptr) continue;
        if (auto s = Alias(node, static_cast<size_t>(out), out == 3 ? rm : rv); !s.ok()) return s;
      }
    }
  }
  if (Out(node, 0) == nullptr) return absl::OkStatus();
  Body b3(Tn(x).sizes);
  int32_t y = b3.Mul(b3.Sub(b3.Cast(LoadB(b3, x), acc), channel(b3, mean_t)), channel(b3, rstd_t));
  if (w >= 0) y = b3.Mul(y, channel(b3, w));
  if (bias >= 0) y = b3.Add(y, channel(b3, bias));
  return FinishPointwise(node, b3, y, Tn(x).dtype, 0).status();
}

absl::Status Decomposer::BatchNormBackward(uint32_t node) {
  // (grad_out, input, weight, running_mean, running_var, save_mean, save_invstd, train, eps,
  // output_mask)
  const int32_t g = In(node, 0), x = In(node, 1), w = In(node, 2), rm = In(node, 3),
                rv = In(node, 4), sm = In(node, 5), si = In(node, 6);
  const bool train = Int(A(node, 7)) != 0;
  const double eps = Num(A(node, 8));
  const size_t r = Rank(x);
  const ScalarType acc =
      loop::ComputeType(ST(x)) == ScalarType::kF64 ? ScalarType::kF64 : ScalarType::kF32;
  std::vector<int64_t> dims;
  for (size_t i = 0; i < r; ++i) {
    if (i != 1) dims.push_back(static_cast<int64_t>(i));
  }
  auto channel = [&](Body& b, int32_t t) {
    std::vector<IndexExpr> c = {Body::V(1)};
    return b.Cast(b.Load(t, ST(t), c), acc);
  };
  auto mean_of = [&](Body& b) { return channel(b, train ? sm : rm); };
  auto invstd_of = [&](Body& b) {
    if (train) return channel(b, si);
    return b.Un(Opcode::kRsqrt, b.AddC(channel(b, rv), eps));
  };
  Body b1 = ReduceBody(x, dims);
  const std::vector<bool> red = reduced_;
  const IndexExpr n = NumelOf(Tn(x).sizes, red);
  auto sg = FinishReduce(node, b1, b1.Cast(LoadB(b1, g), acc), ReduceKind::kSum, loop::DTypeOf(acc),
                         false, 0, true);
  if (!sg.ok()) return sg.status();
  Body b2(Tn(x).sizes, red);
  reduced_ = red;
  int32_t xmu = b2.Sub(b2.Cast(LoadB(b2, x), acc), mean_of(b2));
  auto sgx = FinishReduce(node, b2, b2.Mul(b2.Cast(LoadB(b2, g), acc), xmu), ReduceKind::kSum,
                          loop::DTypeOf(acc), false, 0, true);
  if (!sgx.ok()) return sgx.status();
  if (Out(node, 0) != nullptr) {
    Body b3(Tn(x).sizes);
    int32_t invstd = invstd_of(b3);
    int32_t wv = w >= 0 ? channel(b3, w) : b3.Const(1, acc);
    int32_t gv = b3.Cast(LoadB(b3, g), acc);
    int32_t gi;
    if (train) {
      int32_t nn = b3.Cast(b3.Idx(n), acc);
      int32_t xm = b3.Sub(b3.Cast(LoadB(b3, x), acc), mean_of(b3));
      int32_t proj = b3.Mul(b3.Mul(b3.Div(channel(b3, *sgx), nn), invstd), invstd);
      int32_t gmean = b3.Div(channel(b3, *sg), nn);
      gi = b3.Mul(b3.Mul(b3.Sub(b3.Sub(gv, b3.Mul(xm, proj)), gmean), invstd), wv);
    } else {
      gi = b3.Mul(b3.Mul(gv, invstd), wv);
    }
    if (auto s = FinishPointwise(node, b3, gi, Tn(x).dtype, 0); !s.ok()) return s.status();
  }
  if (const graph::Value* o = Out(node, 1)) {
    Body b({Tn(x).sizes[1]});
    std::vector<IndexExpr> c = {Body::V(0)};
    int32_t v =
        b.Mul(b.Load(*sgx, acc, c), b.Cast(b.Load(train ? si : rv, ST(train ? si : rv), c), acc));
    if (!train)
      v = b.Div(b.Load(*sgx, acc, c),
                b.Un(Opcode::kSqrt, b.AddC(b.Cast(b.Load(rv, ST(rv), c), acc), eps)));
    if (auto s = FinishPointwise(node, b, v, o->dtype, 1); !s.ok()) return s.status();
  }
  if (const graph::Value* o = Out(node, 2)) {
    Body b({Tn(x).sizes[1]});
    if (auto s = FinishPointwise(node, b, b.Load(*sg, acc, {Body::V(0)}), o->dtype, 2); !s.ok()) {
      return s.status();
    }
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------------
// Random numbers, losses, embeddings, shapes.

absl::Status Decomposer::Dropout(uint32_t node) {
  const int32_t x = In(node, 0);
  const double p = Num(A(node, 1));
  const Arg& train = A(node, 2);
  const bool draws = IsNone(train) || Int(train) != 0;
  const int64_t stream = rng_stream_[node];
  const double scale = p >= 1.0 ? 0.0 : 1.0 / (1.0 - p);
  uint32_t threshold = 0;
  if (p >= 1.0) {
    threshold = uint32_t{1} << 24;
  } else if (p > 0.0) {
    threshold = static_cast<uint32_t>(std::ceil(std::ldexp(p, 24)));
  }
  for (int k = 0; k < 2; ++k) {
    const graph::Value* o = Out(node, static_cast<size_t>(k));
    if (o == nullptr) continue;
    Body b(Tn(x).sizes);
    int32_t keep;
    if (draws) {
      int32_t bits = b.RandBits(stream, b.Idx(b.Linear()));
      keep = b.Bin(Opcode::kGe, bits, b.IConst(threshold));
    } else {
      keep = b.Const(1, ScalarType::kBool);
    }
    int32_t r;
    if (k == 0) {
      const ScalarType ct = loop::ComputeType(ST(x));
      int32_t xv = b.Cast(LoadB(b, x), ct);
      r = draws ? b.Sel(keep, b.MulC(xv, scale), b.Const(0, ct)) : xv;
    } else {
      r = keep;
    }
    if (auto s = FinishPointwise(node, b, r, o->dtype, k); !s.ok()) return s.status();
  }
  return absl::OkStatus();
}

absl::Status Decomposer::Random(uint32_t node) {
  const std::string& target = g_.target(N(node));
  const graph::Value* o = Out(node, 0);
  auto sizes = Syms(g_.sizes(*o));
  if (!sizes.ok()) return sizes.status();
  Body b(*sizes);
  int32_t bits = b.RandBits(rng_stream_[node], b.Idx(b.Linear()));
  int32_t u = b.MulC(b.Cast(bits, ScalarType::kF64), std::ldexp(1.0, -24));
  int32_t r = u;
  if (target == "aten.bernoulli.p") {
    r = b.Bin(Opcode::kLt, u, b.Const(Num(A(node, 1), 0.5), ScalarType::kF64));
  }
  return FinishPointwise(node, b, r, o->dtype).status();
}

absl::Status Decomposer::NllLoss(uint32_t node) {
  // (self [N, C] or [C], target [N] or [], weight?, reduction, ignore_index)
  const int32_t x = In(node, 0), target = In(node, 1), w = In(node, 2);
  const int64_t reduction = Int(A(node, 3), 1);
  const int64_t ignore = Int(A(node, 4), -100);
  const bool batched = Rank(x) == 2;
  const ScalarType acc =
      loop::ComputeType(ST(x)) == ScalarType::kF64 ? ScalarType::kF64 : ScalarType::kF32;
  const IndexExpr rows = batched ? Tn(x).sizes[0] : IndexExpr::Const(1);
  const IndexExpr classes = Tn(x).sizes[batched ? 1 : 0];
  // Per row i: (valid, weight, -weight * x[i, t]).
  auto row = [&](Body& b, bool want_loss) {
    std::vector<IndexExpr> tc;
    if (Rank(target) == 1) tc.push_back(Body::V(0));
    int32_t t = b.Cast(b.Load(target, ST(target), tc), ScalarType::kI64);
    int32_t valid = b.Bin(Opcode::kAnd, b.Bin(Opcode::kNe, t, b.IConst(ignore)),
                          b.Bin(Opcode::kAnd, b.Bin(Opcode::kGe, t, b.IConst(0)),
                                b.Bin(Opcode::kLt, t, b.Idx(classes))));
    int32_t wv =
        w >= 0 ? b.Cast(b.Load(w, ST(w), {IndexExpr()}, valid, {t}), acc) : b.Const(1, acc);
    wv = b.Sel(valid, wv, b.Const(0, acc));
    if (!want_loss) return wv;
    std::vector<IndexExpr> xc;
    std::vector<int32_t> dyn;
    if (batched) {
      xc = {Body::V(0), IndexExpr()};
      dyn = {-1, t};
    } else {
      xc = {IndexExpr()};
      dyn = {t};
    }
    int32_t xv = b.Cast(b.Load(x, ST(x), xc, valid, dyn), acc);
    return b.Sel(valid, b.Bin(Opcode::kSub, b.Const(0, acc), b.Mul(wv, xv)), b.Const(0, acc));
  };
  const graph::Value* out = Out(node, 0);
  const graph::Value* tw = Out(node, 1);
  if (reduction == 0 && batched) {
    if (out != nullptr) {
      Body b({rows});
      if (auto s = FinishPointwise(node, b, row(b, true), out->dtype, 0); !s.ok())
        return s.status();
    }
  }
  // total_weight (and the reduced loss) are sums over rows.
  int32_t total = -1;
  if (tw != nullptr || (reduction != 0 || !batched)) {
    reduced_ = {true};
    Body b({rows}, {true});
    auto s =
        FinishReduce(node, b, row(b, false), ReduceKind::kSum, loop::DTypeOf(acc), false, 1, true);
    if (!s.ok()) return s.status();
    total = *s;
    if (tw != nullptr) {
      Body e({});
      if (auto r = FinishPointwise(node, e, e.Load(total, acc, {}), tw->dtype, 1); !r.ok()) {
        return r.status();
      }
    }
  }
  if (out != nullptr && (reduction != 0 || !batched)) {
    reduced_ = {true};
    Body b({rows}, {true});
    auto s =
        FinishReduce(node, b, row(b, true), ReduceKind::kSum, loop::DTypeOf(acc), false, 0, true);
    if (!s.ok()) return s.status();
    Body e({});
    int32_t v = e.Load(*s, acc, {});
    if (reduction == 1) v = e.Div(v, e.Load(total, acc, {}));
    if (auto r = FinishPointwise(node, e, v, out->dtype, 0); !r.ok()) return r.status();
  }
  return absl::OkStatus();
}

absl::Status Decomposer::NllLossBackward(uint32_t node) {
  // (grad_output, self, target, weight?, reduction, ignore_index, total_weight)
  const int32_t g = In(node, 0), x = In(node, 1), target = In(node, 2), w = In(node, 3),
                tw = In(node, 6);
  const int64_t reduction = Int(A(node, 4), 1);
  const int64_t ignore = Int(A(node, 5), -100);
  const bool batched = Rank(x) == 2;
  const ScalarType ct = loop::ComputeType(ST(x));
  return Pointwise(node, [&](Body& b, ScalarType) -> absl::StatusOr<int32_t> {
    std::vector<IndexExpr> tc;
    if (Rank(target) == 1) tc.push_back(Body::V(0));
    int32_t t = b.Cast(b.Load(target, ST(target), tc), ScalarType::kI64);
    int32_t c = b.Idx(Body::V(batched ? 1 : 0));
    int32_t hit =
        b.Bin(Opcode::kAnd, b.Bin(Opcode::kEq, c, t), b.Bin(Opcode::kNe, t, b.IConst(ignore)));
    int32_t wv = w >= 0 ? b.Cast(b.Load(w, ST(w), {Body::V(batched ? 1 : 0)}), ct) : b.Const(1, ct);
    std::vector<IndexExpr> gc;
    if (Rank(g) == 1) gc.push_back(Body::V(0));
    int32_t gv = b.Cast(b.Load(g, ST(g), gc), ct);
    if (reduction == 1) gv = b.Div(gv, b.Cast(b.Load(tw, ST(tw), {}), ct));
    int32_t v = b.Bin(Opcode::kSub, b.Const(0, ct), b.Mul(wv, gv));
    return b.Sel(hit, v, b.Const(0, ct));
  });
}

absl::Status Decomposer::Embedding(uint32_t node) {
  const int32_t w = In(node, 0), idx = In(node, 1);
  return Pointwise(node, [&](Body& b, ScalarType) -> absl::StatusOr<int32_t> {
    std::vector<IndexExpr> ic;
    for (size_t i = 0; i + 1 < b.rank(); ++i) ic.push_back(Body::V(i));
    int32_t i = b.Cast(b.Load(idx, ST(idx), ic), ScalarType::kI64);
    int32_t valid = b.Bin(Opcode::kAnd, b.Bin(Opcode::kGe, i, b.IConst(0)),
                          b.Bin(Opcode::kLt, i, b.Idx(Tn(w).sizes[0])));
    return b.Load(w, ST(w), {IndexExpr(), Body::V(b.rank() - 1)}, valid, {i, -1});
  });
}

absl::Status Decomposer::EmbeddingBackward(uint32_t node) {
  // (grad_output [..., D], indices [...], num_weights, padding_idx, scale_grad_by_freq)
  if (Int(A(node, 4)) != 0) return Fallback(node, "scale_grad_by_freq has no lowering");
  const int32_t g = In(node, 0), idx = In(node, 1);
  const graph::Value* o = Out(node, 0);
  IndexExpr rows = IndexExpr::Const(1);
  for (const IndexExpr& s : Tn(idx).sizes) rows = rows * s;
  const IndexExpr cols = Tn(g).sizes.back();
  // Flattened views of the operands when they are not already 1-d/2-d.
  auto flat = [&](int32_t t, std::vector<IndexExpr> sizes) {
    Body b(sizes);
    std::vector<IndexExpr> coords;
    // Unravel the flat row index into t's leading dims.
    const Tensor& tt = Tn(t);
    const size_t lead = sizes.size() == 2 ? tt.sizes.size() - 1 : tt.sizes.size();
    IndexExpr rest = Body::V(0);
    std::vector<IndexExpr> c(tt.sizes.size());
    IndexExpr stride = IndexExpr::Const(1);
    std::vector<IndexExpr> strides(lead);
    for (size_t i = lead; i-- > 0;) {
      strides[i] = stride;
      stride = stride * tt.sizes[i];
    }
    for (size_t i = 0; i < lead; ++i) {
      IndexExpr q = IndexExpr::FloorDiv(Body::V(0), strides[i], nullptr);
      c[i] = i == 0 ? q : IndexExpr::Mod(q, tt.sizes[i], nullptr);
    }
    if (sizes.size() == 2) c[lead] = Body::V(1);
    return FinishPointwise(node, b, b.Load(t, ST(t), c), tt.dtype, 0, true);
  };
  auto fi = flat(idx, {rows});
  if (!fi.ok()) return fi.status();
  auto fg = flat(g, {rows, cols});
  if (!fg.ok()) return fg.status();
  const ScalarType acc = loop::ComputeType(loop::ScalarTypeOf(o->dtype));
  const bool direct = acc == loop::ScalarTypeOf(o->dtype);
  Node n;
  n.kind = Node::Kind::kScatterAdd;
  n.name = NodeName(node);
  n.scatter.indices = *fi;
  n.scatter.src = *fg;
  n.scatter.rows = rows;
  n.scatter.cols = cols;
  n.scatter.skip_index = Int(A(node, 3), -1);
  int32_t t;
  if (direct) {
    auto tv = TensorOfValue(*o);
    if (!tv.ok()) return tv.status();
    t = *tv;
    value_tensor_[ValueId(*o)] = t;
  } else {
    auto sizes = Syms(g_.sizes(*o));
    if (!sizes.ok()) return sizes.status();
    t = NewTensor(loop::DTypeOf(acc), *sizes, absl::StrCat(NodeName(node), "~", ++temp_));
  }
  n.outputs = {t};
  out_.tensors[static_cast<size_t>(t)].producer = static_cast<int32_t>(out_.nodes.size());
  out_.nodes.push_back(std::move(n));
  if (!direct) {
    Body b(Tn(t).sizes);
    return FinishPointwise(node, b, LoadB(b, t), o->dtype, 0).status();
  }
  return absl::OkStatus();
}

absl::Status Decomposer::Cat(uint32_t node, bool stack) {
  const Arg& list = A(node, 0);
  const graph::Value* o = Out(node, 0);
  auto sizes = Syms(g_.sizes(*o));
  if (!sizes.ok()) return sizes.status();
  const int64_t dim = WrapDim(Int(A(node, 1)), stack ? sizes->size() : sizes->size());
  std::vector<int32_t> parts;
  for (const Arg& a : g_.items(list)) parts.push_back(TensorArg(a));
  Body b(*sizes);
  const ScalarType ct = loop::ComputeType(loop::ScalarTypeOf(o->dtype));
  // Skip empty parts (including legacy 1-d empty tensors).
  struct Part {
    int32_t t;
    IndexExpr begin, size;
  };
  std::vector<Part> live;
  IndexExpr offset;
  for (int32_t t : parts) {
    if (t < 0) continue;
    const Tensor& x = Tn(t);
    IndexExpr size = stack ? IndexExpr::Const(1) : x.sizes[static_cast<size_t>(dim)];
    if (!stack && x.sizes.size() != sizes->size()) continue;
    if (size.is_zero()) continue;
    live.push_back({t, offset, size});
    offset = offset + size;
  }
  if (live.empty()) {
    return FinishPointwise(node, b, b.Const(0, ct), o->dtype).status();
  }
  const int32_t pos = b.Idx(Body::V(static_cast<size_t>(dim)));
  int32_t value = -1;
  for (size_t k = live.size(); k-- > 0;) {
    const Part& p = live[k];
    std::vector<IndexExpr> coords;
    for (size_t i = 0; i < sizes->size(); ++i) {
      if (static_cast<int64_t>(i) == dim) {
        if (!stack) coords.push_back(Body::V(i) - p.begin);
      } else {
        coords.push_back(Body::V(i));
      }
    }
    if (k == 0) {
      int32_t mask = live.size() == 1 ? -1 : b.Bin(Opcode::kLt, pos, b.Idx(p.begin + p.size));
      int32_t v = b.Cast(b.Load(p.t, ST(p.t), coords, mask), ct);
      value = value < 0 ? v : b.Sel(mask, v, value);
    } else {
      int32_t in = b.Bin(Opcode::kAnd, b.Bin(Opcode::kGe, pos, b.Idx(p.begin)),
                         b.Bin(Opcode::kLt, pos, b.Idx(p.begin + p.size)));
      int32_t v = b.Cast(b.Load(p.t, ST(p.t), coords, in), ct);
      value = value < 0 ? v : b.Sel(in, v, value);
    }
  }
  return FinishPointwise(node, b, value, o->dtype).status();
}

absl::Status Decomposer::SliceBackward(uint32_t node) {
  // (grad_output, input_sizes, dim, start, end, step)
  const int32_t g = In(node, 0);
  const graph::Value* o = Out(node, 0);
  auto sizes = Syms(g_.sizes(*o));
  if (!sizes.ok()) return sizes.status();
  const int64_t dim = WrapDim(Int(A(node, 2)), sizes->size());
  if (A(node, 3).kind != ArgKind::kInt || A(node, 4).kind != ArgKind::kInt ||
      A(node, 5).kind != ArgKind::kInt || !(*sizes)[static_cast<size_t>(dim)].is_const()) {
    return Fallback(node, "slice_backward with symbolic bounds has no lowering");
  }
  const int64_t n = (*sizes)[static_cast<size_t>(dim)].const_value();
  int64_t start = Int(A(node, 3)), end = Int(A(node, 4)), step = Int(A(node, 5));
  if (start < 0) start += n;
  if (end < 0) end += n;
  start = std::clamp<int64_t>(start, 0, n);
  end = std::clamp<int64_t>(end, start, n);
  return Pointwise(node, [&](Body& b, ScalarType ct) -> absl::StatusOr<int32_t> {
    int32_t pos = b.Idx(Body::V(static_cast<size_t>(dim)));
    int32_t rel = b.Sub(pos, b.IConst(start));
    int32_t in = b.Bin(Opcode::kAnd, b.Bin(Opcode::kGe, rel, b.IConst(0)),
                       b.Bin(Opcode::kLt, pos, b.IConst(end)));
    std::vector<IndexExpr> coords;
    std::vector<int32_t> dyn;
    for (size_t i = 0; i < b.rank(); ++i) {
      coords.push_back(static_cast<int64_t>(i) == dim ? IndexExpr() : Body::V(i));
      dyn.push_back(-1);
    }
    if (step != 1) {
      in = b.Bin(Opcode::kAnd, in,
                 b.Bin(Opcode::kEq, b.Bin(Opcode::kRemainder, rel, b.IConst(step)), b.IConst(0)));
      rel = b.Bin(Opcode::kFloorDiv, rel, b.IConst(step));
    }
    dyn[static_cast<size_t>(dim)] = rel;
    return b.Sel(in, b.Cast(b.Load(g, ST(g), coords, in, dyn), ct), b.Const(0, ct));
  });
}

absl::Status Decomposer::SelectBackward(uint32_t node) {
  const int32_t g = In(node, 0);
  const graph::Value* o = Out(node, 0);
  const int64_t dim = WrapDim(Int(A(node, 2)), g_.sizes(*o).size());
  auto index =
      Sym(A(node, 3).kind == ArgKind::kSymbolic ? A(node, 3).sym
                                                : graph::SymInt::Constant(Int(A(node, 3))));
  if (!index.ok()) return index.status();
  return Pointwise(node, [&](Body& b, ScalarType ct) -> absl::StatusOr<int32_t> {
    IndexExpr idx = *index;
    if (idx.is_const() && idx.const_value() < 0) idx = b.dim(static_cast<size_t>(dim)) + idx;
    int32_t hit = b.Bin(Opcode::kEq, b.Idx(Body::V(static_cast<size_t>(dim))), b.Idx(idx));
    std::vector<IndexExpr> coords;
    for (size_t i = 0; i < b.rank(); ++i) {
      if (static_cast<int64_t>(i) != dim) coords.push_back(Body::V(i));
    }
    return b.Sel(hit, b.Cast(b.Load(g, ST(g), coords, hit), ct), b.Const(0, ct));
  });
}

absl::Status Decomposer::Addmm(uint32_t node, bool batched) {
  // addmm(bias, a, b, beta, alpha) = beta * bias + alpha * mm(a, b): the product is an extern,
  // the bias an epilogue that fusion folds into a neighbouring kernel.
  const graph::Value* o = Out(node, 0);
  const int32_t bias = In(node, 0);
  auto sizes = Syms(g_.sizes(*o));
  if (!sizes.ok()) return sizes.status();
  const int32_t prod = NewTensor(o->dtype, *sizes, absl::StrCat(NodeName(node), "~", ++temp_));
  Node n;
  n.kind = Node::Kind::kExtern;
  n.name = NodeName(node);
  n.stack_trace = g_.str(N(node).stack_trace);
  n.op = batched ? "aten.bmm.default" : "aten.mm.default";
  for (size_t i = 1; i <= 2; ++i) {
    auto a = ConvertArg(A(node, i));
    if (!a.ok()) return a.status();
    n.args.push_back(*std::move(a));
  }
  n.outputs = {prod};
  out_.tensors[static_cast<size_t>(prod)].producer = static_cast<int32_t>(out_.nodes.size());
  out_.nodes.push_back(std::move(n));
  const double beta = Num(A(node, 3), 1), alpha = Num(A(node, 4), 1);
  Body b(*sizes);
  const ScalarType ct = loop::ComputeType(loop::ScalarTypeOf(o->dtype));
  int32_t p = LoadB(b, prod);
  if (alpha != 1) p = b.MulC(p, alpha);
  int32_t bv = b.Cast(LoadB(b, bias), ct);
  if (beta != 1) bv = beta == 0 ? b.Const(0, ct) : b.MulC(bv, beta);
  return FinishPointwise(node, b, b.Add(bv, p), o->dtype).status();
}

absl::Status Decomposer::Full(uint32_t node,
                              std::function<absl::StatusOr<int32_t>(Body&, ScalarType)> fill) {
  return Pointwise(node, fill);
}

absl::Status Decomposer::Arange(uint32_t node) {
  const std::string& t = g_.target(N(node));
  double start = 0, end = 0, step = 1;
  const size_t n = NumArgs(node);
  (void)n;
  if (t == "aten.arange.default") {
    end = Num(A(node, 0));
  } else {
    start = Num(A(node, 0));
    end = Num(A(node, 1));
    if (t == "aten.arange.start_step") step = Num(A(node, 2), 1);
  }
  (void)end;
  return Pointwise(node, [&](Body& b, ScalarType ct) -> absl::StatusOr<int32_t> {
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

absl::Status Decomposer::IndexSelect(uint32_t node, bool gather) {
  const int32_t x = In(node, 0), index = In(node, 2);
  const int64_t dim = WrapDim(Int(A(node, 1)), Rank(x));
  // A 0-d self is read as one element along `dim`, as PyTorch does.
  const bool scalar = Rank(x) == 0;
  return Pointwise(node, [&](Body& b, ScalarType ct) -> absl::StatusOr<int32_t> {
    std::vector<IndexExpr> ic;
    if (gather) {
      for (size_t i = 0; i < b.rank(); ++i) ic.push_back(Body::V(i));
    } else if (Rank(index) == 1) {
      ic.push_back(scalar ? IndexExpr::Const(0) : Body::V(static_cast<size_t>(dim)));
    }
    int32_t i = b.Cast(b.Load(index, ST(index), ic), ScalarType::kI64);
    const IndexExpr extent = scalar ? IndexExpr::Const(1) : Tn(x).sizes[static_cast<size_t>(dim)];
    int32_t valid = b.Bin(Opcode::kAnd, b.Bin(Opcode::kGe, i, b.IConst(0)),
                          b.Bin(Opcode::kLt, i, b.Idx(extent)));
    std::vector<IndexExpr> coords;
    std::vector<int32_t> dyn;
    for (size_t d = 0; d < Rank(x); ++d) {
      coords.push_back(static_cast<int64_t>(d) == dim ? IndexExpr() : Body::V(d));
      dyn.push_back(static_cast<int64_t>(d) == dim ? i : -1);
    }
    return b.Cast(b.Load(x, ST(x), coords, valid, dyn), ct);
  });
}

// Arguments from `first` on: kernel_size, stride (empty: the kernel), padding, dilation; a
// one-element list repeats, as ATen's do.
absl::StatusOr<PoolWindow> Decomposer::Window(uint32_t node, size_t first, int32_t x) const {
  if (Rank(x) != 3 && Rank(x) != 4) {
    return absl::UnimplementedError("max_pool2d of a tensor not 3-d or 4-d");
  }
  auto pair = [&](size_t i, std::vector<int64_t> dflt) -> std::vector<int64_t> {
    std::vector<int64_t> v = i < NumArgs(node) ? Ints(A(node, i)) : std::vector<int64_t>();
    if (v.empty()) v = std::move(dflt);
    if (v.size() == 1) v.push_back(v[0]);
    return v;
  };
  const std::vector<int64_t> k = pair(first, {});
  if (k.size() != 2) return absl::UnimplementedError("max_pool2d without a 2-d kernel_size");
  const std::vector<int64_t> s = pair(first + 1, k), p = pair(first + 2, {0}),
                             d = pair(first + 3, {1});
  if (s.size() != 2 || p.size() != 2 || d.size() != 2) {
    return absl::UnimplementedError("max_pool2d with window arguments that are not pairs");
  }
  PoolWindow w{k[0], k[1], s[0], s[1], p[0], p[1], d[0], d[1]};
  if (w.kh <= 0 || w.kw <= 0 || w.sh <= 0 || w.sw <= 0 || w.dh <= 0 || w.dw <= 0 || w.ph < 0 ||
      w.pw < 0) {
    return absl::UnimplementedError("max_pool2d with a non-positive window size");
  }
  return w;
}

// The iteration space of a pooling kernel: `lead` (an output's or input's sizes) followed by
// the window's two offsets, which are reduced.
Body Decomposer::PoolBody(std::vector<IndexExpr> lead, const PoolWindow& w) {
  std::vector<bool> red(lead.size() + 2, false);
  red[lead.size()] = red[lead.size() + 1] = true;
  lead.push_back(IndexExpr::Const(w.kh));
  lead.push_back(IndexExpr::Const(w.kw));
  reduced_ = red;
  return Body(std::move(lead), red);
}

// Element (.., row, col) of the 3-d or 4-d tensor `t`: its leading dims at the body's, its
// last two at computed positions, read only where `mask` holds.
int32_t Decomposer::LoadPlane(Body& b, int32_t t, int32_t row, int32_t col, int32_t mask) {
  const size_t r = Rank(t);
  std::vector<IndexExpr> coords;
  for (size_t d = 0; d + 2 < r; ++d) coords.push_back(Body::V(d));
  coords.resize(r);
  std::vector<int32_t> dyn(r, -1);
  dyn[r - 2] = row;
  dyn[r - 1] = col;
  return b.Load(t, ST(t), coords, mask, dyn);
}

absl::Status Decomposer::MaxPool2d(uint32_t node) {
  // out[.., i, j] = max over the window (a, b) of x[.., i*sh + a*dh - ph, j*sw + b*dw - pw],
  // positions outside x counting as -inf; indices are the winner's h * W + w, the first
  // maximum in window order winning and a NaN taking over, as ATen's kernel does.
  const int32_t x = In(node, 0);
  const size_t r = Rank(x);
  auto win = Window(node, 1, x);
  if (!win.ok()) return win.status();
  const PoolWindow w = *win;
  const graph::Value* out = Out(node, 0);
  if (out == nullptr) return absl::InternalError("max_pool2d without a tensor output");
  auto out_sizes = Syms(g_.sizes(*out));
  if (!out_sizes.ok()) return out_sizes.status();
  const IndexExpr height = Tn(x).sizes[r - 2], width = Tn(x).sizes[r - 1];
  const ScalarType acc = loop::ComputeType(ST(x));
  for (int k : {0, 1}) {
    const graph::Value* o = Out(node, static_cast<size_t>(k));
    if (o == nullptr) continue;
    Body b = PoolBody(*out_sizes, w);
    const IndexExpr ih = Body::V(r - 2) * IndexExpr::Const(w.sh) +
                         Body::V(r) * IndexExpr::Const(w.dh) - IndexExpr::Const(w.ph);
    const IndexExpr iw = Body::V(r - 1) * IndexExpr::Const(w.sw) +
                         Body::V(r + 1) * IndexExpr::Const(w.dw) - IndexExpr::Const(w.pw);
    const int32_t ph = b.Idx(ih), pw = b.Idx(iw);
    const int32_t inside = b.Bin(Opcode::kAnd,
                                 b.Bin(Opcode::kAnd, b.Bin(Opcode::kGe, ph, b.IConst(0)),
                                       b.Bin(Opcode::kLt, ph, b.Idx(height))),
                                 b.Bin(Opcode::kAnd, b.Bin(Opcode::kGe, pw, b.IConst(0)),
                                       b.Bin(Opcode::kLt, pw, b.Idx(width))));
    const int32_t v = b.Sel(inside, b.Cast(LoadPlane(b, x, ph, pw, inside), acc),
                            b.Const(-std::numeric_limits<double>::infinity(), acc));
    b.SetReduce(ReduceKind::kArgMax, b.Idx(ih * width + iw));
    std::vector<int32_t> out_dims;
    for (size_t d = 0; d < r; ++d) out_dims.push_back(static_cast<int32_t>(d));
    store_index_ = k == 1;
    auto t = Finish(node, b, v, o->dtype, o, std::move(out_dims), *out_sizes);
    if (!t.ok()) return t.status();
  }
  return absl::OkStatus();
}

absl::Status Decomposer::MaxPool2dBackward(uint32_t node) {
  // grad_x[.., h, w] = sum over the window offsets (a, b) whose output position
  // (i, j) = ((h + ph - a*dh) / sh, (w + pw - b*dw) / sw) divides evenly and lies inside
  // grad_output, of grad_output[.., i, j] where indices[.., i, j] == h * W + w. A gather, so
  // the sum runs in a fixed order and fuses like any reduction.
  const int32_t g = In(node, 0), x = In(node, 1), indices = In(node, 7);
  const size_t r = Rank(x);
  auto win = Window(node, 2, x);
  if (!win.ok()) return win.status();
  const PoolWindow w = *win;
  const graph::Value* out = Out(node, 0);
  if (out == nullptr) return absl::InternalError("max_pool2d backward without a tensor output");
  const IndexExpr width = Tn(x).sizes[r - 1];
  const IndexExpr oh = Tn(g).sizes[r - 2], ow = Tn(g).sizes[r - 1];
  const ScalarType acc = loop::ComputeType(ST(g));
  Body b = PoolBody(Tn(x).sizes, w);
  // Shifted by whole strides so the dividend is never negative.
  auto position = [&](size_t dim, size_t off, int64_t s, int64_t p, int64_t d, int64_t k,
                      const IndexExpr& extent, int32_t* ok) {
    const int64_t shift = s * ((k - 1) * d / s + 1);
    const IndexExpr num =
        Body::V(dim) + IndexExpr::Const(p + shift) - Body::V(off) * IndexExpr::Const(d);
    const IndexExpr q =
        IndexExpr::FloorDiv(num, IndexExpr::Const(s), nullptr) - IndexExpr::Const(shift / s);
    const int32_t qi = b.Idx(q);
    *ok = b.Bin(
        Opcode::kAnd,
        b.Bin(Opcode::kEq, b.Idx(IndexExpr::Mod(num, IndexExpr::Const(s), nullptr)), b.IConst(0)),
        b.Bin(Opcode::kAnd, b.Bin(Opcode::kGe, qi, b.IConst(0)),
              b.Bin(Opcode::kLt, qi, b.Idx(extent))));
    return qi;
  };
  int32_t ok_h, ok_w;
  const int32_t qi = position(r - 2, r, w.sh, w.ph, w.dh, w.kh, oh, &ok_h);
  const int32_t qj = position(r - 1, r + 1, w.sw, w.pw, w.dw, w.kw, ow, &ok_w);
  const int32_t inside = b.Bin(Opcode::kAnd, ok_h, ok_w);
  const int32_t winner = b.Cast(LoadPlane(b, indices, qi, qj, inside), ScalarType::kI64);
  const int32_t here = b.Idx(Body::V(r - 2) * width + Body::V(r - 1));
  const int32_t take = b.Bin(Opcode::kAnd, inside, b.Bin(Opcode::kEq, winner, here));
  const int32_t v = b.Sel(take, b.Cast(LoadPlane(b, g, qi, qj, inside), acc), b.Const(0.0, acc));
  return FinishReduce(node, b, v, ReduceKind::kSum, out->dtype, false, 0, false).status();
}

absl::Status Decomposer::Copy(uint32_t node, int src_arg) {
  const int32_t src = In(node, static_cast<size_t>(src_arg));
  return Pointwise(node, [&](Body& b, ScalarType ct) -> absl::StatusOr<int32_t> {
    return b.Cast(LoadB(b, src), ct);
  });
}

absl::Status Decomposer::CopyInPlace(uint32_t node) {
  // copy_(self, src): the functional graph's way to mutate an input. The new value is written
  // back to the input after the plan.
  const int32_t self = In(node, 0);
  const Tensor& s = Tn(self);
  const Node& owner = out_.nodes[static_cast<size_t>(Tn(s.storage).producer)];
  if (owner.kind != Node::Kind::kInput || s.storage != self) {
    return Fallback(node, "copy_ into something other than a whole graph input");
  }
  const int32_t input_index = owner.input_index;  // Copy below may move the node array
  if (auto st = Copy(node, 1); !st.ok()) return st;
  const graph::Value* o = Out(node, 0);
  if (o == nullptr) return absl::OkStatus();
  out_.write_backs.push_back({input_index, value_tensor_[ValueId(*o)]});
  return absl::OkStatus();
}

absl::Status Decomposer::View(uint32_t node) {
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
    Tensor& nt = out_.tensors[static_cast<size_t>(*t)];
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
    nt.storage = x.storage;
    Node n;
    n.kind = Node::Kind::kView;
    n.name = NodeName(node);
    n.view_of = src;
    n.outputs = {*t};
    nt.producer = static_cast<int32_t>(out_.nodes.size());
    out_.nodes.push_back(std::move(n));
    value_tensor_[ValueId(v)] = *t;
  }
  return absl::OkStatus();
}

absl::Status Decomposer::ConstantPad(uint32_t node) {
  const int32_t x = In(node, 0);
  const std::vector<int64_t> pad = Ints(A(node, 1));
  const double value = Num(A(node, 2));
  return Pointwise(node, [&](Body& b, ScalarType ct) -> absl::StatusOr<int32_t> {
    std::vector<IndexExpr> coords;
    int32_t mask = -1;
    const size_t r = b.rank();
    for (size_t i = 0; i < r; ++i) coords.push_back(Body::V(i));
    for (size_t p = 0; p * 2 < pad.size(); ++p) {
      const size_t d = r - 1 - p;
      const int64_t lo = pad[2 * p];
      coords[d] = Body::V(d) - IndexExpr::Const(lo);
      int32_t pos = b.Idx(coords[d]);
      int32_t in = b.Bin(Opcode::kAnd, b.Bin(Opcode::kGe, pos, b.IConst(0)),
                         b.Bin(Opcode::kLt, pos, b.Idx(Tn(x).sizes[d])));
      mask = mask < 0 ? in : b.Bin(Opcode::kAnd, mask, in);
    }
    // A negative index expression is only ever read under its mask: clamp to keep the index
    // expressions non-negative.
    std::vector<int32_t> dyn(r, -1);
    for (size_t p = 0; p * 2 < pad.size(); ++p) {
      const size_t d = r - 1 - p;
      dyn[d] = b.Idx(coords[d]);
      coords[d] = IndexExpr();
    }
    int32_t v = b.Cast(b.Load(x, ST(x), coords, mask, dyn), ct);
    return mask < 0 ? v : b.Sel(mask, v, b.Const(value, ct));
  });
}

absl::Status Decomposer::Flip(uint32_t node) {
  const int32_t x = In(node, 0);
  std::vector<int64_t> dims = Ints(A(node, 1));
  // Flipping a 0-d tensor (dims 0 or -1) copies it.
  if (Rank(x) == 0) dims.clear();
  return Pointwise(node, [&](Body& b, ScalarType ct) -> absl::StatusOr<int32_t> {
    std::vector<IndexExpr> coords;
    for (size_t i = 0; i < b.rank(); ++i) coords.push_back(Body::V(i));
    for (int64_t d : dims) {
      const size_t di = static_cast<size_t>(WrapDim(d, b.rank()));
      coords[di] = b.dim(di) - IndexExpr::Const(1) - Body::V(di);
    }
    return b.Cast(b.Load(x, ST(x), coords), ct);
  });
}

absl::Status Decomposer::TriangleMask(uint32_t node, bool lower) {
  const int32_t x = In(node, 0);
  const int64_t diagonal = Int(A(node, 1));
  return Pointwise(node, [&](Body& b, ScalarType ct) -> absl::StatusOr<int32_t> {
    const size_t r = b.rank();
    int32_t i = b.Idx(Body::V(r - 2)), j = b.Idx(Body::V(r - 1));
    int32_t d = b.Sub(j, i);
    int32_t keep = lower ? b.Bin(Opcode::kLe, d, b.IConst(diagonal))
                         : b.Bin(Opcode::kGe, d, b.IConst(diagonal));
    return b.Sel(keep, b.Cast(LoadB(b, x), ct), b.Const(0, ct));
  });
}

// ---------------------------------------------------------------------------------------------
// The rule table.

const absl::flat_hash_map<std::string, Decomposer::Rule>& Decomposer::Rules() {
  static const auto* rules = [] {
    auto* r = new absl::flat_hash_map<std::string, Rule>();
    auto unary = [&](const std::string& name, Opcode op) {
      (*r)["aten." + name + ".default"] = [op](Decomposer& d, uint32_t n) {
        return d.Unary(n, op);
      };
    };
    unary("abs", Opcode::kAbs);
    unary("neg", Opcode::kNeg);
    unary("exp", Opcode::kExp);
    unary("exp2", Opcode::kExp2);
    unary("expm1", Opcode::kExpm1);
    unary("log", Opcode::kLog);
    unary("log2", Opcode::kLog2);
    unary("log10", Opcode::kLog10);
    unary("log1p", Opcode::kLog1p);
    unary("sqrt", Opcode::kSqrt);
    unary("rsqrt", Opcode::kRsqrt);
    unary("reciprocal", Opcode::kRecip);
    unary("sin", Opcode::kSin);
    unary("cos", Opcode::kCos);
    unary("tan", Opcode::kTan);
    unary("asin", Opcode::kAsin);
    unary("acos", Opcode::kAcos);
    unary("atan", Opcode::kAtan);
    unary("sinh", Opcode::kSinh);
    unary("cosh", Opcode::kCosh);
    unary("tanh", Opcode::kTanh);
    unary("sigmoid", Opcode::kSigmoid);
    unary("erf", Opcode::kErf);
    unary("erfc", Opcode::kErfc);
    unary("floor", Opcode::kFloor);
    unary("ceil", Opcode::kCeil);
    unary("round", Opcode::kRound);
    unary("trunc", Opcode::kTrunc);
    unary("sign", Opcode::kSign);
    unary("isnan", Opcode::kIsNan);
    unary("isinf", Opcode::kIsInf);
    unary("logical_not", Opcode::kNot);
    unary("bitwise_not", Opcode::kBitNot);
    unary("lgamma", Opcode::kLgamma);

    // Pointwise ops written as formulas over a loaded x.
    auto formula =
        [&](const std::string& target,
            std::function<int32_t(Decomposer&, uint32_t, Body&, int32_t, ScalarType)> f) {
          (*r)[target] = [f](Decomposer& d, uint32_t n) {
            return d.Pointwise(n, [&](Body& b, ScalarType ct) -> absl::StatusOr<int32_t> {
              return f(d, n, b, b.Cast(d.LoadB(b, d.In(n, 0)), ct), ct);
            });
          };
        };
    formula("aten.relu.default", [](Decomposer&, uint32_t, Body& b, int32_t x, ScalarType ct) {
      return b.Bin(Opcode::kMax, x, b.Const(0, ct));
    });
    formula("aten.silu.default", [](Decomposer&, uint32_t, Body& b, int32_t x, ScalarType) {
      return b.Mul(x, b.Un(Opcode::kSigmoid, x));
    });
    formula("aten.gelu.default", [](Decomposer& d, uint32_t n, Body& b, int32_t x, ScalarType) {
      const Arg& a = d.A(n, 1);
      if (a.kind == ArgKind::kString && d.g_.str(a.string_id) == "tanh") {
        int32_t inner = b.MulC(b.Add(x, b.MulC(b.Mul(b.Mul(x, x), x), 0.044715)), kSqrt2OverPi);
        return b.Mul(b.MulC(x, 0.5), b.AddC(b.Un(Opcode::kTanh, inner), 1.0));
      }
      return b.Mul(b.MulC(x, 0.5), b.AddC(b.Un(Opcode::kErf, b.MulC(x, kSqrt1_2)), 1.0));
    });
    formula("aten.mish.default", [](Decomposer&, uint32_t, Body& b, int32_t x, ScalarType) {
      return b.Mul(x, b.Un(Opcode::kTanh, b.Un(Opcode::kLog1p, b.Un(Opcode::kExp, x))));
    });
    formula("aten.hardsigmoid.default",
            [](Decomposer&, uint32_t, Body& b, int32_t x, ScalarType ct) {
              int32_t c = b.Bin(Opcode::kMin, b.Bin(Opcode::kMax, b.AddC(x, 3), b.Const(0, ct)),
                                b.Const(6, ct));
              return b.Div(c, b.Const(6, ct));
            });
    formula("aten.hardswish.default", [](Decomposer&, uint32_t, Body& b, int32_t x, ScalarType ct) {
      int32_t c =
          b.Bin(Opcode::kMin, b.Bin(Opcode::kMax, b.AddC(x, 3), b.Const(0, ct)), b.Const(6, ct));
      return b.Div(b.Mul(x, c), b.Const(6, ct));
    });
    formula("aten.leaky_relu.default", [](Decomposer& d, uint32_t n, Body& b, int32_t x,
                                          ScalarType ct) {
      return b.Sel(b.Bin(Opcode::kGt, x, b.Const(0, ct)), x, b.MulC(x, d.Num(d.A(n, 1), 0.01)));
    });
    formula("aten.hardtanh.default",
            [](Decomposer& d, uint32_t n, Body& b, int32_t x, ScalarType ct) {
              return b.Bin(Opcode::kMin, b.Bin(Opcode::kMax, x, b.Const(d.Num(d.A(n, 1), -1), ct)),
                           b.Const(d.Num(d.A(n, 2), 1), ct));
            });
    formula("aten.softplus.default",
            [](Decomposer& d, uint32_t n, Body& b, int32_t x, ScalarType ct) {
              const double beta = d.Num(d.A(n, 1), 1), th = d.Num(d.A(n, 2), 20);
              int32_t xb = b.MulC(x, beta);
              int32_t soft = b.Div(b.Un(Opcode::kLog1p, b.Un(Opcode::kExp, xb)), b.Const(beta, ct));
              return b.Sel(b.Bin(Opcode::kGt, xb, b.Const(th, ct)), x, soft);
            });
    formula("aten.elu.default", [](Decomposer& d, uint32_t n, Body& b, int32_t x, ScalarType ct) {
      const double alpha = d.Num(d.A(n, 1), 1), scale = d.Num(d.A(n, 2), 1),
                   input_scale = d.Num(d.A(n, 3), 1);
      int32_t neg = b.MulC(b.Un(Opcode::kExpm1, b.MulC(x, input_scale)), alpha * scale);
      return b.Sel(b.Bin(Opcode::kGt, x, b.Const(0, ct)), b.MulC(x, scale), neg);
    });
    auto clamp = [](Decomposer& d, uint32_t n, Body& b, int32_t x, ScalarType ct, bool tensors) {
      for (size_t i = 1; i <= 2; ++i) {
        const Arg& a = d.A(n, i);
        if (d.IsNone(a)) continue;
        int32_t bound;
        if (tensors) {
          bound = b.Cast(d.LoadB(b, d.TensorArg(a)), ct);
        } else {
          bound = b.Const(d.Num(a), ct);
        }
        x = b.Bin(i == 1 ? Opcode::kMax : Opcode::kMin, x, bound);
      }
      return x;
    };
    formula("aten.clamp.default", [clamp](Decomposer& d, uint32_t n, Body& b, int32_t x,
                                          ScalarType ct) { return clamp(d, n, b, x, ct, false); });
    formula("aten.clamp.Tensor", [clamp](Decomposer& d, uint32_t n, Body& b, int32_t x,
                                         ScalarType ct) { return clamp(d, n, b, x, ct, true); });
    formula("aten.clamp_min.default",
            [](Decomposer& d, uint32_t n, Body& b, int32_t x, ScalarType ct) {
              return b.Bin(Opcode::kMax, x, b.Const(d.Num(d.A(n, 1)), ct));
            });
    formula("aten.clamp_max.default",
            [](Decomposer& d, uint32_t n, Body& b, int32_t x, ScalarType ct) {
              return b.Bin(Opcode::kMin, x, b.Const(d.Num(d.A(n, 1)), ct));
            });
    formula("aten.frac.default", [](Decomposer&, uint32_t, Body& b, int32_t x, ScalarType) {
      return b.Sub(x, b.Un(Opcode::kTrunc, x));
    });

    // Backward pointwise ops: (grad, x or y, ...).
    auto backward =
        [&](const std::string& target,
            std::function<int32_t(Decomposer&, uint32_t, Body&, int32_t, int32_t, ScalarType)> f) {
          (*r)[target] = [f](Decomposer& d, uint32_t n) {
            return d.Pointwise(n, [&](Body& b, ScalarType ct) -> absl::StatusOr<int32_t> {
              int32_t g = b.Cast(d.LoadB(b, d.In(n, 0)), ct);
              int32_t x = b.Cast(d.LoadB(b, d.In(n, 1)), ct);
              return f(d, n, b, g, x, ct);
            });
          };
        };
    backward("aten.gelu_backward.default",
             [](Decomposer& d, uint32_t n, Body& b, int32_t g, int32_t x, ScalarType) {
               const Arg& a = d.A(n, 2);
               if (a.kind == ArgKind::kString && d.g_.str(a.string_id) == "tanh") {
                 const double kappa = 0.044715;
                 int32_t x2 = b.Mul(x, x);
                 int32_t inner = b.MulC(b.Add(x, b.MulC(b.Mul(x2, x), kappa)), kSqrt2OverPi);
                 int32_t th = b.Un(Opcode::kTanh, inner);
                 int32_t left = b.MulC(x, 0.5);
                 int32_t right = b.AddC(th, 1.0);
                 int32_t left_d = b.MulC(right, 0.5);
                 int32_t tanh_d = b.Sub(b.Const(1, b.T(th)), b.Mul(th, th));
                 int32_t inner_d = b.MulC(b.AddC(b.MulC(x2, 3 * kappa), 1.0), kSqrt2OverPi);
                 int32_t right_d = b.Mul(b.Mul(left, tanh_d), inner_d);
                 return b.Mul(g, b.Add(left_d, right_d));
               }
               const double kAlpha = kSqrt1_2;
               const double kBeta = 0.5 * 1.12837916709551257390 * kSqrt1_2;  // 1/sqrt(2*pi)
               int32_t cdf = b.MulC(b.AddC(b.Un(Opcode::kErf, b.MulC(x, kAlpha)), 1.0), 0.5);
               int32_t pdf = b.MulC(b.Un(Opcode::kExp, b.MulC(b.Mul(x, x), -0.5)), kBeta);
               return b.Mul(g, b.Add(cdf, b.Mul(x, pdf)));
             });
    backward("aten.silu_backward.default",
             [](Decomposer&, uint32_t, Body& b, int32_t g, int32_t x, ScalarType ct) {
               int32_t s = b.Un(Opcode::kSigmoid, x);
               return b.Mul(b.Mul(g, s), b.Add(b.Const(1, ct), b.Mul(x, b.Sub(b.Const(1, ct), s))));
             });
    backward("aten.tanh_backward.default",
             [](Decomposer&, uint32_t, Body& b, int32_t g, int32_t y, ScalarType ct) {
               return b.Mul(g, b.Sub(b.Const(1, ct), b.Mul(y, y)));
             });
    backward("aten.sigmoid_backward.default",
             [](Decomposer&, uint32_t, Body& b, int32_t g, int32_t y, ScalarType ct) {
               return b.Mul(b.Mul(g, b.Sub(b.Const(1, ct), y)), y);
             });
    backward("aten.threshold_backward.default", [](Decomposer& d, uint32_t n, Body& b, int32_t g,
                                                   int32_t x, ScalarType ct) {
      return b.Sel(b.Bin(Opcode::kLe, x, b.Const(d.Num(d.A(n, 2)), ct)), b.Const(0, ct), g);
    });
    backward("aten.hardtanh_backward.default", [](Decomposer& d, uint32_t n, Body& b, int32_t g,
                                                  int32_t x, ScalarType ct) {
      int32_t out = b.Bin(Opcode::kOr, b.Bin(Opcode::kLe, x, b.Const(d.Num(d.A(n, 2)), ct)),
                          b.Bin(Opcode::kGe, x, b.Const(d.Num(d.A(n, 3)), ct)));
      return b.Sel(out, b.Const(0, ct), g);
    });
    backward("aten.leaky_relu_backward.default",
             [](Decomposer& d, uint32_t n, Body& b, int32_t g, int32_t x, ScalarType ct) {
               return b.Sel(b.Bin(Opcode::kGt, x, b.Const(0, ct)), g, b.MulC(g, d.Num(d.A(n, 2))));
             });
    backward("aten.softplus_backward.default",
             [](Decomposer& d, uint32_t n, Body& b, int32_t g, int32_t x, ScalarType ct) {
               const double beta = d.Num(d.A(n, 2)), th = d.Num(d.A(n, 3));
               int32_t z = b.Un(Opcode::kExp, b.MulC(x, beta));
               int32_t soft = b.Div(b.Mul(g, z), b.AddC(z, 1.0));
               return b.Sel(b.Bin(Opcode::kGt, b.MulC(x, beta), b.Const(th, ct)), g, soft);
             });
    (*r)["aten.native_dropout_backward.default"] = [](Decomposer& d, uint32_t n) {
      return d.Pointwise(n, [&](Body& b, ScalarType ct) -> absl::StatusOr<int32_t> {
        int32_t g = b.Cast(d.LoadB(b, d.In(n, 0)), ct);
        int32_t m = b.Cast(d.LoadB(b, d.In(n, 1)), ct);
        return b.MulC(b.Mul(g, m), d.Num(d.A(n, 2)));
      });
    };

    // Binary arithmetic with alpha.
    auto add_sub = [&](const std::string& target, double sign, bool reversed) {
      (*r)[target] = [sign, reversed](Decomposer& d, uint32_t n) {
        return d.Pointwise(n, [&](Body& b, ScalarType ct) -> absl::StatusOr<int32_t> {
          auto x = d.Operand(b, d.A(n, 0), ct);
          if (!x.ok()) return x;
          auto y = d.Operand(b, d.A(n, 1), ct);
          if (!y.ok()) return y;
          int32_t xv = b.Cast(*x, ct), yv = b.Cast(*y, ct);
          if (reversed) std::swap(xv, yv);
          const double alpha = d.Num(d.A(n, 2), 1);
          if (alpha != 1) yv = b.Mul(yv, b.Const(alpha, ct));
          if (ct == ScalarType::kBool) return b.Bin(Opcode::kOr, xv, yv);
          return b.Bin(sign > 0 ? Opcode::kAdd : Opcode::kSub, xv, yv);
        });
      };
    };
    add_sub("aten.add.Tensor", 1, false);
    add_sub("aten.add.Scalar", 1, false);
    add_sub("aten.sub.Tensor", -1, false);
    add_sub("aten.sub.Scalar", -1, false);
    add_sub("aten.rsub.Tensor", -1, true);
    add_sub("aten.rsub.Scalar", -1, true);
    auto binary = [&](const std::string& target, Opcode op) {
      (*r)[target] = [op](Decomposer& d, uint32_t n) { return d.Binary(n, op); };
    };
    (*r)["aten.mul.Tensor"] = [](Decomposer& d, uint32_t n) {
      return d.Pointwise(n, [&](Body& b, ScalarType ct) -> absl::StatusOr<int32_t> {
        auto x = d.Operand(b, d.A(n, 0), ct);
        if (!x.ok()) return x;
        auto y = d.Operand(b, d.A(n, 1), ct);
        if (!y.ok()) return y;
        if (ct == ScalarType::kBool) return b.Bin(Opcode::kAnd, b.Cast(*x, ct), b.Cast(*y, ct));
        return b.Mul(b.Cast(*x, ct), b.Cast(*y, ct));
      });
    };
    (*r)["aten.mul.Scalar"] = (*r)["aten.mul.Tensor"];
    binary("aten.div.Tensor", Opcode::kDiv);
    binary("aten.div.Scalar", Opcode::kDiv);
    auto div_mode = [](Decomposer& d, uint32_t n) {
      return d.Pointwise(n, [&](Body& b, ScalarType ct) -> absl::StatusOr<int32_t> {
        const Arg& mode = d.A(n, 2);
        const std::string m = mode.kind == ArgKind::kString ? d.g_.str(mode.string_id) : "";
        const ScalarType work = m.empty() ? ct : (loop::IsFloat(ct) ? ct : ScalarType::kI64);
        auto x = d.Operand(b, d.A(n, 0), work);
        if (!x.ok()) return x;
        auto y = d.Operand(b, d.A(n, 1), work);
        if (!y.ok()) return y;
        int32_t xv = b.Cast(*x, work), yv = b.Cast(*y, work);
        if (m == "floor") return b.Bin(Opcode::kFloorDiv, xv, yv);
        if (m == "trunc") {
          if (loop::IsFloat(work)) return b.Un(Opcode::kTrunc, b.Div(xv, yv));
          return b.Bin(Opcode::kDiv, xv, yv);
        }
        return b.Div(b.Cast(xv, ct), b.Cast(yv, ct));
      });
    };
    (*r)["aten.div.Tensor_mode"] = div_mode;
    (*r)["aten.div.Scalar_mode"] = div_mode;
    binary("aten.floor_divide.default", Opcode::kFloorDiv);
    binary("aten.remainder.Tensor", Opcode::kRemainder);
    binary("aten.remainder.Scalar", Opcode::kRemainder);
    binary("aten.fmod.Tensor", Opcode::kFmod);
    binary("aten.fmod.Scalar", Opcode::kFmod);
    binary("aten.atan2.default", Opcode::kAtan2);
    binary("aten.maximum.default", Opcode::kMax);
    binary("aten.minimum.default", Opcode::kMin);
    binary("aten.bitwise_and.Tensor", Opcode::kAnd);
    binary("aten.bitwise_or.Tensor", Opcode::kOr);
    binary("aten.bitwise_xor.Tensor", Opcode::kXor);
    binary("aten.pow.Tensor_Tensor", Opcode::kPow);
    binary("aten.pow.Scalar", Opcode::kPow);
    (*r)["aten.pow.Tensor_Scalar"] = [](Decomposer& d, uint32_t n) {
      return d.Pointwise(n, [&](Body& b, ScalarType ct) -> absl::StatusOr<int32_t> {
        int32_t x = b.Cast(d.LoadB(b, d.In(n, 0)), ct);
        const double e = d.Num(d.A(n, 1));
        if (e == 1) return x;
        if (e == 2) return b.Mul(x, x);
        if (e == 3) return b.Mul(b.Mul(x, x), x);
        if (loop::IsFloat(ct)) {
          if (e == 0.5) return b.Un(Opcode::kSqrt, x);
          if (e == -0.5) return b.Un(Opcode::kRsqrt, x);
          if (e == -1) return b.Un(Opcode::kRecip, x);
          if (e == -2) return b.Un(Opcode::kRecip, b.Mul(x, x));
        }
        return b.Bin(Opcode::kPow, x, b.Const(e, ct));
      });
    };
    auto compare = [&](const std::string& name, Opcode op) {
      (*r)["aten." + name + ".Tensor"] = [op](Decomposer& d, uint32_t n) {
        return d.Compare(n, op);
      };
      (*r)["aten." + name + ".Scalar"] = [op](Decomposer& d, uint32_t n) {
        return d.Compare(n, op);
      };
    };
    compare("eq", Opcode::kEq);
    compare("ne", Opcode::kNe);
    compare("lt", Opcode::kLt);
    compare("le", Opcode::kLe);
    compare("gt", Opcode::kGt);
    compare("ge", Opcode::kGe);
    auto logical = [&](const std::string& target, Opcode op) {
      (*r)[target] = [op](Decomposer& d, uint32_t n) {
        return d.Pointwise(n, [&](Body& b, ScalarType) -> absl::StatusOr<int32_t> {
          return b.Bin(op, b.ToBool(d.LoadB(b, d.In(n, 0))), b.ToBool(d.LoadB(b, d.In(n, 1))));
        });
      };
    };
    logical("aten.logical_and.default", Opcode::kAnd);
    logical("aten.logical_or.default", Opcode::kOr);
    logical("aten.logical_xor.default", Opcode::kXor);
    auto where = [](Decomposer& d, uint32_t n) {
      return d.Pointwise(n, [&](Body& b, ScalarType ct) -> absl::StatusOr<int32_t> {
        int32_t c = b.ToBool(d.LoadB(b, d.In(n, 0)));
        auto x = d.Operand(b, d.A(n, 1), ct);
        if (!x.ok()) return x;
        auto y = d.Operand(b, d.A(n, 2), ct);
        if (!y.ok()) return y;
        return b.Sel(c, b.Cast(*x, ct), b.Cast(*y, ct));
      });
    };
    (*r)["aten.where.self"] = where;
    (*r)["aten.where.ScalarSelf"] = where;
    (*r)["aten.where.ScalarOther"] = where;
    auto masked_fill = [](Decomposer& d, uint32_t n) {
      return d.Pointwise(n, [&](Body& b, ScalarType ct) -> absl::StatusOr<int32_t> {
        int32_t x = b.Cast(d.LoadB(b, d.In(n, 0)), ct);
        int32_t m = b.ToBool(d.LoadB(b, d.In(n, 1)));
        auto v = d.Operand(b, d.A(n, 2), ct);
        if (!v.ok()) return v;
        return b.Sel(m, b.Cast(*v, ct), x);
      });
    };
    (*r)["aten.masked_fill.Scalar"] = masked_fill;
    (*r)["aten.masked_fill.Tensor"] = masked_fill;
    auto lerp = [](Decomposer& d, uint32_t n) {
      return d.Pointwise(n, [&](Body& b, ScalarType ct) -> absl::StatusOr<int32_t> {
        int32_t x = b.Cast(d.LoadB(b, d.In(n, 0)), ct);
        int32_t y = b.Cast(d.LoadB(b, d.In(n, 1)), ct);
        auto w = d.Operand(b, d.A(n, 2), ct);
        if (!w.ok()) return w;
        int32_t wv = b.Cast(*w, ct);
        int32_t diff = b.Sub(y, x);
        int32_t lo = b.Add(x, b.Mul(wv, diff));
        int32_t hi = b.Sub(y, b.Mul(diff, b.Sub(b.Const(1, ct), wv)));
        return b.Sel(b.Bin(Opcode::kLt, b.Un(Opcode::kAbs, wv), b.Const(0.5, ct)), lo, hi);
      });
    };
    (*r)["aten.lerp.Scalar"] = lerp;
    (*r)["aten.lerp.Tensor"] = lerp;
    auto addc = [](bool div) {
      return [div](Decomposer& d, uint32_t n) {
        return d.Pointwise(n, [&](Body& b, ScalarType ct) -> absl::StatusOr<int32_t> {
          int32_t x = b.Cast(d.LoadB(b, d.In(n, 0)), ct);
          int32_t t1 = b.Cast(d.LoadB(b, d.In(n, 1)), ct);
          int32_t t2 = b.Cast(d.LoadB(b, d.In(n, 2)), ct);
          int32_t p = div ? b.Div(t1, t2) : b.Mul(t1, t2);
          return b.Add(x, b.MulC(p, d.Num(d.A(n, 3), 1)));
        });
      };
    };
    (*r)["aten.addcmul.default"] = addc(false);
    (*r)["aten.addcdiv.default"] = addc(true);

    // Copies and casts.
    for (const char* t : {"aten.clone.default", "aten._to_copy.default",
                          "aten.lift_fresh_copy.default", "aten.contiguous.default"}) {
      (*r)[t] = [](Decomposer& d, uint32_t n) { return d.Copy(n, 0); };
    }
    (*r)["aten.copy.default"] = [](Decomposer& d, uint32_t n) { return d.Copy(n, 1); };
    (*r)["aten.copy_.default"] = [](Decomposer& d, uint32_t n) { return d.CopyInPlace(n); };

    // Factories.
    auto fill_arg = [](size_t arg) {
      return [arg](Decomposer& d, uint32_t n) {
        return d.Pointwise(n, [&](Body& b, ScalarType ct) -> absl::StatusOr<int32_t> {
          return d.ScalarValue(b, d.A(n, arg), ct);
        });
      };
    };
    auto fill_const = [](double v) {
      return [v](Decomposer& d, uint32_t n) {
        return d.Pointwise(
            n, [&](Body& b, ScalarType ct) -> absl::StatusOr<int32_t> { return b.Const(v, ct); });
      };
    };
    (*r)["aten.full.default"] = fill_arg(1);
    (*r)["aten.full_like.default"] = fill_arg(1);
    (*r)["aten.scalar_tensor.default"] = fill_arg(0);
    (*r)["aten.zeros.default"] = fill_const(0);
    (*r)["aten.zeros_like.default"] = fill_const(0);
    (*r)["aten.empty.memory_format"] = fill_const(0);
    (*r)["aten.empty_strided.default"] = fill_const(0);
    (*r)["aten.empty_like.default"] = fill_const(0);
    (*r)["aten.ones.default"] = fill_const(1);
    (*r)["aten.ones_like.default"] = fill_const(1);
    for (const char* t : {"aten.arange.default", "aten.arange.start", "aten.arange.start_step"}) {
      (*r)[t] = [](Decomposer& d, uint32_t n) { return d.Arange(n); };
    }
    for (const char* t : {"aten.rand_like.default", "aten.rand.default", "aten.bernoulli.p"}) {
      (*r)[t] = [](Decomposer& d, uint32_t n) { return d.Random(n); };
    }

    // Reductions.
    auto dims_of = [](Decomposer& d, uint32_t n, size_t i) {
      return d.IsNone(d.A(n, i)) ? std::vector<int64_t>{} : d.Ints(d.A(n, i));
    };
    (*r)["aten.sum.default"] = [](Decomposer& d, uint32_t n) {
      return d.Reduction(n, ReduceKind::kSum, {}, false, false);
    };
    (*r)["aten.sum.dim_IntList"] = [dims_of](Decomposer& d, uint32_t n) {
      return d.Reduction(n, ReduceKind::kSum, dims_of(d, n, 1), d.Int(d.A(n, 2)) != 0, false);
    };
    (*r)["aten.mean.default"] = [](Decomposer& d, uint32_t n) {
      return d.Reduction(n, ReduceKind::kSum, {}, false, true);
    };
    (*r)["aten.mean.dim"] = [dims_of](Decomposer& d, uint32_t n) {
      return d.Reduction(n, ReduceKind::kSum, dims_of(d, n, 1), d.Int(d.A(n, 2)) != 0, true);
    };
    (*r)["aten.prod.default"] = [](Decomposer& d, uint32_t n) {
      return d.Reduction(n, ReduceKind::kProd, {}, false, false);
    };
    (*r)["aten.prod.dim_int"] = [](Decomposer& d, uint32_t n) {
      return d.Reduction(n, ReduceKind::kProd, {d.Int(d.A(n, 1))}, d.Int(d.A(n, 2)) != 0, false);
    };
    (*r)["aten.amax.default"] = [dims_of](Decomposer& d, uint32_t n) {
      return d.Reduction(n, ReduceKind::kMax, dims_of(d, n, 1), d.Int(d.A(n, 2)) != 0, false);
    };
    (*r)["aten.amin.default"] = [dims_of](Decomposer& d, uint32_t n) {
      return d.Reduction(n, ReduceKind::kMin, dims_of(d, n, 1), d.Int(d.A(n, 2)) != 0, false);
    };
    (*r)["aten.max.default"] = [](Decomposer& d, uint32_t n) {
      return d.Reduction(n, ReduceKind::kMax, {}, false, false);
    };
    (*r)["aten.min.default"] = [](Decomposer& d, uint32_t n) {
      return d.Reduction(n, ReduceKind::kMin, {}, false, false);
    };
    (*r)["aten.any.default"] = [](Decomposer& d, uint32_t n) {
      return d.Reduction(n, ReduceKind::kAny, {}, false, false);
    };
    (*r)["aten.all.default"] = [](Decomposer& d, uint32_t n) {
      return d.Reduction(n, ReduceKind::kAll, {}, false, false);
    };
    (*r)["aten.any.dim"] = [](Decomposer& d, uint32_t n) {
      return d.Reduction(n, ReduceKind::kAny, {d.Int(d.A(n, 1))}, d.Int(d.A(n, 2)) != 0, false);
    };
    (*r)["aten.all.dim"] = [](Decomposer& d, uint32_t n) {
      return d.Reduction(n, ReduceKind::kAll, {d.Int(d.A(n, 1))}, d.Int(d.A(n, 2)) != 0, false);
    };
    (*r)["aten.max.dim"] = [](Decomposer& d, uint32_t n) {
      return d.ArgReduction(n, true, {d.Int(d.A(n, 1))}, d.Int(d.A(n, 2)) != 0, 0, 1);
    };
    (*r)["aten.min.dim"] = [](Decomposer& d, uint32_t n) {
      return d.ArgReduction(n, false, {d.Int(d.A(n, 1))}, d.Int(d.A(n, 2)) != 0, 0, 1);
    };
    (*r)["aten.argmax.default"] = [](Decomposer& d, uint32_t n) {
      std::vector<int64_t> dims;
      if (!d.IsNone(d.A(n, 1))) dims.push_back(d.Int(d.A(n, 1)));
      return d.ArgReduction(n, true, dims, d.Int(d.A(n, 2)) != 0, -1, 0);
    };
    (*r)["aten.argmin.default"] = [](Decomposer& d, uint32_t n) {
      std::vector<int64_t> dims;
      if (!d.IsNone(d.A(n, 1))) dims.push_back(d.Int(d.A(n, 1)));
      return d.ArgReduction(n, false, dims, d.Int(d.A(n, 2)) != 0, -1, 0);
    };
    auto correction = [](Decomposer& d, uint32_t n) {
      return d.IsNone(d.A(n, 2)) ? 1.0 : d.Num(d.A(n, 2));
    };
    (*r)["aten.var.correction"] = [dims_of, correction](Decomposer& d, uint32_t n) {
      return d.Variance(n, dims_of(d, n, 1), correction(d, n), d.Int(d.A(n, 3)) != 0, 0, -1, false);
    };
    (*r)["aten.std.correction"] = [dims_of, correction](Decomposer& d, uint32_t n) {
      return d.Variance(n, dims_of(d, n, 1), correction(d, n), d.Int(d.A(n, 3)) != 0, 0, -1, true);
    };
    (*r)["aten.var_mean.correction"] = [dims_of, correction](Decomposer& d, uint32_t n) {
      return d.Variance(n, dims_of(d, n, 1), correction(d, n), d.Int(d.A(n, 3)) != 0, 0, 1, false);
    };
    (*r)["aten._softmax.default"] = [](Decomposer& d, uint32_t n) { return d.Softmax(n, false); };
    (*r)["aten._log_softmax.default"] = [](Decomposer& d, uint32_t n) {
      return d.Softmax(n, true);
    };
    (*r)["aten._softmax_backward_data.default"] = [](Decomposer& d, uint32_t n) {
      return d.SoftmaxBackward(n, false);
    };
    (*r)["aten._log_softmax_backward_data.default"] = [](Decomposer& d, uint32_t n) {
      return d.SoftmaxBackward(n, true);
    };

    // Composite ops.
    (*r)["aten.native_layer_norm.default"] = [](Decomposer& d, uint32_t n) {
      return d.LayerNorm(n);
    };
    (*r)["aten.native_layer_norm_backward.default"] = [](Decomposer& d, uint32_t n) {
      return d.LayerNormBackward(n);
    };
    (*r)["aten._native_batch_norm_legit_functional.default"] = [](Decomposer& d, uint32_t n) {
      return d.BatchNorm(n, true);
    };
    (*r)["aten._native_batch_norm_legit_no_training.default"] = [](Decomposer& d, uint32_t n) {
      return d.BatchNorm(n, false);
    };
    (*r)["aten.native_batch_norm_backward.default"] = [](Decomposer& d, uint32_t n) {
      return d.BatchNormBackward(n);
    };
    (*r)["aten.native_dropout.default"] = [](Decomposer& d, uint32_t n) { return d.Dropout(n); };
    (*r)["aten.nll_loss_forward.default"] = [](Decomposer& d, uint32_t n) { return d.NllLoss(n); };
    (*r)["aten.nll_loss_backward.default"] = [](Decomposer& d, uint32_t n) {
      return d.NllLossBackward(n);
    };
    (*r)["aten.embedding.default"] = [](Decomposer& d, uint32_t n) { return d.Embedding(n); };
    (*r)["aten.embedding_dense_backward.default"] = [](Decomposer& d, uint32_t n) {
      return d.EmbeddingBackward(n);
    };
    (*r)["aten.cat.default"] = [](Decomposer& d, uint32_t n) { return d.Cat(n, false); };
    (*r)["aten.stack.default"] = [](Decomposer& d, uint32_t n) { return d.Cat(n, true); };
    (*r)["aten.slice_backward.default"] = [](Decomposer& d, uint32_t n) {
      return d.SliceBackward(n);
    };
    (*r)["aten.select_backward.default"] = [](Decomposer& d, uint32_t n) {
      return d.SelectBackward(n);
    };
    (*r)["aten.max_pool2d_with_indices.default"] = [](Decomposer& d, uint32_t n) {
      return d.MaxPool2d(n);
    };
    (*r)["aten.max_pool2d_with_indices_backward.default"] = [](Decomposer& d, uint32_t n) {
      return d.MaxPool2dBackward(n);
    };
    (*r)["aten.index_select.default"] = [](Decomposer& d, uint32_t n) {
      return d.IndexSelect(n, false);
    };
    (*r)["aten.gather.default"] = [](Decomposer& d, uint32_t n) { return d.IndexSelect(n, true); };
    (*r)["aten.constant_pad_nd.default"] = [](Decomposer& d, uint32_t n) {
      return d.ConstantPad(n);
    };
    (*r)["aten.flip.default"] = [](Decomposer& d, uint32_t n) { return d.Flip(n); };
    (*r)["aten.tril.default"] = [](Decomposer& d, uint32_t n) { return d.TriangleMask(n, true); };
    (*r)["aten.triu.default"] = [](Decomposer& d, uint32_t n) { return d.TriangleMask(n, false); };
    (*r)["aten.addmm.default"] = [](Decomposer& d, uint32_t n) { return d.Addmm(n, false); };
    (*r)["aten.baddbmm.default"] = [](Decomposer& d, uint32_t n) { return d.Addmm(n, true); };
    return r;
  }();
  return *rules;
}

absl::Status Decomposer::Visit(uint32_t node) {
  const graph::Node& gn = N(node);
  const std::string& target = g_.target(gn);
  // Symbolic scalars carry their value in their metadata: nothing to compute.
  bool has_tensor = false;
  for (const graph::Value& v : g_.outputs(gn)) {
    if (v.kind == graph::ValueKind::kTensor) has_tensor = true;
  }
  if (target == "operator.getitem") {
    const Arg& a = A(node, 0);
    const int64_t k = Int(A(node, 1));
    for (const graph::Value& v : g_.outputs(gn)) {
      if (v.kind != graph::ValueKind::kTensor || a.kind != ArgKind::kRef) continue;
      const graph::Node& src = N(a.ref.node);
      if (k < 0 || static_cast<uint32_t>(k) >= src.num_outputs) {
        return absl::InternalError(
            absl::StrCat("getitem ", k, " out of range at ", NodeName(node)));
      }
      const graph::Value& sv = g_.outputs(src)[static_cast<size_t>(k)];
      value_tensor_[ValueId(v)] = value_tensor_[ValueId(sv)];
    }
    return absl::OkStatus();
  }
  if (!has_tensor && !ops::IsCollective(target)) return absl::OkStatus();
  if (gn.schema == nullptr) return Fallback(node, absl::StrCat("Kiln does not know ", target));
  // Library calls (collectives among them) and views, as the op registry says.
  if (ops::IsExtern(target)) return Extern(node, target, false, "");
  if (ops::IsView(target) || target == "aten.reshape.default") return View(node);
  auto it = Rules().find(target);
  if (it == Rules().end()) return Fallback(node, absl::StrCat("no lowering for ", target));
  absl::Status s = it->second(*this, node);
  if (absl::IsUnimplemented(s)) return Fallback(node, std::string(s.message()));
  return s;
}

absl::StatusOr<PrimGraph> Decomposer::Run() {
  // Symbols in canonical names, sorted.
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
  rng_stream_.assign(g_.num_nodes(), -1);
  for (uint32_t i = 0; i < g_.num_nodes(); ++i) {
    // Random ops take Philox streams in node order (see compiler/interp/philox.h).
    if (ops::DrawsRandom(g_.target(g_.node(i)))) rng_stream_[i] = out_.rng_ops++;
  }
  for (uint32_t i = 0; i < g_.num_inputs(); ++i) {
    const graph::Node& gn = N(i);
    loop::InputDesc d;
    d.role = gn.role;
    d.name = NodeName(i);
    if (gn.num_outputs == 1) {
      const graph::Value& v = g_.outputs(gn)[0];
      if (v.kind == graph::ValueKind::kTensor) {
        d.kind = loop::InputDesc::Kind::kTensor;
        auto sizes = Syms(g_.sizes(v));
        auto strides = Syms(g_.strides(v));
        if (!sizes.ok()) return sizes.status();
        if (!strides.ok()) return strides.status();
        d.sizes = *std::move(sizes);
        d.strides = *std::move(strides);
        d.dtype = v.dtype;
        d.on_cpu = v.device.type == graph::DeviceType::kCpu;
      } else if (v.kind == graph::ValueKind::kSymInt) {
        auto e = Sym(v.scalar);
        if (e.ok()) {
          d.kind = loop::InputDesc::Kind::kScalar;
          d.scalar = *std::move(e);
        }
      }
    }
    out_.inputs.push_back(std::move(d));
  }
  for (uint32_t node : c_.order()) {
    const graph::Node& gn = N(node);
    if (gn.kind == graph::NodeKind::kInput) {
      for (const graph::Value& v : g_.outputs(gn)) {
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
        out_.tensors[static_cast<size_t>(*t)].producer = static_cast<int32_t>(out_.nodes.size());
        out_.nodes.push_back(std::move(n));
        value_tensor_[ValueId(v)] = *t;
      }
      continue;
    }
    if (absl::Status s = Visit(node); !s.ok()) {
      if (absl::IsUnimplemented(s)) {
        if (absl::Status f = Fallback(node, std::string(s.message())); !f.ok()) return f;
        continue;
      }
      return s;
    }
  }
  // Outputs, flattened.
  std::function<absl::Status(const Arg&)> flatten = [&](const Arg& a) -> absl::Status {
    if (a.kind == ArgKind::kList) {
      for (const Arg& x : g_.items(a)) {
        if (absl::Status s = flatten(x); !s.ok()) return s;
      }
      return absl::OkStatus();
    }
    Output o;
    if (a.kind == ArgKind::kRef) {
      const graph::Value* v = g_.Resolve(a.ref);
      if (v != nullptr && v->kind == graph::ValueKind::kTensor) {
        o.kind = Output::Kind::kTensor;
        o.tensor = value_tensor_[ValueId(*v)];
        if (o.tensor < 0) {
          return absl::InternalError(absl::StrCat("output ", ValueName(*v), " has no tensor"));
        }
      } else if (v != nullptr && v->kind == graph::ValueKind::kSymInt) {
        auto e = Sym(v->scalar);
        if (!e.ok()) return e.status();
        o.kind = Output::Kind::kSymbol;
        o.symbol = *e;
      }
    } else if (a.kind == ArgKind::kInt) {
      o.kind = Output::Kind::kSymbol;
      o.symbol = IndexExpr::Const(a.int_value);
    } else if (a.kind == ArgKind::kSymbolic) {
      auto e = Sym(a.sym);
      if (!e.ok()) return e.status();
      o.kind = Output::Kind::kSymbol;
      o.symbol = *e;
    }
    out_.outputs.push_back(std::move(o));
    return absl::OkStatus();
  };
  if (absl::Status s = flatten(g_.output()); !s.ok()) return s;
  return std::move(out_);
}

}  // namespace

absl::StatusOr<PrimGraph> Decompose(const graph::Graph& graph,
                                    const canon::CanonicalGraph& canonical) {
  return Decomposer(graph, canonical).Run();
}

bool HasLowering(absl::string_view target) {
  const std::string t(target);
  return ops::IsExtern(t) || ops::IsView(t) || t == "aten.reshape.default" ||
         ops::IsCollective(t) || t == "operator.getitem" || Decomposer::Rules().contains(t);
}

std::vector<std::string> LoweredOps() {
  std::vector<std::string> lowered =
      ops::TargetsWhere([](const ops::Op& op) { return op.extern_call || op.is_view(); });
  lowered.insert(lowered.end(), {"aten.reshape.default", "operator.getitem"});
  for (const auto& [target, rule] : Decomposer::Rules()) lowered.push_back(target);
  std::sort(lowered.begin(), lowered.end());
  lowered.erase(std::unique(lowered.begin(), lowered.end()), lowered.end());
  return lowered;
}

}  // namespace kiln::decompose
