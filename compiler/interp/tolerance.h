#pragma once

// How far a value PyTorch computed on the GPU may lie from the interpreter's: the one place
// that says what "the oracle agrees with PyTorch" means (tests/compiler/interp/
// reference_test.cc checks it on the corpus' recorded runs).
//
// The interpreter computes every op in double and rounds its result to the dtype once;
// PyTorch's kernels round as they go, in float32 accumulators for float32, bfloat16 and
// float16 alike, summing in another order. The interpreter is the closer of the two to the
// exact value, so the bound is PyTorch's error, carried through a graph. A value passes when
//
//   |pytorch - interpreter| <= rtol * |pytorch| + atol * scale
//
// where `scale` is the magnitude of the terms that produced the value: the largest finite
// magnitude in its tensor (an element small because its terms cancelled, such as a
// normalized activation near its mean, is as wrong as the tensor's large elements are), or,
// for a result that sums the elements of another tensor (a reduction, a bias gradient), the
// largest magnitude in that tensor: a sum that cancels to nothing, such as the gradient of a
// bias that a softmax or a normalization makes irrelevant, carries its terms' rounding
// error, not an error relative to itself.
//
// The bound is set by the least precise arithmetic a value went through, with unit roundoff
// u (2^-24 for float32):
//   - float32: rtol 1e-4, atol 1e-5. A reduction of K terms is typically off by
//     ~sqrt(K) u of its terms' magnitude (K = 4096: 4e-6), and the corpus' float32 graphs
//     agree with PyTorch to a few 1e-7 of their tensors' magnitudes; the bounds leave room
//     for chains of a few hundred ops each a few ulps off.
//   - TF32 (u = 2^-11 = 4.9e-4): float32 values that went through a convolution. PyTorch
//     lets cuDNN run float32 convolutions with TF32 products by default
//     (torch.backends.cudnn.allow_tf32), which carry 10 significand bits, so a convolution is
//     off by a few u of its terms (the corpus' convolution graphs: up to 4e-4 of the
//     tensor's magnitude), and every value downstream inherits that. rtol and atol are 4u.
//   - bfloat16 (u = 2^-8) and float16 (u = 2^-11): each op rounds its result to the dtype on
//     both sides, and a value just off a rounding boundary lands one ulp (2u) apart; chains
//     of such ops (autocast graphs) drift by a few ulps: rtol 4u, atol 2u. float32 values of
//     an autocast graph went through bfloat16 or float16 matmuls and get their bound.
//   - float64: rtol and atol 1e-9 (no float64 work in the corpus runs in reduced precision).
//   - integers and bools: exact.
//
// Large tensors are recorded as samples plus their sum and sum of absolute values; a sum is
// bounded by the sum of its elements' bounds: rtol * sum(|pytorch|) + atol * scale * n.

#include <cmath>
#include <cstdint>

#include "compiler/interp/dtype.h"

namespace kiln::interp {

struct Tolerance {
  double rtol = 0;
  double atol = 0;  // relative to `scale`, the magnitude of the value's terms

  // The largest difference allowed for a value `reference` whose terms have magnitude
  // `scale`.
  double Bound(double reference, double scale) const {
    return rtol * std::fabs(reference) + atol * scale;
  }
  // Whether `actual` agrees with `reference`: equal (infinities of one sign included), both
  // NaN, or both finite and within the bound (an infinite reference's bound is infinite, and
  // no finite value may pass for it).
  bool Allows(double reference, double actual, double scale) const {
    if (reference == actual) return true;
    if (std::isnan(reference) || std::isnan(actual)) {
      return std::isnan(reference) && std::isnan(actual);
    }
    if (std::isinf(reference) || std::isinf(actual)) return false;
    return std::fabs(reference - actual) <= Bound(reference, scale);
  }
  // The bound for the sum of `n` values whose magnitudes sum to `abs_sum`.
  double SumBound(double abs_sum, double scale, int64_t n) const {
    return rtol * abs_sum + atol * scale * static_cast<double>(n);
  }
  // The looser of two bounds, term by term.
  Tolerance Or(const Tolerance& other) const {
    return {std::fmax(rtol, other.rtol), std::fmax(atol, other.atol)};
  }
};

// The bound for values computed in `dtype` (float32 with TF32 products when `tf32`).
constexpr Tolerance PyTorchTolerance(DType dtype, bool tf32 = false) {
  switch (dtype) {
    case v1::DTYPE_FLOAT64:
      return {1e-9, 1e-9};
    case v1::DTYPE_FLOAT32:
      return tf32 ? Tolerance{4 * 0x1p-11, 4 * 0x1p-11} : Tolerance{1e-4, 1e-5};
    case v1::DTYPE_FLOAT16:
      return {4 * 0x1p-11, 2 * 0x1p-11};
    case v1::DTYPE_BFLOAT16:
      return {4 * 0x1p-8, 2 * 0x1p-8};
    default:
      return {0, 0};
  }
}

}  // namespace kiln::interp
