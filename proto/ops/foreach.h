#pragma once

// The _foreach_* ops optimizers record (torch.optim with foreach=True): one op applied to each
// element of tensor lists. Result i is the element op run on element i of every per-element
// argument and on the arguments all elements share (a scalar, a 0-d tensor, alpha), which is
// what PyTorch's reference ("slow") foreach kernels compute. The compiler writes each call as
// one call of the element op per element (compiler/graph/expand_foreach.h) and the
// interpreter runs them the same way: this table is what both read.

#include <cstddef>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace kiln::ops {

struct ForeachOp {
  std::string target;   // "aten._foreach_add.Scalar"
  std::string element;  // the op applied per element: "aten.add.Tensor"
  // The foreach schema's positional parameters in order. The element op takes the parameter
  // at the same position, except a name starting with '*', which it takes by that keyword.
  // Keyword-only arguments of the call (alpha) pass through unchanged.
  std::vector<std::string> params;
  // Which params are per element: a list (Tensor[], Scalar[]), or for the .Tensor overloads of
  // addcmul and addcdiv a 1-d tensor of one scalar per element.
  std::set<size_t> lists;

  // The parameter's name without its '*'.
  static std::string Name(const std::string& param) {
    return param[0] == '*' ? param.substr(1) : param;
  }
  static bool ByKeyword(const std::string& param) { return param[0] == '*'; }
};

// Every foreach op, sorted by target.
const std::vector<ForeachOp>& ForeachOps();

// The foreach op `target` names, or null.
const ForeachOp* FindForeach(absl::string_view target);

}  // namespace kiln::ops
