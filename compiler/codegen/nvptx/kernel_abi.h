#pragma once

// The sm_90 side of a kernel's code (proto/kernel_abi.h): the entry is a PTX kernel
// (`.entry`, marked by nvvm.annotations "kernel") whose parameters are the KernelParams in
// order, each by value: a buffer's device address as a pointer, a symbol and the RNG seed and
// offset as int64. cuLaunchKernel's kernelParams[i] then points at the i-th value, as
// params[i] does on x86-64. The body walks the kernel's flattened parallel range with a
// grid-stride loop (launch.h), its index math in int64; kernels with long reductions share
// each point among a warp's or a block's threads.
//
// A pointwise kernel with runs (launch.h VectorLanes) computes a whole run with vector loads
// and stores where it can. Whether its buffers allow that is decided at run time: the plan
// promises 64-byte alignment for arena and output buffers, but an input is the caller's
// tensor with its storage offset applied, aligned only to its element size, and a symbolic
// row length decides where rows start. So each thread tests once, at its start, that every
// buffer it accesses with vectors is aligned to its access and that every symbolic term of
// those accesses' indices is a multiple of it (a few integer instructions over the kernel's
// parameters, the same outcome in every thread, so no divergence). Where the test fails, and
// for the short last run of a row, the run's elements are computed one at a time as in a
// kernel without runs. Alignment is thus no requirement the runtime must check or meet (by
// copying a misaligned input), and results do not depend on which path ran.

#include <string>
#include <vector>

#include "compiler/codegen/llvm/kernel_emitter.h"

namespace kiln::codegen::nvptx {

// The walk of one thread over a kernel whose points are each one thread's (no split
// reductions): points first, first + stride, ... of the flattened range (launch.h PointsOf
// with VectorLanes), each a run of elements computed as above. Apart from the special
// registers that give `first` and `stride`, so that tests can run it on the host.
absl::Status EmitThreadWalk(ParallelSpace& space, llvm::Value* first, llvm::Value* stride);

// The walk of a kernel whose segments have blocks of their own (launch.h SegmentsOf): block
// `block` (ctaid.x) runs the segment whose blocks (SegmentBlocks, in segment order) hold it,
// whose thread walk starts at the point of its block within the segment's blocks and `thread`
// (tid.x), over the segment's own points where it has them (loop::Kernel::segment_points).
absl::Status EmitSegments(ParallelSpace& space, llvm::Value* block, llvm::Value* thread);

class GpuKernelAbi final : public KernelAbi {
 public:
  // No launch parameters: the body reads its position from the special registers.
  std::vector<llvm::Type*> LaunchParams(llvm::LLVMContext& context) const override;
  void EmitEntry(llvm::Module& module, const std::string& name, const plan::KernelParams& params,
                 llvm::Function* body) const override;
  absl::Status EmitParallel(ParallelSpace& space) const override;

  // Split reductions (launch.h SplitOf): each thread takes the elements slice, slice +
  // slices, ... of its point's reduction. Partials combine by butterfly shuffles among the
  // lanes of a warp that share a point; for a block per point, then through shared memory
  // across the warps (one slot per warp, combined by a second round of shuffles); for
  // column splits, through one shared slot per warp and point, which every thread combines in
  // warp order. Every thread of a point ends with its result. The order is fixed by the
  // split, so results do not vary between runs.
  bool SplitsReductions(const loop::Kernel& kernel) const override;
  std::pair<llvm::Value*, llvm::Value*> ReductionStart(ParallelSpace& space) const override;
  // Up to kMaxUnrolledTrips elements a thread (launch.h).
  int64_t SplitTrips(const loop::Kernel& kernel) const override;
  absl::Status CombinePartials(ParallelSpace& space, loop::ReduceKind kind, loop::ScalarType type,
                               llvm::Value** value, llvm::Value** index) const override;
};

}  // namespace kiln::codegen::nvptx
