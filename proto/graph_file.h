#pragma once

// Reads a graph file in any form Kiln's tools accept: a binary kiln.v1.Graph, a kiln.v1.Graph
// in protobuf JSON, or an FX capture JSON file (converted by fx::ImportCapture). Errors name
// the file and, for JSON, why neither form fit.

#include <string>

#include "absl/status/statusor.h"
#include "kiln/v1/graph.pb.h"

namespace kiln {

absl::StatusOr<v1::Graph> ReadGraphFile(const std::string& path);

}  // namespace kiln
