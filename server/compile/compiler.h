#pragma once

// The seam between kilnd's compile service and the compiler. The service hands a validated,
// keyed graph to a Compiler and stores what comes back; which compiler that is, is decided
// where kilnd is put together. InProcessCompiler runs kiln::compiler::Compile on the calling
// thread; tests put a fake here to control how long a compile takes, whether it fails and
// whether it notices cancellation; compiles in supervised worker processes (DESIGN.md,
// "Compile isolation") will be another implementation.
//
// An implementation must be thread-safe (the compile pool calls it from several threads at
// once), stop with CANCELLED soon after `context.cancel` is raised, and report its phases
// through `context.on_phase`. Errors are those of kiln::compiler::Compile (compiler/compile.h).

#include <string>

#include "absl/status/statusor.h"
#include "compiler/compile.h"
#include "compiler/graph/graph.h"
#include "kiln/v1/artifact.pb.h"
#include "kiln/v1/compile.pb.h"

namespace kiln::server {

class Compiler {
 public:
  virtual ~Compiler() = default;

  // Compiles `graph` for `options`; `compile_key` is recorded in the result.
  virtual absl::StatusOr<v1::CompiledGraph> Compile(const graph::Graph& graph,
                                                    const v1::CompileOptions& options,
                                                    const std::string& compile_key,
                                                    const compiler::CompileContext& context) = 0;
};

// The compiler linked into kilnd, run on the caller's thread.
class InProcessCompiler final : public Compiler {
 public:
  absl::StatusOr<v1::CompiledGraph> Compile(const graph::Graph& graph,
                                            const v1::CompileOptions& options,
                                            const std::string& compile_key,
                                            const compiler::CompileContext& context) override;
};

}  // namespace kiln::server
