// Python operators on symbolic scalars and shape queries: computed from metadata, never
// from tensor elements.

#include "proto/ops/op_table.h"

namespace kiln::ops {
namespace {

constexpr const char* kScalarOps[] = {
    "operator.getitem(Any a, int b) -> Tuple",
    "operator.add(Scalar a, Scalar b) -> Scalar",
    "operator.sub(Scalar a, Scalar b) -> Scalar",
    "operator.mul(Scalar a, Scalar b) -> Scalar",
    "operator.floordiv(Scalar a, Scalar b) -> Scalar",
    "operator.truediv(Scalar a, Scalar b) -> Scalar",
    "operator.mod(Scalar a, Scalar b) -> Scalar",
    "operator.pow(Scalar a, Scalar b) -> Scalar",
    "operator.neg(Scalar a) -> Scalar",
    "operator.eq(Scalar a, Scalar b) -> Scalar",
    "operator.ne(Scalar a, Scalar b) -> Scalar",
    "operator.lt(Scalar a, Scalar b) -> Scalar",
    "operator.le(Scalar a, Scalar b) -> Scalar",
    "operator.gt(Scalar a, Scalar b) -> Scalar",
    "operator.ge(Scalar a, Scalar b) -> Scalar",
    "aten.sym_size.int(Tensor self, int dim) -> SymInt",
    "aten.sym_stride.int(Tensor self, int dim) -> SymInt",
    "aten.sym_numel.default(Tensor self) -> SymInt",
    "aten.sym_storage_offset.default(Tensor self) -> SymInt",
    "aten._assert_scalar.default(Scalar self, str assert_msg) -> ()",
};

}  // namespace

void AddScalarOps(OpTable& t) { t.Add(Traits{}, kScalarOps); }

}  // namespace kiln::ops
