#pragma once

// Kiln's loop-level IR: what lowering produces, fusion transforms and code generation
// consumes, for every target alike. Nothing here is specific to a machine: how a kernel's
// parallel space is launched is each backend's schedule (compiler/codegen/backend.h).
//
// A Program is a list of steps over buffers: kernel launches, extern calls (matmuls,
// convolutions, attention, collectives) and fallbacks (ops run eagerly by the runtime).
//
// A Kernel iterates over a space of parallel dimensions (extents are IndexExprs over the
// program's symbols) and, optionally, reduction dimensions. Its body is a small SSA of
// scalar instructions split into stages that run in order for each point of the parallel
// space: a stage either runs once per parallel point or loops over the whole reduction
// space. Reduce instructions accumulate over the reduction loop of their stage; their
// results (and every value of a stage that does not loop) are visible to later stages.
// Loop variables are numbered parallel first (p0..p{P-1}), then reduction (pP..).
//
// Memory is only touched by Load and Store, at an index that is an IndexExpr over loop
// variables and symbols plus optional data-dependent terms (gathers): views are index maps
// over the buffer that holds the storage, never copies. Loads may carry a mask: a masked-off
// lane reads nothing and yields zero, so a load outside a tensor (concatenation, padding)
// is never performed.

#include <cstdint>
#include <string>
#include <vector>

#include "compiler/graph/graph.h"
#include "compiler/loop/index_expr.h"
#include "kiln/v1/graph.pb.h"

namespace kiln::loop {

// Scalar types of SSA values. Half types never appear as SSA types: they load as f32 and
// store from f32 (PyTorch computes in f32 for them).
enum class ScalarType : uint8_t { kBool, kI8, kU8, kI16, kI32, kI64, kF16, kBF16, kF32, kF64 };

ScalarType ScalarTypeOf(graph::DType dtype);  // storage type of a dtype
graph::DType DTypeOf(ScalarType type);
int ByteSize(ScalarType type);            // storage bytes (bool: 1)
bool IsFloat(ScalarType type);            // f16, bf16, f32, f64
bool IsSigned(ScalarType type);           // signed ints
ScalarType ComputeType(ScalarType type);  // f16/bf16 -> f32, others unchanged
const char* ScalarTypeName(ScalarType type);

enum class Opcode : uint8_t {
  kConst,     // fimm (floats) or iimm (ints, bool)
  kIndex,     // the i64 value of `index`
  kLoad,      // buffer at index (+ dyn terms), optional mask; type = ComputeType(storage)
  kStore,     // buffer at index (+ dyn terms) <- a (converted to the buffer's type)
  kRandBits,  // Philox bits >> 8 (i64 in [0, 2^24)) of element a (i64) in RNG stream iimm
  kReduce,    // accumulates a with `reduce`; arg reductions also take b (the i64 index) and
              // yield the index when iimm is 1, the value when 0
  kCast,      // a to `type`
  kSelect,    // a ? b : c
  // Unary.
  kNeg,
  kAbs,
  kExp,
  kExpm1,
  kExp2,
  kLog,
  kLog1p,
  kLog2,
  kLog10,
  kSqrt,
  kRsqrt,
  kRecip,
  kSin,
  kCos,
  kTan,
  kAsin,
  kAcos,
  kAtan,
  kSinh,
  kCosh,
  kTanh,
  kSigmoid,
  kErf,
  kErfc,
  kFloor,
  kCeil,
  kRound,
  kTrunc,
  kSign,
  kIsNan,
  kIsInf,
  kNot,
  kBitNot,
  kLgamma,
  // Binary.
  kAdd,
  kSub,
  kMul,
  kDiv,
  kFloorDiv,
  kRemainder,
  kFmod,
  kPow,
  kAtan2,
  kMax,
  kMin,
  kAnd,
  kOr,
  kXor,
  kEq,
  kNe,
  kLt,
  kLe,
  kGt,
  kGe,
};

enum class ReduceKind : uint8_t { kSum, kProd, kMax, kMin, kArgMax, kArgMin, kAny, kAll };

const char* OpcodeName(Opcode op);
bool IsUnary(Opcode op);
bool IsBinary(Opcode op);

// A data-dependent index term: value (an i64 SSA value) times stride.
struct DynIndex {
  int32_t value = -1;
  IndexExpr stride;
};

struct Inst {
  Opcode op = Opcode::kConst;
  ScalarType type = ScalarType::kF32;  // result type (kStore: the stored value's type)
  int32_t a = -1, b = -1, c = -1;      // operands: SSA ids of earlier instructions
  double fimm = 0;
  int64_t iimm = 0;
  ReduceKind reduce = ReduceKind::kSum;
  // kLoad, kStore.
  int32_t buffer = -1;
  IndexExpr index;  // also kIndex
  std::vector<DynIndex> dyn;
  int32_t mask = -1;  // kLoad, kStore: a bool SSA value, or -1
};

struct Stage {
  bool loops = false;  // loops over the reduction space
  int32_t begin = 0;   // instructions [begin, end) of Kernel::insts
  int32_t end = 0;
};

struct Kernel {
  std::string name;
  std::vector<IndexExpr> parallel;   // extents of p0..
  std::vector<IndexExpr> reduction;  // extents of the reduction variables
  std::vector<Inst> insts;
  std::vector<Stage> stages;
  std::vector<std::string> nodes;  // canonical names of the graph nodes it computes
  // False for kernels whose stores depend on data (scatter-add): never fused with others.
  bool fusible = true;
  // A pointwise kernel of one stage that fusion joined from independent kernels: where each
  // of them starts among the instructions (the first at 0), so that a target may give each
  // its own threads (no instruction of one uses a value of another). Empty when the kernel
  // was not so joined.
  std::vector<int32_t> segments;
  // Where a segment covers only the first points of a one-dimensional kernel (fusion joined
  // kernels of different extents, fuse::PadTo): each segment's point count, one per segment;
  // empty when each covers all. Such a segment's loads and stores are masked to its points, so
  // a target may run it over all of them or over its own only.
  std::vector<int64_t> segment_points;
  // Where segment g ends: the next one's start, or the end of the instructions.
  int32_t SegmentEnd(size_t g) const {
    return g + 1 < segments.size() ? segments[g + 1] : static_cast<int32_t>(insts.size());
  }

