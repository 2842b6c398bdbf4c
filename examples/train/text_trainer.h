// hg-train's text runs (--model gpt|lstm): next-byte prediction on a text file, 90% of it to train on
// and the last 10% to validate, AdamW with a cosine schedule and gradient clipping, the AMP
// recipe of the precision asked for (bf16: autocast; f16: autocast + GradScaler, unscaled before
// clipping; f32: neither). Every `eval_every` steps it prints the training and validation loss,
// the speed, and a sample of text from the model; a progress bar runs in between (on a terminal).
#pragma once
#include <cstdint>
#include <string>

#include "train/text_models.h"

namespace hg_train {

// Debian's base-files puts the GNU GPL version 3 on every system: 35 KB of English.
inline constexpr const char* kDefaultText = "/usr/share/common-licenses/GPL-3";

struct TextRunConfig {
  std::string model = "gpt";
  std::string data_path = kDefaultText;
  std::string precision = "bf16";  // f32, f16 or bf16
  TextModelConfig shape;  // lstm: text_model_defaults("lstm") gives its own
  double lr = 2e-3;
  double weight_decay = 0.1;
  int64_t steps = 300;
  int64_t batch_size = 32;
  uint64_t seed = 0;
  int64_t eval_every = 100;
  int sample_length = 200;
  std::string sample_prompt = "This License";
  bool checkpoint_activations = false;  // recompute each block in backward (autograd::checkpoint)
  std::string out;                      // writes model.safetensors there when set
};

// What the run ended with (the last evaluation).
struct TextRunResult {
  double train_loss = 0, validation_loss = 0, tokens_per_s = 0;
  int64_t steps = 0;
  std::string sample;
};

TextRunResult run_text(const TextRunConfig& config, bool verbose = true);

// A model's default shape and learning rate: gpt 2 x 128 (4 heads), lr 2e-3; lstm embedding 64,
// 2 x 256, lr 6e-3 (examples/11_char_gpt.cpp and 12_lstm.cpp).
TextRunConfig text_model_defaults(const std::string& model);

}  // namespace hg_train
