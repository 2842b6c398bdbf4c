// Trainer: the training step, evaluation and checkpoints of hg-train.
#include "train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <numbers>

#include "train/progress.h"

namespace hg_train {

namespace sd = hg::state_dict;

hg::DType precision_dtype(const std::string& precision) {
  if (precision == "f32") return hg::f32;
  if (precision == "f16") return hg::f16;
  // fp8, fp8-block: linear/conv2d in FP8 (amp/fp8.h), the other ops under bf16 autocast.
  if (precision == "bf16" || precision == "bf16-pure" || precision == "fp8" || precision == "fp8-block") return hg::bf16;
  HG_FAIL("unknown precision \"", precision, "\" (expected f32, f16, bf16, bf16-pure, fp8 or fp8-block)");
}

hg::amp::Fp8Recipe fp8_recipe(const std::string& precision) {
  // Transformer Engine's defaults (HYBRID formats, an amax history of 1024 steps, its max) for
  // fp8; DeepSeek-V3's tiles (1 x 128 activations and gradients, 128 x 128 weights) for fp8-block.
  if (precision == "fp8-block") return {.scaling = hg::amp::Fp8Scaling::Block};
  return {.scaling = hg::amp::Fp8Scaling::Delayed};
}

hg::optim::Rounding rounding_from_name(const std::string& name) {
  for (const hg::optim::Rounding r : {hg::optim::Rounding::Stochastic, hg::optim::Rounding::Kahan, hg::optim::Rounding::Nearest})
    if (name == hg::optim::rounding_name(r)) return r;
  HG_FAIL("unknown rounding \"", name, "\" (expected stochastic, kahan or nearest)");
}

std::string memory_per_parameter(const hg::optim::Optimizer& optimizer) {
  const hg::optim::MemoryUse use = optimizer.memory_use();
  const double n = double(std::max<int64_t>(use.parameters, 1));
  char line[256];
  std::snprintf(line, sizeof line, "%.2f bytes/parameter for weights + gradients + optimizer state (%lld parameters: "
                "weight %.0f, gradient %.0f, f32 master %.0f, state %.0f)", use.bytes_per_parameter(),
                (long long)use.parameters, double(use.weight_bytes) / n, double(use.gradient_bytes) / n,
                double(use.master_bytes) / n, double(use.state_bytes) / n);
  return line;
}

namespace {
// The largest |g| over every gradient, as backward left them (scaled by the loss scale): how close
// the step came to f16's 65504 (--log-steps). inf or NaN when a gradient overflowed.
double largest_gradient(const hg::optim::Optimizer& optimizer) {
  double largest = 0;
  for (const hg::Tensor& p : optimizer.parameters()) {
    if (!p.grad().defined() || p.grad().numel() == 0) continue;
    const double g = hg::amax(hg::abs(p.grad().flatten()).to(hg::f32), 0).item<double>();
    if (!(g <= largest)) largest = g;  // (NaN wins)
  }
  return largest;
}

std::unique_ptr<hg::optim::Optimizer> make_optimizer(const TrainConfig& c, const std::vector<hg::Tensor>& params) {
  HG_CHECK(!c.nesterov || (c.optimizer == "sgd" && c.momentum > 0), "--nesterov needs --optimizer sgd and a momentum > 0");
  // bf16-pure: the bf16 weights are updated in place, rounded as --rounding says, with the run's seed.
  const hg::optim::Rounding rounding = c.precision == "bf16-pure" ? c.rounding : hg::optim::Rounding::Nearest;
  if (c.optimizer == "sgd")
    return std::make_unique<hg::optim::SGD>(params, hg::optim::SGDOptions{.lr = c.lr, .momentum = c.momentum,
                                                                          .weight_decay = c.weight_decay,
                                                                          .nesterov = c.nesterov, .rounding = rounding,
                                                                          .seed = c.seed});
  if (c.optimizer == "adam")
    return std::make_unique<hg::optim::Adam>(params, hg::optim::AdamOptions{.lr = c.lr, .weight_decay = c.weight_decay,
                                                                            .rounding = rounding, .seed = c.seed});
  if (c.optimizer == "adamw") {
    hg::optim::AdamWOptions options{.lr = c.lr, .rounding = rounding, .seed = c.seed};
    if (c.weight_decay > 0) options.weight_decay = c.weight_decay;  // (else AdamW's own default, 0.01)
    return std::make_unique<hg::optim::AdamW>(params, options);
  }
  HG_FAIL("unknown optimizer \"", c.optimizer, "\" (expected sgd, adam or adamw)");
}

// The input normalisation, after the checks that make it meaningful: an empty set would give a
// 0.00% accuracy (test) or a puzzling "std must be positive" from the loader (training).
int64_t world_size(const TrainConfig& c) { return c.group ? c.group->world_size() : 1; }
int64_t rank(const TrainConfig& c) { return c.group ? c.group->rank() : 0; }

// --augment: a random 28x28 crop of the image padded by 2 (zeros: the background), flipped
// left-right half of the time -- the usual Fashion-MNIST augmentation.
hg::data::Transform augmentation(const TrainConfig& c) {
  if (!c.augment) return {};
  return hg::data::Compose({hg::data::RandomCrop(28, {.padding = 2}), hg::data::RandomHorizontalFlip(0.5)});
}

hg::data::PixelStatistics checked_statistics(const TrainConfig& c, const hg::data::MNIST& train,
                                             const hg::data::MNIST& test) {
  HG_CHECK(train.size() > 0, "the training set in ", train.root(), " is empty: nothing to train on");
  HG_CHECK(test.size() > 0, "the test set in ", test.root(), " is empty: the accuracy would mean nothing");
  if (!c.normalize) return {0.0, 1.0};
  const hg::data::PixelStatistics stats = hg::data::pixel_statistics(train);
  HG_CHECK(stats.std > 0, "every training pixel has the same value (", stats.mean * 255,
           "): there is nothing to normalise; use --no-normalize");
  return stats;
}
}  // namespace

Trainer::Trainer(TrainConfig config, const hg::data::MNIST& train, const hg::data::MNIST& test)
    : config_(std::move(config)),
      train_set_(train),
      test_set_(test),
      model_((hg::manual_seed(config_.seed), make_model(config_.model))),
      scaler_({.growth_interval = config_.growth_interval, .enabled = config_.precision == "f16"}),
      stats_(checked_statistics(config_, train_set_, test_set_)),
      loader_(train_set_, {.batch_size = config_.batch_size, .shuffle = true, .seed = config_.seed, .mean = stats_.mean,
                           .std = stats_.std, .num_replicas = world_size(config_), .rank = rank(config_),
                           .transform = augmentation(config_)}),
      autocast_(config_.precision != "f32"),
      autocast_dtype_(autocast_ ? precision_dtype(config_.precision) : hg::f16),
      fp8_enabled_(config_.precision.rfind("fp8", 0) == 0),
      fp8_(fp8_recipe(config_.precision)) {
  precision_dtype(config_.precision);  // validates the name
  if (config_.precision == "bf16-pure") {
    HG_CHECK(config_.device.is_cpu() || config_.rounding == hg::optim::Rounding::Nearest,
             "--precision bf16-pure rounds stochastically on the CPU only for now (--device cpu, or --rounding nearest)");
    model_.to(hg::bf16);  // weights (and so gradients and optimizer state) in bf16: no f32 copy anywhere
  }
  model_.to(config_.device);
  if (config_.group) {  // rank 0's initial weights everywhere; gradients averaged across ranks
    ddp_ = std::make_unique<hg::distributed::DataParallel>(model_, config_.group);
    ddp_->attach(scaler_);
  }
  optimizer_ = make_optimizer(config_, model_.parameters());
  scaler_.set_parameter_names(model_.named_parameters());
  counters_.world_size = world_size(config_);
  counters_.batches_per_epoch = loader_.num_batches();
  checkpoint_.add("model", model_).add("optimizer", *optimizer_).add("scaler", scaler_).add("loader", loader_)
      .add("trainer", counters_);
  if (fp8_enabled_) checkpoint_.add("fp8", fp8_);  // the amax histories: a resumed run scales as before
  checkpoint_.set_metadata("written_by", "hg-train").set_metadata("precision", config_.precision);
  checkpoint_.require_metadata("model", config_.model);
  if (!config_.step_log.empty() && writes_diagnostics()) {
    step_log_ = std::make_unique<std::ofstream>(config_.step_log);
    HG_CHECK(step_log_->good(), "--log-steps ", config_.step_log, ": cannot write there");
    *step_log_ << "step,epoch,loss,scale,applied,largest_scaled_gradient\n" << std::flush;
    HG_CHECK(step_log_->good(), "--log-steps ", config_.step_log, ": write failed (disk full?)");
  }
}

EpochMetrics Trainer::run_epoch(bool show_progress) {
  EpochMetrics m;
  m.epoch = int(counters_.epoch) + 1;
  const hg::Device device = config_.device;
  // What the loader has left of the epoch (all of it, or the rest after a mid-epoch checkpoint,
  // in batches of this run's size); --max-steps caps the epoch's steps, those before a resume
  // included.
  int64_t budget = loader_.remaining_batches();
  if (config_.max_steps_per_epoch > 0)
    budget = std::min(budget, std::max<int64_t>(config_.max_steps_per_epoch - counters_.epoch_step, 0));
  ProgressBar bar("epoch " + std::to_string(m.epoch) + "/" + std::to_string(config_.epochs), budget);
  model_.train();
  int64_t epoch_peak = 0;
  // NOTE: on CUDA nothing in the loop reads a device value (a read waits for the GPU): the loss
  // is summed on the device, the GradScaler's skip decision stays on the device (step_async),
  // and skipped steps are counted from the optimizer's device counter at the end of the epoch.
  const bool on_gpu = device.is_cuda();
  const int64_t applied_before = optimizer_->steps_applied();
  hg::Tensor loss_sum_device;
  double loss_sum = 0, shown_loss = 0;
  int64_t samples = 0;
  const auto start = std::chrono::steady_clock::now();
  // NOTE: an explicit iterator, advanced before a checkpoint is written: the loader's saved
  // position must already count the batch just trained on (--max-steps leaves the rest of the
  // loader's epoch for the next run_epoch).
  for (auto batch = loader_.begin(); batch != loader_.end() && m.steps < budget;) {
    const auto [x_cpu, y_cpu] = *batch;
    const hg::Tensor x = x_cpu.to(device), y = y_cpu.to(device);
    optimizer_->zero_grad();
    if (config_.schedule != "constant" || config_.warmup_epochs > 0) optimizer_->set_lr(scheduled_lr(counters_.step));
    // The step's own memory: the peak above what was live before it (parameters, optimizer
    // state, data), measured from a fresh peak. Step 0 warms caches: step 1 is measured by part.
    if (m.steps == 1)
      m.memory = live_parts(model_, *optimizer_, {train_set_.images(), train_set_.labels(), test_set_.images(),
                                                  test_set_.labels()}, {x, y}, device);
    const int64_t before = hg::memory::allocated(device);
    hg::memory::reset_peak(device);
    hg::Tensor loss;
    {
      hg::amp::Autocast autocast(autocast_dtype_, autocast_);
      hg::amp::Fp8Autocast fp8(fp8_, fp8_enabled_);
      loss = hg::cross_entropy(ddp_ ? (*ddp_)(x) : model_(x), y);
    }
    if (m.steps == 1) m.activation_bytes = hg::memory::allocated(device) - before;
    scaler_.scale(loss).backward();
    if (m.steps == 1) m.memory.gradients = gradient_bytes(*optimizer_);
    if (!config_.gradient_histogram.empty()) histogram_.add(*optimizer_, scaler_);
    if (step_log_) {  // the step's result is read on the host: a wait per step on a GPU
      const double largest = largest_gradient(*optimizer_);  // before step() unscales them: x scale
      const hg::amp::StepResult result = scaler_.step(*optimizer_);
      *step_log_ << counters_.step + 1 << ',' << m.epoch << ',' << loss.item<double>() << ',' << result.scale << ','
                 << int(result.applied) << ',' << largest << '\n';
    } else {
      scaler_.step_async(*optimizer_);
    }
    scaler_.update();
    m.step_peak_bytes = std::max(m.step_peak_bytes, hg::memory::peak_allocated(device) - before);
    epoch_peak = std::max(epoch_peak, hg::memory::peak_allocated(device));
    if (on_gpu) {
      hg::NoGradGuard no_grad;
      loss_sum_device = loss_sum_device.defined() ? loss_sum_device + loss.detach() : loss.detach().clone();
    } else {
      loss_sum += loss.item<double>();
    }
    samples += x.shape()[0];
    ++m.steps, ++counters_.epoch_step, ++counters_.step;
    ++batch;
    if (config_.checkpoint_every > 0 && counters_.step % config_.checkpoint_every == 0 && writes_files())
      save_checkpoint(config_.checkpoint_path);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (show_progress && ProgressBar::terminal()) {
      // On the GPU the running loss is read (a sync) only every 50 steps.
      if (!on_gpu) shown_loss = loss_sum / double(m.steps);
      else if (m.steps % 50 == 1) shown_loss = loss_sum_device.item<double>() / double(m.steps);
      bar.update(m.steps, double(samples * world_size(config_)) / seconds, shown_loss);
    }
  }
  if (on_gpu && loss_sum_device.defined()) loss_sum = loss_sum_device.item<double>();
  m.skipped_steps = m.steps - (optimizer_->steps_applied() - applied_before);
  bar.finish();
  if (config_.group) {  // the epoch's loss over every rank's samples, and every rank's samples
    const hg::Tensor totals = hg::from_vector(std::vector<double>{loss_sum, double(samples)}, {2});
    config_.group->all_reduce(totals);
    loss_sum = totals.to_vector<double>()[0] / double(config_.group->world_size());
    samples = int64_t(totals.to_vector<double>()[1]);
  }
  m.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  m.samples_per_s = double(samples) / m.seconds;
  m.peak_bytes = epoch_peak;
  m.train_loss = loss_sum / double(std::max<int64_t>(m.steps, 1));
  m.scale = scaler_.get_scale();
  m.test_accuracy = evaluate();
  ++counters_.epoch;
  counters_.epoch_step = 0;
  if (writes_files()) save_checkpoint(config_.checkpoint_path);
  if (!config_.gradient_histogram.empty() && writes_diagnostics()) histogram_.write_csv(config_.gradient_histogram);
  if (step_log_) {
    step_log_->flush();
    HG_CHECK(step_log_->good(), "--log-steps ", config_.step_log, ": write failed (disk full?)");
  }
  return m;
}

double Trainer::scheduled_lr(int64_t step) const {
  const int64_t per_epoch = config_.max_steps_per_epoch > 0
                                ? std::min(config_.max_steps_per_epoch, counters_.batches_per_epoch)
                                : counters_.batches_per_epoch;
  const int64_t total = std::max<int64_t>(int64_t(config_.epochs) * per_epoch, 1);
  const int64_t warmup = std::min(int64_t(std::llround(config_.warmup_epochs * double(per_epoch))), total);
  if (step < warmup) return config_.lr * double(step + 1) / double(warmup);
  if (config_.schedule == "constant") return config_.lr;
  const double progress = double(std::min(step, total) - warmup) / double(std::max<int64_t>(total - warmup, 1));
  return config_.lr * 0.5 * (1 + std::cos(std::numbers::pi * progress));
}

double Trainer::evaluate() {
  hg::NoGradGuard no_grad;
  model_.eval();
  // Distributed: each rank scores its shard and the counts are summed (a world size that does not
  // divide the test set counts a few padded samples twice, as PyTorch's DistributedSampler does).
  // Batches of 250: at 1000 a MobileNet's activations (75 MB) were past glibc's 32 MiB mmap limit,
  // so every op mapped fresh pages from the kernel -- 4 million page faults, a quarter of the
  // test pass's 19 s; at 250 the heap reuses its blocks (245 thousand faults, 14 s).
  hg::data::DataLoader test_loader(test_set_, {.batch_size = 250, .shuffle = false, .mean = stats_.mean, .std = stats_.std,
                                               .num_replicas = world_size(config_), .rank = rank(config_)});
  int64_t correct = 0, seen = 0;
  // FP8 inference scales each batch by its own amax (current scaling; block: its tiles), so the
  // test set leaves the training's delayed-scaling histories alone.
  hg::amp::Fp8Recipe inference = fp8_.recipe();
  if (inference.scaling == hg::amp::Fp8Scaling::Delayed) inference.scaling = hg::amp::Fp8Scaling::Current;
  hg::amp::Fp8State inference_fp8(inference);
  for (auto [x, y] : test_loader) {
    hg::amp::Autocast autocast(autocast_dtype_, autocast_);
    hg::amp::Fp8Autocast fp8(inference_fp8, fp8_enabled_);
    const hg::Tensor predicted = hg::argmax(model_(x.to(config_.device)), 1);
    correct += hg::sum(hg::eq(predicted, y.to(config_.device))).item<int64_t>();
    seen += y.numel();
  }
  model_.train();
  if (config_.group) {
    const hg::Tensor counts = hg::from_vector(std::vector<int64_t>{correct, seen}, {2});
    config_.group->all_reduce(counts);
    correct = counts.to_vector<int64_t>()[0];
    seen = counts.to_vector<int64_t>()[1];
  }
  return seen ? double(correct) / double(seen) : 0.0;
}

std::map<std::string, hg::Tensor> Trainer::Counters::state_dict() const {
  const auto i64 = [](int64_t v) { return hg::from_vector(std::vector<int64_t>{v}, {}); };
  return {{"epoch", i64(epoch)}, {"epoch_step", i64(epoch_step)}, {"step", i64(step)}, {"world_size", i64(world_size)}};
}

void Trainer::Counters::load_state_dict(const std::map<std::string, hg::Tensor>& state) {
  const std::string_view what = "trainer";
  sd::require_exact_keys(state, {"epoch", "epoch_step", "step", "world_size"}, what);
  const int64_t loaded_epoch = sd::read_int(state, "epoch", what, 0, 1 << 30);
  // epoch_step counts the steps of the writer's batch size: --max-steps caps it, nothing else.
  const int64_t loaded_epoch_step = sd::read_int(state, "epoch_step", what, 0, int64_t(1) << 53);
  const int64_t loaded_step = sd::read_int(state, "step", what, 0, int64_t(1) << 53);
  // (The loader saves its position as a sample index: a checkpoint of another number of ranks
  // resumes exactly; world_size says only who wrote it.)
  sd::read_int(state, "world_size", what, 1, 1 << 20);
  epoch = loaded_epoch;
  epoch_step = loaded_epoch_step;
  step = loaded_step;
}

// hg-train's checkpoints from before hg::Checkpoint (format 0, 2026-12-02) lack keys that later
// ones have, and each has one right value for such a file: the optimizer's kind is the one this
// run resumes with (its state names are checked on load: SGD's momentum against Adam's moments;
// Adam and AdamW keep the same state, so resume with the one you trained with), the file was
// written at the end of an epoch (epoch_step 0, step = epochs x this run's batches per epoch) by
// one process. The loader's {epoch, position} it holds is read as a batch count of this run's
// batch size.
void Trainer::upgrade_format_0(hg::SafetensorsContents& file) const {
  auto& t = file.tensors;
  const auto i64 = [](int64_t v) { return hg::from_vector(std::vector<int64_t>{v}, {}); };
  HG_CHECK(t.count("trainer.epoch"), "the checkpoint has no format metadata and no trainer.epoch: it was not written by "
           "hg-train (format 0) or is damaged");
  const int64_t epochs = sd::read_int(t, "trainer.epoch", "trainer", 0, 1 << 30);
  if (!t.count("optimizer.kind")) t["optimizer.kind"] = sd::from_text(optimizer_->kind());
  if (!t.count("trainer.epoch_step")) t["trainer.epoch_step"] = i64(0);
  if (!t.count("trainer.step")) t["trainer.step"] = i64(epochs * counters_.batches_per_epoch);
  if (!t.count("trainer.world_size")) t["trainer.world_size"] = i64(1);
}

void Trainer::load_checkpoint(const std::string& path) {
  hg::SafetensorsContents file = hg::load_with_metadata(path);
  if (hg::Checkpoint::format_version(file, path) == 0) upgrade_format_0(file);
  checkpoint_.load(file, path);
}

}  // namespace hg_train
