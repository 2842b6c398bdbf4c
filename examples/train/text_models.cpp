// hg-train's text models and their loss, validation and sampling (train/text_models.h).
#include "train/text_models.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>
#include <optional>
#include <vector>

namespace hg_train {

namespace nn = hg::nn;
using hg::Tensor;
using hg::data::TextDataset;

GptBlock::GptBlock(const TextModelConfig& c)
    : ln1({c.d_model}), ln2({c.d_model}), attn(c.d_model, c.heads, {.dropout = c.dropout}), fc(c.d_model, 4 * c.d_model),
      proj(4 * c.d_model, c.d_model), drop(c.dropout) {
  register_module("ln1", ln1);
  register_module("attn", attn);
  register_module("ln2", ln2);
  register_module("fc", fc);
  register_module("proj", proj);
}

Tensor GptBlock::attention_branch(const Tensor& x) {
  const Tensor h = ln1(x);
  return drop(std::get<0>(attn.forward(h, h, h, {.need_weights = false, .is_causal = true})));
}

// proj(gelu(fc(h))), with fc's GELU as its epilogue: the GEMM applies it to each block of the
// product while the block is in cache (ops/epilogue.h), the same values as the unfused pair.
Tensor GptBlock::mlp_branch(const Tensor& x) {
  return drop(proj(hg::linear(ln2(x), fc.weight, fc.bias, {.epilogue = hg::Epilogue::Gelu})));
}

Tensor GptBlock::forward(const Tensor& x) {
  const Tensor y = x + attention_branch(x);
  return y + mlp_branch(y);
}

CharGPT::CharGPT(TextModelConfig c)
    : config(c), tokens(TextDataset::kVocabSize, c.d_model), positions(c.block, c.d_model), ln_f({c.d_model}),
      head(c.d_model, TextDataset::kVocabSize, /*bias=*/false) {
  register_module("tokens", tokens);
  register_module("positions", positions);
  for (int64_t i = 0; i < c.layers; ++i) blocks.push_back(GptBlock(c));
  register_module("blocks", blocks);
  register_module("ln_f", ln_f);
  register_module("head", head);
}

Tensor CharGPT::forward(const Tensor& idx) {
  HG_CHECK(idx.dim() == 2 && idx.shape()[1] <= config.block, "CharGPT: expected byte indices [B, T] with T <= ",
           config.block, ", got shape ", idx.shape());
  const int64_t T = idx.shape()[1];
  Tensor x = tokens(idx) + positions(hg::arange(T, {.dtype = hg::i64, .device = idx.device()}));
  // fn(in), recomputed in backward rather than kept (autograd::checkpoint keeps fn until then: a
  // copy, not a reference to this temporary).
  const auto recomputed = [](std::function<Tensor(const Tensor&)> fn, const Tensor& in) {
    return hg::autograd::checkpoint([fn](const std::vector<Tensor>& inputs) { return fn(inputs[0]); }, {in});
  };
  for (nn::Module& module : blocks) {
    auto& block = static_cast<GptBlock&>(module);
    if (checkpointing == Checkpointing::none) {
      x = block(x);
    } else if (checkpointing == Checkpointing::blocks) {
      x = recomputed([&block](const Tensor& in) { return block(in); }, x);
    } else {
      x = x + recomputed([&block](const Tensor& in) { return block.attention_branch(in); }, x);
      x = x + recomputed([&block](const Tensor& in) { return block.mlp_branch(in); }, x);
    }
  }
  return head(ln_f(x));
}

CharLSTM::CharLSTM(TextModelConfig c)
    : config(c), tokens(TextDataset::kVocabSize, c.d_model),
      lstm(c.d_model, c.hidden, {.num_layers = c.layers, .batch_first = true, .dropout = c.dropout}),
      head(c.hidden, TextDataset::kVocabSize) {
  register_module("tokens", tokens);
  register_module("lstm", lstm);
  register_module("head", head);
}

std::tuple<Tensor, std::tuple<Tensor, Tensor>> CharLSTM::forward(const Tensor& idx, const std::tuple<Tensor, Tensor>& state) {
  auto [out, next] = lstm(tokens(idx), state);
  return {head(out), next};
}

Tensor CharLSTM::forward(const Tensor& idx) { return std::get<0>(forward(idx, {})); }

Tensor next_byte_loss(nn::Module& model, const Tensor& x, const Tensor& y, hg::DType dtype) {
  std::optional<hg::amp::Autocast> autocast;
  if (dtype != hg::f32) autocast.emplace(dtype);
  const Tensor logits = model(x);
  return hg::cross_entropy(logits.reshape({-1, TextDataset::kVocabSize}).to(hg::f32), y.reshape({-1}));
}

double validation_loss(nn::Module& model, const TextDataset& text, hg::DType dtype) {
  hg::NoGradGuard no_grad;
  model.eval();
  hg::data::DataLoader loader(text, {.batch_size = 64, .shuffle = false});
  double total = 0;
  int64_t batches = 0;
  for (auto [x, y] : loader) total += next_byte_loss(model, x, y, dtype).item<double>(), ++batches;
  model.train();
  return total / double(std::max<int64_t>(batches, 1));
}

int draw_byte(const std::vector<float>& logits, double temperature, int top_k) {
  HG_CHECK(top_k >= 1 && size_t(top_k) <= logits.size() && temperature > 0,
           "draw_byte: expected 1 <= top_k <= ", logits.size(), " and temperature > 0, got ", top_k, " and ", temperature);
  std::vector<int> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + top_k, order.end(),
                    [&](int a, int b) { return logits[size_t(a)] > logits[size_t(b)]; });
  std::vector<double> weights(static_cast<size_t>(top_k));
  for (int k = 0; k < top_k; ++k)
    weights[size_t(k)] = std::exp((logits[size_t(order[size_t(k)])] - logits[size_t(order[0])]) / temperature);
  double u = hg::rand({1}).item<double>() * std::accumulate(weights.begin(), weights.end(), 0.0);
  for (int k = 0; k < top_k; ++k)
    if ((u -= weights[size_t(k)]) < 0) return order[size_t(k)];
  return order[size_t(top_k - 1)];
}

std::string sample_text(nn::Module& model, int64_t block, const std::string& prompt, int length, double temperature,
                        int top_k) {
  hg::NoGradGuard no_grad;
  model.eval();
  std::string text = prompt;
  for (int n = 0; n < length; ++n) {
    const std::string context = text.substr(text.size() > size_t(block) ? text.size() - size_t(block) : 0);
    const Tensor idx = TextDataset::encode(context).reshape({1, -1});
    const Tensor logits = model(idx);  // [1, T, 256]: the last position predicts the next byte
    const Tensor last = hg::narrow(logits, 1, logits.shape()[1] - 1, 1);
    text.push_back(char(draw_byte(last.to(hg::f32).to_vector<float>(), temperature, top_k)));
  }
  model.train();
  return text;
}

}  // namespace hg_train
