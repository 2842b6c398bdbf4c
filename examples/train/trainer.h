// One training run of hg-train: the model, its optimizer, the GradScaler and the loaders, with
// the AMP recipe of the precision asked for:
//   f32:  no autocast, no scaling
//   f16:  Autocast(f16) around forward + loss, GradScaler (dynamic loss scaling)
//   bf16: Autocast(bf16), no scaling (bf16 has f32's exponent range)
//   bf16-pure: bf16 weights and bf16 optimizer state, no f32 copy at all: each update computed in
//              f32 and written back with stochastic rounding (or --rounding kahan / nearest), under
//              Autocast(bf16) so the loss is still computed in f32
#pragma once
#include <fstream>
#include <memory>
#include <string>

#include "halfgrad.h"
#include "train/memory_parts.h"
#include "train/models.h"

namespace hg_train {

struct TrainConfig {
  std::string model = "mlp";
  std::string optimizer = "sgd";
  std::string precision = "f32";
  // bf16-pure: how the optimizer writes bf16 weights and state back (hg::optim::Rounding).
  hg::optim::Rounding rounding = hg::optim::Rounding::Stochastic;
  double lr = 0.05;
  double momentum = 0.9;
  double weight_decay = 0;  // SGD: L2 added to the gradient; AdamW: decoupled (Adam: L2)
  bool nesterov = false;    // SGD only
  // The learning rate per step: "constant", or "cosine" (from lr down to 0 over the run's steps,
  // as CosineAnnealingLR), each after a linear warmup from lr / warmup_steps over warmup_epochs.
  // A pure function of the step counter, so a resumed run continues the same schedule.
  std::string schedule = "constant";
  double warmup_epochs = 0;
  // Random crop (padding 2) and horizontal flip of each training image, with the loader's seed.
  bool augment = false;
  int epochs = 5;
  int64_t batch_size = 128;
  uint64_t seed = 0;
  hg::Device device = hg::Device::cpu();
  int64_t max_steps_per_epoch = 0;  // 0: whole epochs
  int64_t growth_interval = 2000;   // f16: the GradScaler grows the scale after this many clean steps
  // Inputs are normalised with the training set's pixel statistics (computed at start).
  bool normalize = true;
  // Where run_epoch writes its checkpoint (empty: nowhere): at the end of every epoch and, when
  // checkpoint_every > 0, every that many steps, so an interrupted run loses little.
  std::string checkpoint_path;
  int64_t checkpoint_every = 0;
  // Diagnostics for docs/amp.md's figures (empty: off). step_log: one CSV line per step (loss,
  // loss scale, applied or skipped); it makes each step wait for its result. gradient_histogram:
  // the exponent histogram of every gradient before/after unscaling (amp::GradientHistogram),
  // over the whole run, rewritten at the end of each epoch.
  std::string step_log;
  std::string gradient_histogram;
  // Data-parallel training (under mpirun): each rank trains on its shard with batch_size samples
  // per step, so the global batch is batch_size * world_size. Null: one process.
  std::shared_ptr<hg::distributed::ProcessGroup> group;
};

struct EpochMetrics {
  int epoch = 0;
  double train_loss = 0;        // mean over the epoch's steps
  double test_accuracy = 0;     // fraction in [0, 1]
  double samples_per_s = 0;     // training only (evaluation excluded)
  int64_t peak_bytes = 0;       // hg::memory::peak_allocated during the epoch's training
  int64_t step_peak_bytes = 0;  // the most one step allocated above what was live before it
  int64_t activation_bytes = 0; // bytes the graph held after the forward (saved for backward)
  MemoryParts memory;           // the epoch's second step by part (its first warms caches)
  int64_t steps = 0;
  int64_t skipped_steps = 0;    // steps the GradScaler skipped (f16 only)
  double scale = 1.0;           // the loss scale at the end of the epoch
  double seconds = 0;
};

class Trainer {
 public:
  Trainer(TrainConfig config, const hg::data::MNIST& train, const hg::data::MNIST& test);
  // The checkpoint holds references to the members: a Trainer stays where it was built.
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  EpochMetrics run_epoch(bool show_progress);
  double evaluate();
  // Epochs completed so far (those of a resumed checkpoint included).
  int epochs_done() const { return int(counters_.epoch); }
  // Steps already taken in the epoch in progress (a checkpoint written mid-epoch).
  int64_t epoch_steps_done() const { return counters_.epoch_step; }

