#pragma once

// OrderDims: a pointwise kernel walks its parallel space in the order its stores walk memory.
//
// Lowering gives a kernel one parallel variable per dimension of the tensor it computes, in
// the tensor's logical order, and code generation gives neighbouring threads neighbouring
// points of the innermost variable. For a tensor laid out in logical order that is where its
// elements are contiguous. For one that is not (a channels-last activation [N, C, H, W] with
// strides [HWC, 1, WC, C]) neighbouring threads would store C elements apart, one memory
// transaction each, where the channel, contiguous in memory, is the outer variable.
//
// A kernel whose every store is affine in each parallel variable with constant coefficients
// (and walks no reduction variable), all stores ranking the variables the same way by
// coefficient (largest outermost, ties in their order), and whose innermost variable so
// ranked moves every store by one element while its present innermost one does not, has its
// parallel variables permuted into that order: the channels-last kernel walks (n, h, w, c),
// and CoalesceDims then merges the three outer variables. A kernel that reduces (a max pool's
// window) keeps its reduction variables; each point still reduces over its own. Every index
// is rewritten through the permutation, so each point computes and stores what it did: the
// results are bit for bit the same. Loads that were contiguous along the old innermost
// variable (a copy out of logical order) become strided: the stores decide.
//
// Deterministic.

#include "compiler/loop/ir.h"

namespace kiln::fuse {

// `kernel` with its parallel variables in store order; the kernel unchanged when the rule
// above does not apply.
loop::Kernel OrderDims(loop::Kernel kernel);

// Every kernel of `program` through OrderDims.
loop::Program OrderDims(loop::Program program);

}  // namespace kiln::fuse
