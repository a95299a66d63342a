#pragma once

// What the LLVM code generators (x86-64, sm_90) take from their caller: the optimization
// level, whether to return the optimized IR, and how many threads compile kernels. No option
// changes the bytes but the optimization level, which is part of a backend's key facts.

#include "compiler/codegen/backend.h"

namespace kiln::codegen {

struct CodegenOptions {
  int opt_level = 2;          // 0..3
  bool emit_llvm_ir = false;  // also return the optimized IR text (for tests and debugging)
  // Kernels compile in parallel on this many threads; <= 0: one per hardware thread. The
  // bytes do not depend on it.
  int threads = 0;
};

// The options that a backend's Generate asks for, at the default optimization level.
inline CodegenOptions CodegenOptionsFor(const GenerateOptions& options) {
  CodegenOptions out;
  out.emit_llvm_ir = options.emit_llvm_ir;
  out.threads = options.threads;
  return out;
}

}  // namespace kiln::codegen
