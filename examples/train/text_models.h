// The text models hg-train knows (--model gpt|lstm), trained on the bytes of a text file to predict
// the next byte (data::TextDataset: vocabulary 256), and what a run does with them: the loss, the
// validation loss, and sampling. examples/11_char_gpt.cpp trains the same GPT step by step.
//
//   gpt: GPT-2's shape, small: byte and learned position embeddings, `layers` pre-LayerNorm blocks
//        (causal multi-head self-attention on the fused scaled_dot_product_attention, a GELU MLP
//        4x wide, dropout on both residual branches), a final LayerNorm, a linear head onto the
//        256 bytes. Parameter names as nanoGPT-style PyTorch code writes them (tokens.weight,
//        blocks.0.attn.in_proj_weight, ...).
//   lstm: byte embeddings (width d_model), nn::LSTM with `layers` layers of `hidden` (dropout
//        between them, batch_first), a linear head onto the 256 bytes (examples/12_lstm.cpp).
#pragma once
#include <string>
#include <tuple>
#include <vector>

#include "halfgrad.h"

namespace hg_train {

struct TextModelConfig {
  int64_t block = 64;    // the context: tokens per training example
  int64_t d_model = 128;
  int64_t heads = 4;
  int64_t layers = 2;
  double dropout = 0.1;
  int64_t hidden = 256;  // lstm: the state's width
};

// One pre-LayerNorm transformer block: x + attention(ln1(x)), then x + mlp(ln2(x)).
class GptBlock : public hg::nn::Module {
 public:
  explicit GptBlock(const TextModelConfig& config);
  hg::Tensor forward(const hg::Tensor& x) override;
  // The two residual branches: forward(x) = y + mlp_branch(y) with y = x + attention_branch(x).
  hg::Tensor attention_branch(const hg::Tensor& x);  // dropout(attention(ln1(x)))
  hg::Tensor mlp_branch(const hg::Tensor& x);        // dropout(proj(gelu(fc(ln2(x)))))

  hg::nn::LayerNorm ln1, ln2;
  hg::nn::MultiheadAttention attn;
  hg::nn::Linear fc, proj;
  hg::nn::Dropout drop;
};

// Activation checkpointing (hg::autograd::checkpoint): what backward recomputes instead of
// keeping. blocks: each block, from its input (hg-train --checkpoint-activations); branches: each
// residual branch on its own, half a block's activations held at a time (bench/checkpoint_bench).
enum class Checkpointing { none, blocks, branches };

class CharGPT : public hg::nn::Module {
 public:
  explicit CharGPT(TextModelConfig config = {});
  // idx i64 [B, T] (T <= block) -> logits [B, T, 256]
  hg::Tensor forward(const hg::Tensor& idx) override;

  TextModelConfig config;
  Checkpointing checkpointing = Checkpointing::none;
  hg::nn::Embedding tokens, positions;
  hg::nn::ModuleList blocks;
  hg::nn::LayerNorm ln_f;
  hg::nn::Linear head;
};

class CharLSTM : public hg::nn::Module {
 public:
  explicit CharLSTM(TextModelConfig config = {.d_model = 64});
  // idx i64 [B, T], state (h, c) [layers, B, hidden] or undefined -> logits [B, T, 256] and the
  // state after the last byte (sampling carries it from byte to byte).
  std::tuple<hg::Tensor, std::tuple<hg::Tensor, hg::Tensor>> forward(const hg::Tensor& idx,
                                                                     const std::tuple<hg::Tensor, hg::Tensor>& state);
  hg::Tensor forward(const hg::Tensor& idx) override;  // from a zero state

  TextModelConfig config;
  hg::nn::Embedding tokens;
  hg::nn::LSTM lstm;
  hg::nn::Linear head;
};

// The mean next-byte cross-entropy of a model mapping [B, T] bytes to [B, T, 256] logits, under
// autocast to `dtype` unless it is f32 (the loss itself in f32).
hg::Tensor next_byte_loss(hg::nn::Module& model, const hg::Tensor& x, const hg::Tensor& y, hg::DType dtype);

// The mean loss over a whole dataset, without gradients, in eval mode.
double validation_loss(hg::nn::Module& model, const hg::data::TextDataset& text, hg::DType dtype);

// One byte drawn from next-byte logits [256]: divided by `temperature`, cut to the `top_k`
// likeliest, with halfgrad's generator (manual_seed repeats a sample).
int draw_byte(const std::vector<float>& logits, double temperature, int top_k);

// `length` bytes after `prompt`: each drawn from the model's next-byte distribution divided by
// `temperature` and cut to its `top_k` likeliest bytes (with halfgrad's generator, so
// manual_seed repeats a sample), the context cut to the last `block` bytes.
std::string sample_text(hg::nn::Module& model, int64_t block, const std::string& prompt, int length,
                        double temperature = 0.8, int top_k = 20);

}  // namespace hg_train
