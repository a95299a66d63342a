#pragma once

// Runs of consecutive points along one parallel dimension of a pointwise kernel, computed
// together by one thread: what lets a GPU thread move a run's elements with a few wide memory
// accesses instead of one access per element. A load or store whose index steps through
// consecutive elements of its buffer along the dimension (WalksContiguously) becomes one
// vector access of the whole run when its alignment can hold: the run starts at a multiple of
// `lanes`, so the access is aligned when its buffer's address and the terms of its index that
// do not move along the dimension are multiples of the alignment. Those that are constant are
// checked here; those over symbols, and the buffer's address, only at run time, by the code
// that walks the runs (ParallelSpace::RunsAligned). Pure functions of the loop IR, no LLVM.

#include <cstdint>
#include <vector>

#include "compiler/loop/index_expr.h"
#include "compiler/loop/ir.h"

namespace kiln::codegen {

// Whether `access`, a load or store, touches the next element of its buffer each time
// parallel variable `var` steps by one, the other variables fixed, and touches every element
// it is asked for: its index is p<var> plus terms that do not mention p<var>, it has no
// data-dependent term and no mask. False for any other instruction.
bool WalksContiguously(const loop::Inst& access, int32_t var);

// A load or store of a run's `lanes` elements as one access.
struct VectorAccess {
  int32_t inst = -1;     // the load or store, an index into Kernel::insts
  int32_t buffer = -1;   // its buffer
  int32_t align = 0;     // bytes: min(max access bytes, lanes * element size)
  int32_t elements = 0;  // align / element size: what its index's offset must be a multiple of
  // Terms of its index over symbols (a coefficient times the symbols of one term, its other
  // factors dropped: they are integers) that must be multiples of `elements` at run time.
  std::vector<loop::IndexExpr> multiples;
};

struct PointRuns {
  int32_t dim = 0;    // the parallel dimension the runs walk
  int32_t lanes = 1;  // points per run
  // The kernel's vector accesses, in instruction order; every other instruction runs once
  // per point of the run, or once for all of them when nothing it computes varies along
  // the dimension.
  std::vector<VectorAccess> vectors;
};

// The runs of `lanes` (a power of two) points along parallel dimension `dim` of `kernel`, a
// kernel of `program`: its loads and stores that walk contiguously along `dim` and whose
// index terms without p<dim> can be multiples of their alignment become vector accesses of
// at most `max_access_bytes` alignment (a power of two). Empty `vectors` when none can.
PointRuns PlanPointRuns(const loop::Program& program, const loop::Kernel& kernel, int32_t dim,
                        int32_t lanes, int32_t max_access_bytes);

}  // namespace kiln::codegen
