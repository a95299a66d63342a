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
    "aten._unsafe_index.Tensor(Tensor self, Tensor?[] indices) -> Tensor",
    "aten.index_put.default(Tensor self, Tensor?[] indices, Tensor values, "
    "bool accumulate=False) -> Tensor",
    "aten.index_add.default(Tensor self, int dim, Tensor index, Tensor source, *, "
    "Scalar alpha=1) -> Tensor",
    "aten.select_backward.default(Tensor grad_output, SymInt[] input_sizes, int dim, "
    "SymInt index) -> Tensor",
    "aten.slice_backward.default(Tensor grad_output, SymInt[] input_sizes, int dim, "
    "SymInt start, SymInt end, SymInt step) -> Tensor",
    "aten.slice_scatter.default(Tensor self, Tensor src, int dim=0, SymInt? start=None, "
    "SymInt? end=None, SymInt step=1) -> Tensor",
    "aten.select_scatter.default(Tensor self, Tensor src, int dim, SymInt index) -> Tensor",
    "aten.embedding.default(Tensor weight, Tensor indices, SymInt padding_idx=-1, "
    "bool scale_grad_by_freq=False, bool sparse=False) -> Tensor",
};

// The embedding gradient is a library call on every target. It is a scatter-add into rows
// the indices choose, and the two ways to parallelize it that a compiler's kernels have are
// both wrong here: float atomics (Inductor's) change the result from run to run, and a
// thread per column looping over every index in order is deterministic but serial (most of
// nanoGPT's backward on an H100). What makes it fast and deterministic is a sort of the
// indices, which the loop IR cannot express: PyTorch's CUDA kernel sorts them (a stable
// radix sort) and sums each row's contributions in index order, and the CPU runtime buckets
// them by row and sums each row in index order, a thread per block of rows. The CUDA kernel
// keeps the number of distinct rows on the device (no host synchronization, with or without
// scale_grad_by_freq), so a CUDA graph may capture it.
constexpr const char* kLibraryCalls[] = {
    "aten.embedding_dense_backward.default(Tensor grad_output, Tensor indices, "
    "SymInt num_weights, SymInt padding_idx, bool scale_grad_by_freq) -> Tensor",
};

}  // namespace

void AddIndexingOps(OpTable& t) {
  t.Add(Traits{}, kIndexing);
  t.Add(Traits{.extern_call = true}, kLibraryCalls);
}

}  // namespace kiln::ops
