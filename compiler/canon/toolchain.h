#pragma once

// The toolchain fingerprint that goes into every compile key: code from another Kiln, another
// compiler build (any change to its sources, compiler_fingerprint.h), another kernel ABI,
// LLVM or CUDA version, or for another target or CPU level, never shares a cache entry.
// Fixed at build time; thread-safe.

#include <functional>
#include <map>
#include <string>

#include "absl/strings/string_view.h"

namespace kiln::canon {

struct Toolchain {
  std::string kiln_version;          // kKilnVersion ("0.1.0")
  std::string compiler_fingerprint;  // kCompilerFingerprint: the compiler's sources
  int kernel_abi_version = 0;        // kKernelAbiVersion of proto/kernel_abi.h
  std::string llvm_version;          // LLVM_VERSION_STRING of the LLVM Kiln was built against
  std::string cuda_version;          // "13.0" from the CUDA toolkit's cuda.h; "none" without it
  // For each target this build has a backend for: what the backend says about its code
  // (Backend::KeyFacts: architecture, CPU level, code-changing options).
  std::map<std::string, std::string, std::less<>> backends;
};

// The toolchain this binary was built with.
const Toolchain& CurrentToolchain();

// The fingerprint for code generated for `target`, as text: "kiln 0.1.0; compiler <sha256>;
// kernel abi 1; llvm 16.0.6; cuda 13.0; target x86_64 (x86_64-unknown-linux-gnu, cpu
// x86-64-v3, O2)". A target without a backend says "(no backend)".
std::string ToolchainFingerprint(const Toolchain& toolchain, absl::string_view target);

}  // namespace kiln::canon
