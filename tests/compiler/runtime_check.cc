#include "tests/compiler/runtime_check.h"

#include <string>
#include <utility>

#include "compiler/codegen/target.h"
#include "compiler/compile.h"
#include "compiler/graph/import.h"
#include "tests/client/runtime/interp_bridge.h"

namespace kiln::testing {

absl::StatusOr<v1::CompiledGraph> CompileForCpu(const v1::Graph& graph) {
  auto g = graph::Import(graph);
  if (!g.ok()) return g.status();
  v1::CompileOptions options;
  options.set_target(std::string(codegen::kTargetX86_64));
  return compiler::Compile(*g, options, "test-key");
}

absl::StatusOr<exec::CheckReport> CheckOnRuntime(const v1::Graph& graph,
                                                 const v1::CompiledGraph& artifact,
                                                 exec::CheckOptions options) {
  options.runner = runtime::testing::RuntimeRunner();
  return exec::CheckAgainstInterpreter(graph, artifact, options);
}

}  // namespace kiln::testing
