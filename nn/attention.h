// nn::MultiheadAttention: PyTorch's nn.MultiheadAttention, with the parameter names that make
// its safetensors load both ways -- in_proj_weight [3E, E] (q, k and v projections stacked),
// in_proj_bias [3E], out_proj.weight [E, E], out_proj.bias [E] -- and one difference of default:
// batch_first = true (inputs [B, L, E]; false: [L, B, E], PyTorch's default).
//
//   nn::MultiheadAttention mha(128, 4);
//   auto [y, weights] = mha.forward(x, x, x, {.need_weights = false});   // self-attention
//   Tensor y = mha(x);                                                   // the same, shorter
//
// Masks follow nn.MultiheadAttention, not scaled_dot_product_attention: an integer attn_mask
// ([L, S] or [B * H, L, S]) or key_padding_mask ([B, S]) marks with nonzero the keys a query may
// NOT attend to; floating masks are added to the scores. With need_weights = false the heads run
// on the fused scaled_dot_product_attention (memory linear in the length on the CPU); with
// need_weights = true (PyTorch's default) the probabilities are made explicitly and returned,
// averaged over the heads ([B, L, S]) or per head ([B, H, L, S]). Dropout on the probabilities in
// training mode only.
#pragma once
#include <tuple>

#include "nn/linear.h"
#include "nn/module.h"

namespace hg::nn {

struct MultiheadAttentionOptions {
  double dropout = 0.0;
  bool bias = true;
  bool batch_first = true;
};

struct MultiheadAttentionForwardOptions {
  Tensor key_padding_mask = {};
  bool need_weights = true;
  Tensor attn_mask = {};
  bool average_attn_weights = true;
  bool is_causal = false;  // query i attends to keys j <= i (in place of an attn_mask)
};

class MultiheadAttention : public Module {
 public:
  MultiheadAttention(int64_t embed_dim, int64_t num_heads, MultiheadAttentionOptions options = {});
  // (attn_output, attn_weights); attn_weights is undefined when need_weights is false.
  std::tuple<Tensor, Tensor> forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                     MultiheadAttentionForwardOptions options = {});
  // Self-attention without weights: forward(x, x, x, {.need_weights = false}).
  Tensor forward(const Tensor& x) override;
  using Module::operator();

  int64_t embed_dim, num_heads, head_dim;
  MultiheadAttentionOptions options;
  Tensor in_proj_weight, in_proj_bias;
  Linear out_proj;
};

}  // namespace hg::nn
