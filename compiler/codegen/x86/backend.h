#pragma once

// The x86-64 backend, target "x86_64": every kernel becomes a function of the CPU entry ABI
// (proto/kernel_abi.h) in one shared object (codegen.h), launched over the outer range that
// launch.h describes.

#include <memory>

#include "compiler/codegen/backend.h"

namespace kiln::codegen::x86 {

std::unique_ptr<codegen::Backend> NewBackend();

}  // namespace kiln::codegen::x86
