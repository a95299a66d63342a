#include "tests/compiler/runtime_check.h"

#include <utility>

#include "tests/client/runtime/interp_bridge.h"

namespace kiln::testing {

absl::StatusOr<exec::CheckReport> CheckOnRuntime(const v1::Graph& graph,
                                                 const v1::CompiledGraph& artifact,
                                                 exec::CheckOptions options) {
  options.runner = runtime::testing::RuntimeRunner();
  return exec::CheckAgainstInterpreter(graph, artifact, options);
}

}  // namespace kiln::testing
