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
#include <string>
#include <tuple>

#include "nn/layernorm.h"
#include "nn/layers.h"
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

namespace hg::nn {

// nn::TransformerEncoderLayer: PyTorch's, with its parameter names (self_attn.*, linear1, linear2,
// norm1, norm2) and one difference of default, batch_first = true as MultiheadAttention's:
//   post-norm (norm_first = false): x = norm1(x + sa(x)); x = norm2(x + ff(x))
//   pre-norm  (norm_first = true):  x = x + sa(norm1(x)); x = x + ff(norm2(x))
// sa = dropout(self-attention without weights), ff = dropout(linear2(dropout(act(linear1(x))))),
// act "relu" or "gelu". Masks as MultiheadAttention's (nonzero = may not attend).
struct TransformerEncoderLayerOptions {
  int64_t dim_feedforward = 2048;
  double dropout = 0.1;
  std::string activation = "relu";
  double layer_norm_eps = 1e-5;
  bool batch_first = true;
  bool norm_first = false;
  bool bias = true;
};

struct TransformerEncoderLayerForwardOptions {
  Tensor src_mask = {};
  Tensor src_key_padding_mask = {};
  bool is_causal = false;
};

class TransformerEncoderLayer : public Module {
 public:
  TransformerEncoderLayer(int64_t d_model, int64_t nhead, TransformerEncoderLayerOptions options = {});
  Tensor forward(const Tensor& src, TransformerEncoderLayerForwardOptions options);
  Tensor forward(const Tensor& src) override { return forward(src, {}); }
  using Module::operator();

  TransformerEncoderLayerOptions options;
  MultiheadAttention self_attn;
  Linear linear1, linear2;
  LayerNorm norm1, norm2;
  Dropout dropout, dropout1, dropout2;

 private:
  Tensor self_attention(const Tensor& x, const TransformerEncoderLayerForwardOptions& o);
  Tensor feed_forward(const Tensor& x);
};

}  // namespace hg::nn
