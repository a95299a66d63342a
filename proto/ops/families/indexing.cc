// Indexing: gathers, scatters, embeddings and the backward of slicing.

#include "proto/ops/op_table.h"

namespace kiln::ops {
namespace {

constexpr const char* kIndexing[] = {
    "aten.index_select.default(Tensor self, int dim, Tensor index) -> Tensor",
    "aten.gather.default(Tensor self, int dim, Tensor index, *, bool sparse_grad=False) -> Tensor",
    "aten.scatter.src(Tensor self, int dim, Tensor index, Tensor src) -> Tensor",
    "aten.scatter.value(Tensor self, int dim, Tensor index, Scalar value) -> Tensor",
    "aten.scatter_add.default(Tensor self, int dim, Tensor index, Tensor src) -> Tensor",
    "aten.index.Tensor(Tensor self, Tensor?[] indices) -> Tensor",
    "aten.index_put.default(Tensor self, Tensor?[] indices, Tensor values, "
    "bool accumulate=False) -> Tensor",
    "aten.index_add.default(Tensor self, int dim, Tensor index, Tensor source, *, "
    "Scalar alpha=1) -> Tensor",
    "aten.select_backward.default(Tensor grad_output, SymInt[] input_sizes, int dim, "
    "SymInt index) -> Tensor",
    "aten.slice_backward.default(Tensor grad_output, SymInt[] input_sizes, int dim, "
    "SymInt start, SymInt end, SymInt step) -> Tensor",
    "aten.embedding.default(Tensor weight, Tensor indices, SymInt padding_idx=-1, "
    "bool scale_grad_by_freq=False, bool sparse=False) -> Tensor",
    "aten.embedding_dense_backward.default(Tensor grad_output, Tensor indices, "
    "SymInt num_weights, SymInt padding_idx, bool scale_grad_by_freq) -> Tensor",
};

}  // namespace

void AddIndexingOps(OpTable& t) { t.Add(Traits{}, kIndexing); }

}  // namespace kiln::ops
