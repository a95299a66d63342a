#include "server/compile/compiler.h"

#include <utility>

namespace kiln::server {
namespace {

constexpr char kCrashedCompileUrl[] = "type.kiln.dev/crashed-compile";

}  // namespace

absl::StatusOr<v1::CompiledGraph> InProcessCompiler::Compile(
    const CompileInput& input, const compiler::CompileContext& context) {
  return compiler::Compile(input.graph, input.options, input.compile_key, context);
}

absl::Status MarkCrashedCompile(absl::Status status) {
  status.SetPayload(kCrashedCompileUrl, absl::Cord("1"));
  return status;
}

bool IsCrashedCompile(const absl::Status& status) {
  return status.GetPayload(kCrashedCompileUrl).has_value();
}

}  // namespace kiln::server
