#pragma once

// Checks a compiled artifact against the reference interpreter: random inputs made from the
// graph's metadata (at given symbol values), the graph run by the interpreter in double
// precision, the artifact run by a runner (the in-process executor unless the caller brings
// another, such as the client runtime in tests), and every output compared with a tolerance
// per dtype (relative to the output's largest magnitude; exact for integers and bools, so
// dropout masks must match bit for bit).

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "compiler/exec/executor.h"
#include "compiler/interp/interpreter.h"
#include "kiln/v1/artifact.pb.h"
#include "kiln/v1/graph.pb.h"

namespace kiln::exec {

// Runs an artifact on interpreter inputs (which it may write, as write-back steps do) and
// returns its outputs as interpreter values. `Execute` is one.
using Runner = std::function<absl::StatusOr<std::vector<interp::Value>>(
    const v1::CompiledGraph& artifact, absl::Span<const interp::Value> inputs,
    const ExecOptions& options)>;

struct CheckOptions {
  uint64_t input_seed = 1;
  std::map<std::string, int64_t, std::less<>> symbols;  // by the graph's own symbol names
  uint64_t rng_seed = 1234;
  uint64_t rng_offset = 7;
  int threads = 1;
  Runner runner;  // empty: Execute
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

absl::StatusOr<CheckReport> CheckAgainstInterpreter(const v1::Graph& graph,
                                                    const v1::CompiledGraph& artifact,
                                                    const CheckOptions& options = {});

}  // namespace kiln::exec
