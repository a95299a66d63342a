// Random inputs made from a graph's metadata: integer inputs get values valid for how the
// graph uses them, floating inputs magnitudes and signs like a model's.

#include "compiler/interp/random_inputs.h"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "proto/fx/capture_import.h"

namespace kiln::interp {
namespace {

// The backward of max_pool2d(kernel 3, stride 2, padding 1) over an [8, 8] plane, its saved
// indices reaching it through a detach.
constexpr char kPoolBackward[] = R"json({
  "model": "synthetic", "kind": "bw",
  "nodes": [
    {"name": "grad", "op": "placeholder", "target": "grad", "args": [], "kwargs": {},
     "meta": {"shape": [2, 3, 4, 4], "stride": [48, 16, 4, 1], "dtype": "torch.float32",
              "device": "cpu", "storage_offset": 0}},
    {"name": "x", "op": "placeholder", "target": "x", "args": [], "kwargs": {},
     "meta": {"shape": [2, 3, 8, 8], "stride": [192, 64, 8, 1], "dtype": "torch.float32",
              "device": "cpu", "storage_offset": 0}},
    {"name": "saved", "op": "placeholder", "target": "saved", "args": [], "kwargs": {},
     "meta": {"shape": [2, 3, 4, 4], "stride": [48, 16, 4, 1], "dtype": "torch.int64",
              "device": "cpu", "storage_offset": 0}},
    {"name": "indices", "op": "call_function", "target": "aten.detach.default",
     "args": [{"node": "saved"}], "kwargs": {},
     "meta": {"shape": [2, 3, 4, 4], "stride": [48, 16, 4, 1], "dtype": "torch.int64",
              "device": "cpu", "storage_offset": 0}},
    {"name": "gx", "op": "call_function",
     "target": "aten.max_pool2d_with_indices_backward.default",
     "args": [{"node": "grad"}, {"node": "x"}, [3, 3], [2, 2], [1, 1], [1, 1], false,
              {"node": "indices"}], "kwargs": {},
     "meta": {"shape": [2, 3, 8, 8], "stride": [192, 64, 8, 1], "dtype": "torch.float32",
              "device": "cpu", "storage_offset": 0}},
    {"name": "output", "op": "output", "target": "output", "args": [[{"node": "gx"}]],
     "kwargs": {}, "meta": null}
  ]
})json";

TEST(RandomInputsTest, MaxPoolIndicesLieInTheirOutputsWindow) {
  absl::StatusOr<v1::Graph> graph = fx::ImportCapture(kPoolBackward);
  ASSERT_TRUE(graph.ok()) << graph.status();
  for (uint64_t seed : {1, 2, 3}) {
    RandomInputOptions options;
    options.seed = seed;
    absl::StatusOr<std::vector<Value>> inputs = MakeRandomInputs(*graph, options);
    ASSERT_TRUE(inputs.ok()) << inputs.status();
    const std::vector<int64_t> indices = std::get<Tensor>((*inputs)[2]).ToInts();
    ASSERT_EQ(indices.size(), 2u * 3 * 4 * 4);
    std::set<std::pair<int64_t, int64_t>> offsets;  // where in its window each index lies
    for (size_t k = 0; k < indices.size(); ++k) {
      const int64_t i = static_cast<int64_t>(k) / 4 % 4, j = static_cast<int64_t>(k) % 4;
      const int64_t h = indices[k] / 8, w = indices[k] % 8;
      const int64_t a = h - (2 * i - 1), b = w - (2 * j - 1);
      EXPECT_TRUE(indices[k] >= 0 && a >= 0 && a < 3 && b >= 0 && b < 3)
          << "seed " << seed << ": index " << indices[k] << " of output (" << i << ", " << j
          << ") is outside its window";
      offsets.insert({a, b});
    }
    EXPECT_EQ(offsets.size(), 9u) << "every position of a window is drawn somewhere";
  }
}

TEST(RandomInputsTest, GivenRangesOverrideTheWindow) {
  absl::StatusOr<v1::Graph> graph = fx::ImportCapture(kPoolBackward);
  ASSERT_TRUE(graph.ok()) << graph.status();
  RandomInputOptions options;
  options.int_ranges["saved"] = {5, 6};
  absl::StatusOr<std::vector<Value>> inputs = MakeRandomInputs(*graph, options);
  ASSERT_TRUE(inputs.ok()) << inputs.status();
  for (int64_t v : std::get<Tensor>((*inputs)[2]).ToInts()) EXPECT_EQ(v, 5);
}

