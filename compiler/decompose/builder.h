#pragma once

// What decompose's rules build with (internal to compiler/decompose). A Body is the scalar
// body of one Compute under construction; a Builder owns the PrimGraph being made from one
// graph and adds to it, for the graph node a rule decomposes, the tensors and nodes that
// stand for it: Computes (pointwise or reducing), Views, Externs and fallbacks.
//
// Builder methods return INVALID_ARGUMENT, naming the node, when a node's metadata disagrees
// with what its op computes from its inputs (the graph is at fault), INTERNAL for other
// inconsistencies, and UNIMPLEMENTED for what the loop IR cannot compute: the node then falls
// back. A symbolic size outside the IR's forms
// becomes an opaque IndexExpr, which tensors, views, externs and fallbacks carry as it is;
// a Compute that would need one in its kernel is UNIMPLEMENTED.

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "compiler/canon/canonical_graph.h"
#include "compiler/decompose/decompose.h"
#include "compiler/graph/graph.h"
#include "compiler/loop/index_expr.h"
#include "compiler/loop/ir.h"

namespace kiln::decompose {

// The type a binary op on `a` and `b` computes in, as PyTorch promotes tensor dtypes.
loop::ScalarType PromoteScalarTypes(loop::ScalarType a, loop::ScalarType b);

// PyTorch's type categories, ordered: 0 bool, 1 integer, 2 floating point.
int Category(loop::ScalarType t);

// A dim in [-rank, rank) made non-negative; a 0-d tensor takes 0 and -1.
int64_t WrapDim(int64_t d, size_t rank);

// Builds the body of one Compute: an iteration space of dims (some reduced) and loop IR
// instructions in SSA form, whose operands are promoted and cast as they are emitted.
class Body {
 public:
  explicit Body(std::vector<loop::IndexExpr> dims, std::vector<bool> reduced = {}) {
    c_.dims = std::move(dims);
    c_.reduced = reduced.empty() ? std::vector<bool>(c_.dims.size(), false) : std::move(reduced);
  }
  size_t rank() const { return c_.dims.size(); }
  const Compute& compute() const { return c_; }
  const loop::IndexExpr& dim(size_t i) const { return c_.dims[i]; }
  // Per dim: whether the Compute reduces it.
  const std::vector<bool>& reduced() const { return c_.reduced; }
  static loop::IndexExpr V(size_t d) { return loop::IndexExpr::Var(static_cast<int32_t>(d)); }

  loop::ScalarType T(int32_t v) const { return c_.body[static_cast<size_t>(v)].type; }

