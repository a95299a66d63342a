#include "proto/graph_file.h"

#include <google/protobuf/util/json_util.h>

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "proto/fx/capture_import.h"

namespace kiln {
namespace {

// Whether `bytes` are a binary kiln.v1.Graph. Protobuf skips fields it does not know, so
// almost any bytes that happen to parse would otherwise pass as an empty graph: a graph must
// hold at least one field Kiln knows.
bool ParseBinaryGraph(const std::string& bytes, v1::Graph& graph) {
  if (!graph.ParseFromString(bytes)) return false;
  v1::Graph known = graph;
  known.DiscardUnknownFields();
  return known.ByteSizeLong() > 0;
}

}  // namespace

absl::StatusOr<v1::Graph> ReadGraphFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string bytes = ss.str();
  if (bytes.empty()) return absl::InvalidArgumentError(absl::StrCat(path, ": empty, not a graph"));
  const size_t first = bytes.find_first_not_of(" \t\r\n");
  v1::Graph graph;
  if (first != std::string::npos && bytes[first] == '{') {
    auto status = google::protobuf::util::JsonStringToMessage(bytes, &graph);
    if (status.ok()) return graph;
    absl::StatusOr<v1::Graph> fx = fx::ImportCapture(bytes);
    if (fx.ok()) return fx;
    // A binary graph may start with bytes that read as JSON's "{": a first input that
    // encodes to 123 bytes starts the graph with "\n{".
    graph.Clear();
    if (ParseBinaryGraph(bytes, graph)) return graph;
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": neither a kiln.v1.Graph in JSON (", status.message().as_string(),
                     ") nor an FX capture (", fx.status().message(), ")"));
  }
  if (!ParseBinaryGraph(bytes, graph)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": not a graph file (neither a binary kiln.v1.Graph nor JSON)"));
  }
  return graph;
}

}  // namespace kiln
