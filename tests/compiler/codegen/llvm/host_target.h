#pragma once

// The build host's LLVM target (x86-64, as every machine that builds Kiln), for tests of the
// target-neutral LLVM plumbing: described here rather than taken from the x86-64 code
// generator, so that these tests do not depend on its choices.

#include <string_view>

#include "compiler/codegen/llvm/target_machine.h"
#include "llvm/Support/TargetSelect.h"

namespace kiln::testing {

inline codegen::TargetDescription HostTarget(std::string_view features = "") {
  codegen::TargetDescription target;
  target.triple = "x86_64-unknown-linux-gnu";
  target.cpu = "x86-64-v3";
  target.features = features;
  target.relocation = llvm::Reloc::PIC_;
  target.initialize = [] {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
  };
  return target;
}

}  // namespace kiln::testing
