// Scaled-dot-product attention: library calls of the runtime.

#include "proto/ops/op_table.h"

namespace kiln::ops {
namespace {

// The forward ops draw their dropout mask from the next Philox stream, whatever dropout_p
// is: streams are numbered before values are known.
constexpr const char* kForward[] = {
    "aten._scaled_dot_product_efficient_attention.default(Tensor query, Tensor key, "
    "Tensor value, Tensor? attn_bias, bool compute_log_sumexp, float dropout_p=0.0, "
    "bool is_causal=False, *, float? scale=None) "
    "-> (Tensor output, Tensor log_sumexp, Tensor philox_seed, Tensor philox_offset)",
    "aten._scaled_dot_product_cudnn_attention.default(Tensor query, Tensor key, Tensor value, "
    "Tensor? attn_bias, bool compute_log_sumexp, float dropout_p=0.0, bool is_causal=False, "
    "bool return_debug_mask=False, *, float? scale=None) -> (Tensor output, Tensor logsumexp, "
    "Tensor cum_seq_q, Tensor cum_seq_k, SymInt max_q, SymInt max_k, Tensor philox_seed, "
    "Tensor philox_offset, Tensor debug_attn_mask)",
};

// The backward ops replay the mask from philox_seed and philox_offset.
constexpr const char* kBackward[] = {
    "aten._scaled_dot_product_efficient_attention_backward.default(Tensor grad_out_, "
    "Tensor query, Tensor key, Tensor value, Tensor? attn_bias, Tensor out, Tensor logsumexp, "
    "Tensor philox_seed, Tensor philox_offset, float dropout_p, bool[4] grad_input_mask, "
    "bool is_causal=False, *, float? scale=None) -> (Tensor, Tensor, Tensor, Tensor)",
    "aten._scaled_dot_product_cudnn_attention_backward.default(Tensor grad_out, Tensor query, "
    "Tensor key, Tensor value, Tensor out, Tensor logsumexp, Tensor philox_seed, "
    "Tensor philox_offset, Tensor? attn_bias, Tensor? cum_seq_q, Tensor? cum_seq_k, "
    "SymInt max_q, SymInt max_k, float dropout_p, bool is_causal, *, float? scale=None) "
    "-> (Tensor, Tensor, Tensor)",
};

// The flash forms, forward then backward: the runtime does not implement them, so they run as
// fallback steps.
constexpr const char* kFlashForward[] = {
    "aten._scaled_dot_product_flash_attention.default(Tensor query, Tensor key, Tensor value, "
    "float dropout_p=0.0, bool is_causal=False, bool return_debug_mask=False, *, "
    "float? scale=None) -> (Tensor output, Tensor logsumexp, Tensor cum_seq_q, "
    "Tensor cum_seq_k, SymInt max_q, SymInt max_k, Tensor rng_state, Tensor unused, "
    "Tensor debug_attn_mask)",
};
constexpr const char* kFlashBackward[] = {
    "aten._scaled_dot_product_flash_attention_backward.default(Tensor grad_out, Tensor query, "
    "Tensor key, Tensor value, Tensor out, Tensor logsumexp, Tensor cum_seq_q, "
    "Tensor cum_seq_k, SymInt max_q, SymInt max_k, float dropout_p, bool is_causal, "
    "Tensor philox_seed, Tensor philox_offset, *, float? scale=None) "
    "-> (Tensor grad_query, Tensor grad_key, Tensor grad_value)",
};

}  // namespace

void AddAttentionOps(OpTable& t) {
  t.Add(Traits{.extern_call = true, .attention = true, .random = true}, kForward);
  t.Add(Traits{.extern_call = true, .attention = true}, kBackward);
  t.Add(Traits{.attention = true, .random = true}, kFlashForward);
  t.Add(Traits{.attention = true}, kFlashBackward);
}

}  // namespace kiln::ops