  hg::nn::Sequential& model() { return model_; }
  const hg::optim::Optimizer& optimizer() const { return *optimizer_; }
  int64_t global_batch() const { return config_.batch_size * (config_.group ? config_.group->world_size() : 1); }
  hg::amp::GradScaler& scaler() { return scaler_; }
  // The learning rate the schedule gives step `step` (0-based, counted over the whole run).
  double scheduled_lr(int64_t step) const;
  const hg::data::PixelStatistics& input_statistics() const { return stats_; }
  // Everything needed to resume bitwise, through hg::Checkpoint: model, optimizer, scaler, loader
  // position, RNG and the trainer's own epoch/step counters. Saving is atomic; loading checks
  // every value and loads all of it or nothing.
  // Checkpoints of every hg-train version load (docs: README, "The training program").
  void save_checkpoint(const std::string& path) { checkpoint_.save(path); }
  void load_checkpoint(const std::string& path);
  // Where the loader stands in the epoch in progress: samples of it trained on (all ranks).
  int64_t epoch_sample() const { return loader_.epoch_sample(); }

 private:
  TrainConfig config_;
  hg::data::MNIST train_set_, test_set_;
  hg::nn::Sequential model_;
  std::unique_ptr<hg::optim::Optimizer> optimizer_;
  hg::amp::GradScaler scaler_;
  hg::data::PixelStatistics stats_;
  hg::data::DataLoader loader_;
  std::unique_ptr<hg::distributed::DataParallel> ddp_;  // set when config.group is
  // Checkpoints are written by one process: rank 0 of a distributed run.
  bool writes_diagnostics() const { return !config_.group || config_.group->rank() == 0; }
  bool writes_files() const { return !config_.checkpoint_path.empty() && (!config_.group || config_.group->rank() == 0); }
  bool autocast_;
  hg::DType autocast_dtype_;
  bool fp8_enabled_;       // --precision fp8 / fp8-block
  hg::amp::Fp8State fp8_;  // their recipe and delayed-scaling state
  // The trainer's own part of the checkpoint ("trainer.*"): where the run is.
  struct Counters {
    int64_t epoch = 0;       // epochs completed
    int64_t epoch_step = 0;  // steps taken in the epoch in progress
    int64_t step = 0;        // steps taken in all
    int64_t world_size = 1;  // processes of the run that wrote it (informational)
    int64_t batches_per_epoch = 0;  // this run's (upgrades a format-0 checkpoint's step count)
    std::map<std::string, hg::Tensor> state_dict() const;
    void load_state_dict(const std::map<std::string, hg::Tensor>& state);
  };
  Counters counters_;
  void upgrade_format_0(hg::SafetensorsContents& file) const;
  hg::Checkpoint checkpoint_;
  std::unique_ptr<std::ofstream> step_log_;
  hg::amp::GradientHistogram histogram_;
};

hg::DType precision_dtype(const std::string& precision);
// --precision fp8 -> delayed scaling (Transformer Engine's defaults), fp8-block -> block scaling.
hg::amp::Fp8Recipe fp8_recipe(const std::string& precision);
// "stochastic", "kahan", "nearest" -> hg::optim::Rounding (an hg::Error for another name).
hg::optim::Rounding rounding_from_name(const std::string& name);
// One line: the bytes per parameter of weights + gradients + optimizer state, and of what.
std::string memory_per_parameter(const hg::optim::Optimizer& optimizer);

}  // namespace hg_train
