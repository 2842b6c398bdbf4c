// Lesson 12: a character-level LSTM on the text lesson 11's GPT reads -- the GNU GPL version 3 in
// /usr/share/common-licenses/GPL-3 (package base-files, 35 KB) -- sampled as it trains.
//
//   build/examples/12_lstm [steps = 500] [text file = /usr/share/common-licenses/GPL-3]
//
// The model: byte embeddings (vocabulary 256, width 64), nn::LSTM with 2 layers of 256 (dropout
// 0.1 between them, batch_first) and a linear head onto the 256 bytes. AdamW (lr 6e-3) with a cosine
// schedule, bf16 autocast on the CPU (no GradScaler: bf16 has f32's range; the LSTM layer takes
// and returns bf16 under autocast, as PyTorch's, its gates and cell state f32 inside), blocks of
// 64 bytes, 90% of the text to train on and the last 10% to validate. Each block starts from a zero state (the blocks are shuffled); sampling
// carries the (h, c) state from byte to byte, so each new byte costs one step, not a re-read of
// the context. Samples: temperature 0.8, the 20 likeliest bytes (top-k), after "This License".
// The model, its loss and draw_byte are hg-train's (examples/train/text_models.h: hg-train
// --model lstm trains the same network); this file is the training loop and the stateful sampler.
//
// Measured (1 thread, AVX512-BF16 CPU, ~19k tokens/s): validation loss 5.53 before training
// (uniform: 5.55); the default 500 steps (29 passes over the text) take 55 s and end at a
// training loss of 1.21 and a validation loss of 1.97 nats per byte (2.02 at step 300, where the
// sample is already mostly English words); CTest's 20 steps take ~3 s (validation loss 3.49).
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <tuple>

#include "halfgrad.h"
#include "train/text_models.h"  // the model (hg-train's --model lstm), its loss and draw_byte

namespace nn = hg::nn;
namespace data = hg::data;
using hg::Tensor;
using hg_train::CharLSTM;

namespace {

constexpr int64_t kBlock = 64, kBatch = 32;

// `length` bytes after `prompt`: the prompt read once, then one LSTM step per byte.
std::string sample(CharLSTM& model, const std::string& prompt, int length, double temperature, int top_k) {
  hg::NoGradGuard no_grad;
  model.eval();
  std::string text = prompt;
  auto [logits, state] = model.forward(data::TextDataset::encode(prompt).reshape({1, -1}), {});
  for (int n = 0; n < length; ++n) {
    const Tensor last = hg::narrow(logits, 1, logits.shape()[1] - 1, 1);  // [1, 1, 256]
    text.push_back(char(hg_train::draw_byte(last.to(hg::f32).to_vector<float>(), temperature, top_k)));
    std::tie(logits, state) = model.forward(data::TextDataset::encode(text.substr(text.size() - 1)).reshape({1, 1}), state);
  }
  model.train();
  return text;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const int steps = argc > 1 ? std::atoi(argv[1]) : 500;
    const std::string path = argc > 2 ? argv[2] : "/usr/share/common-licenses/GPL-3";
    HG_CHECK(steps > 0, "usage: 12_lstm [steps > 0] [text file]");
    const data::TextDataset whole(path, kBlock);
    const std::string& bytes = whole.text();
    const size_t split = bytes.size() * 9 / 10;
    const auto train = data::TextDataset::from_string(bytes.substr(0, split), kBlock);
    const auto valid = data::TextDataset::from_string(bytes.substr(split), kBlock);
    data::DataLoader loader(train, {.batch_size = kBatch, .shuffle = true, .drop_last = true, .seed = 0});

    hg::manual_seed(0);
    CharLSTM model({.d_model = 64, .layers = 2, .dropout = 0.1, .hidden = 256});
    int64_t parameters = 0;
    for (const Tensor& p : model.parameters()) parameters += p.numel();
    hg::optim::AdamW opt(model.parameters(), {.lr = 6e-3, .weight_decay = 0.01});
    hg::optim::CosineAnnealingLR schedule(opt, steps);
    std::printf("char LSTM: %lld parameters, %d layers of %lld, embedding %lld, block %lld; %s: %zu bytes "
                "(%lld training blocks); bf16 autocast, CPU level %s\n",
                static_cast<long long>(parameters), int(model.config.layers), static_cast<long long>(model.config.hidden),
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
            std::printf("  a sample:\n---\n%s\n---\n", sample(model, "This License", 200, 0.8, 20).c_str());
          std::fflush(stdout);
        }
        if (step == steps) break;
      }
    }
    nn::save(model, "char_lstm.safetensors");
    std::printf("saved char_lstm.safetensors\n");
  } catch (const hg::Error& e) {
    std::fprintf(stderr, "12_lstm: %s\n", e.what());
    return 1;
  }
  return 0;
}
