// nn::MultiheadAttention (see attention.h): project, split into heads, attend, merge, project.
#include "nn/attention.h"

#include <cmath>
#include <limits>

#include "nn/init.h"
#include "ops/activation.h"
#include "ops/attention.h"
#include "ops/dropout.h"
#include "ops/elementwise.h"
#include "ops/linalg.h"
#include "ops/masking.h"
#include "ops/reduce.h"
#include "ops/shape.h"

namespace hg::nn {

namespace {

constexpr std::string_view kName = "MultiheadAttention";

// A PyTorch MHA mask as an additive one of `dtype`: nonzero integer = -inf (not attended).
Tensor additive(const Tensor& mask, DType dtype) {
  if (is_floating(mask.dtype())) return mask.to(dtype);
  return masked_fill(zeros(mask.shape(), {.dtype = dtype, .device = mask.device()}), mask,
                     -std::numeric_limits<double>::infinity());
}

}  // namespace

MultiheadAttention::MultiheadAttention(int64_t embed_dim_, int64_t num_heads_, MultiheadAttentionOptions opts)
    : embed_dim(embed_dim_), num_heads(num_heads_), head_dim(0), options(opts),
      out_proj(embed_dim_ > 0 ? embed_dim_ : 1, embed_dim_ > 0 ? embed_dim_ : 1, opts.bias) {
  HG_CHECK(embed_dim > 0 && num_heads > 0 && embed_dim % num_heads == 0, kName, ": embed_dim (", embed_dim,
           ") must be positive and divisible by num_heads (", num_heads, ")");
  HG_CHECK(opts.dropout >= 0 && opts.dropout < 1, kName, ": dropout must be in [0, 1), got ", opts.dropout);
  head_dim = embed_dim / num_heads;
  // PyTorch's initialisation: xavier_uniform_ projections, zero biases (out_proj's too).
  in_proj_weight = register_parameter("in_proj_weight", empty({3 * embed_dim, embed_dim}));
  init::xavier_uniform_(in_proj_weight);
  if (opts.bias) {
    in_proj_bias = register_parameter("in_proj_bias", zeros({3 * embed_dim}));
    init::zeros_(out_proj.bias);
  }
  register_module("out_proj", out_proj);
}

Tensor MultiheadAttention::forward(const Tensor& x) { return std::get<0>(forward(x, x, x, {.need_weights = false})); }

std::tuple<Tensor, Tensor> MultiheadAttention::forward(const Tensor& query_in, const Tensor& key_in,
                                                       const Tensor& value_in, MultiheadAttentionForwardOptions o) {
  HG_CHECK(query_in.dim() == 3 && key_in.dim() == 3 && value_in.dim() == 3, kName, ": expected 3-D query, key and value (",
           options.batch_first ? "[B, L, E]" : "[L, B, E]", "), got ", query_in.shape(), ", ", key_in.shape(), " and ",
           value_in.shape());
  HG_CHECK(is_floating(query_in.dtype()) && is_floating(key_in.dtype()) && is_floating(value_in.dtype()), kName,
           ": expected floating query, key and value (linear projections into scaled_dot_product_attention), got ",
           query_in.dtype(), ", ", key_in.dtype(), " and ", value_in.dtype());
  const Tensor query = options.batch_first ? query_in : query_in.transpose(0, 1);
  const Tensor key = options.batch_first ? key_in : key_in.transpose(0, 1);
  const Tensor value = options.batch_first ? value_in : value_in.transpose(0, 1);
  const int64_t B = query.shape()[0], L = query.shape()[1], S = key.shape()[1];
  HG_CHECK(query.shape()[2] == embed_dim && key.shape()[2] == embed_dim && value.shape()[2] == embed_dim, kName,
           ": query, key and value must end in embed_dim = ", embed_dim, ", got ", query_in.shape(), ", ",
           key_in.shape(), " and ", value_in.shape());
  HG_CHECK(key.shape()[0] == B && value.shape()[0] == B && value.shape()[1] == S, kName,
           ": key and value must have the query's batch and one length, got ", query_in.shape(), ", ", key_in.shape(),
           " and ", value_in.shape());
  HG_CHECK(!(o.is_causal && o.attn_mask.defined()), kName, ": give is_causal or attn_mask, not both");

  // The three projections: one GEMM when query, key and value are the same tensor.
  const auto part = [&](int i) { return narrow(in_proj_weight, 0, i * embed_dim, embed_dim); };
  const auto part_bias = [&](int i) { return in_proj_bias.defined() ? narrow(in_proj_bias, 0, i * embed_dim, embed_dim) : Tensor(); };
  Tensor q, k, v;
  if (query_in.is_same(key_in) && key_in.is_same(value_in)) {
    const std::vector<Tensor> qkv = chunk(linear(query, in_proj_weight, in_proj_bias), 3, -1);
    q = qkv[0], k = qkv[1], v = qkv[2];
  } else {
    q = linear(query, part(0), part_bias(0));
    k = linear(key, part(1), part_bias(1));
    v = linear(value, part(2), part_bias(2));
  }
  // [B, T, E] -> [B, H, T, head_dim]: views the fused kernel reads in place, through their strides
  const auto heads = [&](const Tensor& t, int64_t T) { return t.reshape({B, T, num_heads, head_dim}).transpose(1, 2); };
  q = heads(q, L), k = heads(k, S), v = heads(v, S);

  // One additive mask [B or 1, H or 1, L, S] from attn_mask and key_padding_mask.
  const DType mask_dtype = q.dtype();
  Tensor mask;
  if (o.attn_mask.defined()) {
    const Tensor m = o.attn_mask;
    HG_CHECK((m.dim() == 2 && m.shape() == Shape{L, S}) || (m.dim() == 3 && m.shape() == Shape{B * num_heads, L, S}),
             kName, ": attn_mask must be [L, S] = [", L, ", ", S, "] or [B * num_heads, L, S] = [", B * num_heads, ", ",
             L, ", ", S, "], got ", m.shape());
    mask = additive(m, mask_dtype);
    if (m.dim() == 3) mask = mask.reshape({B, num_heads, L, S});
  }
  if (o.key_padding_mask.defined()) {
    HG_CHECK((o.key_padding_mask.shape() == Shape{B, S}), kName, ": key_padding_mask must be [B, S] = [", B, ", ", S,
             "], got ", o.key_padding_mask.shape());
    const Tensor padding = additive(o.key_padding_mask, mask_dtype).reshape({B, 1, 1, S});
    mask = mask.defined() ? mask + padding : padding;
  }
  const double p = is_training() ? options.dropout : 0.0;
  Tensor attended, weights;
  if (!o.need_weights) {
    attended = scaled_dot_product_attention(q, k, v, {.attn_mask = mask, .dropout_p = p, .is_causal = o.is_causal});
  } else {
    weights = attention_probabilities(q, k, mask, o.is_causal, 1.0 / std::sqrt(double(head_dim)));
    if (p > 0) weights = dropout(weights, p, true);
    attended = matmul(weights, v);
    if (o.average_attn_weights) weights = mean(weights, {1});
  }
  // [B, H, L, head_dim] -> [B, L, E]: a view after the fused op (it returns the transpose of a
  // contiguous [B, L, H, head_dim], kernels/attention.h), a copy after the need_weights path.
  Tensor out = out_proj(attended.transpose(1, 2).reshape({B, L, embed_dim}));
  if (!options.batch_first) out = out.transpose(0, 1);
  return {out, weights};
}

}  // namespace hg::nn