  int32_t Emit(loop::Inst in) {
    c_.body.push_back(std::move(in));
    return static_cast<int32_t>(c_.body.size() - 1);
  }
  int32_t Load(int32_t tensor, loop::ScalarType storage, std::vector<loop::IndexExpr> coords,
               int32_t mask = -1, std::vector<int32_t> dyn = {}) {
    LoadSite site;
    site.tensor = tensor;
    if (dyn.empty()) dyn.assign(coords.size(), -1);
    site.coords = std::move(coords);
    site.dyn = std::move(dyn);
    c_.loads.push_back(std::move(site));
    loop::Inst in;
    in.op = loop::Opcode::kLoad;
    in.type = loop::ComputeType(storage);
    in.iimm = static_cast<int64_t>(c_.loads.size() - 1);
    in.mask = mask;
    return Emit(std::move(in));
  }
  int32_t Const(double v, loop::ScalarType t) {
    loop::Inst in;
    in.op = loop::Opcode::kConst;
    in.type = loop::ComputeType(t);
    if (loop::IsFloat(in.type)) {
      in.fimm = v;
    } else if (t == loop::ScalarType::kBool) {
      in.iimm = v != 0;
    } else {
      in.iimm = static_cast<int64_t>(v);
    }
    return Emit(std::move(in));
  }
  int32_t IConst(int64_t v, loop::ScalarType t = loop::ScalarType::kI64) {
    loop::Inst in;
    in.op = loop::Opcode::kConst;
    in.type = t;
    in.iimm = v;
    if (loop::IsFloat(t)) in.fimm = static_cast<double>(v);
    return Emit(std::move(in));
  }
  int32_t Idx(loop::IndexExpr e) {
    loop::Inst in;
    in.op = loop::Opcode::kIndex;
    in.type = loop::ScalarType::kI64;
    in.index = std::move(e);
    return Emit(std::move(in));
  }
  int32_t Cast(int32_t v, loop::ScalarType t) {
    t = loop::ComputeType(t);
    if (T(v) == t) return v;
    loop::Inst in;
    in.op = loop::Opcode::kCast;
    in.type = t;
    in.a = v;
    return Emit(std::move(in));
  }
  int32_t Un(loop::Opcode op, int32_t a) {
    loop::Inst in;
    in.op = op;
    in.type = (op == loop::Opcode::kIsNan || op == loop::Opcode::kIsInf || op == loop::Opcode::kNot)
                  ? loop::ScalarType::kBool
                  : T(a);
    in.a = a;
    return Emit(std::move(in));
  }
  static bool IsCompare(loop::Opcode op) {
    return op == loop::Opcode::kEq || op == loop::Opcode::kNe || op == loop::Opcode::kLt ||
           op == loop::Opcode::kLe || op == loop::Opcode::kGt || op == loop::Opcode::kGe;
  }
  int32_t Bin(loop::Opcode op, int32_t a, int32_t b) {
    loop::ScalarType t = PromoteScalarTypes(T(a), T(b));
    if (op == loop::Opcode::kAnd || op == loop::Opcode::kOr || op == loop::Opcode::kXor) {
      if (T(a) == loop::ScalarType::kBool && T(b) == loop::ScalarType::kBool) {
        t = loop::ScalarType::kBool;
      }
    }
    a = Cast(a, t);
    b = Cast(b, t);
    loop::Inst in;
    in.op = op;
    in.type = IsCompare(op) ? loop::ScalarType::kBool : t;
    in.a = a;
    in.b = b;
    return Emit(std::move(in));
  }
  int32_t Sel(int32_t c, int32_t a, int32_t b) {
    loop::ScalarType t = PromoteScalarTypes(T(a), T(b));
    a = Cast(a, t);
    b = Cast(b, t);
    loop::Inst in;
    in.op = loop::Opcode::kSelect;
    in.type = t;
    in.a = ToBool(c);
    in.b = a;
    in.c = b;
    return Emit(std::move(in));
  }
  int32_t ToBool(int32_t v) {
    if (T(v) == loop::ScalarType::kBool) return v;
    return Bin(loop::Opcode::kNe, v, Const(0, T(v)));
  }
  int32_t RandBits(int64_t stream, int32_t element) {
    loop::Inst in;
    in.op = loop::Opcode::kRandBits;
    in.type = loop::ScalarType::kI64;
    in.iimm = stream;
    in.a = element;
    return Emit(std::move(in));
  }
  int32_t Add(int32_t a, int32_t b) { return Bin(loop::Opcode::kAdd, a, b); }
  int32_t Sub(int32_t a, int32_t b) { return Bin(loop::Opcode::kSub, a, b); }
  int32_t Mul(int32_t a, int32_t b) { return Bin(loop::Opcode::kMul, a, b); }
  int32_t Div(int32_t a, int32_t b) { return Bin(loop::Opcode::kDiv, a, b); }
  int32_t MulC(int32_t a, double c) { return Mul(a, Const(c, T(a))); }
  int32_t AddC(int32_t a, double c) { return Add(a, Const(c, T(a))); }

  // The row-major position of the current point among all dims.
  loop::IndexExpr Linear() const {
    loop::IndexExpr lin, stride = loop::IndexExpr::Const(1);
    for (size_t i = c_.dims.size(); i-- > 0;) {
      lin = lin + V(i) * stride;
      stride = stride * c_.dims[i];
    }
    return lin;
  }

  // How the reduced dims combine; arg reductions order by the i64 SSA value `index` and
  // yield it instead of the value when `store_index`.
  void SetReduce(loop::ReduceKind k, int32_t index = -1, bool store_index = false) {
    c_.reduce = k;
    c_.reduce_index = index;
    c_.store_index = store_index;
  }
  Compute Take(int32_t result, std::vector<int32_t> out_dims) {
    c_.result = result;
    c_.out_dims = std::move(out_dims);
    return std::move(c_);
  }

 private:
  Compute c_;
};

// The PrimGraph of one graph under construction. Graph values are bound to the tensors that
// hold them as their producers are decomposed; tensors and nodes are appended in execution
// order, so a rule's references to tensors stay valid but references into the tensor and
// node arrays do not survive the next addition.
class Builder {
 public:
  // Starts the PrimGraph of `g` with its symbols, renamed canonically and sorted.
  // `rng_streams` holds each node's random stream, -1 for nodes that draw none.
  Builder(const graph::Graph& g, const canon::CanonicalGraph& c, std::vector<int64_t> rng_streams);

  // The PrimGraph built; the Builder is spent.
  PrimGraph Take() { return std::move(out_); }

