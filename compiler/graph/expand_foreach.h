#pragma once

// Foreach calls (proto/ops/foreach.h) written out as one call of their element op per
// element, so that the optimizer step a trainer compiles lowers like any other pointwise
// code instead of running as eager fallbacks. `getitem(call, i)` becomes a reference to
// element i's call. Element i of call "x" is named "x[i]" and keeps its stack trace.
//
// A call is left as it is when it cannot be written out element by element: its lists
// differ in length from its results, a per-element argument is not a list (the .Tensor
// overloads' 1-d tensor of scalars), an element call would take a name the graph already
// uses, or its result is used other than through getitem or an element reference.

#include <optional>

#include "kiln/v1/graph.pb.h"

namespace kiln::graph {

// The graph with its foreach calls written out, or nullopt when none could be. `proto` must
// have imported (its references resolve, in order).
std::optional<v1::Graph> ExpandForeach(const v1::Graph& proto);

}  // namespace kiln::graph
