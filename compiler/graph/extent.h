#pragma once

// What tensor metadata reaches in its storage. Import checks every tensor against the int64
// index range (later phases compute indices and byte sizes in 64 bits) and every output of
// a view op whose elements lie within its base (ops::Op::view_within_base) against that
// base: metadata that reaches outside is inconsistent with the storage.
//
// Errors are INVALID_ARGUMENT carrying a kiln.v1.FieldViolation (proto/error_detail.h) that
// names the node and field. Pure and thread-safe.

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "compiler/graph/graph.h"

namespace kiln::graph {

// The storage elements a tensor reaches, [first, last]. Known only when sizes, strides and
// offset are all concrete; an empty (zero-element) tensor reaches nothing.
struct Extent {
  bool known = false;
  bool empty = false;
  int64_t first = 0;
  int64_t last = 0;
};

// The extent of metadata that CheckIndexRange accepted.
Extent ExtentOf(absl::Span<const SymInt> sizes, absl::Span<const SymInt> strides,
                const SymInt& storage_offset);

// The element count fits int64, so do the tensor's bytes at `element_bytes` an element, and
// every element the metadata reaches has an int64 index and byte offset. Symbolic metadata
// passes: its values are not known here. `field` is where the metadata sits ("outputs[0]");
// errors name its sizes (or sizes[i]) or strides[i].
absl::Status CheckIndexRange(absl::string_view node, const std::string& field,
                             absl::Span<const SymInt> sizes, absl::Span<const SymInt> strides,
                             const SymInt& storage_offset, int64_t element_bytes = 1);

// Node `node` of `graph` calls a view op whose elements lie within its base: each tensor
// output with known metadata reaches only elements its base (the argument the op views)
// reaches. Outputs and bases with symbolic metadata, and empty ones, pass.
absl::Status CheckViewInBase(const Graph& graph, const Node& node);

}  // namespace kiln::graph
