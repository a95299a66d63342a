// The functional collectives: library calls over a process group, ordered among themselves
// and never reordered; a CUDA graph captures them only with a capture-safe process group.

#include "proto/ops/op_table.h"

namespace kiln::ops {
namespace {

constexpr const char* kCollectives[] = {
    "_c10d_functional.all_reduce.default(Tensor input, str reduce_op, str group_name) -> Tensor",
    "_c10d_functional.all_reduce_coalesced.default(Tensor[] inputs, str reduce_op, "
    "str group_name) -> Tensor[]",
    "_c10d_functional.all_gather_into_tensor.default(Tensor input, int group_size, "
    "str group_name) -> Tensor",
    "_c10d_functional.all_gather_into_tensor_coalesced.default(Tensor[] inputs, int group_size, "
    "str group_name) -> Tensor[]",
    "_c10d_functional.reduce_scatter_tensor.default(Tensor input, str reduce_op, int group_size, "
    "str group_name) -> Tensor",
    "_c10d_functional.reduce_scatter_tensor_coalesced.default(Tensor[] inputs, str reduce_op, "
    "int group_size, str group_name) -> Tensor[]",
    "_c10d_functional.all_to_all_single.default(Tensor input, SymInt[] output_split_sizes, "
    "SymInt[] input_split_sizes, str group_name) -> Tensor",
    "_c10d_functional.broadcast.default(Tensor input, int src, str group_name) -> Tensor",
    "_c10d_functional.wait_tensor.default(Tensor tensor) -> Tensor",
};

}  // namespace

void AddCollectiveOps(OpTable& t) {
  t.Add(Traits{.extern_call = true, .collective = true, .capture_safe = false}, kCollectives);
}

}  // namespace kiln::ops
