// Reductions over dims, and the ops that reduce along a dim but keep its size (scans and the
// softmax family).

#include "proto/ops/op_table.h"

namespace kiln::ops {
namespace {

constexpr const char* kReductions[] = {
    "aten.sum.default(Tensor self, *, ScalarType? dtype=None) -> Tensor",
    "aten.sum.dim_IntList(Tensor self, int[1]? dim, bool keepdim=False, *, "
    "ScalarType? dtype=None) -> Tensor",
    "aten.mean.default(Tensor self, *, ScalarType? dtype=None) -> Tensor",
    "aten.mean.dim(Tensor self, int[1]? dim, bool keepdim=False, *, ScalarType? dtype=None) "
    "-> Tensor",
    "aten.prod.default(Tensor self, *, ScalarType? dtype=None) -> Tensor",
    "aten.prod.dim_int(Tensor self, int dim, bool keepdim=False, *, ScalarType? dtype=None) "
    "-> Tensor",
    "aten.amax.default(Tensor self, int[1] dim=[], bool keepdim=False) -> Tensor",
    "aten.amin.default(Tensor self, int[1] dim=[], bool keepdim=False) -> Tensor",
    "aten.max.default(Tensor self) -> Tensor",
    "aten.min.default(Tensor self) -> Tensor",
    "aten.max.dim(Tensor self, int dim, bool keepdim=False) -> (Tensor values, Tensor indices)",
    "aten.min.dim(Tensor self, int dim, bool keepdim=False) -> (Tensor values, Tensor indices)",
    "aten.argmax.default(Tensor self, int? dim=None, bool keepdim=False) -> Tensor",
    "aten.argmin.default(Tensor self, int? dim=None, bool keepdim=False) -> Tensor",
    "aten.any.default(Tensor self) -> Tensor",
    "aten.any.dim(Tensor self, int dim, bool keepdim=False) -> Tensor",
    "aten.all.default(Tensor self) -> Tensor",
    "aten.all.dim(Tensor self, int dim, bool keepdim=False) -> Tensor",
    "aten.var.correction(Tensor self, int[1]? dim=None, *, Scalar? correction=None, "
    "bool keepdim=False) -> Tensor",
    "aten.std.correction(Tensor self, int[1]? dim=None, *, Scalar? correction=None, "
    "bool keepdim=False) -> Tensor",
    "aten.var_mean.correction(Tensor self, int[1]? dim=None, *, Scalar? correction=None, "
    "bool keepdim=False) -> (Tensor, Tensor)",
    "aten.logsumexp.default(Tensor self, int[1] dim, bool keepdim=False) -> Tensor",
};

constexpr const char* kAlongADim[] = {
    "aten.cumsum.default(Tensor self, int dim, *, ScalarType? dtype=None) -> Tensor",
    "aten._softmax.default(Tensor self, int dim, bool half_to_float) -> Tensor",
    "aten._safe_softmax.default(Tensor self, int dim, ScalarType? dtype=None) -> Tensor",
    "aten._softmax_backward_data.default(Tensor grad_output, Tensor output, int dim, "
    "ScalarType input_dtype) -> Tensor",
    "aten._log_softmax.default(Tensor self, int dim, bool half_to_float) -> Tensor",
    "aten._log_softmax_backward_data.default(Tensor grad_output, Tensor output, int dim, "
    "ScalarType input_dtype) -> Tensor",
};

}  // namespace

void AddReductionOps(OpTable& t) {
  t.Add(Traits{.reduction = true}, kReductions);
  t.Add(Traits{}, kAlongADim);
}

}  // namespace kiln::ops
