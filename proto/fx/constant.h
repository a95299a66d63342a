#pragma once

// Constant tensors that AOTAutograd lifts into a graph as get_attr nodes become the factory
// call that makes them, so the rest of Kiln sees only calls and compile keys hold constants
// by value: a tensor with no elements becomes aten.empty.memory_format(sizes), and a 0-d
// tensor becomes aten.scalar_tensor(value) with its dtype and device. Those are the constants
// AOTAutograd writes (empty placeholders for unused outputs, lifted scalars); a constant with
// more elements is INVALID_ARGUMENT saying so.

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "kiln/v1/graph.pb.h"

namespace kiln::fx {

// Fills `node`'s target, args and kwargs with the call that makes a constant of `meta` whose
// contiguous little-endian bytes are `bytes` (absent when the capture wrote none).
absl::Status ConstantAsCall(const v1::TensorMeta& meta, const std::optional<std::string>& bytes,
                            v1::Node* node);

}  // namespace kiln::fx
