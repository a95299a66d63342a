#pragma once

// A BackendRegistry holds at most one Backend per known target and answers which backend
// compiles a target. BuiltinBackends() is the registry of the backends this build of Kiln
// has; tests build registries of their own. Lookups are thread-safe once registration is
// done.

#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "compiler/codegen/backend.h"
#include "compiler/codegen/target.h"

namespace kiln::codegen {

class BackendRegistry {
 public:
  // Adds `backend` under its target. INVALID_ARGUMENT when the target is not a known one
  // (target.h), ALREADY_EXISTS when the target has a backend already.
  absl::Status Register(std::unique_ptr<Backend> backend);

  // The backend for `target`, or nullptr.
  const Backend* Find(absl::string_view target) const;

  // The backend for `target`. INVALID_ARGUMENT for a name that is not a known target (the
  // message lists them); UNIMPLEMENTED "no backend registered for target ..." for a known
  // target without one in this registry (the message lists those it has).
  absl::StatusOr<const Backend*> For(absl::string_view target) const;

  // The targets with a backend, in registration order.
  std::vector<absl::string_view> targets() const;

 private:
  std::vector<std::unique_ptr<Backend>> backends_;
};

// The backends built into this binary: x86_64, and cuda:sm_90 where the build found CUDA's
// nvJitLink and this host loads it (codegen/nvptx/nvjitlink.h). Built on first use.
const BackendRegistry& BuiltinBackends();

}  // namespace kiln::codegen
