// The settings the ranks of an hg-train run compare (see rank_settings.h).
#include "train/rank_settings.h"

#include <cstdio>
#include <cstring>

#include "train/models.h"

namespace hg_train {

namespace {

std::string number(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.17g", v);  // every bit: 0.1 and 0.10000000000000001 differ
  return text;
}

// FNV-1a over a tensor's bytes: two datasets of equal size but other contents differ.
std::string digest(const hg::Tensor& t) {
  const hg::Tensor c = t.contiguous();
  const auto* p = static_cast<const uint8_t*>(c.raw_data());
  const auto n = size_t(c.numel()) * hg::element_size(c.dtype());
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  char text[64];
  std::snprintf(text, sizeof text, "%lld samples, digest %016llx", (long long)t.shape()[0], (unsigned long long)h);
  return text;
}

std::string dataset_digest(const hg::data::MNIST& set) { return digest(set.images()) + " / " + digest(set.labels()); }

// Where the checkpoint stands (its step counter), read from the file: ranks handed different
// files, or one file that changed between their reads, are told apart.
std::string checkpoint_position(const std::string& resume) {
  if (resume.empty()) return "none";
  const hg::SafetensorsContents file = hg::load_with_metadata(resume);
  for (const char* key : {"trainer.step", "trainer.epoch"})
    if (file.tensors.count(key)) return std::string(key) + " " + std::to_string(file.tensors.at(key).item<int64_t>());
  return "no step counter";
}

}  // namespace

std::vector<hg::distributed::Setting> rank_settings(const TrainConfig& config, const hg::data::MNIST& train,
                                                    const hg::data::MNIST& test, const std::string& resume) {
  return {{"--model", config.model},
          {"the model's parameters", hg::distributed::structure_of(make_model(config.model))},
          {"--optimizer", config.optimizer},
          {"--lr", number(config.lr)},
          {"--momentum", number(config.momentum)},
          {"--nesterov", config.nesterov ? "yes" : "no"},
          {"--weight-decay", number(config.weight_decay)},
          {"--schedule", config.schedule},
          {"--warmup-epochs", number(config.warmup_epochs)},
          {"--augment", config.augment ? "yes" : "no"},
          {"--precision", config.precision},  // as resolved ("amp" and "auto" may resolve per machine)
          {"--rounding", hg::optim::rounding_name(config.rounding)},
          {"--batch-size", std::to_string(config.batch_size)},
          {"--seed", std::to_string(config.seed)},
          {"--epochs", std::to_string(config.epochs)},
          {"--max-steps", std::to_string(config.max_steps_per_epoch)},
          {"--growth-interval", std::to_string(config.growth_interval)},
          {"--no-normalize", config.normalize ? "no" : "yes"},
          {"--device", config.device.is_cuda() ? "cuda" : "cpu"},
          {"--checkpoint-every", std::to_string(config.checkpoint_every)},
          {"the training data", dataset_digest(train)},
          {"the test data", dataset_digest(test)},
          {"--resume", resume},
          {"the checkpoint's position", checkpoint_position(resume)}};
}

}  // namespace hg_train
