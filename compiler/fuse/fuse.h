#pragma once

// Fuse: the loop program with fewer kernels and buffers, same results.
//
//  - Vertical: a pointwise kernel whose buffer only kernels read (not an output, not an
//    extern's operand) is inlined into each reader, recomputed at the reader's index (the
//    reader's view of the buffer is mapped back onto the producer's iteration space), and
//    its buffer disappears. Masked reads stay masked through the inlined loads.
//  - Reductions with prologue and epilogue: pointwise producers inline into reduction
//    bodies; kernels over the same parallel space (P) or the same full space (P x R) as a
//    reduction kernel join it as later stages, reading earlier stages' values directly; so
//    does one over a view of P x R, its dimensions merged (seen over P x R where its
//    indices allow) or split (a layer norm's [B, T] rows flattened to [B*T] for the next
//    matmul, split back: the normalization is the norm's last loop). A
//    producer over P x R whose result must stay in memory (a residual sum the backward
//    needs) runs in the reduction's first loop and stores there; later loops recompute such
//    values from their inputs instead of loading back what their own kernel stored.
//  - Horizontal: kernels over the same iteration space that read the same buffer join into
//    one kernel; so do independent ones over a small constant space (an optimizer step's
//    updates of many parameters of one shape), whose cost is mostly their launch.
//  - Extern epilogues: the bias and scaling of addmm/baddbmm (split off by decompose) are
//    pointwise kernels, so they fuse like any other.
//
// Legality: a kernel only moves up to an earlier kernel when everything it reads is already
// produced there, never across a collective; kernels joined into one never read what the
// other writes except at the same index of the same parallel point. Decisions follow program
// order only, so the result is deterministic.

#include "absl/status/statusor.h"
#include "compiler/loop/ir.h"

namespace kiln::fuse {

struct FuseOptions {
  bool vertical = true;
  bool merge = true;  // reductions with epilogues, horizontal
  // A producer is inlined into at most this many load sites (recomputation bound).
  int max_inline_sites = 8;
};

absl::StatusOr<loop::Program> Fuse(loop::Program program, const FuseOptions& options = {});

}  // namespace kiln::fuse
