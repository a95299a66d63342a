// Random inputs made from a graph's metadata: integer inputs get values valid for how the
// graph uses them.

#include "compiler/interp/random_inputs.h"

#include <gtest/gtest.h>

#include <set>
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

}  // namespace
}  // namespace kiln::interp
