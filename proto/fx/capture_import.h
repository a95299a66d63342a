#pragma once

// Converts the FX capture format (one graph per JSON file: {"model", "kind", "nodes",
// "code", "guards"}, see DESIGN.md "Real graphs") into a kiln.v1.Graph, carrying every
// field: tensor metadata, symbolic sizes, symbol hints and ranges, guard expressions and
// stack traces. Pure and thread-safe.
//
// Malformed input gets INVALID_ARGUMENT whose message names the node and field at fault,
// e.g. `node "addmm" args[0]: refers to unknown node "view_9"`.

#include "absl/strings/string_view.h"

#include "absl/status/statusor.h"
#include "kiln/v1/graph.pb.h"

namespace kiln::fx {

absl::StatusOr<v1::Graph> ImportCapture(absl::string_view json_text);

// The dtype named as torch prints it ("torch.float32"), or DTYPE_UNSPECIFIED if unknown.
v1::DType DTypeFromTorchName(absl::string_view name);
// "torch.float32" for DTYPE_FLOAT32; empty for DTYPE_UNSPECIFIED or an unknown value.
absl::string_view TorchNameOfDType(v1::DType dtype);

}  // namespace kiln::fx
