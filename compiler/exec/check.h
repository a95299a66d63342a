#pragma once

// Checks a compiled artifact against the reference interpreter: random inputs made from the
// graph's metadata (at given symbol values), the graph run by the interpreter in double
// precision, the artifact run by the in-process executor, and every output compared with a
// tolerance per dtype (relative to the output's largest magnitude; exact for integers and
// bools, so dropout masks must match bit for bit).

#include <cstdint>
#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "kiln/v1/artifact.pb.h"
#include "kiln/v1/graph.pb.h"

namespace kiln::exec {

struct CheckOptions {
  uint64_t input_seed = 1;
  std::map<std::string, int64_t, std::less<>> symbols;  // by the graph's own symbol names
  uint64_t rng_seed = 1234;
  uint64_t rng_offset = 7;
  int threads = 1;
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