// A linear layer and a layer norm's backward: the weight reaches addmm through a transpose
// and a bf16 copy; rstd must be positive. An optimizer's exp_avg_sq reaches a square root
// through `* beta2 + (1 - beta2) * g * g`, its step count an exponent of beta.
constexpr char kModelPieces[] = R"json({
  "model": "synthetic", "kind": "bw",
  "nodes": [
    {"name": "x", "op": "placeholder", "target": "x", "args": [], "kwargs": {},
     "meta": {"shape": [4, 64], "stride": [64, 1], "dtype": "torch.bfloat16",
              "device": "cpu", "storage_offset": 0}},
    {"name": "w", "op": "placeholder", "target": "w", "args": [], "kwargs": {},
     "meta": {"shape": [32, 64], "stride": [64, 1], "dtype": "torch.float32",
              "device": "cpu", "storage_offset": 0}},
    {"name": "b", "op": "placeholder", "target": "b", "args": [], "kwargs": {},
     "meta": {"shape": [32], "stride": [1], "dtype": "torch.bfloat16",
              "device": "cpu", "storage_offset": 0}},
    {"name": "rstd", "op": "placeholder", "target": "rstd", "args": [], "kwargs": {},
     "meta": {"shape": [4, 1], "stride": [1, 1], "dtype": "torch.float32",
              "device": "cpu", "storage_offset": 0}},
    {"name": "sq", "op": "placeholder", "target": "sq", "args": [], "kwargs": {},
     "meta": {"shape": [4], "stride": [1], "dtype": "torch.float32",
              "device": "cpu", "storage_offset": 0}},
    {"name": "g", "op": "placeholder", "target": "g", "args": [], "kwargs": {},
     "meta": {"shape": [4], "stride": [1], "dtype": "torch.float32",
              "device": "cpu", "storage_offset": 0}},
    {"name": "step", "op": "placeholder", "target": "step", "args": [], "kwargs": {},
     "meta": {"shape": [], "stride": [], "dtype": "torch.float32",
              "device": "cpu", "storage_offset": 0}},
    {"name": "eps", "op": "placeholder", "target": "eps", "args": [], "kwargs": {},
     "meta": {"shape": [], "stride": [], "dtype": "torch.float64",
              "device": "cpu", "storage_offset": 0}},
    {"name": "wb", "op": "call_function", "target": "aten._to_copy.default",
     "args": [{"node": "w"}], "kwargs": {"dtype": "torch.bfloat16"},
     "meta": {"shape": [32, 64], "stride": [64, 1], "dtype": "torch.bfloat16",
              "device": "cpu", "storage_offset": 0}},
    {"name": "wt", "op": "call_function", "target": "aten.t.default",
     "args": [{"node": "wb"}], "kwargs": {},
     "meta": {"shape": [64, 32], "stride": [1, 64], "dtype": "torch.bfloat16",
              "device": "cpu", "storage_offset": 0}},
    {"name": "y", "op": "call_function", "target": "aten.addmm.default",
     "args": [{"node": "b"}, {"node": "x"}, {"node": "wt"}], "kwargs": {},
     "meta": {"shape": [4, 32], "stride": [32, 1], "dtype": "torch.bfloat16",
              "device": "cpu", "storage_offset": 0}},
    {"name": "scaled", "op": "call_function", "target": "aten.mul.Tensor",
     "args": [{"node": "rstd"}, 2.0], "kwargs": {},
     "meta": {"shape": [4, 1], "stride": [1, 1], "dtype": "torch.float32",
              "device": "cpu", "storage_offset": 0}},
    {"name": "root", "op": "call_function", "target": "aten.rsqrt.default",
     "args": [{"node": "scaled"}], "kwargs": {},
     "meta": {"shape": [4, 1], "stride": [1, 1], "dtype": "torch.float32",
              "device": "cpu", "storage_offset": 0}},
    {"name": "decayed", "op": "call_function", "target": "aten.mul.Tensor",
     "args": [{"node": "sq"}, 0.999], "kwargs": {},
     "meta": {"shape": [4], "stride": [1], "dtype": "torch.float32",
              "device": "cpu", "storage_offset": 0}},
    {"name": "updated", "op": "call_function", "target": "aten.addcmul.default",
     "args": [{"node": "decayed"}, {"node": "g"}, {"node": "g"}], "kwargs": {"value": 0.001},
     "meta": {"shape": [4], "stride": [1], "dtype": "torch.float32",
              "device": "cpu", "storage_offset": 0}},
    {"name": "denom", "op": "call_function", "target": "aten.sqrt.default",
     "args": [{"node": "updated"}], "kwargs": {},
     "meta": {"shape": [4], "stride": [1], "dtype": "torch.float32",
              "device": "cpu", "storage_offset": 0}},
    {"name": "bias_correction", "op": "call_function", "target": "aten.pow.Scalar",
     "args": [0.999, {"node": "step"}], "kwargs": {},
     "meta": {"shape": [], "stride": [], "dtype": "torch.float32",
              "device": "cpu", "storage_offset": 0}},
    {"name": "squares", "op": "call_function", "target": "aten.mul.Tensor",
     "args": [{"node": "x"}, {"node": "x"}], "kwargs": {},
     "meta": {"shape": [4, 64], "stride": [64, 1], "dtype": "torch.float32",
              "device": "cpu", "storage_offset": 0}},
    {"name": "mean_square", "op": "call_function", "target": "aten.mean.dim",
     "args": [{"node": "squares"}, [-1], true], "kwargs": {},
     "meta": {"shape": [4, 1], "stride": [1, 1], "dtype": "torch.float32",
              "device": "cpu", "storage_offset": 0}},
    {"name": "eps32", "op": "call_function", "target": "aten._to_copy.default",
     "args": [{"node": "eps"}], "kwargs": {"dtype": "torch.float32"},
     "meta": {"shape": [], "stride": [], "dtype": "torch.float32",
              "device": "cpu", "storage_offset": 0}},
    {"name": "shifted", "op": "call_function", "target": "aten.add.Tensor",
     "args": [{"node": "mean_square"}, {"node": "eps32"}], "kwargs": {},
     "meta": {"shape": [4, 1], "stride": [1, 1], "dtype": "torch.float32",
              "device": "cpu", "storage_offset": 0}},
    {"name": "rms", "op": "call_function", "target": "aten.rsqrt.default",
     "args": [{"node": "shifted"}], "kwargs": {},
     "meta": {"shape": [4, 1], "stride": [1, 1], "dtype": "torch.float32",
              "device": "cpu", "storage_offset": 0}},
    {"name": "output", "op": "output", "target": "output",
     "args": [[{"node": "y"}, {"node": "root"}, {"node": "denom"}, {"node": "bias_correction"},
               {"node": "rms"}]],
     "kwargs": {}, "meta": null}
  ]
})json";

