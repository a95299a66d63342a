// The backends a Kiln build has: a new target's backend is registered here. cuda:sm_90 is
// built where the CUDA toolkit's nvJitLink and libdevice are (KILN_HAVE_CUDA), and registered
// where nvJitLink loads.

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>

#include "compiler/codegen/registry.h"
#include "compiler/codegen/x86/backend.h"

#ifdef KILN_HAVE_CUDA
#include "compiler/codegen/nvptx/backend.h"
#include "compiler/codegen/nvptx/nvjitlink.h"
#endif

namespace kiln::codegen {

const BackendRegistry& BuiltinBackends() {
  static const BackendRegistry* registry = [] {
    auto* r = new BackendRegistry();
    auto add = [r](std::unique_ptr<Backend> backend) {
      // Only a mistake in this list fails: a backend for an unknown or repeated target.
      if (absl::Status s = r->Register(std::move(backend)); !s.ok()) {
        std::fprintf(stderr, "kiln: %s\n", std::string(s.message()).c_str());
        std::abort();
      }
    };
    add(x86::NewBackend());
#ifdef KILN_HAVE_CUDA
    // Without nvJitLink on this host (it is loaded at run time) cuda:sm_90 has no backend.
    if (nvptx::NvJitLinkAvailable().ok()) add(nvptx::NewBackend());
#endif
    return r;
  }();
  return *registry;
}

}  // namespace kiln::codegen
