#pragma once

// What the CPU runtime hands to code outside it: the arguments of an extern or fallback
// call as run-time values, and the hooks an embedding trainer supplies for the steps Kiln
// does not run itself (fallback ops, collectives across ranks).

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "client/runtime/tensor.h"
#include "kiln/v1/graph.pb.h"

namespace kiln::runtime {

// Python's None.
struct NoneValue {
  bool operator==(const NoneValue&) const { return true; }
};

// One argument of a call at run time: tensors are views of the run's buffers, symbolic
// integers are already evaluated, constants are as the plan recorded them.
struct CallValue {
  using List = std::vector<CallValue>;
  std::variant<NoneValue, Tensor, int64_t, double, bool, std::string, v1::DType, v1::Device,
               v1::Layout, v1::MemoryFormat, List>
      v;

  bool is_none() const { return std::holds_alternative<NoneValue>(v); }
  const Tensor* tensor() const { return std::get_if<Tensor>(&v); }
};

// A step the runtime cannot run itself: an op Kiln has no lowering for. The hook computes
// `op` (an OpOverload name such as "aten.nonzero.default") on `args`/`kwargs` and writes
// result i into outputs[i]; an undefined outputs[i] means the plan does not use result i.
// Output tensors are preallocated views with the geometry the plan chose.
struct FallbackCall {
  absl::string_view op;
  absl::string_view node;    // canonical name of the graph node, for messages
  absl::string_view reason;  // why the compiler fell back
  // An op that draws random numbers draws them from Philox stream `rng_stream` under
  // `rng_seed` (the run's offset plus the op's number among the graph's RNG ops).
  uint64_t rng_seed = 0;
  uint64_t rng_stream = 0;
  std::vector<CallValue> args;
  std::vector<std::pair<std::string, CallValue>> kwargs;
  std::vector<Tensor> outputs;
};
using FallbackHook = std::function<absl::Status(const FallbackCall&)>;

// A collective across the ranks of a job, performed synchronously by the trainer's process
// group: `op` is "all_reduce", "all_gather_into_tensor", "reduce_scatter_tensor",
// "all_to_all_single" or "broadcast" (coalesced forms arrive as one call per tensor, in
// order); `output` receives the result (it may be `input` itself for an in-place all_reduce).
struct CollectiveCall {
  absl::string_view op;
  absl::string_view reduce_op;  // "sum", "avg", "max", ... (empty for all_gather)
  // Canonical: "pg0", "pg1", ... in order of first use in the graph; the hook maps pgN to
  // the trainer's N-th process group of that graph.
  absl::string_view group_name;
  int64_t group_size = 1;
  int64_t src = 0;  // broadcast: the rank whose input every rank receives
  // all_to_all_single: rows of dim 0 sent to / received from each rank (empty: equal).
  std::vector<int64_t> input_split_sizes, output_split_sizes;
  Tensor input;
  Tensor output;
};
using CollectiveHook = std::function<absl::Status(const CollectiveCall&)>;

}  // namespace kiln::runtime