  const graph::Graph& graph() const { return g_; }

  // --- Symbols and names.
  // A size, stride, offset or symbolic scalar as an IndexExpr (opaque when outside the IR's
  // forms); UNIMPLEMENTED only for a symbol the graph does not declare.
  absl::StatusOr<loop::IndexExpr> Sym(const graph::SymInt& s) const;
  absl::StatusOr<std::vector<loop::IndexExpr>> Syms(absl::Span<const graph::SymInt> v) const;
  // UNIMPLEMENTED, naming the expression, unless a kernel can compute `e` (or every stride
  // and the offset of tensor `t`, or everything the Compute under construction in `b` uses).
  absl::Status Computable(const loop::IndexExpr& e) const;
  absl::Status ComputableLayout(int32_t t) const;
  absl::Status ComputableBody(const Body& b) const;
  std::string NodeName(uint32_t node) const { return absl::StrCat("%", c_.position(node)); }
  std::string ValueName(const graph::Value& v) const;

  // --- Graph values and the tensors that hold them (-1 while unbound).
  int32_t TensorOf(const graph::Value& v) const { return value_tensor_[ValueId(v)]; }
  void Bind(const graph::Value& v, int32_t t) { value_tensor_[ValueId(v)] = t; }

  // --- Tensors.
  // A contiguous tensor.
  int32_t NewTensor(graph::DType dtype, std::vector<loop::IndexExpr> sizes,
                    const std::string& name);
  // A contiguous tensor internal to `node`'s decomposition ("%12~3").
  int32_t TempTensor(uint32_t node, graph::DType dtype, std::vector<loop::IndexExpr> sizes) {
    return NewTensor(dtype, std::move(sizes), absl::StrCat(NodeName(node), "~", ++temp_));
  }
  // A tensor with the layout `v`'s metadata records; not bound to `v`.
  absl::StatusOr<int32_t> TensorOfValue(const graph::Value& v);
  const Tensor& Tn(int32_t t) const { return out_.tensors[static_cast<size_t>(t)]; }
  loop::ScalarType ST(int32_t t) const { return loop::ScalarTypeOf(Tn(t).dtype); }
  size_t Rank(int32_t t) const { return Tn(t).sizes.size(); }

  // --- Graph nodes and their arguments.
  const graph::Node& N(uint32_t node) const { return g_.node(node); }
  const graph::Arg& A(uint32_t node, size_t i) const { return g_.args(N(node))[i]; }
  size_t NumArgs(uint32_t node) const { return N(node).num_args; }
  // Output `k` of `node` when it is a tensor, else null.
  const graph::Value* Out(uint32_t node, size_t k) const;
  // The tensor an argument refers to, or -1.
  int32_t TensorArg(const graph::Arg& a) const;
  int32_t In(uint32_t node, size_t i) const { return TensorArg(A(node, i)); }
  static bool IsNone(const graph::Arg& a) {
    return a.kind == graph::ArgKind::kNone || a.kind == graph::ArgKind::kAbsent;
  }
  static double Num(const graph::Arg& a, double dflt = 0);
  static int64_t Int(const graph::Arg& a, int64_t dflt = 0) {
    return a.kind == graph::ArgKind::kInt || a.kind == graph::ArgKind::kBool ? a.int_value : dflt;
  }
  static bool IsFloatScalar(const graph::Arg& a) { return a.kind == graph::ArgKind::kFloat; }
  std::vector<int64_t> Ints(const graph::Arg& a) const;
  // The random stream of `node`, -1 when it draws none.
  int64_t rng_stream(uint32_t node) const { return rng_streams_[node]; }
  // Whether a run stores `v` whatever computes it: a graph output, or read (through views) by
  // a library call or a fallback (decompose.cc StoredValues). False until SetStored.
  bool Stored(const graph::Value& v) const {
    return ValueId(v) < stored_.size() && stored_[ValueId(v)];
  }
  void SetStored(std::vector<bool> stored) { stored_ = std::move(stored); }

  // --- Loads and operands.
  // A scalar argument as an SSA value of type `t` (symbolic ints through their expression).
  absl::StatusOr<int32_t> ScalarValue(Body& b, const graph::Arg& a, loop::ScalarType t) const;
  // Coordinates of tensor `t` broadcast against the trailing dims of `b` (or of its first
  // `ndims` dims).
  std::vector<loop::IndexExpr> BroadcastCoords(const Body& b, int32_t t, size_t ndims = 0) const;
  int32_t LoadB(Body& b, int32_t t) const { return b.Load(t, ST(t), BroadcastCoords(b, t)); }
  // A tensor argument or a scalar argument as a value broadcast over `b`.
  absl::StatusOr<int32_t> Operand(Body& b, const graph::Arg& a, loop::ScalarType scalar_type) const;

