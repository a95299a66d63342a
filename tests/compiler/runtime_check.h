#pragma once

// The compiler's tests compile graphs for x86_64 and check the artifacts the way a trainer
// runs them: on the client CPU runtime (client/runtime), against the reference interpreter.

#include "absl/status/statusor.h"
#include "compiler/exec/check.h"
#include "kiln/v1/artifact.pb.h"
#include "kiln/v1/graph.pb.h"

namespace kiln::testing {

// Imports `graph` and compiles it for x86_64.
absl::StatusOr<v1::CompiledGraph> CompileForCpu(const v1::Graph& graph);

// exec::CheckAgainstInterpreter with the artifact run by a CpuRuntime (buffers poisoned,
// fallback steps through the interpreter).
absl::StatusOr<exec::CheckReport> CheckOnRuntime(const v1::Graph& graph,
                                                 const v1::CompiledGraph& artifact,
                                                 exec::CheckOptions options = {});

}  // namespace kiln::testing
