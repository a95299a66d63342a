#pragma once

// BatchWriteBacks: the new values of a graph's mutated inputs reach them through one kernel.
//
// A functional graph returns the new value of each input it mutates (a batch norm's running
// mean and variance, its count of batches), and the plan ends with a write-back step per
// input, which a runtime carries out as a device copy. ResNet-18's forward mutates 60 such
// buffers, a few hundred bytes each: 60 copies, each one call from the host and one
// operation on the device, where the bytes cost nothing.
//
// Write-back steps that follow one another, each from a dense (row-major) value of constant
// size to an input of the same dtype and sizes laid out densely, become one pointwise kernel
// of one segment a copy (loop::Kernel::segments), over as many points as the largest copy,
// each segment's loads and stores masked to its own points (segment_points). The kernel runs
// where the first of those steps ran; each step stays, with the input's own memory as its new
// value (its src names the input's buffer), so the plan still says which inputs change, and a
// runtime writes nothing more for it. A step is left as it is where its value is the input's
// own memory already, is larger than kMaxBatchedElements, or reads an input that another
// step of the run writes (the copies of one kernel run at once). At least two copies make a
// kernel. Values are unchanged: every element is copied as it was.
//
// Deterministic: steps are taken in program order.

#include <cstdint>

#include "compiler/loop/ir.h"

namespace kiln::fuse {

// The most elements one batched copy moves: larger ones stay device copies, whose launch is
// a small part of their cost.
inline constexpr int64_t kMaxBatchedElements = int64_t{1} << 20;

// `program` with each run of write-back steps batched as above.
loop::Program BatchWriteBacks(loop::Program program);

}  // namespace kiln::fuse