  int32_t num_vars() const { return static_cast<int32_t>(parallel.size() + reduction.size()); }
  const IndexExpr* Extent(int32_t var) const {
    const size_t v = static_cast<size_t>(var);
    if (var < 0) return nullptr;
    if (v < parallel.size()) return &parallel[v];
    if (v - parallel.size() < reduction.size()) return &reduction[v - parallel.size()];
    return nullptr;
  }
  VarExtents Extents() const {
    return [this](int32_t var) { return Extent(var); };
  }
};

// A buffer of the program. Inputs are the graph's tensor inputs (storage as the input's
// metadata describes it: its first byte is element 0 of the storage, the tensor itself
// starts at its storage offset); others are allocated by the plan.
struct Buffer {
  enum class Kind : uint8_t { kInput, kIntermediate };
  Kind kind = Kind::kIntermediate;
  graph::DType dtype = graph::DType::kFloat32;
  IndexExpr elements;        // storage size in elements
  int32_t input_index = -1;  // kInput: position among the graph inputs
  std::string name;          // canonical name of the value that owns the storage
};

// A strided view of a buffer, as extern calls and outputs see tensors.
struct TensorRef {
  int32_t buffer = -1;
  std::vector<IndexExpr> sizes;
  std::vector<IndexExpr> strides;
  IndexExpr offset;
  graph::DType dtype = graph::DType::kFloat32;
};

// An argument of an extern or fallback call.
struct CallArg {
  enum class Kind : uint8_t { kTensor, kValue, kList, kNoneTensor };
  Kind kind = Kind::kValue;
  TensorRef tensor;            // kTensor
  v1::Argument value;          // kValue (never a reference)
  std::vector<CallArg> items;  // kList
};

struct ExternCall {
  std::string op;  // OpOverload target
  std::vector<CallArg> args;
  std::vector<std::pair<std::string, CallArg>> kwargs;
  std::vector<TensorRef> outputs;  // one per tensor result; buffer -1 for an unused None
  std::string node;                // canonical node name
  bool collective = false;
  bool fallback = false;
  std::string reason;       // fallback: why
  int64_t rng_stream = -1;  // the op's number among the graph's RNG ops, or -1
  std::string stack_trace;
};

struct Step {
  enum class Kind : uint8_t { kKernel, kExtern, kWriteBack };
  Kind kind = Kind::kKernel;
  int32_t kernel = -1;       // kKernel
  ExternCall call;           // kExtern (fallbacks too)
  int32_t input_index = -1;  // kWriteBack: the mutated input
  TensorRef src;             // kWriteBack: the new value
};

// One element of the graph's flattened output.
struct Output {
  enum class Kind : uint8_t { kTensor, kSymbol, kNone };
  Kind kind = Kind::kNone;
  TensorRef tensor;  // kTensor
  IndexExpr symbol;  // kSymbol: the scalar's value
};

// A graph input as the plan needs it: where symbols are read from, what is static.
struct InputDesc {
  enum class Kind : uint8_t { kTensor, kScalar, kOther };
  Kind kind = Kind::kOther;
  std::vector<IndexExpr> sizes, strides;        // kTensor
  graph::DType dtype = graph::DType::kFloat32;  // kTensor
  IndexExpr scalar;                             // kScalar: its value
  graph::InputRole role = graph::InputRole::kUnspecified;
  bool on_cpu = false;
  std::string name;  // canonical name
};

struct Program {
  std::vector<InputDesc> inputs;     // one per graph input, in calling order
  std::vector<std::string> symbols;  // canonical names; IndexExpr symbol ids index this
  std::vector<int64_t> symbol_hints;
  std::vector<Buffer> buffers;
  std::vector<Kernel> kernels;
  std::vector<Step> steps;
  std::vector<Output> outputs;
  int64_t rng_ops = 0;  // RNG ops of the graph: the offset advance per run
};

// Calls f with each SSA value `in` uses: its operands, mask and data-dependent index terms.
template <typename F>
void ForEachOperand(const Inst& in, F f) {
  for (int32_t v : {in.a, in.b, in.c, in.mask}) {
    if (v >= 0) f(v);
  }
  for (const DynIndex& d : in.dyn) f(d.value);
}

// Renumbers every SSA value `in` uses through `map` (old id -> new id).
void RemapOperands(Inst* in, const std::vector<int32_t>& map);

// Renumbers `in`'s operands through `map` and appends it to `out`; returns its new id.
int32_t AppendRemapped(std::vector<Inst>* out, Inst in, const std::vector<int32_t>& map);

// Whether some stage of the kernel loops over its reduction space.
bool HasLoopStage(const Kernel& kernel);

// A readable dump of a kernel or program, for tests and debugging. Deterministic.
std::string ToString(const Program& program, const Kernel& kernel);
std::string ToString(const Program& program);

}  // namespace kiln::loop
