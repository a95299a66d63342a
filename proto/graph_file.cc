#include "proto/graph_file.h"

#include <google/protobuf/util/json_util.h>

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "proto/fx/capture_import.h"

namespace kiln {

absl::StatusOr<v1::Graph> ReadGraphFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string bytes = ss.str();
  const size_t first = bytes.find_first_not_of(" \t\r\n");
  v1::Graph graph;
  if (first != std::string::npos && bytes[first] == '{') {
    auto status = google::protobuf::util::JsonStringToMessage(bytes, &graph);
    if (status.ok()) return graph;
    absl::StatusOr<v1::Graph> fx = fx::ImportCapture(bytes);
    if (fx.ok()) return fx;
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": neither a kiln.v1.Graph in JSON (", status.message().as_string(),
                     ") nor an FX capture (", fx.status().message(), ")"));
  }
  if (!graph.ParseFromString(bytes)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a binary kiln.v1.Graph"));
  }
  return graph;
}

}  // namespace kiln
