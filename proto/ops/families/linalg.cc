// Matrix products and convolution.

#include "proto/ops/op_table.h"

namespace kiln::ops {
namespace {

// Library calls of the runtime.
constexpr const char* kLibraryCalls[] = {
    "aten.mm.default(Tensor self, Tensor mat2) -> Tensor",
    "aten.bmm.default(Tensor self, Tensor mat2) -> Tensor",
    "aten.convolution.default(Tensor input, Tensor weight, Tensor? bias, SymInt[] stride, "
    "SymInt[] padding, SymInt[] dilation, bool transposed, SymInt[] output_padding, "
    "SymInt groups) -> Tensor",
    "aten.convolution_backward.default(Tensor grad_output, Tensor input, Tensor weight, "
    "SymInt[]? bias_sizes, SymInt[] stride, SymInt[] padding, SymInt[] dilation, "
    "bool transposed, SymInt[] output_padding, SymInt groups, bool[3] output_mask) "
    "-> (Tensor, Tensor, Tensor)",
};

// The product is an extern call; the compiler adds the bias and the scaling itself, so
// that they fuse with what follows -- unless the result is stored anyway, where the library
// adds the bias as it writes the product.
constexpr const char* kWithEpilogue[] = {
    "aten.addmm.default(Tensor self, Tensor mat1, Tensor mat2, *, Scalar beta=1, "
    "Scalar alpha=1) -> Tensor",
    "aten.baddbmm.default(Tensor self, Tensor batch1, Tensor batch2, *, Scalar beta=1, "
    "Scalar alpha=1) -> Tensor",
};

}  // namespace

void AddLinalgOps(OpTable& t) {
  t.Add(Traits{.extern_call = true}, kLibraryCalls);
  t.Add(Traits{.extern_when_stored = true}, kWithEpilogue);
}

}  // namespace kiln::ops
