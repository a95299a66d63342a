#include "server/compile/compiler.h"

namespace kiln::server {

absl::StatusOr<v1::CompiledGraph> InProcessCompiler::Compile(
    const graph::Graph& graph, const v1::CompileOptions& options, const std::string& compile_key,
    const compiler::CompileContext& context) {
  return compiler::Compile(graph, options, compile_key, context);
}

}  // namespace kiln::server
