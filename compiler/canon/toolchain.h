#pragma once

// The toolchain fingerprint that goes into every compile key: code from another Kiln,
// LLVM or CUDA version, or for another target architecture, never shares a cache entry.
// Fixed at build time; thread-safe.

#include <string>

#include "absl/strings/string_view.h"

namespace kiln::canon {

struct Toolchain {
  std::string kiln_version;  // "0.1.0"
  std::string llvm_version;  // LLVM_VERSION_STRING of the LLVM Kiln was built against
  std::string cuda_version;  // "13.0" from the CUDA toolkit's cuda.h; "none" without it
};

// The toolchain this binary was built with.
const Toolchain& CurrentToolchain();

// The fingerprint for code generated for `target` ("x86_64", "cuda:sm_90"), as text:
// "kiln 0.1.0; llvm 16.0.6; cuda 13.0; arch x86_64".
std::string ToolchainFingerprint(const Toolchain& toolchain, absl::string_view target);

}  // namespace kiln::canon
