#pragma once

// Random inputs for a graph, made from its input metadata: tensors with the recorded
// sizes, strides, storage offset and dtype; symbolic ints with their values. Deterministic
// for a given seed. Integer tensors get values valid for how the graph uses them
// (embedding indices below the table's rows, nll targets below the class count, gather /
// index_select / scatter indices below the indexed size, max-pooling indices inside their
// output's window, as the forward pool saves them), found by following the input through
// views to its consumers. Floating inputs are uniform in [-1, 1) but where the graph says
// more: a matmul's or convolution's weight is drawn within PyTorch's default initialization
// bound 1 / sqrt(fan_in), and a value that must be positive (a variance, an inverse standard
// deviation, what a square root or logarithm takes, an optimizer's step count) is drawn
// positive. Callers can give ranges explicitly instead.

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/interp/interpreter.h"
#include "kiln/v1/graph.pb.h"

namespace kiln::interp {

struct RandomInputOptions {
  uint64_t seed = 0;
  // Symbol values; symbols not given take their hints from the graph.
  std::map<std::string, int64_t, std::less<>> symbols;
  // [low, high) for integer inputs, by input name; overrides what is inferred.
  std::map<std::string, std::pair<int64_t, int64_t>, std::less<>> int_ranges;
  // [low, high) for floating inputs, by input name; overrides what is inferred.
  std::map<std::string, std::pair<double, double>, std::less<>> float_ranges;
};

// The symbol values a run uses: `overrides` first, then the graph's hints. An int symbol
// with neither is INVALID_ARGUMENT.
absl::StatusOr<std::map<std::string, int64_t, std::less<>>> ResolveSymbols(
    const v1::Graph& graph, const std::map<std::string, int64_t, std::less<>>& overrides);

// [low, high) of the values MakeRandomInputs draws for each integer tensor input (bool
// excluded: always [0, 2)), by input name: inferred from the input's uses, else [0, 2);
// options.int_ranges overrides. For tools that make inputs of their own.
absl::StatusOr<std::map<std::string, std::pair<int64_t, int64_t>, std::less<>>> IntInputRanges(
    const v1::Graph& graph, const RandomInputOptions& options = {});

// [low, high) of the values MakeRandomInputs draws for each floating tensor input, by input
// name: inferred from the input's uses (see above); options.float_ranges overrides.
absl::StatusOr<std::map<std::string, std::pair<double, double>, std::less<>>> FloatInputRanges(
    const v1::Graph& graph, const RandomInputOptions& options = {});

// One value per graph input, in order.
absl::StatusOr<std::vector<Value>> MakeRandomInputs(const v1::Graph& graph,
                                                    const RandomInputOptions& options = {});

}  // namespace kiln::interp
