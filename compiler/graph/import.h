#pragma once

// Import turns a kiln.v1.Graph into Kiln's graph IR, validating everything first: names,
// references (unknown, later, cycles), output metadata, dtypes, devices, layouts, sizes,
// strides and storage offsets (no negatives, no element index beyond int64, views of known
// view ops inside their base), symbolic expressions (they must parse and mention only
// declared symbols), guards, and every call of an op Kiln knows against its schema
// (argument count, names and types; see proto/ops/registry.h). Calls of unknown ops are accepted
// when every output carries metadata; they become fallback steps. Foreach calls come out
// written per element (expand_foreach.h).
//
// Errors are INVALID_ARGUMENT carrying a kiln.v1.FieldViolation (see proto/error_detail.h)
// that names the node or input, the field ("args[1]", "outputs[0].sizes[2]",
// "guards.shape_env[0]") and what was expected. Pure and thread-safe.

#include "absl/status/statusor.h"
#include "compiler/graph/graph.h"
#include "kiln/v1/graph.pb.h"

namespace kiln::graph {

absl::StatusOr<Graph> Import(const v1::Graph& proto);

}  // namespace kiln::graph
