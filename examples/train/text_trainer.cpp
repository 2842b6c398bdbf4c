// hg-train's text runs (train/text_trainer.h).
#include "train/text_trainer.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>

#include "train/progress.h"

namespace hg_train {

namespace {

using hg::Tensor;
using hg::data::TextDataset;

std::unique_ptr<hg::nn::Module> make_text_model(const TextRunConfig& config) {
  if (config.model == "gpt") return std::make_unique<CharGPT>(config.shape);
  if (config.model == "lstm") return std::make_unique<CharLSTM>(config.shape);
  HG_FAIL("unknown text model \"", config.model, "\" (expected gpt or lstm)");
}

}  // namespace

TextRunConfig text_model_defaults(const std::string& model) {
  TextRunConfig config;
  config.model = model;
  if (model == "lstm") config.shape.d_model = 64, config.lr = 6e-3, config.weight_decay = 0.01;
  return config;
}

TextRunResult run_text(const TextRunConfig& config, bool verbose) {
  HG_CHECK(config.precision == "f32" || config.precision == "f16" || config.precision == "bf16",
           "text models train in f32, f16 or bf16, got --precision ", config.precision);
  HG_CHECK(config.steps > 0 && config.batch_size > 0 && config.eval_every > 0,
           "text runs need --steps, --batch-size and the evaluation interval > 0");
  const hg::DType dtype = config.precision == "f32" ? hg::f32 : config.precision == "f16" ? hg::f16 : hg::bf16;
  const int64_t block = config.shape.block;
  const TextDataset whole(config.data_path, block);
  const std::string& bytes = whole.text();
  const size_t split = bytes.size() * 9 / 10;
  const auto train = TextDataset::from_string(bytes.substr(0, split), block);
  const auto valid = TextDataset::from_string(bytes.substr(split), block);
  HG_CHECK(train.size() >= config.batch_size, "--data ", config.data_path, ": ", bytes.size(),
           " bytes give ", train.size(), " training blocks of ", block, " tokens, fewer than one batch of ",
           config.batch_size);
  HG_CHECK(valid.size() > 0, "--data ", config.data_path, ": its last 10% (", bytes.size() - split,
           " bytes) is shorter than one block of ", block, " tokens to validate on");
  hg::data::DataLoader loader(train, {.batch_size = config.batch_size, .shuffle = true, .drop_last = true,
                                      .seed = config.seed});

  hg::manual_seed(config.seed);
  std::unique_ptr<hg::nn::Module> model = make_text_model(config);
  int64_t parameters = 0;
  for (const Tensor& p : model->parameters()) parameters += p.numel();
  hg::optim::AdamW opt(model->parameters(), {.lr = config.lr, .weight_decay = config.weight_decay});
  hg::optim::CosineAnnealingLR schedule(opt, config.steps);
  hg::amp::GradScaler scaler({.enabled = dtype == hg::f16});
  auto* gpt = dynamic_cast<CharGPT*>(model.get());
  HG_CHECK(!config.checkpoint_activations || gpt != nullptr, "--checkpoint-activations is for --model gpt");
  if (config.checkpoint_activations) gpt->checkpointing = Checkpointing::blocks;
  if (verbose) {
    std::printf("hg-train: %s, %lld parameters, %s: %zu bytes (%lld training blocks of %lld), precision %s, AdamW lr %g, "
                "batch %lld, %lld steps, %d thread(s), CPU level %s%s\n",
                config.model.c_str(), (long long)parameters, config.data_path.c_str(), bytes.size(),
                (long long)train.size(), (long long)block, config.precision.c_str(), config.lr,
                (long long)config.batch_size, (long long)config.steps, hg::get_num_threads(),
                hg::cpu::isa_summary().c_str(), config.checkpoint_activations ? ", activation checkpointing" : "");
    std::printf("before training: validation loss %.3f (uniform over 256 bytes: %.3f)\n",
                validation_loss(*model, valid, dtype), std::log(256.0));
    std::fflush(stdout);
  }

  TextRunResult result;
  double window_loss = 0, train_seconds = 0;
  int64_t window_steps = 0, step = 0;
  ProgressBar bar("steps", config.steps);
  while (step < config.steps) {
    for (auto [x, y] : loader) {
      const auto start = std::chrono::steady_clock::now();
      opt.zero_grad();
      const Tensor loss = next_byte_loss(*model, x, y, dtype);
      scaler.scale(loss).backward();
      scaler.unscale_(opt);  // true gradients before clipping (a no-op without scaling)
      hg::nn::utils::clip_grad_norm_(model->parameters(), 1.0);
      scaler.step(opt);
      scaler.update();
      schedule.step();
      const double value = loss.item<double>();
      train_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      window_loss += value, ++window_steps, ++step;
      const double tokens_per_s = double(step * config.batch_size * block) / train_seconds;
      if (verbose) bar.update(step, tokens_per_s, window_loss / double(window_steps));
      if (step % config.eval_every == 0 || step == config.steps) {
        result = {.train_loss = window_loss / double(window_steps), .validation_loss = validation_loss(*model, valid, dtype),
                  .tokens_per_s = tokens_per_s, .steps = step,
                  .sample = sample_text(*model, block, config.sample_prompt, config.sample_length)};
        if (verbose) {
          bar.finish();
          std::printf("step %lld/%lld: training loss %.3f, validation loss %.3f, %.0f tokens/s (training only)\n",
                      (long long)step, (long long)config.steps, result.train_loss, result.validation_loss, tokens_per_s);
          std::printf("  sample (temperature 0.8, top 20 bytes):\n---\n%s\n---\n", result.sample.c_str());
          std::fflush(stdout);
        }
        window_loss = 0, window_steps = 0;
      }
      if (step == config.steps) break;
    }
  }
  if (!config.out.empty()) {
    hg::nn::save(*model, config.out + "/model.safetensors");
    if (verbose) std::printf("wrote %s/model.safetensors\n", config.out.c_str());
  }
  return result;
}

}  // namespace hg_train
