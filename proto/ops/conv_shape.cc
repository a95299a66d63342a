#include "proto/ops/conv_shape.h"

#include <algorithm>
#include <tuple>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace kiln::ops {
namespace {

// A per-spatial-dim argument: one entry applies to every dim, none takes `fallback`.
absl::Status Expand(std::vector<int64_t>& v, size_t dims, absl::string_view name,
                    int64_t fallback) {
  if (v.empty()) v.assign(dims, fallback);
  if (v.size() == 1) v.assign(dims, v[0]);
  if (v.size() != dims) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, " must have ", dims, " entries, got ", v.size()));
  }
  return absl::OkStatus();
}

}  // namespace

std::vector<int64_t> ConvShape::OutputSizes() const {
  std::vector<int64_t> s = {n, cout};
  s.insert(s.end(), out.begin(), out.end());
  return s;
}

absl::StatusOr<ConvShape> ConvolutionShape(absl::Span<const int64_t> input,
                                           absl::Span<const int64_t> weight,
                                           std::vector<int64_t> stride,
                                           std::vector<int64_t> padding,
                                           std::vector<int64_t> dilation, bool transposed,
                                           std::vector<int64_t> output_padding, int64_t groups) {
  if (input.size() < 3 || weight.size() != input.size()) {
    return absl::InvalidArgumentError(absl::StrCat("input of rank ", input.size(),
                                                   " and weight of rank ", weight.size(),
                                                   " do not form a batched convolution"));
  }
  const size_t dims = input.size() - 2;
  ConvShape s;
  for (auto [v, name, fallback] : {std::tuple{&stride, "stride", 1},
                                   {&padding, "padding", 0},
                                   {&dilation, "dilation", 1},
                                   {&output_padding, "output_padding", 0}}) {
    if (absl::Status e = Expand(*v, dims, name, fallback); !e.ok()) return e;
  }
  s.n = input[0];
  s.cin = input[1];
  s.groups = groups;
  s.transposed = transposed;
  if (groups <= 0 || s.cin % groups != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("groups ", groups, " must divide the input channels ", s.cin));
  }
  if (transposed) {
    if (weight[0] != s.cin) {
      return absl::InvalidArgumentError(
          absl::StrCat("transposed weight must have ", s.cin, " input channels"));
    }
    s.cout = weight[1] * groups;
  } else {
    if (weight[1] * groups != s.cin) {
      return absl::InvalidArgumentError(absl::StrCat("weight expects ", weight[1] * groups,
                                                     " input channels, the input has ", s.cin));
    }
    if (weight[0] % groups != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("groups ", groups, " must divide the output channels ", weight[0]));
    }
    s.cout = weight[0];
  }
  for (size_t d = 0; d < dims; ++d) {
    if (stride[d] < 1 || dilation[d] < 1 || padding[d] < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "stride ", stride[d], ", dilation ", dilation[d], " and padding ", padding[d], " of dim ",
          d, ": stride and dilation must be positive, padding not negative"));
    }
    const int64_t in = input[d + 2];
    const int64_t k = weight[d + 2];
    const int64_t out =
        transposed
            ? (in - 1) * stride[d] - 2 * padding[d] + dilation[d] * (k - 1) + output_padding[d] + 1
            : (in + 2 * padding[d] - dilation[d] * (k - 1) - 1) / stride[d] + 1;
    if (out < 0 && in != 0) {
      return absl::InvalidArgumentError("the output would have negative size");
    }
    s.in.push_back(in);
    s.out.push_back(std::max<int64_t>(out, 0));
    s.kernel.push_back(k);
  }
  s.stride = std::move(stride);
  s.padding = std::move(padding);
  s.dilation = std::move(dilation);
  s.output_padding = std::move(output_padding);
  return s;
}

}  // namespace kiln::ops
