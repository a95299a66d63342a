#pragma once

// The shape contract of aten.convolution and aten.convolution_backward: how the input and
// weight sizes and the stride, padding, dilation, transposed, output_padding and groups
// arguments determine the output's sizes, and which combinations are invalid. The
// compiler's interpreter and the runtime both size and check convolutions by it, so they
// cannot disagree on what a convolution computes. Pure, thread-safe.

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace kiln::ops {

struct ConvShape {
  int64_t n = 0;     // batch
  int64_t cin = 0;   // input channels
  int64_t cout = 0;  // output channels
  int64_t groups = 1;
  bool transposed = false;
  // Per spatial dim, with one-entry and empty argument lists expanded.
  std::vector<int64_t> in, out, kernel;
  std::vector<int64_t> stride, padding, dilation, output_padding;

  // [n, cout, out...].
  std::vector<int64_t> OutputSizes() const;
};

// The shape of a batched convolution of `input` [N, C, *spatial] with `weight`
// ([Cout, C / groups, *kernel], or [C, Cout / groups, *kernel] when transposed). A per-dim
// argument of one entry applies to every dim; an empty one takes its default (stride 1,
// padding 0, dilation 1, output_padding 0). INVALID_ARGUMENT, saying why, for ranks that do
// not form a batched convolution, lists of another length, a stride or dilation below 1, a
// negative padding, groups that do not divide the channels, a weight that does not fit
// them, or a negative output size (an empty input gives an empty output instead).
absl::StatusOr<ConvShape> ConvolutionShape(absl::Span<const int64_t> input,
                                           absl::Span<const int64_t> weight,
                                           std::vector<int64_t> stride,
                                           std::vector<int64_t> padding,
                                           std::vector<int64_t> dilation, bool transposed,
                                           std::vector<int64_t> output_padding, int64_t groups);

}  // namespace kiln::ops
