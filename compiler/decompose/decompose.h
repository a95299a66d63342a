#pragma once

// Decompose: the imported aten graph rewritten into a few primitive tensor operations, the
// input of lowering.
//
//  - Compute: an iteration space of dimensions (some of them reduced) with a scalar body
//    (loop IR instructions) that reads input tensors at coordinates given as index
//    expressions over the dimensions (broadcasting, gathers, concatenation and padding are
//    all just coordinates and masks), and yields one value per point, or one reduced value
//    per point of the non-reduced dimensions. Composite ops (layer norm and its backward,
//    gelu, softmax, nll loss, batch norm, dropout, ...) become a few Computes.
//  - View: the same storage as another tensor under other sizes, strides and offset, as the
//    graph's metadata records them: views are never copies.
//  - Extern: an op the runtime runs with a library (matmuls, convolutions, attention, the
//    embedding gradient, collectives), or a fallback for an op Kiln has no lowering for.
//
// Tensors that stand for graph values keep the layout their metadata records; others are
// contiguous. Symbols are renamed to their canonical names. A pure function of the graph.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/canon/canonical_graph.h"
#include "compiler/graph/graph.h"
#include "compiler/loop/index_expr.h"
#include "compiler/loop/ir.h"
#include "kiln/v1/graph.pb.h"

namespace kiln::decompose {

struct Tensor {
  graph::DType dtype = graph::DType::kFloat32;
  std::vector<loop::IndexExpr> sizes;
  std::vector<loop::IndexExpr> strides;  // in its storage, in elements
  loop::IndexExpr offset;
  int32_t storage = -1;   // the tensor owning the storage: itself unless a view
  int32_t producer = -1;  // the node that makes it
  std::string name;       // canonical name ("%12", "%12.1", "%12~3" for internal tensors)
};

// How a Compute reads an input: a Load instruction's `iimm` indexes Compute::loads.
struct LoadSite {
  int32_t tensor = -1;
  std::vector<loop::IndexExpr> coords;  // one per tensor dimension, over the Compute's dims
  std::vector<int32_t> dyn;             // per dimension: an i64 SSA value added, or -1
};

struct Compute {
  std::vector<loop::IndexExpr> dims;  // var i ranges over dims[i]
  std::vector<bool> reduced;          // per dim
  std::vector<loop::Inst> body;       // loads use LoadSite `iimm`; no stores
  std::vector<LoadSite> loads;
  int32_t result = -1;                               // SSA value yielded per point
  loop::ReduceKind reduce = loop::ReduceKind::kSum;  // when some dim is reduced
  int32_t reduce_index = -1;                         // arg reductions: the i64 SSA index
  bool store_index = false;  // arg reductions: yield the index, not the value
  // Output dimension d is iteration dimension out_dims[d], or -1 for a kept size-1 dim.
  std::vector<int32_t> out_dims;
};

// An argument of an extern call.
struct CallArg {
  enum class Kind : uint8_t { kTensor, kValue, kList, kNoneTensor };
  Kind kind = Kind::kValue;
  int32_t tensor = -1;
  v1::Argument value;
  std::vector<CallArg> items;
};

struct Node {
  enum class Kind : uint8_t { kInput, kCompute, kView, kExtern };
  Kind kind = Kind::kCompute;
  std::string name;          // canonical name of the graph node it comes from
  std::string stack_trace;   // for diagnostics
  int32_t input_index = -1;  // kInput
  Compute compute;           // kCompute
  int32_t view_of = -1;      // kView: the tensor viewed
  // kExtern.
  std::string op;
  std::vector<CallArg> args;
  std::vector<std::pair<std::string, CallArg>> kwargs;
  bool collective = false;
  bool fallback = false;
  std::string reason;
  int64_t rng_stream = -1;
  std::vector<int32_t> outputs;  // tensors made (one for kInput/kCompute/kView; one per
                                 // result for kExtern, -1 for None)
};

struct Output {
  enum class Kind : uint8_t { kTensor, kSymbol, kNone };
  Kind kind = Kind::kNone;
  int32_t tensor = -1;
  loop::IndexExpr symbol;
};

struct WriteBack {
  int32_t input_index = -1;
  int32_t tensor = -1;
};

struct PrimGraph {
  std::vector<loop::InputDesc> inputs;  // one per graph input
  std::vector<std::string> symbols;     // canonical names, sorted
  std::vector<int64_t> symbol_hints;
  std::vector<Tensor> tensors;
  std::vector<Node> nodes;  // in execution order
  std::vector<Output> outputs;
  std::vector<WriteBack> write_backs;
  int64_t rng_ops = 0;
};

// Decomposes `graph` (nodes in canonical order, names from `canonical`). Ops with no
// decomposition become fallback externs with the reason. INVALID_ARGUMENT, naming the node
// (its name and op) and what disagrees, when a node's recorded output metadata provably
// disagrees with the rank or sizes its op computes from its inputs: the graph is at fault.
// INTERNAL only for other inconsistent metadata.
absl::StatusOr<PrimGraph> Decompose(const graph::Graph& graph,
                                    const canon::CanonicalGraph& canonical);

// Whether Decompose has a rule (lowering, view or extern) for `target`.
bool HasLowering(absl::string_view target);

// Every target HasLowering accepts, sorted. Collectives are accepted by their
// `_c10d_functional.` prefix; the list names those with a known schema.
std::vector<std::string> LoweredOps();

}  // namespace kiln::decompose
