// Pooling, normalization and losses.

#include "proto/ops/op_table.h"

namespace kiln::ops {
namespace {

constexpr const char* kPooling[] = {
    "aten.max_pool2d_with_indices.default(Tensor self, int[2] kernel_size, int[2] stride=[], "
    "int[2] padding=0, int[2] dilation=1, bool ceil_mode=False) -> (Tensor, Tensor)",
    "aten.max_pool2d_with_indices_backward.default(Tensor grad_output, Tensor self, "
    "int[2] kernel_size, int[2] stride, int[2] padding, int[2] dilation, bool ceil_mode, "
    "Tensor indices) -> Tensor",
    "aten.avg_pool2d.default(Tensor self, int[2] kernel_size, int[2] stride=[], "
    "int[2] padding=0, bool ceil_mode=False, bool count_include_pad=True, "
    "int? divisor_override=None) -> Tensor",
    "aten.avg_pool2d_backward.default(Tensor grad_output, Tensor self, int[2] kernel_size, "
    "int[2] stride, int[2] padding, bool ceil_mode, bool count_include_pad, "
    "int? divisor_override) -> Tensor",
    "aten._adaptive_avg_pool2d.default(Tensor self, SymInt[2] output_size) -> Tensor",
    "aten._adaptive_avg_pool2d_backward.default(Tensor grad_output, Tensor self) -> Tensor",
};

constexpr const char* kNormalizationAndLosses[] = {
    "aten.native_layer_norm.default(Tensor input, SymInt[] normalized_shape, Tensor? weight, "
    "Tensor? bias, float eps) -> (Tensor, Tensor, Tensor)",
    "aten.native_layer_norm_backward.default(Tensor grad_out, Tensor input, "
    "SymInt[] normalized_shape, Tensor mean, Tensor rstd, Tensor? weight, Tensor? bias, "
    "bool[3] output_mask) -> (Tensor, Tensor, Tensor)",
    "aten.native_group_norm.default(Tensor input, Tensor? weight, Tensor? bias, SymInt N, "
    "SymInt C, SymInt HxW, int group, float eps) -> (Tensor, Tensor, Tensor)",
    "aten._native_batch_norm_legit_functional.default(Tensor input, Tensor? weight, "
    "Tensor? bias, Tensor running_mean, Tensor running_var, bool training, float momentum, "
    "float eps) -> (Tensor, Tensor, Tensor, Tensor, Tensor)",
    "aten._native_batch_norm_legit_no_training.default(Tensor input, Tensor? weight, "
    "Tensor? bias, Tensor running_mean, Tensor running_var, float momentum, float eps) "
    "-> (Tensor, Tensor, Tensor)",
    "aten.native_batch_norm_backward.default(Tensor grad_out, Tensor input, Tensor? weight, "
    "Tensor? running_mean, Tensor? running_var, Tensor? save_mean, Tensor? save_invstd, "
    "bool train, float eps, bool[3] output_mask) -> (Tensor, Tensor, Tensor)",
    "aten.mse_loss.default(Tensor self, Tensor target, int reduction=1) -> Tensor",
    "aten.mse_loss_backward.default(Tensor grad_output, Tensor self, Tensor target, "
    "int reduction) -> Tensor",
    "aten.nll_loss_forward.default(Tensor self, Tensor target, Tensor? weight, int reduction, "
    "SymInt ignore_index) -> (Tensor output, Tensor total_weight)",
    "aten.nll_loss_backward.default(Tensor grad_output, Tensor self, Tensor target, "
    "Tensor? weight, int reduction, SymInt ignore_index, Tensor total_weight) -> Tensor",
};

}  // namespace

void AddNnOps(OpTable& t) {
  t.Add(Traits{}, kPooling);
  t.Add(Traits{}, kNormalizationAndLosses);
}

}  // namespace kiln::ops
