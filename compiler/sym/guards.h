#pragma once

// The guards of a compiled graph, parsed once and checked against symbol values, and the
// check of symbol values against their ShapeEnv ranges.
//
// A CompiledGuards holds every ShapeEnv guard (sympy form, over the graph's symbols) and
// the Python-form guard expression (over L['tN']); Check evaluates them in that order and
// reports the first one that does not hold, with the values it saw:
// "guard miss: `Eq(s0, 128)` is false at s0=64". Immutable after Compile; safe to share
// across threads.

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "compiler/sym/expr.h"
#include "kiln/v1/graph.pb.h"

namespace kiln::sym {

// The values a graph was captured with: each symbol's hint under its name, and for the N-th
// symbolic-scalar input (inputs whose meta is `symbolic`, in input order) the binding of
// L['tN']: its symbol when the input's expression is a bare symbol (python_inputs[N]),
// otherwise the expression's value at the hints, bound under "L['tN']". Symbols without a
// hint stay unbound. INVALID_ARGUMENT names the input whose expression does not parse.
absl::StatusOr<Bindings> BindingsFromGraph(const v1::Graph& graph);

// The outcome of checking guards or ranges.
struct GuardCheck {
  bool holds = true;    // every guard holds (every symbol is in range)
  std::string field;    // the failed guard's field: "guards.shape_env[2]", "symbols[0]"
  std::string guard;    // the failed guard's text as written, or the range
  std::string message;  // for people: "guard miss: `Eq(s0, 128)` is false at s0=64"
  absl::Status error;   // why the guard could not be evaluated (OK when it was false)
};

class CompiledGuards {
 public:
  // Parses every guard. INVALID_ARGUMENT names the field at fault ("guards.shape_env[2]",
  // "guards.python_expr") with the parse error. An empty python_expr means no such guard.
  static absl::StatusOr<CompiledGuards> Compile(const v1::Guards& guards);

  // Evaluates the guards in order (shape_env, then python_expr) and stops at the first one
  // that is false or cannot be evaluated (an unbound symbol, a division by zero): neither
  // proves the graph valid for these values, so both are a miss.
  GuardCheck Check(const Bindings& bindings) const;

  size_t size() const { return guards_.size(); }

 private:
  struct Guard {
    std::string field;
    std::string text;
    ExprPtr expr;
  };
  std::vector<Guard> guards_;
};

// Checks every bound symbol of `graph` against its range (Symbol.lower/upper; infinite or
// absent ends do not limit). Symbols without a binding are not checked.
GuardCheck CheckSymbolRanges(const v1::Graph& graph, const Bindings& bindings);

}  // namespace kiln::sym
