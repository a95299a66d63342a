#pragma once

// Kiln's in-memory graph IR: what every compiler phase after import reads.
//
// A Graph is a list of nodes in a topological order. Graph inputs (placeholders) are the
// first `num_inputs()` nodes, in calling order; the rest are calls. Each node produces
// `num_outputs` values (one for most ops, one per tuple element for multi-output ops).
// Arguments are typed (Arg) and refer to values by (node index, output index), so edges
// are plain integers and phases can index arrays by them.
//
// Storage is flat: nodes, values, arguments, dimensions, strings and symbolic expressions
// live in per-graph arrays and refer to each other by 32-bit indices. A Graph is built
// once (by Import) and immutable afterwards; it is safe to read from several threads.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/types/span.h"
#include "compiler/sym/expr.h"
#include "proto/ops/registry.h"

namespace kiln::graph {

// Element types; the numbers are kiln.v1.DType's.
enum class DType : uint8_t {
  kFloat32 = 1,
  kFloat64 = 2,
  kFloat16 = 3,
  kBFloat16 = 4,
  kInt64 = 5,
  kInt32 = 6,
  kInt16 = 7,
  kInt8 = 8,
  kUInt8 = 9,
  kBool = 10,
  kComplex64 = 11,
  kComplex128 = 12,
  kFloat8E4M3FN = 13,
  kFloat8E5M2 = 14,
  kUInt16 = 15,
  kUInt32 = 16,
  kUInt64 = 17,
};
inline constexpr int kMaxDType = 17;

// Layouts and memory formats; the numbers are kiln.v1's. Layout 0 does not occur: import
// reads LAYOUT_UNSPECIFIED as strided.
enum class Layout : uint8_t { kStrided = 1, kSparseCoo = 2, kSparseCsr = 3, kJagged = 4 };
enum class MemoryFormat : uint8_t {
  kContiguous = 1,
  kChannelsLast = 2,
  kChannelsLast3d = 3,
  kPreserve = 4,
};

enum class DeviceType : uint8_t { kCpu, kCuda, kMeta, kMps, kXpu, kHip };

struct Device {
  DeviceType type = DeviceType::kCpu;
  int16_t index = -1;  // -1: the device string named no index
  friend bool operator==(const Device&, const Device&) = default;
};

// "cpu", "cuda", ...; and back (false for an unknown type).
absl::string_view DeviceTypeName(DeviceType type);
bool ParseDeviceType(absl::string_view name, DeviceType* type);
absl::string_view DTypeName(DType dtype);  // "float32", ...

// An integer that is a constant or a symbolic expression. Symbolic ones hold an index into
// Graph::exprs(); identical expression texts share one index.
class SymInt {
 public:
  SymInt() = default;
  static SymInt Constant(int64_t value) { return SymInt(value, false); }
  static SymInt Symbolic(uint32_t expr) { return SymInt(expr, true); }

  bool is_symbolic() const { return symbolic_; }
  int64_t value() const { return payload_; }                         // constants only
  uint32_t expr() const { return static_cast<uint32_t>(payload_); }  // symbolic only

  friend bool operator==(const SymInt&, const SymInt&) = default;

