#pragma once

// The seam between kilnd's compile service and the compiler. The service hands a validated,
// keyed graph to a Compiler and stores what comes back; which compiler that is, is decided
// where kilnd is put together. InProcessCompiler runs kiln::compiler::Compile on the calling
// thread; WorkerCompiler (worker_compiler.h) runs it in supervised worker processes (DESIGN.md,
// "Compile isolation"); tests put a fake here to control how long a compile takes, whether it
// fails and whether it notices cancellation.
//
// An implementation must be thread-safe (the compile pool calls it from several threads at
// once), stop with CANCELLED soon after `context.cancel` is raised, and report its phases
// through `context.on_phase`. Errors are those of kiln::compiler::Compile (compiler/compile.h),
// plus, for a compile that took its process down (a crash, the memory limit), INTERNAL marked
// with MarkCrashedCompile: the same input would do it again, so the service remembers the key.

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "compiler/compile.h"
#include "compiler/graph/graph.h"
#include "kiln/v1/artifact.pb.h"
#include "kiln/v1/compile.pb.h"
#include "kiln/v1/graph.pb.h"

namespace kiln::server {

// One compile. The references stay valid until Compile returns.
struct CompileInput {
  const graph::Graph& graph;          // imported and validated
  const v1::Graph& source;            // what `graph` was imported from
  const v1::CompileOptions& options;  // validated
  const std::string& compile_key;     // recorded in the result
  // The latest deadline of the requests waiting when the compile started. Cancellation
  // (context.cancel) stops a compile; this only tells why it was stopped.
  absl::Time deadline = absl::InfiniteFuture();

  // Whether a cancelled compile was stopped by its deadline. The server's deadline is the
  // client's timeout counted from the request's arrival, so a client that gives up at its own
  // deadline cancels the call a transit time (`kDeadlineSkew` at most, under load) earlier.
  static constexpr absl::Duration kDeadlineSkew = absl::Seconds(1);
  bool StoppedByDeadline() const { return absl::Now() + kDeadlineSkew >= deadline; }
};

class Compiler {
 public:
  virtual ~Compiler() = default;

  virtual absl::StatusOr<v1::CompiledGraph> Compile(const CompileInput& input,
                                                    const compiler::CompileContext& context) = 0;
};

// The compiler linked into kilnd, run on the caller's thread.
class InProcessCompiler final : public Compiler {
 public:
  absl::StatusOr<v1::CompiledGraph> Compile(const CompileInput& input,
                                            const compiler::CompileContext& context) override;
};

// Marks `status` (not OK) as the error of a compile that took its process down.
absl::Status MarkCrashedCompile(absl::Status status);
// Whether `status` was marked so.
bool IsCrashedCompile(const absl::Status& status);

}  // namespace kiln::server
