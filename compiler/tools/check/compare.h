#pragma once

// How one output an artifact computed is judged against the reference interpreter's value
// of it (runtime_check.h runs both sides).
//
// Every element must lie within `rtol * (|expected| + scale)` of the interpreter's, `scale`
// being the largest finite magnitude in the expected tensor; exact types must be equal, and
// NaN matches only NaN.
//
// A softmax's probabilities are bounded by their logits' magnitude L instead:
// `rtol * (|expected| * max(1, L) + scale)`. p_i is proportional to exp(z_i), so logits
// off by d move p_i by a factor e^d: the logits' absolute error is the probabilities'
// relative error, and float32 computes logits to a few ulps of L, not of 1. T5 does not
// scale its attention logits by 1/sqrt(d); they reach 145, and float32 rounding in the
// layers before them moves a probability by 2.4e-4 of itself, 1.2 times the bound
// relative to the probabilities alone.
//
// Graphs with bfloat16 or float16 values get a second chance, because there the interpreter
// is not the only right answer. It rounds every op's result to its dtype, as eager PyTorch
// does (tests/compiler/interp/reference_test.cc); compiled kernels keep float32 between the
// ops they fuse and round only what they store, as torch.compile's Inductor does by default
// (its emulate_precision_casts is off: "Inductor's behavior should be closer to fp64 ref
// numerics"). Each rounding that eager does and a kernel skips moves a value by up to half
// an ulp (2^-9 of it in bfloat16) and every op after it carries that on, so two right
// answers drift apart by many ulps: in the corpus by up to 15% of a tensor's largest
// magnitude, at elements where terms that large cancel, far past any bound on the
// difference that would still catch a wrong kernel. So an output that misses the bound is
// judged as PyTorch judges its own compiler (torch._dynamo.utils.same with an fp64
// reference): against the graph run without any rounding (`exact`), it must be about as
// accurate as eager rounding is,
//
//   max |actual - exact| <= 3 * max |expected - exact| + max(rtol, 1e-3) * scale, and the
//   same for the root mean square,
//
// over the elements whose exact value is finite; there the artifact must be finite too,
// unless eager rounding overflowed into the same non-finite value. Elements whose exact value
// is not finite must meet the elementwise bound. 3 is PyTorch's factor for bfloat16 and
// float16 results, and 1e-3 its tol / 10 for them (a float32 loss of a bfloat16 graph has
// one element: its eager error is one draw, not a yardstick). In the corpus' 24 bfloat16 and
// float16 graphs, 677 outputs miss the elementwise bound; their error is at most 2.4 times eager's
// at the largest difference and 1.75 times in rms, while a wrong kernel is off by far more than
// rounding moves a value.

#include <string>

#include "compiler/interp/tensor.h"

namespace kiln::check {

struct Expectation {
  interp::Tensor expected;  // the interpreter's value, every op rounded to its dtype
  // The same value computed without rounding (round_to_dtype off), for graphs with
  // bfloat16 or float16 values; undefined otherwise.
  interp::Tensor exact;
  double rtol = 0;  // relative to |expected| + scale; 0 for exact types
  // For softmax probabilities, the largest finite magnitude of their logits; 0 otherwise.
  double logit_scale = 0;
};

struct Verdict {
  bool ok = true;
  std::string message;  // where it first fails, for people
  double worst = 0;     // the largest error relative to what is allowed (ok: <= 1)
};

// Judges `actual`, which has the expected tensor's sizes and dtype.
Verdict CompareTensor(const interp::Tensor& actual, const Expectation& e);

}  // namespace kiln::check
