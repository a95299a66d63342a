#pragma once

// Kiln's reference interpreter: runs a kiln.v1.Graph node by node on the CPU in double
// precision, rounding every result to its dtype. It is the oracle every compiler test
// compares against, so it shares nothing with the compiler's IR: it reads kiln.v1.Graph
// directly and implements each aten op naively from PyTorch's definition.
//
// Run is a pure function of the graph, the inputs and the options (dropout draws from
// Kiln's Philox streams, see philox.h), and is safe to call from several threads at once.
// Tensor inputs are used in place: an op that mutates an input (copy_) writes through to
// the caller's tensor, as the trainer runtime's write-back would.
//
// Errors: an unsupported op is UNIMPLEMENTED naming the node and its target; bad
// arguments, shape mismatches and results that disagree with the node's metadata are
// INVALID_ARGUMENT naming the node.

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "compiler/interp/tensor.h"
#include "kiln/v1/graph.pb.h"

namespace kiln::interp {

// Python's None (an absent optional value, or an output the graph does not produce).
struct None {
  bool operator==(const None&) const { return true; }
};

// A value flowing through a graph: a tensor, a symbolic int/float/bool's value, or None.
using Value = std::variant<None, Tensor, int64_t, double, bool>;

// An argument of an op as the interpreter hands it over: a value, or one of the constants
// a schema takes (strings, dtypes, devices, layouts, memory formats) or a list of them.
struct Arg {
  using List = std::vector<Arg>;
  std::variant<None, Tensor, int64_t, double, bool, std::string, v1::DType, v1::Device, v1::Layout,
               v1::MemoryFormat, List>
      v;

  Arg() : v(None{}) {}
  Arg(None) : v(None{}) {}
  Arg(Tensor t) : v(std::move(t)) {}
  Arg(int i) : v(int64_t{i}) {}
  Arg(int64_t i) : v(i) {}
  Arg(double d) : v(d) {}
  Arg(bool b) : v(b) {}
  Arg(const char* s) : v(std::string(s)) {}
  Arg(std::string s) : v(std::move(s)) {}
  Arg(v1::DType d) : v(d) {}
  Arg(v1::MemoryFormat m) : v(m) {}
  Arg(List l) : v(std::move(l)) {}
  Arg(const Value& value);
  // A list of ints (sizes, dims).
  static Arg Ints(std::vector<int64_t> ints);
  static Arg Bools(std::vector<bool> bools);
  static Arg Tensors(std::vector<Tensor> tensors);
  static Arg FromValue(const Value& value);
};

struct RunOptions {
  // Values of the graph's symbols ("s77" -> 16). Symbols not given here are bound from
  // symbolic-int inputs and from input tensor sizes whose metadata is a bare symbol.
  std::map<std::string, int64_t, std::less<>> symbols;
  // Philox seed and the run's stream offset (see philox.h).
  uint64_t rng_seed = 0;
  uint64_t rng_offset = 0;
  // Collectives are the identity for a world size of 1; larger ones are UNIMPLEMENTED.
  int64_t world_size = 1;
  // When false, floating results keep full double precision instead of being rounded to
  // their dtype: the mode in which finite differences check gradients.
  bool round_to_dtype = true;
  // When true, node results are checked against the nodes' metadata (sizes and dtype) and
  // fresh (non-view) results are laid out with the metadata's strides.
  bool follow_meta = true;
};

// Runs `graph` on `inputs` (one per GraphInput, in order) and returns the values of its
// output, flattened in order (None entries kept).
absl::StatusOr<std::vector<Value>> Run(const v1::Graph& graph, absl::Span<const Value> inputs,
                                       const RunOptions& options = {});

// A graph or plan argument as an op argument: constants (scalars, strings, dtypes, devices,
// layouts, memory formats, None) convert here, lists item by item; anything else (a node
// reference, a symbolic value) goes to `other`.
absl::StatusOr<Arg> ArgFromArgument(
    const v1::Argument& a, const std::function<absl::StatusOr<Arg>(const v1::Argument&)>& other);

// Runs one op by its OpOverload name ("aten.add.Tensor") on the given arguments; returns
// its results (one entry for a single result, one per element for a tuple or list).
// `rng_stream_index` is the op's number among the graph's RNG ops (see philox.h).
absl::StatusOr<std::vector<Value>> RunOp(absl::string_view target, std::vector<Arg> args,
                                         std::vector<std::pair<std::string, Arg>> kwargs = {},
                                         const RunOptions& options = {},
                                         uint64_t rng_stream_index = 0);

// Whether the interpreter implements `target`.
bool IsSupportedOp(absl::string_view target);
// Every implemented OpOverload name, sorted.
std::vector<std::string> SupportedOps();
// The number of RNG op nodes in `graph`: how far one run advances the RNG offset.
int64_t RngOpCount(const v1::Graph& graph);

}  // namespace kiln::interp
