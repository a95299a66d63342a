// The convolution shape contract the interpreter and the runtime share: output sizes of
// regular, strided, padded, dilated, grouped and transposed convolutions, and what is
// refused.

#include "proto/ops/conv_shape.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace kiln::ops {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::vector<int64_t> OutputOf(std::vector<int64_t> input, std::vector<int64_t> weight,
                              std::vector<int64_t> stride, std::vector<int64_t> padding,
                              std::vector<int64_t> dilation, bool transposed = false,
                              std::vector<int64_t> output_padding = {}, int64_t groups = 1) {
  absl::StatusOr<ConvShape> s = ConvolutionShape(input, weight, stride, padding, dilation,
                                                 transposed, output_padding, groups);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? s->OutputSizes() : std::vector<int64_t>{};
}

TEST(ConvShapeTest, OutputSizes) {
  // (in + 2p - d(k - 1) - 1) / s + 1 per dim.
  EXPECT_THAT(OutputOf({2, 3, 8, 9}, {4, 3, 3, 3}, {1}, {0}, {1}), ElementsAre(2, 4, 6, 7));
  EXPECT_THAT(OutputOf({2, 3, 8, 9}, {4, 3, 3, 2}, {2, 3}, {1, 0}, {1, 2}),
              ElementsAre(2, 4, 4, 3));
  EXPECT_THAT(OutputOf({1, 2, 5}, {6, 1, 3}, {1}, {1}, {1}, false, {}, 2), ElementsAre(1, 6, 5));
  // Transposed: (in - 1) s - 2p + d(k - 1) + output_padding + 1; weight [Cin, Cout / g, k].
  EXPECT_THAT(OutputOf({1, 4, 5, 5}, {4, 3, 3, 3}, {2}, {1}, {1}, true, {1}, 1),
              ElementsAre(1, 3, 10, 10));
  EXPECT_THAT(OutputOf({1, 4, 5}, {4, 3, 3}, {1}, {0}, {1}, true, {}, 2), ElementsAre(1, 6, 7));
}

TEST(ConvShapeTest, ListsExpandAndDefault) {
  absl::StatusOr<ConvShape> s =
      ConvolutionShape({1, 1, 6, 6, 6}, {1, 1, 2, 2, 2}, {2}, {}, {}, false, {}, 1);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_THAT(s->stride, ElementsAre(2, 2, 2));
  EXPECT_THAT(s->padding, ElementsAre(0, 0, 0));
  EXPECT_THAT(s->dilation, ElementsAre(1, 1, 1));
  EXPECT_THAT(s->output_padding, ElementsAre(0, 0, 0));
  EXPECT_THAT(s->kernel, ElementsAre(2, 2, 2));
  EXPECT_THAT(s->out, ElementsAre(3, 3, 3));
  EXPECT_EQ(s->cin, 1);
  EXPECT_EQ(s->cout, 1);
}

TEST(ConvShapeTest, AnEmptyInputGivesAnEmptyOutput) {
  EXPECT_THAT(OutputOf({1, 1, 0}, {1, 1, 3}, {1}, {0}, {1}), ElementsAre(1, 1, 0));
}

TEST(ConvShapeTest, RefusesWhatDoesNotFit) {
  const struct {
    std::vector<int64_t> input, weight, stride, padding;
    int64_t groups;
    bool transposed;
    const char* why;
  } cases[] = {
      {{3, 8}, {4, 3}, {1}, {0}, 1, false, "do not form a batched convolution"},
      {{1, 3, 8}, {4, 3, 3, 3}, {1}, {0}, 1, false, "do not form a batched convolution"},
      {{1, 3, 8, 8}, {4, 3, 3, 3}, {1, 1, 1}, {0}, 1, false, "stride must have 2 entries, got 3"},
      {{1, 3, 8}, {4, 3, 3}, {0}, {0}, 1, false, "stride and dilation must be positive"},
      {{1, 3, 8}, {4, 3, 3}, {1}, {-1}, 1, false, "padding not negative"},
      {{1, 3, 8}, {4, 1, 3}, {1}, {0}, 2, false, "groups 2 must divide the input channels 3"},
      {{1, 4, 8}, {4, 1, 3}, {1}, {0}, 2, false, "weight expects 2 input channels"},
      {{1, 4, 8}, {3, 2, 3}, {1}, {0}, 2, false, "groups 2 must divide the output channels 3"},
      {{1, 4, 8}, {3, 2, 3}, {1}, {0}, 1, true, "transposed weight must have 4 input channels"},
      {{1, 3, 2}, {4, 3, 5}, {1}, {0}, 1, false, "negative size"},
  };
  for (const auto& c : cases) {
    absl::StatusOr<ConvShape> s =
        ConvolutionShape(c.input, c.weight, c.stride, c.padding, {}, c.transposed, {}, c.groups);
    ASSERT_FALSE(s.ok()) << c.why;
    EXPECT_TRUE(absl::IsInvalidArgument(s.status()));
    EXPECT_THAT(std::string(s.status().message()), HasSubstr(c.why));
  }
}

}  // namespace
}  // namespace kiln::ops
