#pragma once

// x86-64 code generation through LLVM 16: every kernel of a loop program is emitted by the
// target-neutral kernel emitter (codegen/llvm) as an exported function of the CPU entry ABI
// (kernel_abi.h), optimized with LLVM's O2 pipeline (loops written so the vectorizer takes
// them; reductions are the only place where reassociation is allowed), emitted as an object
// for a baseline CPU and linked in process by LLD (link.h) into a shared object whose only
// undefined symbols are libc/libm functions (checked: anything else is INTERNAL). No compiler
// or linker process is started.
//
// Target: x86-64-v3 (Haswell and later: AVX2, FMA, F16C, BMI2), the baseline of every trainer
// host Kiln serves; F16C gives half-precision conversions without runtime helpers. FMA
// contraction is never enabled, so results match PyTorch's separate multiply and add.
//
// Thread-safe: each call builds its own LLVM context; the in-process linker is serialized.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/codegen/llvm/codegen_options.h"
#include "compiler/loop/ir.h"

namespace kiln::codegen::x86 {

inline constexpr char kTargetCpu[] = "x86-64-v3";
inline constexpr char kTargetTriple[] = "x86_64-unknown-linux-gnu";

struct CodegenResult {
  std::string shared_object;           // ELF bytes
  std::string llvm_ir;                 // when asked for
  std::vector<int32_t> vector_widths;  // per kernel: the widest vector the innermost loop got
  std::vector<std::string> entry;      // per kernel: its symbol
};

// Kernel i is the symbol "kiln_k<j>_<name>", j <= i the first kernel with the same code
// (codegen/llvm/kernel_module.h EntryName), with parameters in plan::ParamsOf order.
absl::StatusOr<CodegenResult> GenerateSharedObject(const loop::Program& program,
                                                   const CodegenOptions& options = {});

}  // namespace kiln::codegen::x86
