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
// The model, its loss and the sampler are hg-train's (examples/train/text_models.h: hg-train
// --model gpt trains the same network); this file is the training loop.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "halfgrad.h"
#include "train/text_models.h"  // the model (hg-train's --model gpt), its loss and sampling

namespace nn = hg::nn;
namespace data = hg::data;
using hg::Tensor;

namespace {

constexpr int64_t kBlock = 64, kBatch = 32;

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
    hg_train::CharGPT model({.block = kBlock, .d_model = 128, .heads = 4, .layers = 2, .dropout = 0.1});
    int64_t parameters = 0;
    for (const Tensor& p : model.parameters()) parameters += p.numel();
    hg::optim::AdamW opt(model.parameters(), {.lr = 2e-3, .weight_decay = 0.1});
    hg::optim::CosineAnnealingLR schedule(opt, steps);
    std::printf("char GPT: %lld parameters, %d layers x %lld heads, d_model %lld, block %lld; %s: %zu bytes "
                "(%lld training blocks); bf16 autocast, CPU level %s\n",
                static_cast<long long>(parameters), int(model.config.layers), static_cast<long long>(model.config.heads),
                static_cast<long long>(model.config.d_model), static_cast<long long>(kBlock), path.c_str(), bytes.size(),
                static_cast<long long>(train.size()), hg::cpu::isa_name(hg::cpu::isa()));
    std::printf("before training, validation loss %.3f (uniform over 256 bytes: %.3f)\n", hg_train::validation_loss(model, valid, hg::bf16),
                std::log(256.0));

    const auto start = std::chrono::steady_clock::now();
    int step = 0;
    double recent = 0;
    while (step < steps) {
      for (auto [x, y] : loader) {
        opt.zero_grad();
        const Tensor loss = hg_train::next_byte_loss(model, x, y, hg::bf16);
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
          std::printf("  validation loss %.3f\n", hg_train::validation_loss(model, valid, hg::bf16));
          if (step % 200 == 0 || step == steps)
            std::printf("  a sample:\n---\n%s\n---\n", hg_train::sample_text(model, kBlock, "This License", 200, 0.8, 20).c_str());
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
