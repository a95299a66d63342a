#pragma once

// The targets Kiln knows, by the names clients put in CompileOptions.target and artifacts
// carry in CodeModule.target. This is the one list of them: a name not here is rejected as
// INVALID_ARGUMENT; a name here compiles when this build registers a backend for it
// (registry.h).

#include <algorithm>
#include <iterator>

#include "absl/strings/string_view.h"

namespace kiln::codegen {

inline constexpr absl::string_view kTargetX86_64 = "x86_64";
inline constexpr absl::string_view kTargetCudaSm90 = "cuda:sm_90";

// Every known target, in the order messages list them.
inline constexpr absl::string_view kKnownTargets[] = {kTargetX86_64, kTargetCudaSm90};

inline bool IsKnownTarget(absl::string_view target) {
  return std::find(std::begin(kKnownTargets), std::end(kKnownTargets), target) !=
         std::end(kKnownTargets);
}

}  // namespace kiln::codegen
