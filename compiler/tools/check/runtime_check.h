#pragma once

// Checks a compiled x86_64 artifact the way a trainer runs it: random inputs made from the
// graph's metadata (at given symbol values), the graph run by the reference interpreter in
// double precision, the artifact run by the client's CpuRuntime (buffers poisoned, extern
// steps native, fallback steps through the interpreter), and every output compared with a
// tolerance per dtype (relative to the output's largest magnitude; exact for integers and
// bools, so dropout masks must match bit for bit), as is every input the plan writes back (a
// batch norm's running statistics) against what the interpreter's copy_ left in it. Graphs
// with bfloat16 or float16 values also run without rounding, and an output that misses the
// tolerance passes if it is as close to that exact value as eager rounding is (compare.h).
//
// Errors (the StatusOr's) are failures to run either side: inputs that cannot be made, an
// artifact the runtime refuses or a step that fails. Outputs that differ are not errors:
// the report says where.

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kiln/v1/artifact.pb.h"
#include "kiln/v1/graph.pb.h"

namespace kiln::check {

// Symbol values by the graph's own symbol names.
using SymbolValues = std::map<std::string, int64_t, std::less<>>;

struct CheckOptions {
  uint64_t input_seed = 1;
  SymbolValues symbols;  // empty: the hints
  uint64_t rng_seed = 1234;
  uint64_t rng_offset = 7;
  // The runtime's threads. Above 1, each launch's range is split among them, so a kernel
  // whose result depends on the split shows up as a mismatch.
  int threads = 1;
  // Multiplies every RelativeTolerance: for whole graphs, whose float32 matmuls feed
  // long chains of ops.
  double tolerance_scale = 1;
};

struct CheckReport {
  bool ok = true;
  std::string message;  // the first mismatch, for people
  int outputs = 0;      // outputs compared
  double worst = 0;     // largest error relative to its tolerance (ok: <= 1)
};

// Tolerance (relative) for a dtype: 1e-5 f32, 1e-2 f16/bf16, 1e-9 f64, 0 for exact types.
double RelativeTolerance(v1::DType dtype);

// CheckOptions::tolerance_scale for whole graphs. They run their matmuls and attention in
// float32 on the runtime (the interpreter in float64): with uniform [-1, 1) weights nanoGPT's
// attention logits reach ~30, and its forward outputs land at up to 2x the 1e-5 per-op
// tolerance; the MLP graphs and nanoGPT's backward stay under 0.1x of it.
inline constexpr double kWholeGraphToleranceScale = 4;

absl::StatusOr<CheckReport> CheckAgainstInterpreter(const v1::Graph& graph,
                                                    const v1::CompiledGraph& artifact,
                                                    const CheckOptions& options = {});

// Symbol values worth checking a graph at: first the hints (an empty map), then the hints
// moved by -1, +1 and +3 (at least 1) where every symbol stays in its range and every
// ShapeEnv guard holds. A graph without symbols, or whose guards do not parse, gets the
// hints only.
std::vector<SymbolValues> GuardedCheckPoints(const v1::Graph& graph);

// Whether the graph itself runs on inputs at `options.symbols`. A model can have limits its
// guards do not state (nanoGPT's position table has block_size rows); past them the
// interpreter, like eager PyTorch, refuses the inputs as INVALID_ARGUMENT, and checking at such
// a point checks nothing.
absl::Status GraphAccepts(const v1::Graph& graph, const CheckOptions& options);

}  // namespace kiln::check