 private:
  SymInt(int64_t payload, bool symbolic) : payload_(payload), symbolic_(symbolic) {}
  int64_t payload_ = 0;
  bool symbolic_ = false;
};

// What a value is.
enum class ValueKind : uint8_t {
  kTensor,
  kSymInt,    // a symbolic (or traced) int
  kSymFloat,  // a symbolic float
  kSymBool,   // a symbolic bool
  kNone,      // no value: None, or an output FX recorded no metadata for
};

// One value a node produces. Tensor metadata is inline; sizes and strides are ranges of
// Graph::dims(). Symbolic scalars keep their expression in `scalar`.
struct Value {
  ValueKind kind = ValueKind::kNone;
  DType dtype = DType::kFloat32;  // tensors
  Layout layout = Layout::kStrided;
  bool requires_grad = false;
  Device device;
  uint32_t rank = 0;
  uint32_t dims = 0;      // sizes at dims[0, rank), strides at dims[rank, 2*rank)
  SymInt storage_offset;  // tensors
  SymInt scalar;          // symbolic scalars: the expression (always symbolic)
  uint32_t node = 0;      // the producing node
  uint32_t output = 0;    // which of its outputs
};

// A reference to a value: node `node`'s output `output`, or the node's whole tuple.
struct Ref {
  static constexpr int32_t kWhole = -1;
  uint32_t node = 0;
  int32_t output = kWhole;  // kWhole for a single-output node means its one value
  friend bool operator==(const Ref&, const Ref&) = default;
};

enum class ArgKind : uint8_t {
  kAbsent,  // an unknown op's parameter that was not passed (never for known ops)
  kNone,
  kRef,
  kInt,
  kFloat,
  kBool,
  kString,        // string_id
  kDType,         // int_value: DType
  kDevice,        // device
  kLayout,        // int_value: Layout
  kMemoryFormat,  // int_value: MemoryFormat
  kList,          // items: Graph::items(arg)
  kSymbolic,      // sym (a symbolic int, float or bool expression); sym_kind says which
};

struct ListSpan {
  uint32_t begin = 0;
  uint32_t size = 0;
};

// One argument. 24 bytes; lists point into the same pool as top-level arguments.
struct Arg {
  ArgKind kind = ArgKind::kNone;
  ValueKind sym_kind = ValueKind::kSymInt;  // kSymbolic only
  uint32_t name = 0;  // keyword name (string id) for unknown ops' kwargs; 0 otherwise
  union {
    int64_t int_value = 0;  // kInt, kBool (0/1), kDType, kLayout, kMemoryFormat
    double float_value;     // kFloat
    Ref ref;                // kRef
    uint32_t string_id;     // kString
    Device device;          // kDevice
    ListSpan list;          // kList
    SymInt sym;             // kSymbolic
  };
  Arg() {}
};
static_assert(sizeof(Arg) == 24, "arguments stay compact: the pool is scanned by every phase");

enum class NodeKind : uint8_t { kInput, kCall };

// The role of a graph input; the numbers are kiln.v1.InputRole's.
enum class InputRole : uint8_t {
  kUnspecified = 0,
  kParameter = 1,
  kBuffer = 2,
  kUserInput = 3,
  kTangent = 4,
  kSaved = 5,
  kRngState = 6,
};

struct Node {
  NodeKind kind = NodeKind::kCall;
  bool multi_output = false;                 // the call returns a tuple (even of one element)
  InputRole role = InputRole::kUnspecified;  // inputs only
  // The op's registry entry (schema and traits); nullptr for inputs and unknown ops, which
  // run as fallbacks. `schema` is &op->schema, for the phases that read only parameters.
  const ops::Op* op = nullptr;
  const ops::OpSchema* schema = nullptr;
  uint32_t target = 0;       // string id of the OpOverload target; 0 for inputs
  uint32_t name = 0;         // string id of the original name (debug only)
  uint32_t stack_trace = 0;  // string id, 0 when absent (debug only)
  // Arguments at args[args_begin, args_begin + num_args). For known ops: one per schema
  // parameter in schema order, keyword arguments bound and defaults filled in. For
  // unknown ops: the positional arguments, then the keyword arguments (Arg::name set).
  uint32_t args_begin = 0;
  uint32_t num_args = 0;
  uint32_t outputs_begin = 0;  // values[outputs_begin, outputs_begin + num_outputs)
  uint32_t num_outputs = 0;
};

// A symbol of the graph's ShapeEnv.
struct Symbol {
  std::string name;
  ValueKind kind = ValueKind::kSymInt;  // kSymInt or kSymFloat
  bool has_hint = false;
  int64_t int_hint = 0;
  double float_hint = 0;
};

class Graph {
 public:
  absl::Span<const Node> nodes() const { return nodes_; }
  const Node& node(uint32_t i) const { return nodes_[i]; }
  uint32_t num_inputs() const { return num_inputs_; }
  uint32_t num_nodes() const { return static_cast<uint32_t>(nodes_.size()); }

  absl::Span<const Value> values() const { return values_; }
  const Value& value(uint32_t i) const { return values_[i]; }
  // The values node `n` produces.
  absl::Span<const Value> outputs(const Node& n) const {
    return absl::MakeConstSpan(values_).subspan(n.outputs_begin, n.num_outputs);
  }
  // The value `ref` names, or nullptr for a whole tuple of a multi-output node.
  const Value* Resolve(const Ref& ref) const;

  absl::Span<const Arg> args(const Node& n) const {
    return absl::MakeConstSpan(args_).subspan(n.args_begin, n.num_args);
  }
  absl::Span<const Arg> items(const Arg& list) const {
    return absl::MakeConstSpan(args_).subspan(list.list.begin, list.list.size);
  }
  absl::Span<const SymInt> sizes(const Value& v) const {
    return absl::MakeConstSpan(dims_).subspan(v.dims, v.rank);
  }
  absl::Span<const SymInt> strides(const Value& v) const {
    return absl::MakeConstSpan(dims_).subspan(v.dims + v.rank, v.rank);
  }

  // What the graph returns (usually a list of refs).
  const Arg& output() const { return output_; }

  // String id 0 is the empty string.
  const std::string& str(uint32_t id) const { return strings_[id]; }
  const std::string& target(const Node& n) const { return strings_[n.target]; }
  const std::string& name(const Node& n) const { return strings_[n.name]; }

  // Symbolic expressions (parsed), with the text they were parsed from.
  const sym::Expr& expr(uint32_t id) const { return *exprs_[id]; }
  const std::string& expr_text(uint32_t id) const { return expr_texts_[id]; }
  uint32_t num_exprs() const { return static_cast<uint32_t>(exprs_.size()); }

  absl::Span<const Symbol> symbols() const { return symbols_; }
  absl::Span<const std::string> shape_env_guards() const { return shape_env_guards_; }
  const std::string& python_guard() const { return python_guard_; }

 private:
  friend class GraphBuilder;

  std::vector<Node> nodes_;
  uint32_t num_inputs_ = 0;
  std::vector<Value> values_;
  std::vector<Arg> args_;
  std::vector<SymInt> dims_;
  Arg output_;
  std::vector<std::string> strings_{std::string()};
  std::vector<sym::ExprPtr> exprs_;
  std::vector<std::string> expr_texts_;
  std::vector<Symbol> symbols_;
  std::vector<std::string> shape_env_guards_;
  std::string python_guard_;
};

}  // namespace kiln::graph
