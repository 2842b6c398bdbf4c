// Lesson 11: a character-level GPT, trained on a text every Debian system has -- the GNU GPL
// version 3 in /usr/share/common-licenses/GPL-3 (package base-files, 35 KB) -- and sampled as it
// trains.
//
//   build/examples/11_char_gpt [steps = 300] [text file = /usr/share/common-licenses/GPL-3]
//
// 35 KB is little text: past ~200 steps (13 passes over it) the model starts to memorise it --
// the training loss keeps falling while the validation loss turns back up (printed every 100
// steps). A longer text trains longer.
//
// The model is GPT-2's shape, small: byte tokens (data::TextDataset, vocabulary 256) and learned
// positions, 2 pre-LayerNorm blocks of causal self-attention (4 heads, d_model 128, the fused
// scaled_dot_product_attention under nn::MultiheadAttention) and a GELU MLP, a final LayerNorm
// and a linear head onto the 256 bytes. AdamW, bf16 autocast on the CPU (no GradScaler: bf16 has
// f32's range), blocks of 64 tokens, 90% of the text to train on and the last 10% to validate.
// Samples: temperature 0.8, the 20 likeliest bytes (top-k), from the prompt "This License".
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <string>
#include <vector>

#include "halfgrad.h"

namespace nn = hg::nn;
namespace data = hg::data;
using hg::Tensor;

namespace {

constexpr int64_t kBlock = 64, kModel = 128, kHeads = 4, kLayers = 2, kBatch = 32;

// Pre-LayerNorm transformer block: x + attention(ln(x)), then x + mlp(ln(x)).
struct Block : nn::Module {
  nn::LayerNorm ln1{{kModel}}, ln2{{kModel}};
  nn::MultiheadAttention attn{kModel, kHeads, {.dropout = 0.1}};
  nn::Linear fc{kModel, 4 * kModel}, proj{4 * kModel, kModel};
  nn::Dropout drop{0.1};
  Block() {
    register_module("ln1", ln1);
    register_module("attn", attn);
    register_module("ln2", ln2);
    register_module("fc", fc);
    register_module("proj", proj);
  }
  Tensor forward(const Tensor& x) override {
    const Tensor h = ln1(x);
    const Tensor attended = std::get<0>(attn.forward(h, h, h, {.need_weights = false, .is_causal = true}));
    const Tensor y = x + drop(attended);
    return y + drop(proj(hg::gelu(fc(ln2(y)))));
  }
};

struct CharGPT : nn::Module {
  nn::Embedding tokens{data::TextDataset::kVocabSize, kModel}, positions{kBlock, kModel};
  nn::ModuleList blocks;
  nn::LayerNorm ln_f{{kModel}};
  nn::Linear head{kModel, data::TextDataset::kVocabSize, /*bias=*/false};
  CharGPT() {
    register_module("tokens", tokens);
    register_module("positions", positions);
    for (int i = 0; i < kLayers; ++i) blocks.push_back(Block());
    register_module("blocks", blocks);
    register_module("ln_f", ln_f);
    register_module("head", head);
  }
  // idx i64 [B, T] (T <= kBlock) -> logits [B, T, 256]
  Tensor forward(const Tensor& idx) override {
    const int64_t T = idx.shape()[1];
    Tensor x = tokens(idx) + positions(hg::arange(T, {.dtype = hg::i64}));
    for (nn::Module& block : blocks) x = block(x);
    return head(ln_f(x));
  }
};

Tensor loss_of(CharGPT& model, const Tensor& x, const Tensor& y) {
  hg::amp::Autocast autocast(hg::bf16);
  const Tensor logits = model(x);
  return hg::cross_entropy(logits.reshape({-1, data::TextDataset::kVocabSize}).to(hg::f32), y.reshape({-1}));
}

double validation_loss(CharGPT& model, const data::TextDataset& text) {
  hg::NoGradGuard no_grad;
  model.eval();
  data::DataLoader loader(text, {.batch_size = 64, .shuffle = false});
  double total = 0;
  int64_t batches = 0;
  for (auto [x, y] : loader) total += loss_of(model, x, y).item<double>(), ++batches;
  model.train();
  return total / double(std::max<int64_t>(batches, 1));
}

// `length` bytes after `prompt`, each drawn from the model's next-byte distribution divided by
// the temperature and cut to its `top_k` likeliest bytes.
std::string sample(CharGPT& model, const std::string& prompt, int length, double temperature, int top_k) {
  hg::NoGradGuard no_grad;
  model.eval();
  std::string text = prompt;
  for (int n = 0; n < length; ++n) {
    const std::string context = text.substr(text.size() > size_t(kBlock) ? text.size() - kBlock : 0);
    const Tensor idx = data::TextDataset::encode(context).reshape({1, -1});
    const Tensor logits = model(idx);  // [1, T, 256]: the last position predicts the next byte
    std::vector<float> last = hg::narrow(logits, 1, logits.shape()[1] - 1, 1).to(hg::f32).to_vector<float>();
    std::vector<int> order(last.size());
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + top_k, order.end(), [&](int a, int b) { return last[a] > last[b]; });
    std::vector<double> p(static_cast<size_t>(top_k));
    for (int k = 0; k < top_k; ++k) p[size_t(k)] = std::exp((last[size_t(order[size_t(k)])] - last[size_t(order[0])]) / temperature);
    const double total = std::accumulate(p.begin(), p.end(), 0.0);
    double u = hg::rand({1}).item<double>() * total;
    int chosen = top_k - 1;
    for (int k = 0; k < top_k; ++k)
      if ((u -= p[size_t(k)]) < 0) {
        chosen = k;
        break;
      }
    text.push_back(char(order[size_t(chosen)]));
  }
  model.train();
  return text;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const int steps = argc > 1 ? std::atoi(argv[1]) : 300;
    const std::string path = argc > 2 ? argv[2] : "/usr/share/common-licenses/GPL-3";
    HG_CHECK(steps > 0, "usage: 11_char_gpt [steps > 0] [text file]");
    const data::TextDataset whole(path, kBlock);
    const std::string& bytes = whole.text();
    const size_t split = bytes.size() * 9 / 10;
    const auto train = data::TextDataset::from_string(bytes.substr(0, split), kBlock);
    const auto valid = data::TextDataset::from_string(bytes.substr(split), kBlock);
    data::DataLoader loader(train, {.batch_size = kBatch, .shuffle = true, .drop_last = true, .seed = 0});

