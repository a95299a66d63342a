#include "proto/ops/foreach.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace kiln::ops {
namespace {

std::vector<ForeachOp> MakeForeachOps() {
  std::vector<ForeachOp> ops;
  auto add = [&](std::string name, std::string element, std::vector<std::string> params,
                 std::set<size_t> lists) {
    ops.push_back({absl::StrCat("aten._foreach_", name), absl::StrCat("aten.", element),
                   std::move(params), std::move(lists)});
  };
  // Unary ops.
  for (const char* name :
       {"abs",   "acos", "asin",  "atan",       "ceil",  "cos",    "cosh",    "erf",
        "erfc",  "exp",  "expm1", "floor",      "frac",  "lgamma", "log",     "log10",
        "log1p", "log2", "neg",   "reciprocal", "round", "rsqrt",  "sigmoid", "sign",
        "sin",   "sinh", "sqrt",  "tan",        "tanh",  "trunc"}) {
    add(absl::StrCat(name, ".default"), absl::StrCat(name, ".default"), {"self"}, {0});
  }
  // Binary ops: a list with a shared scalar, with another list, with one scalar per element,
  // or with a shared 0-d tensor. alpha (add, sub) is keyword-only.
  for (const char* name : {"add", "sub", "mul", "div"}) {
    const std::string op = absl::StrCat(name, ".Tensor");
    add(absl::StrCat(name, ".Scalar"), op, {"self", "scalar"}, {0});
    add(absl::StrCat(name, ".List"), op, {"self", "other"}, {0, 1});
    add(absl::StrCat(name, ".ScalarList"), op, {"self", "scalars"}, {0, 1});
  }
  for (const char* name : {"add", "mul", "div"}) {
    add(absl::StrCat(name, ".Tensor"), absl::StrCat(name, ".Tensor"), {"self", "other"}, {0});
  }
  // maximum and minimum are clamp_min and clamp_max, as PyTorch implements them.
  for (const auto& [name, clamp] :
       std::vector<std::pair<std::string, std::string>>{{"clamp_min", "clamp_min"},
                                                        {"clamp_max", "clamp_max"},
                                                        {"maximum", "clamp_min"},
                                                        {"minimum", "clamp_max"}}) {
    add(name + ".Scalar", clamp + ".default", {"self", "scalar"}, {0});
    add(name + ".List", clamp + ".Tensor", {"self", "other"}, {0, 1});
    add(name + ".ScalarList", clamp + ".default", {"self", "scalars"}, {0, 1});
  }
  add("pow.List", "pow.Tensor_Tensor", {"self", "exponent"}, {0, 1});
  add("pow.Scalar", "pow.Tensor_Scalar", {"self", "exponent"}, {0});
  add("pow.ScalarList", "pow.Tensor_Scalar", {"self", "exponent"}, {0, 1});
  add("pow.ScalarAndTensor", "pow.Scalar", {"self", "exponent"}, {1});
  // Ternary ops.
  for (const char* name : {"addcmul", "addcdiv"}) {
    const std::string op = absl::StrCat(name, ".default");
    add(absl::StrCat(name, ".Scalar"), op, {"self", "tensor1", "tensor2", "value"}, {0, 1, 2});
    add(absl::StrCat(name, ".ScalarList"), op, {"self", "tensor1", "tensor2", "scalars"},
        {0, 1, 2, 3});
    add(absl::StrCat(name, ".Tensor"), op, {"self", "tensor1", "tensor2", "scalars"}, {0, 1, 2, 3});
  }
  add("lerp.List", "lerp.Tensor", {"self", "tensors1", "weights"}, {0, 1, 2});
  add("lerp.Scalar", "lerp.Scalar", {"self", "tensors1", "weight"}, {0, 1});
  add("lerp.ScalarList", "lerp.Scalar", {"self", "tensors1", "weight"}, {0, 1, 2});
  // Copies and norms.
  add("copy.default", "copy.default", {"self", "src", "non_blocking"}, {0, 1});
  add("norm.Scalar", "linalg_vector_norm.default", {"self", "ord", "*dtype"}, {0});
  std::sort(ops.begin(), ops.end(),
            [](const ForeachOp& a, const ForeachOp& b) { return a.target < b.target; });
  return ops;
}

}  // namespace

const std::vector<ForeachOp>& ForeachOps() {
  static const std::vector<ForeachOp>* ops = new std::vector<ForeachOp>(MakeForeachOps());
  return *ops;
}

const ForeachOp* FindForeach(absl::string_view target) {
  const std::vector<ForeachOp>& ops = ForeachOps();
  auto it =
      std::lower_bound(ops.begin(), ops.end(), target,
                       [](const ForeachOp& op, absl::string_view t) { return op.target < t; });
  return it != ops.end() && it->target == target ? &*it : nullptr;
}

}  // namespace kiln::ops
