#pragma once

// Binding a call of a known op to its schema (proto/ops/op_schema.h): which argument fills
// each parameter (by position or keyword), whether each argument has its parameter's type,
// and the defaults of the parameters left out. Import binds every call of a known op, so
// that later phases find one argument per parameter, in schema order.
//
// Errors are INVALID_ARGUMENT carrying a kiln.v1.FieldViolation (proto/error_detail.h) that
// names the node and the argument ("args[1]", "kwargs.alpha"). Pure and thread-safe.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "compiler/graph/graph.h"
#include "proto/ops/op_schema.h"

namespace kiln::graph {

// Where one parameter of a call takes its value from.
struct ParamSource {
  enum class From : uint8_t { kDefault, kPositional, kKeyword };
  From from = From::kDefault;
  int index = -1;     // into the call's positional or keyword arguments
  std::string field;  // "args[1]" or "kwargs.alpha": where errors about the value point
};

// Assigns a call's positional arguments and its keyword arguments (named `keywords`, in
// the order given) to the parameters of `schema`: one source per parameter. Errors: more
// positional arguments than the schema has positional parameters, a keyword the schema does
// not name, a parameter given both ways. A parameter left out is kDefault here, whether or
// not it has a default (BindToSchema checks that).
absl::StatusOr<std::vector<ParamSource>> BindParams(absl::string_view node,
                                                    const ops::OpSchema& schema,
                                                    size_t num_positional,
                                                    absl::Span<const std::string> keywords);

// OK when `arg` has the type of `param` (None where the parameter is optional). Reads the
// kinds of referenced values and list items from `graph`.
absl::Status CheckArgType(const Graph& graph, absl::string_view node, const std::string& field,
                          const ops::ParamSchema& param, const Arg& arg);

// `arg` for messages: "int 3", "a tensor (\"mm\")", "symbolic \"s0 + 1\"", ...
std::string DescribeArg(const Graph& graph, const Arg& arg);

// The default of `param` as an argument. A str default is interned with `intern`; a list
// default appends its items to `pool` and points at them.
Arg DefaultArg(const ops::ParamSchema& param,
               absl::FunctionRef<uint32_t(const std::string&)> intern, std::vector<Arg>& pool);

// A call's arguments as import converted them.
struct CallArgs {
  absl::Span<const Arg> positional;
  absl::Span<const Arg> keyword;
  absl::Span<const std::string> keyword_names;  // one per keyword argument
};

// A Python number where `op`'s schema says Tensor (aten.mul.Tensor(x, 0.5), which AOTAutograd
// writes constantly): PyTorch wraps it as a 0-d "wrapped number" whose type promotion is a
// scalar's (a float does not promote a bf16 tensor), which is exactly what the op's Scalar
// overload computes (aten.mul.Scalar(x, 0.5)). Returns that overload: the one entry of the
// same op whose parameters have the same names and types except that each Tensor parameter
// given a number is a Scalar. nullptr when no Tensor parameter got a number, when the call
// does not bind, or when the op has no such overload (binding then reports the argument).
const ops::Op* ScalarOverload(const ops::Op& op, const CallArgs& call);

// Binds `call` to `schema` (BindParams), checks every argument's type and that every
// parameter left out has a default, then appends one argument per parameter to `pool`,
// followed by the items of list defaults. `pool` may be the argument pool `graph` reads:
// nothing is appended until every check has passed.
absl::Status BindToSchema(const Graph& graph, absl::string_view node, const ops::OpSchema& schema,
                          const CallArgs& call,
                          absl::FunctionRef<uint32_t(const std::string&)> intern,
                          std::vector<Arg>& pool);

}  // namespace kiln::graph
