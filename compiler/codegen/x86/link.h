#pragma once

// Links x86-64 kernel objects into one shared object with LLD's ELF linker, in process (no
// linker executable is started): position-independent, no build id, non-executable stack,
// bound at load time, soname libkiln_kernels.so. The objects are linked in the order given,
// so the bytes depend on nothing else. Thread-safe: LLD keeps global state, so links run one
// at a time. INTERNAL when a temporary file cannot be written or the link fails (with LLD's
// messages).

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace kiln::codegen::x86 {

absl::StatusOr<std::string> LinkSharedObject(const std::vector<std::string>& objects);

}  // namespace kiln::codegen::x86
