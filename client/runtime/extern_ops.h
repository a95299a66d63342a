#pragma once

// The ops the CPU runtime implements natively for ExternSteps: exactly the op registry's
// extern ops (proto/ops/registry.h): matrix products, convolutions, attention, the embedding
// gradient and collectives. Each reads its arguments by schema position or
// keyword, as PyTorch's schemas name them, and writes result i into outputs[i] (skipping
// undefined outputs). Results do not depend on the number of threads.
//
// Errors are INVALID_ARGUMENT naming the op and the argument at fault, UNIMPLEMENTED for
// a feature outside the runtime's scope (dropout in attention, an unsupported dtype), and
// FAILED_PRECONDITION for a collective across ranks without a collective hook.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "client/runtime/call.h"
#include "proto/base/thread_pool.h"

namespace kiln::runtime {

// What a call needs from the run besides its arguments.
struct ExternContext {
  ThreadPool* pool = nullptr;  // required
  int max_threads = 0;         // <= 0: the whole pool
  uint64_t rng_seed = 0;
  uint64_t rng_offset = 0;  // the call's Philox stream: the run's offset plus the op's number
  int64_t world_size = 1;
  const CollectiveHook* collective = nullptr;  // may be null or empty
};

struct ExternCall {
  absl::string_view op;
  absl::Span<const CallValue> args;
  absl::Span<const std::pair<std::string, CallValue>> kwargs;
  absl::Span<const Tensor> outputs;
  const ExternContext* context = nullptr;
};

// Runs `call`. UNIMPLEMENTED when the op is not one the runtime implements.
absl::Status RunExternOp(const ExternCall& call);
// Whether RunExternOp implements `op`.
bool IsExternOpSupported(absl::string_view op);
// Every op RunExternOp implements, sorted.
std::vector<std::string> SupportedExternOps();

}  // namespace kiln::runtime
