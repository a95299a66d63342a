#pragma once

// A small in-process executor for x86-64 artifacts, for `kilnd compile --check` and the
// compiler's tests: it loads the artifact's shared object (from memory, through a memfd),
// allocates buffers and the arena exactly as the artifact describes them, launches kernels
// with the kernel ABI (splitting each launch's range into several pieces, so kernels that
// depend on the split fail), runs extern and fallback steps through the reference
// interpreter, applies write-backs, and returns the outputs as interpreter values.
//
// It is not the client runtime (client/runtime): it exists so the compiler can check its
// own output without linking the client. Buffers are poisoned (all bytes 0xFF: NaN for
// floats, -1 for integers) when allocated and when freed, so elements nobody wrote and reads
// after a free show up as mismatches.

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "compiler/interp/interpreter.h"
#include "kiln/v1/artifact.pb.h"

namespace kiln::exec {

// Where a run spent its time.
struct ExecStats {
  double kernel_ms = 0;  // launches of generated kernels
  double extern_ms = 0;  // extern and fallback steps (through the interpreter)
};

struct ExecOptions {
  uint64_t rng_seed = 0;
  uint64_t rng_offset = 0;
  int pieces = 3;              // each launch's [0, grid) is split into this many ranges
  int threads = 1;             // ranges run on this many threads
  ExecStats* stats = nullptr;  // filled when set
};

// Runs `artifact` on `inputs` (one per graph input, as interp::MakeRandomInputs makes them).
absl::StatusOr<std::vector<interp::Value>> Execute(const v1::CompiledGraph& artifact,
                                                   absl::Span<const interp::Value> inputs,
                                                   const ExecOptions& options = {});

}  // namespace kiln::exec
