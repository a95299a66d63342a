#pragma once

// The compiler's entry point: a validated graph and its options in, a CompiledGraph out.
// Phases run in order (decompose, lower, fuse, plan, codegen, cudagraph analysis) and each
// is a function of the previous phase's output, so the same graph and options always give
// the same bytes. The target's backend (codegen/backend.h) schedules the kernels for the plan
// and generates their code. Between phases the compile checks `cancel` and stops with CANCELLED.
// Thread-safe: independent compiles may run concurrently.

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "compiler/codegen/registry.h"
#include "compiler/graph/graph.h"
#include "compiler/loop/ir.h"
#include "kiln/v1/artifact.pb.h"
#include "kiln/v1/compile.pb.h"

namespace kiln::compiler {

struct CompileContext {
  // Raised by the caller when nobody wants the result any more.
  const std::atomic<bool>* cancel = nullptr;
  // Told about each phase as it finishes (name, start, end): for traces and metrics.
  std::function<void(absl::string_view phase, absl::Time start, absl::Time end)> on_phase;
  // Where the target's backend comes from; nullptr: codegen::BuiltinBackends().
  const codegen::BackendRegistry* backends = nullptr;
  // Shown the loop program after each phase that makes one (lower, pad, fuse, split, narrow,
  // coalesce, specialize): for tools that print what the compiler decided (kilnc --dump-loop).
  std::function<void(absl::string_view phase, const loop::Program& program)> on_program;
};

// Compiles `graph` for `options.target()` (a name of codegen/target.h) with that target's
// backend. `compile_key` is recorded in the result. An op without a lowering becomes a
// fallback step, so every valid graph compiles; errors are INVALID_ARGUMENT (bad options, an
// unknown target, a node whose metadata disagrees with what its op computes), UNIMPLEMENTED (no
// backend registered for the target), FAILED_PRECONDITION (require_cudagraph and the plan is not
// capturable, with the reasons), CANCELLED, or INTERNAL naming the phase.
absl::StatusOr<v1::CompiledGraph> Compile(const graph::Graph& graph,
                                          const v1::CompileOptions& options,
                                          const std::string& compile_key,
                                          const CompileContext& context = {});

}  // namespace kiln::compiler
