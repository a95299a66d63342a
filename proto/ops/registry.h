#pragma once

// The ops Kiln knows: one entry per OpOverload target ("aten.addmm.default") with its schema
// and its traits, the facts every phase used to keep in lists of its own (which ops are
// views, draw random numbers, run as library calls, are collectives, keep their order).
// Import checks calls against the schemas, canonicalization keeps ordered ops in order,
// decompose turns extern ops into extern steps, the interpreter and the runtimes number
// the random draws, and the runtime implements exactly the extern ops listed here. Adding
// an op is one entry in the family file that fits it (see op_table.h).
//
// The table is built once, on first use, and is immutable afterwards: lookups are
// thread-safe and return pointers that live for the process.

#include <optional>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "proto/ops/op_schema.h"

namespace kiln::ops {

// Where a functional collective keeps its arguments (parameter indices, -1 where the op
// takes no such argument), read from its schema.
struct CollectiveLayout {
  // The collective as process groups name it: "all_reduce", "all_gather_into_tensor",
  // "reduce_scatter_tensor", "all_to_all_single", "broadcast", "wait_tensor".
  std::string kind;
  bool coalesced = false;  // `inputs` is a list, run one tensor after the other
  int input = -1;          // `input`, `inputs` or `tensor`
  int reduce_op = -1;
  int group_size = -1;
  int group_name = -1;
  int src = -1;  // broadcast: the rank whose tensor every rank receives
  int output_split_sizes = -1;
  int input_split_sizes = -1;
};

// Where a scaled-dot-product attention op keeps its arguments and results (indices, -1
// where the op has no such one), read from its schema: the efficient and cuDNN forms put
// them in different places, and the compiler's interpreter and the runtime read both.
struct AttentionLayout {
  bool backward = false;
  // Parameters.
  int query = -1, key = -1, value = -1, attn_bias = -1, dropout_p = -1, is_causal = -1;
  int scale = -1;
  int compute_log_sumexp = -1;  // forward
  int grad_out = -1, out = -1, logsumexp = -1, philox_seed = -1, philox_offset = -1;
  int grad_input_mask = -1;  // backward
  // Results of the forward op.
  int result_logsumexp = -1, result_philox_seed = -1, result_philox_offset = -1;
  int result_max_q = -1, result_max_k = -1;
};

struct Op {
  OpSchema schema;

  // Elementwise over its (broadcast) tensor arguments: one result element per position.
  bool pointwise = false;
  // Reduces dims of its input (sum, amax, var, ...).
  bool reduction = false;
  // The results view the storage of parameter `view_of` (-1: fresh results). Within its
  // elements, except for ops like as_strided that may reach anywhere in the storage.
  int view_of = -1;
  bool view_within_base = false;
  // The runtime runs it with a library (matmuls, convolution, attention, collectives): the
  // compiler emits an extern step for it, and every runtime implements it.
  bool extern_call = false;
  // Decomposed (a library call and an epilogue that fuses with its neighbours), except where
  // its result is stored anyway: then the compiler emits an extern step for the whole op
  // (addmm, whose bias the library adds as it writes), so every runtime implements it too.
  bool extern_when_stored = false;
  // A functional collective over a process group (never reordered, duplicated or removed).
  std::optional<CollectiveLayout> collective;
  // Scaled-dot-product attention.
  std::optional<AttentionLayout> attention;
  // Draws random numbers: each call takes the next Philox stream of the graph.
  bool random = false;
  // The parameters the op writes (`Tensor(a!)` in its schema).
  std::vector<int> mutated;
  // A CUDA graph may capture it (collectives need a capture-safe process group).
  bool capture_safe = true;
  // Its position relative to other ordered ops is part of its meaning: random draws,
  // collectives and mutation. Derived, never declared.
  bool ordered = false;

  const std::string& target() const { return schema.target; }
  bool is_view() const { return view_of >= 0; }
};

// The entry of `target`, or nullptr when Kiln does not know the op.
const Op* FindOp(absl::string_view target);

// Every entry, sorted by target.
absl::Span<const Op* const> AllOps();

// The targets of the entries `pred` accepts, sorted.
std::vector<std::string> TargetsWhere(absl::FunctionRef<bool(const Op&)> pred);

// Trait queries by target; an unknown op has none of these traits, except as noted.
bool IsView(absl::string_view target);
bool IsExtern(absl::string_view target);
// IsExtern, or an extern step where its result is stored anyway (Op::extern_when_stored):
// what a runtime must implement.
bool MayRunAsExtern(absl::string_view target);
bool DrawsRandom(absl::string_view target);
// Also every op of the functional-collectives namespace Kiln has no entry for: whatever it
// is, it talks to other ranks.
bool IsCollective(absl::string_view target);
// Unknown ops are ordered: they may draw, communicate or mutate.
bool IsOrdered(absl::string_view target);
// Unknown collectives are not capture-safe; other unknown ops are (as far as the op goes:
// they run as fallback steps, which block capture on their own).
bool IsCaptureSafe(absl::string_view target);

}  // namespace kiln::ops
