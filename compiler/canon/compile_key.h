#pragma once

// Compile keys. A CompileKey is the SHA-256 over a canonical encoding of the graph (see
// canonical_graph.h), the code-changing compile options (target, require_cudagraph,
// precision, backend options in sorted order) and the toolchain fingerprint. The
// KeyRecord keeps each component's digest and every node's, so Explain (explain.h) can
// name what differs between two keys.
//
// Same graph and options always give the same key, on any machine with the same
// toolchain. Pure and thread-safe.

#include <memory>

#include "absl/status/statusor.h"
#include "compiler/canon/canonical_graph.h"
#include "compiler/canon/toolchain.h"
#include "compiler/graph/graph.h"
#include "kiln/v1/compile.pb.h"
#include "kiln/v1/graph.pb.h"
#include "kiln/v1/key.pb.h"

namespace kiln::canon {

// OK when the options are well formed (a known target, codegen/target.h; a known precision
// policy); INVALID_ARGUMENT naming the field otherwise. A known target keys whether or not
// this build has a backend for it.
absl::Status ValidateOptions(const v1::CompileOptions& options);

// The key record of an imported graph in canonical form.
absl::StatusOr<v1::KeyRecord> ComputeKeyRecord(const CanonicalGraph& graph,
                                               const v1::CompileOptions& options,
                                               const Toolchain& toolchain = CurrentToolchain());

// A graph with everything needed to key and explain it.
struct KeyedGraph {
  std::unique_ptr<graph::Graph> graph;
  std::unique_ptr<CanonicalGraph> canonical;  // borrows *graph
  v1::CompileOptions options;
  v1::KeyRecord record;
};

// Imports (validating), canonicalizes and keys `proto` under `options`.
absl::StatusOr<KeyedGraph> KeyGraph(const v1::Graph& proto, const v1::CompileOptions& options,
                                    const Toolchain& toolchain = CurrentToolchain());

}  // namespace kiln::canon