namespace hg::nn {

TransformerEncoderLayer::TransformerEncoderLayer(int64_t d_model, int64_t nhead, TransformerEncoderLayerOptions opts)
    : options(opts),
      self_attn(d_model, nhead, {.dropout = opts.dropout, .bias = opts.bias, .batch_first = opts.batch_first}),
      linear1(d_model, opts.dim_feedforward, opts.bias), linear2(opts.dim_feedforward, d_model, opts.bias),
      norm1({d_model}, {.eps = opts.layer_norm_eps}), norm2({d_model}, {.eps = opts.layer_norm_eps}),
      dropout(opts.dropout), dropout1(opts.dropout), dropout2(opts.dropout) {
  HG_CHECK(opts.activation == "relu" || opts.activation == "gelu",
           "TransformerEncoderLayer: activation must be \"relu\" or \"gelu\", got \"", opts.activation, "\"");
  HG_CHECK(opts.dim_feedforward > 0, "TransformerEncoderLayer: dim_feedforward must be positive, got ",
           opts.dim_feedforward);
  register_module("self_attn", self_attn);
  register_module("linear1", linear1);
  register_module("dropout", dropout);
  register_module("linear2", linear2);
  register_module("norm1", norm1);
  register_module("norm2", norm2);
  register_module("dropout1", dropout1);
  register_module("dropout2", dropout2);
}

Tensor TransformerEncoderLayer::self_attention(const Tensor& x, const TransformerEncoderLayerForwardOptions& o) {
  const Tensor attended = std::get<0>(self_attn.forward(
      x, x, x,
      {.key_padding_mask = o.src_key_padding_mask, .need_weights = false, .attn_mask = o.src_mask, .is_causal = o.is_causal}));
  return dropout1(attended);
}

// linear2(dropout(act(linear1(x)))), the activation as linear1's epilogue (ops/epilogue.h): the
// same values, one pass less over the 4x-wide hidden activations.
Tensor TransformerEncoderLayer::feed_forward(const Tensor& x) {
  const Epilogue act = options.activation == "gelu" ? Epilogue::Gelu : Epilogue::Relu;
  const Tensor hidden = linear(x, linear1.weight, linear1.bias, {.epilogue = act});
  return dropout2(linear2(dropout(hidden)));
}

Tensor TransformerEncoderLayer::forward(const Tensor& src, TransformerEncoderLayerForwardOptions o) {
  if (options.norm_first) {
    const Tensor x = src + self_attention(norm1(src), o);
    return x + feed_forward(norm2(x));
  }
  const Tensor x = norm1(src + self_attention(src, o));
  return norm2(x + feed_forward(x));
}

}  // namespace hg::nn