TEST(RandomInputsTest, FloatInputsTakeTheirDomainsFromTheirUses) {
  absl::StatusOr<v1::Graph> graph = fx::ImportCapture(kModelPieces);
  ASSERT_TRUE(graph.ok()) << graph.status();
  absl::StatusOr<std::map<std::string, std::pair<double, double>, std::less<>>> ranges =
      FloatInputRanges(*graph);
  ASSERT_TRUE(ranges.ok()) << ranges.status();
  using Range = std::pair<double, double>;
  // nn.Linear's default bound: 1 / sqrt(in_features), in_features = 64.
  EXPECT_EQ(ranges->at("w"), Range(-0.125, 0.125));
  EXPECT_EQ(ranges->at("x"), Range(-1, 1));
  EXPECT_EQ(ranges->at("b"), Range(-1, 1));
  EXPECT_EQ(ranges->at("rstd"), Range(0.5, 1.5)) << "through a positive scale, into rsqrt";
  EXPECT_EQ(ranges->at("sq"), Range(0.5, 1.5)) << "decayed, plus a square, under sqrt";
  EXPECT_EQ(ranges->at("g"), Range(-1, 1)) << "squared: either sign";
  EXPECT_EQ(ranges->at("step"), Range(0.5, 1.5));
  EXPECT_EQ(ranges->at("eps"), Range(0.5, 1.5)) << "converted, added to a mean, into rsqrt";

  RandomInputOptions options;
  options.float_ranges["w"] = {2, 3};
  absl::StatusOr<std::vector<Value>> inputs = MakeRandomInputs(*graph, options);
  ASSERT_TRUE(inputs.ok()) << inputs.status();
  for (double v : std::get<Tensor>((*inputs)[1]).ToDoubles()) {
    EXPECT_TRUE(v >= 2 && v < 3) << v << " is outside the given range";
  }
  for (double v : std::get<Tensor>((*inputs)[3]).ToDoubles()) {
    EXPECT_TRUE(v >= 0.5 && v < 1.5) << v << " is outside rstd's inferred range";
  }
}

// A convolution's weight: fan_in = in_channels / groups * kernel area.
TEST(RandomInputsTest, ConvolutionWeightsTakeTheirFanIn) {
  constexpr char kConv[] = R"json({
    "model": "synthetic", "kind": "fw",
    "nodes": [
      {"name": "x", "op": "placeholder", "target": "x", "args": [], "kwargs": {},
       "meta": {"shape": [1, 4, 8, 8], "stride": [256, 64, 8, 1], "dtype": "torch.float32",
                "device": "cpu", "storage_offset": 0}},
      {"name": "w", "op": "placeholder", "target": "w", "args": [], "kwargs": {},
       "meta": {"shape": [8, 4, 2, 2], "stride": [16, 4, 2, 1], "dtype": "torch.float32",
                "device": "cpu", "storage_offset": 0}},
      {"name": "y", "op": "call_function", "target": "aten.convolution.default",
       "args": [{"node": "x"}, {"node": "w"}, null, [1, 1], [0, 0], [1, 1], false, [0, 0], 1],
       "kwargs": {},
       "meta": {"shape": [1, 8, 7, 7], "stride": [392, 49, 7, 1], "dtype": "torch.float32",
                "device": "cpu", "storage_offset": 0}},
      {"name": "output", "op": "output", "target": "output", "args": [[{"node": "y"}]],
       "kwargs": {}, "meta": null}
    ]
  })json";
  absl::StatusOr<v1::Graph> graph = fx::ImportCapture(kConv);
  ASSERT_TRUE(graph.ok()) << graph.status();
  auto ranges = FloatInputRanges(*graph);
  ASSERT_TRUE(ranges.ok()) << ranges.status();
  EXPECT_EQ(ranges->at("w"), std::make_pair(-0.25, 0.25));
  EXPECT_EQ(ranges->at("x"), std::make_pair(-1.0, 1.0));
}

}  // namespace
}  // namespace kiln::interp
