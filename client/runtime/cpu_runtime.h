#pragma once

// Kiln's CPU runtime: executes a CompiledGraph for the x86_64 target. Load verifies and
// loads the graph's code modules, resolves every kernel entry and parses every symbolic
// expression once; Run binds the symbols from the inputs, lays out the buffers (one
// 64-byte aligned arena for intermediates and workspaces, fresh memory for outputs, the
// caller's memory for inputs), runs the plan's steps in order and returns the outputs.
//
//   auto runtime = CpuRuntime::Load(compiled);         // StatusOr<unique_ptr<CpuRuntime>>
//   auto outputs = (*runtime)->Run({x, w}, options);    // StatusOr<vector<Tensor>>
//
// Inputs: one Tensor per graph input in calling order; a symbolic-int input is a 0-d int64
// tensor (Tensor::Scalar). The runtime reads them, and writes into them only where the plan
// has a write-back step (a mutated input). Outputs own their memory, except outputs that
// alias an input: those are views of the caller's tensor (and share its owner, if any).
// A symbolic-scalar output is a 0-d int64 tensor; a None output is an undefined Tensor.
//
// Extern steps run natively (see extern_ops.h); fallback steps and collectives over more
// than one rank go to hooks in RunOptions. As artifact.proto says, an extern/fallback output
// TensorView with buffer -1 marks a result the plan drops, and an input buffer starts at the
// input tensor's first element; inputs are checked against CompiledGraph.inputs when the
// artifact has them (otherwise against the input buffers' dtypes and sizes only).
//
// Thread-safety: a CpuRuntime is immutable after Load; Run may be called from several
// threads at once (each run has its own buffers; concurrent runs share the thread pool,
// and a run that finds it busy runs its loops on its own thread).
//
// Errors: Load gives INVALID_ARGUMENT for a malformed plan (naming the step, buffer or
// kernel), DATA_LOSS for a module whose bytes do not match its digest, NOT_FOUND for a
// missing kernel entry (naming module and kernel). Run gives INVALID_ARGUMENT for inputs
// that do not fit the plan (naming the input), FAILED_PRECONDITION when a needed hook is
// missing, and passes on what extern ops and hooks return, prefixed with the step.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "client/runtime/call.h"
#include "client/runtime/tensor.h"
#include "kiln/v1/artifact.pb.h"

namespace kiln::runtime {

class CpuRuntime {
 public:
  struct Options {
    // Threads for kernels and extern ops, the calling thread included; <= 0: one per
    // hardware thread.
    int threads = 0;
  };

  struct RunOptions {
    // The counter-based RNG's seed and offset, passed to kernels that take them.
    uint64_t rng_seed = 0;
    uint64_t rng_offset = 0;
    // Runs fallback steps; required when the plan has any.
    FallbackHook fallback;
    // Performs collectives when world_size (or a collective's group size) is above 1.
    CollectiveHook collective;
    int64_t world_size = 1;
    // Threads this run may use, at most the runtime's; <= 0: all of them.
    int threads = 0;
    // Fills the arena and output buffers with a NaN pattern before the run and freed
    // buffers at their free step, so a plan that reads memory it never wrote, or reads a
    // buffer after freeing it, produces NaNs instead of plausible numbers. For tests.
    bool poison = false;
  };

  ~CpuRuntime();
  CpuRuntime(const CpuRuntime&) = delete;
  CpuRuntime& operator=(const CpuRuntime&) = delete;

  static absl::StatusOr<std::unique_ptr<CpuRuntime>> Load(const v1::CompiledGraph& graph,
                                                          const Options& options);
  static absl::StatusOr<std::unique_ptr<CpuRuntime>> Load(const v1::CompiledGraph& graph) {
    return Load(graph, Options());
  }

  absl::StatusOr<std::vector<Tensor>> Run(absl::Span<const Tensor> inputs,
                                          const RunOptions& options) const;
  absl::StatusOr<std::vector<Tensor>> Run(absl::Span<const Tensor> inputs) const {
    return Run(inputs, RunOptions());
  }

  int num_inputs() const;
  int num_outputs() const;

  struct Plan;  // the loaded plan, internal (cpu_plan.h)

 private:
  explicit CpuRuntime(std::unique_ptr<Plan> plan);
  std::unique_ptr<Plan> plan_;
};

}  // namespace kiln::runtime
