#pragma once

// Explains why two compile keys differ: the first differing component (in the order
// format, toolchain, options, inputs, graph, outputs) and, for the graph, the first node
// in canonical order that has no counterpart in the other graph, with the field that
// differs: "differs in component graph, first at node 17 (aten.mul.Tensor) arg 1 (other):
// 2.0 vs 3.0". Nodes are matched by identity (canonical_graph.h), so a change to one node
// is reported at that node, not at the nodes whose positions it shifted.
//
// From two records alone the answer names the component and node; with the graphs it
// also names the field and both values. Node positions count graph inputs first.
// Pure and thread-safe.

#include "compiler/canon/compile_key.h"
#include "kiln/v1/admin.pb.h"
#include "kiln/v1/key.pb.h"

namespace kiln::canon {

v1::ExplainResponse Explain(const v1::KeyRecord& a, const v1::KeyRecord& b);

v1::ExplainResponse Explain(const KeyedGraph& a, const KeyedGraph& b);

}  // namespace kiln::canon
