#pragma once

// A Compiler for tests of what stands in front of the compiler (single flight, the compile
// pool, deadlines, cancellation, rendezvous): it compiles nothing, so a test decides exactly
// when a compile finishes and how. Its artifacts are small and depend on the compile key only,
// so equal keys give equal bytes as with the real compiler.
//
// Hold() makes compiles that start from then on wait until Release(); a compile that is held
// stops with CANCELLED as soon as its cancel flag is raised. FailWith makes every compile fail.
// Thread-safe.

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "proto/base/sync.h"
#include "server/compile/compiler.h"

namespace kiln::testing {

class FakeCompiler final : public server::Compiler {
 public:
  absl::StatusOr<v1::CompiledGraph> Compile(const server::CompileInput& input,
                                            const compiler::CompileContext& context) override;

  void Hold();
  void Release();
  // Every compile from now on returns `status` (OK: compiles succeed again).
  void FailWith(absl::Status status);

  // Compiles started so far, and those that stopped because they were cancelled.
  int64_t started() const;
  int64_t cancelled() const;
  // Blocks until `n` compiles have started, or `timeout` passes; whether they had.
  bool WaitForStarted(int64_t n, absl::Duration timeout = absl::Seconds(30)) const;
  bool WaitForCancelled(int64_t n, absl::Duration timeout = absl::Seconds(30)) const;

 private:
  mutable Mutex mu_;
  mutable CondVar changed_;
  bool held_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status failure_ ABSL_GUARDED_BY(mu_);
  int64_t started_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t cancelled_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace kiln::testing