  // --- Computes.
  // OK unless `value`'s metadata, an output of `node`, provably disagrees with the sizes
  // `computed` from the node's inputs: INVALID_ARGUMENT naming the node, its op and what
  // disagrees (a rank; a size, where the symbolic expressions decide it).
  absl::Status CheckMetadata(uint32_t node, const graph::Value& value,
                             const std::vector<loop::IndexExpr>& computed) const;
  // Adds a Compute producing a tensor; `value` (may be null) gives its layout and name, and
  // must agree with `out_sizes` (CheckMetadata).
  absl::StatusOr<int32_t> Finish(uint32_t node, Body& b, int32_t result, graph::DType dtype,
                                 const graph::Value* value, std::vector<int32_t> out_dims,
                                 std::vector<loop::IndexExpr> out_sizes);
  // A pointwise Compute over all dims of `b` producing output `k` of `node` (or a temporary).
  absl::StatusOr<int32_t> FinishPointwise(uint32_t node, Body& b, int32_t result,
                                          graph::DType dtype, int k = 0, bool temp = false);
  // A Compute reducing `b`'s reduced dims; the output keeps size-1 dims at reduced positions
  // when `keepdim`.
  absl::StatusOr<int32_t> FinishReduce(uint32_t node, Body& b, int32_t result,
                                       loop::ReduceKind kind, graph::DType dtype, bool keepdim,
                                       int k, bool temp, int32_t index = -1,
                                       bool store_index = false);
  // A Body over `t`'s dims reducing the dims in `dims` (empty: all).
  Body ReduceBody(int32_t t, const std::vector<int64_t>& dims) const;
  // Reduces `v` over the reduced dims of `b` into a keepdim temporary of type `acc`.
  absl::StatusOr<int32_t> SumTemp(uint32_t node, Body& b, int32_t v, loop::ReduceKind kind,
                                  loop::ScalarType acc);
  // The number of elements of `dims` that `red` marks.
  static loop::IndexExpr NumelOf(const std::vector<loop::IndexExpr>& dims,
                                 const std::vector<bool>& red);
  // Output `k` of `node` over the values of tensor `t`: `t` itself when its layout is the
  // output's, else a copy.
  absl::Status Alias(uint32_t node, size_t k, int32_t t);
  // A pointwise Compute over the sizes of `node`'s output 0, whose value `fn` emits given the
  // output's compute type.
  absl::Status Pointwise(uint32_t node,
                         const std::function<absl::StatusOr<int32_t>(Body&, loop::ScalarType)>& fn);

  // --- Other nodes.
  // Appends `n` and makes it the producer of its outputs; returns its index.
  int32_t AddNode(Node n);
  const Node& node(int32_t i) const { return out_.nodes[static_cast<size_t>(i)]; }
  void AddWriteBack(int32_t input_index, int32_t tensor) {
    out_.write_backs.push_back({input_index, tensor});
  }
  // The tensors of graph input `node`, bound to its values.
  absl::Status AddInput(uint32_t node);
  // `node`'s results as views of its first argument with their metadata's layout (a copy for
  // a reshape of a tensor not laid out contiguously).
  absl::Status View(uint32_t node);
  // An argument for an extern call.
  absl::StatusOr<CallArg> ConvertArg(const graph::Arg& a) const;
  // A call of `op` standing for `node`: its name and stack trace, no arguments or results.
  Node CallOf(uint32_t node, const std::string& op) const;
  // Appends `node`'s positional arguments first..last (inclusive) to call `n`.
  absl::Status AddArgs(uint32_t node, size_t first, size_t last, Node& n) const;
  // `node` as a call of `op` with its arguments and results.
  absl::Status Extern(uint32_t node, const std::string& op, bool fallback,
                      const std::string& reason);
  // `node` as a call of its own op that the runtime runs eagerly, with the reason.
  absl::Status Fallback(uint32_t node, const std::string& reason);

 private:
  uint32_t ValueId(const graph::Value& v) const {
    return static_cast<uint32_t>(&v - g_.values().data());
  }

  const graph::Graph& g_;
  const canon::CanonicalGraph& c_;
  PrimGraph out_;
  std::vector<int32_t> value_tensor_;
  std::map<std::string, int32_t> sym_ids_;
  std::vector<int64_t> rng_streams_;
  std::vector<bool> stored_;  // by value id
  int temp_ = 0;
};

}  // namespace kiln::decompose
