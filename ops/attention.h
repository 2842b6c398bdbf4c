// scaled_dot_product_attention: softmax(q k^T * scale + mask) v over the last two dims, as
// PyTorch's torch.nn.functional.scaled_dot_product_attention.
//
//   q [..., L, E], k [..., S, E], v [..., S, Ev] (the same batch dims, rank >= 2) -> [..., L, Ev]
//   .attn_mask  broadcast to [..., L, S]: an integer mask (u8, nonzero = the key takes part, as
//               PyTorch's bool mask) or a floating one added to the scores; it gets no gradient
//   .dropout_p  dropout on the probabilities (always applied when > 0, as PyTorch's function:
//               modules pass 0 in eval); the mask comes from the Philox stream, so manual_seed
//               replays it
//   .is_causal  query i sees keys j <= i (PyTorch's tril(ones(L, S))); not with .attn_mask
//   .scale      default 1 / sqrt(E)
// A query row whose keys are all masked gives NaN, as PyTorch's softmax of a row of -inf.
//
// CPU without dropout: one fused kernel (kernels/attention.h, FlashAttention-2's online softmax):
// memory O(T * D), never the T x T matrix, also in backward. With dropout, and on CUDA for now,
// the composition matmul -> softmax -> dropout -> matmul (the T x T matrix is materialised).
// Autocast: Lower (PyTorch's list); 16-bit inputs are computed in f32 inside and rounded once.
#pragma once
#include <optional>

#include "core/tensor.h"

namespace hg {

struct ScaledDotProductAttentionOptions {
  Tensor attn_mask = {};
  double dropout_p = 0.0;
  bool is_causal = false;
  std::optional<double> scale = std::nullopt;
};

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    ScaledDotProductAttentionOptions options = {});

// softmax(q k^T * scale + additive_mask) with query i seeing keys j <= i when is_causal: the
// [..., L, S] probabilities the fused kernel never materialises, from differentiable ops (the
// composed attention's first half; nn::MultiheadAttention's need_weights).
Tensor attention_probabilities(const Tensor& q, const Tensor& k, const Tensor& additive_mask, bool is_causal,
                               double scale);

}  // namespace hg