    hg::manual_seed(0);
    CharGPT model;
    int64_t parameters = 0;
    for (const Tensor& p : model.parameters()) parameters += p.numel();
    hg::optim::AdamW opt(model.parameters(), {.lr = 2e-3, .weight_decay = 0.1});
    hg::optim::CosineAnnealingLR schedule(opt, steps);
    std::printf("char GPT: %lld parameters, %d layers x %lld heads, d_model %lld, block %lld; %s: %zu bytes "
                "(%lld training blocks); bf16 autocast, CPU level %s\n",
                static_cast<long long>(parameters), int(kLayers), static_cast<long long>(kHeads),
                static_cast<long long>(kModel), static_cast<long long>(kBlock), path.c_str(), bytes.size(),
                static_cast<long long>(train.size()), hg::cpu::isa_name(hg::cpu::isa()));
    std::printf("before training, validation loss %.3f (uniform over 256 bytes: %.3f)\n", validation_loss(model, valid),
                std::log(256.0));

    const auto start = std::chrono::steady_clock::now();
    int step = 0;
    double recent = 0;
    while (step < steps) {
      for (auto [x, y] : loader) {
        opt.zero_grad();
        const Tensor loss = loss_of(model, x, y);
        loss.backward();
        nn::utils::clip_grad_norm_(model.parameters(), 1.0);
        opt.step();
        schedule.step();
        recent += loss.item<double>();
        if (++step % 50 == 0 || step == steps) {
          const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
          std::printf("step %4d/%d: training loss %.3f, %.0f tokens/s\n", step, steps, recent / (step % 50 ? step % 50 : 50),
                      double(step) * kBatch * kBlock / seconds);
          std::fflush(stdout);
          recent = 0;
        }
        if (step % 100 == 0 || step == steps) {
          std::printf("  validation loss %.3f\n", validation_loss(model, valid));
          if (step % 200 == 0 || step == steps)
            std::printf("  a sample:\n---\n%s\n---\n", sample(model, "This License", 200, 0.8, 20).c_str());
          std::fflush(stdout);
        }
        if (step == steps) break;
      }
    }
    nn::save(model, "char_gpt.safetensors");
    std::printf("saved char_gpt.safetensors\n");
  } catch (const hg::Error& e) {
    std::fprintf(stderr, "11_char_gpt: %s\n", e.what());
    return 1;
  }
  return 0;
}
