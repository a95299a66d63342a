#pragma once

// Plan: the fused loop program turned into the artifact's execution plan. Fixes kernel names
// and parameter lists, launch geometry (as the target's backend scheduled each kernel),
// buffer kinds (inputs, outputs, arena intermediates),
// buffer liveness with frees after last use, arena offsets with reuse (expressions over the
// symbols when sizes are symbolic), extern and fallback steps with strided views, input
// write-backs, output bindings (aliasing inputs or earlier outputs where they view them),
// where the runtime reads each symbol, the CUDA-graph analysis and the summary. Everything
// except code modules, what code generation tells about each kernel (its module, vector
// width) and the decision digest. A pure function of its input.

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/codegen/backend.h"
#include "compiler/loop/ir.h"
#include "kiln/v1/artifact.pb.h"

namespace kiln::plan {

struct PlanOptions {
  std::string target;  // recorded in the artifact
  int32_t graph_nodes = 0;
};

// Fills everything of a CompiledGraph but `modules`, `compile_key`, `guards`,
// `decision_digest` and the kernels' code facts (their module and entry, which replaces the
// name: codegen/backend.h). Kernel i of the result is program.kernels[i] named "kiln_k<i>",
// launched as schedules[i] says. INVALID_ARGUMENT when
// there is not one schedule per kernel; FAILED_PRECONDITION when a symbol cannot be read from
// any input.
absl::StatusOr<v1::CompiledGraph> Plan(const loop::Program& program,
                                       const std::vector<codegen::KernelSchedule>& schedules,
                                       const PlanOptions& options);

// The parameters of a kernel in calling order: the buffers it touches (by index), then the
// symbols it reads (by id), then the RNG seed and offset when it draws random numbers.
struct KernelParams {
  std::vector<int32_t> buffers;
  std::vector<int32_t> symbols;
  bool rng = false;
};
KernelParams ParamsOf(const loop::Kernel& kernel);

// SymInt of an IndexExpr over the program's symbols.
v1::SymInt ToSymInt(const loop::IndexExpr& e, const std::vector<std::string>& symbols);

}  // namespace kiln::plan
