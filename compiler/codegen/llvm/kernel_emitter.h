#pragma once

// The LLVM IR of one kernel of a loop program, for any target. The emitter writes the
// kernel's body: an internal, always-inlined function "<name>_body" that takes the kernel's
// parameters in plan::ParamsOf order (buffers as `noalias` pointers, also `readonly` where the
// kernel never stores to them; symbols and the RNG seed and offset as i64) followed by the
// target's launch parameters, and computes the kernel's stages at every point of its parallel
// space. What differs between targets comes from a KernelAbi: the exported entry (how
// parameters arrive) and how the body walks the parallel space (how a parallel index is
// obtained: a loop over a range the CPU runtime hands out, the thread and block index on a
// GPU, and whether a thread computes runs of points together).
//
// Emission is deterministic: the same kernel, ABI and module state give the same IR.

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "compiler/codegen/llvm/point_runs.h"
#include "compiler/loop/ir.h"
#include "compiler/plan/plan.h"
#include "llvm/IR/IRBuilder.h"
#include "llvm/IR/Module.h"

namespace kiln::codegen {

// What a KernelAbi may use of the body being emitted while it walks the parallel space.
class ParallelSpace {
 public:
  virtual ~ParallelSpace() = default;

  virtual llvm::IRBuilder<>& builder() = 0;
  virtual const loop::Program& program() const = 0;
  virtual const loop::Kernel& kernel() const = 0;
  // The body's i-th launch parameter (KernelAbi::LaunchParams order).
  virtual llvm::Value* launch_param(size_t i) = 0;
  // The extent of parallel dimension `d`, computed at the insertion point.
  virtual llvm::Value* Extent(size_t d) = 0;
  // Makes `index` the value of parallel variable p<d> for what is emitted next.
  virtual void Bind(size_t d, llvm::Value* index) = 0;
  // Emits `for (iv = lo; iv < hi; iv += step) body(iv)` (step > 0) and leaves the insertion
  // point after the loop; `innermost` marks a loop the vectorizer should widen.
  virtual absl::Status Loop(llvm::Value* lo, llvm::Value* hi, llvm::Value* step,
                            const std::function<absl::Status(llvm::Value* iv)>& body,
                            bool innermost) = 0;
  // Binds p0..p{dims-1} to the position of `flat` in the row-major order of the first `dims`
  // parallel dimensions (p0 outermost), computed at the insertion point.
  void BindRowMajor(llvm::Value* flat, size_t dims);
  // Emits the kernel's stages for the point whose parallel variables are bound.
  virtual absl::Status EmitPoint() = 0;
  // Makes EmitPoint and EmitRun emit only the instructions [begin, end): one segment of a
  // kernel joined from independent ones (loop::Kernel::segments), which the ABI gives threads
  // of its own. `points` (when not negative) narrows a one-dimensional kernel to its first
  // `points` points, which Extent(0) then answers: the segment's own (segment_points).
  // Everything again after RestrictTo(0, kernel().insts.size()).
  virtual void RestrictTo(int32_t begin, int32_t end, int64_t points = -1) = 0;

  // An i1, computed at the insertion point from the buffers' addresses and the symbols alone
  // (so the same for every point): true when every vector access of `runs` among the emitted
  // instructions (RestrictTo) is aligned as it says at the first point of every run (a
  // multiple of runs.lanes along runs.dim).
  virtual llvm::Value* RunsAligned(const PointRuns& runs) = 0;
  // Emits the stages of a kernel that does not loop over a reduction for the run of
  // runs.lanes points p<runs.dim> = first, first + 1, ..., the other parallel variables bound.
  // The caller ensures that the run lies inside the dimension's extent and that RunsAligned
  // holds. Each vector access of `runs` is one access of the whole run; an instruction that
  // does not vary along the dimension runs once; every other one runs once per point, in
  // point order, one instruction after the other. That order equals computing the points one
  // after the other wherever no point reads or writes an element another point of the run
  // writes, which a kernel whose points run in parallel threads already requires. INTERNAL
  // for a kernel that loops over a reduction.
  virtual absl::Status EmitRun(const PointRuns& runs, llvm::Value* first) = 0;

  // One step of a reduction: `cur` (with its position `cur_index` for arg reductions, else
  // null) combined with `x` (at `x_index`), where `type` is the values' type. Returns the new
  // value and position. Arg reductions keep the earliest position among equal values, and a
  // negative position marks an empty partial, so partial results combine in any order to the
  // value one thread walking the whole space in order finds.
  virtual std::pair<llvm::Value*, llvm::Value*> Accumulate(loop::ReduceKind kind,
                                                           loop::ScalarType type, llvm::Value* cur,
                                                           llvm::Value* cur_index, llvm::Value* x,
                                                           llvm::Value* x_index) = 0;
  // The identity value of a reduction over `type` (its starting value).
  virtual llvm::Value* Identity(loop::ReduceKind kind, loop::ScalarType type) = 0;
};

// A target's part of a kernel's code.
class KernelAbi {
 public:
  virtual ~KernelAbi() = default;

  // The types of the body's parameters after the kernel's own: what the entry passes about
  // the launch (x86-64: the range [begin, end) of outer iterations).
  virtual std::vector<llvm::Type*> LaunchParams(llvm::LLVMContext& context) const = 0;

  // Creates the exported function `name` in `module`: it takes the target's calling
  // convention, gets the kernel's parameters (`params`) and calls `body` with them followed
  // by the launch parameters.
  virtual void EmitEntry(llvm::Module& module, const std::string& name,
                         const plan::KernelParams& params, llvm::Function* body) const = 0;

  // Emits, at the start of the body, the walk over the kernel's parallel space: binds the
  // parallel variables and emits the point at each of them.
  virtual absl::Status EmitParallel(ParallelSpace& space) const = 0;

  // Whether several threads share each point of `kernel` and split its reduction loops
  // (flattened row-major), each from ReductionStart stepping by its second value; their
  // partial results are then made one by CombinePartials. By default one thread walks a
  // point's whole reduction space in order.
  virtual bool SplitsReductions(const loop::Kernel& kernel) const { return false; }
  virtual std::pair<llvm::Value*, llvm::Value*> ReductionStart(ParallelSpace& space) const {
    return {nullptr, nullptr};
  }
  // When every thread of a point takes the same small constant number of its reduction's
  // elements (a step that divides the reduction), that number, else 0. The split loop is
  // then emitted unrolled, so that a load a later stage repeats (the row that a softmax or a
  // norm reads in each of its passes) is read once and kept in registers.
  virtual int64_t SplitTrips(const loop::Kernel& kernel) const { return 0; }
  // Makes this thread's partial `*value` (and `*index` for arg reductions, else null) the
  // reduction over every thread of the point, in every one of them.
  virtual absl::Status CombinePartials(ParallelSpace& space, loop::ReduceKind kind,
                                       loop::ScalarType type, llvm::Value** value,
                                       llvm::Value** index) const {
    return absl::OkStatus();
  }
};

// Emits `kernel` of `program` into `module`: its body and, through `abi`, its entry `name`.
// INTERNAL for a kernel the emitter cannot express.
absl::Status EmitKernel(llvm::Module& module, const loop::Program& program,
                        const loop::Kernel& kernel, const std::string& name, const KernelAbi& abi);

}  // namespace kiln::codegen
