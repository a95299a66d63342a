#pragma once

// A Backend generates code for one target. Everything before it in the pipeline is
// target-neutral; a backend decides how each kernel's parallel extents map to the machine
// (Schedule) and turns the fused loop program into code modules (Generate), and it names
// the facts about its code that compile keys must include (KeyFacts).
//
// Schedule and Generate are pure functions of the program: the same program always gets
// the same launch geometry and the same bytes, whatever the number of threads. A backend is
// immutable once built and safe for concurrent use. Backends are found by target name in a
// BackendRegistry (registry.h).

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "compiler/loop/index_expr.h"
#include "compiler/loop/ir.h"
#include "kiln/v1/artifact.pb.h"

namespace kiln::codegen {

// How one kernel is launched, as expressions over the program's symbols (the plan records
// them in Kernel.launch).
struct KernelSchedule {
  // x86-64: one extent, the range [0, grid[0]) of the entry's outer loop that the runtime
  // splits across threads. GPU: grid x, y, z.
  std::vector<loop::IndexExpr> grid;
  // GPU: threads per block x, y, z. Empty on a CPU.
  std::vector<loop::IndexExpr> block;
};

// One unit of machine code, loaded as `kind` says.
struct CodeModule {
  v1::BinaryKind kind = v1::BINARY_KIND_UNSPECIFIED;
  std::string binary;
};

// What code generation decided or learned about one kernel.
struct KernelCode {
  int32_t module = 0;  // index into GeneratedCode::modules
  // The entry symbol in that module: "kiln_k<j>_<name>", j the first kernel in program order
  // of the same code and name its name (codegen/llvm/kernel_module.h EntryName), which kernels
  // of the same code share.
  std::string entry;
  // Elements per vector operation: x86-64, the widest one of its innermost loop; sm_90, the
  // elements of each thread's run (nvptx/launch.h VectorLanes).
  int32_t vector_width = 1;
  int32_t registers = 0;                   // GPU: registers per thread; 0 when unknown
  int32_t static_shared_memory_bytes = 0;  // GPU
};

struct GeneratedCode {
  std::vector<CodeModule> modules;
  // One per program kernel, in order; a kernel's parameters are in plan::ParamsOf order.
  std::vector<KernelCode> kernels;
  std::string llvm_ir;  // the optimized IR of every kernel, when asked for
};

struct GenerateOptions {
  bool emit_llvm_ir = false;  // also return the optimized IR text (tests and debugging)
  // Kernels compile in parallel on this many threads; <= 0: one per hardware thread. The
  // bytes do not depend on it.
  int threads = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;

  // The target this backend generates code for: one of kKnownTargets (target.h).
  virtual absl::string_view target() const = 0;

  // The facts about the generated code that the build's sources alone do not pin down and
  // that a reader of a key should see: the architecture, the CPU level, the options that
  // change code ("x86_64-unknown-linux-gnu, cpu x86-64-v3, O2"). Part of every compile key
  // for this target.
  virtual std::string KeyFacts() const = 0;

  // Into how many parts kernel `kernel` of `program` should cut its reduction so that the
  // machine has enough to do (fuse/split_reductions.h): 1 keeps it whole, the default. Asked
  // of each kernel that can be cut, before Schedule.
  virtual int64_t ReductionParts(const loop::Program& program, const loop::Kernel& kernel) const {
    (void)program;
    (void)kernel;
    return 1;
  }

  // The byte multiple at which the rows of 16-bit float matrices that matmuls read or write
  // should start (fuse/pad_rows.h): the libraries the target calls for matmuls run their fast
  // kernels only on such rows. 0, the default, keeps the graph's layouts.
  virtual int64_t MatmulRowAlignment() const { return 0; }

  // The program as this backend's code runs it: rewrites that hold only for the code it
  // generates (checks its schedules make always true), made after the portable phases;
  // Schedule and Generate are given what it returns. The default changes nothing.
  virtual loop::Program Specialize(loop::Program program) const { return program; }

  // One schedule per kernel of `program`, in order.
  virtual absl::StatusOr<std::vector<KernelSchedule>> Schedule(
      const loop::Program& program) const = 0;

  // The code of every kernel of `program`. INTERNAL when code generation fails.
  virtual absl::StatusOr<GeneratedCode> Generate(const loop::Program& program,
                                                 const GenerateOptions& options) const = 0;
};

}  // namespace kiln::codegen
