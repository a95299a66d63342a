#pragma once

// Reads a graph file in any form Kiln's tools accept: a binary kiln.v1.Graph, a kiln.v1.Graph
// in protobuf JSON, or an FX capture JSON file (converted by fx::ImportCapture). The form is
// found from the bytes, not from the file name. Errors name the file: NOT_FOUND when it
// cannot be read, INVALID_ARGUMENT when it is none of the three forms (for JSON, with why
// neither JSON form fit). An empty file, or bytes that parse only as fields kiln.v1.Graph
// does not have, are not a graph.

#include <string>

#include "absl/status/statusor.h"
#include "kiln/v1/graph.pb.h"

namespace kiln {

absl::StatusOr<v1::Graph> ReadGraphFile(const std::string& path);

}  // namespace kiln
