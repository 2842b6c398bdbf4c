// Trainer: the training step, evaluation and checkpoints of hg-train.
#include "train/trainer.h"

#include <chrono>

#include "train/progress.h"

namespace hg_train {

hg::DType precision_dtype(const std::string& precision) {
  if (precision == "f32") return hg::f32;
  if (precision == "f16") return hg::f16;
  if (precision == "bf16") return hg::bf16;
  HG_FAIL("unknown precision \"", precision, "\" (expected f32, f16 or bf16)");
}

namespace {
std::unique_ptr<hg::optim::Optimizer> make_optimizer(const TrainConfig& c, const std::vector<hg::Tensor>& params) {
  if (c.optimizer == "sgd") return std::make_unique<hg::optim::SGD>(params, hg::optim::SGDOptions{.lr = c.lr, .momentum = c.momentum});
  if (c.optimizer == "adam") return std::make_unique<hg::optim::Adam>(params, hg::optim::AdamOptions{.lr = c.lr});
  if (c.optimizer == "adamw") return std::make_unique<hg::optim::AdamW>(params, hg::optim::AdamWOptions{.lr = c.lr});
  HG_FAIL("unknown optimizer \"", c.optimizer, "\" (expected sgd, adam or adamw)");
}

int64_t world_size(const TrainConfig& c) { return c.group ? c.group->world_size() : 1; }
int64_t rank(const TrainConfig& c) { return c.group ? c.group->rank() : 0; }

// Prefixes every key of a state dict, to store several in one file.
void merge(std::map<std::string, hg::Tensor>& into, const std::string& prefix, const std::map<std::string, hg::Tensor>& from) {
  for (const auto& [k, v] : from) into[prefix + k] = v;
}
std::map<std::string, hg::Tensor> extract(const std::map<std::string, hg::Tensor>& all, const std::string& prefix) {
  std::map<std::string, hg::Tensor> out;
  for (const auto& [k, v] : all)
    if (k.rfind(prefix, 0) == 0) out[k.substr(prefix.size())] = v;
  return out;
}
}  // namespace

Trainer::Trainer(TrainConfig config, const hg::data::MNIST& train, const hg::data::MNIST& test)
    : config_(std::move(config)),
      train_set_(train),
      test_set_(test),
      model_((hg::manual_seed(config_.seed), make_model(config_.model))),
      scaler_({.enabled = config_.precision == "f16"}),
      stats_(config_.normalize ? hg::data::pixel_statistics(train_set_) : hg::data::PixelStatistics{0.0, 1.0}),
      loader_(train_set_, {.batch_size = config_.batch_size, .shuffle = true, .seed = config_.seed, .mean = stats_.mean,
                           .std = stats_.std, .num_replicas = world_size(config_), .rank = rank(config_)}),
      autocast_(config_.precision != "f32"),
      autocast_dtype_(autocast_ ? precision_dtype(config_.precision) : hg::f16) {
  precision_dtype(config_.precision);  // validates the name
  model_.to(config_.device);
  if (config_.group) {  // rank 0's initial weights everywhere; gradients averaged across ranks
    ddp_ = std::make_unique<hg::distributed::DataParallel>(model_, config_.group);
    ddp_->attach(scaler_);
  }
  optimizer_ = make_optimizer(config_, model_.parameters());
  scaler_.set_parameter_names(model_.named_parameters());
}

EpochMetrics Trainer::run_epoch(bool show_progress) {
  EpochMetrics m;
  m.epoch = ++epoch_;
  const hg::Device device = config_.device;
  int64_t total = loader_.num_batches();
  if (config_.max_steps_per_epoch > 0) total = std::min(total, config_.max_steps_per_epoch);
  ProgressBar bar("epoch " + std::to_string(m.epoch) + "/" + std::to_string(config_.epochs), total);
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
  for (auto [x_cpu, y_cpu] : loader_) {
    if (m.steps >= total) break;  // --max-steps: the loader resumes at this batch next time
    const hg::Tensor x = x_cpu.to(device), y = y_cpu.to(device);
    optimizer_->zero_grad();
    // The step's own memory: the peak above what was live before it (parameters, optimizer
    // state, data), measured from a fresh peak.
    const int64_t before = hg::memory::allocated(device);
    hg::memory::reset_peak(device);
    hg::Tensor loss;
    {
      hg::amp::Autocast autocast(autocast_dtype_, autocast_);
      loss = hg::cross_entropy(ddp_ ? (*ddp_)(x) : model_(x), y);
    }
    if (m.steps == 1) m.activation_bytes = hg::memory::allocated(device) - before;  // step 0 warms caches
    scaler_.scale(loss).backward();
    scaler_.step_async(*optimizer_);
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
    ++m.steps;
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
    loss_sum = totals.to_vector<double>()[0] / config_.group->world_size();
    samples = int64_t(totals.to_vector<double>()[1]);
  }
  m.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  m.samples_per_s = double(samples) / m.seconds;
  m.peak_bytes = epoch_peak;
  m.train_loss = loss_sum / double(std::max<int64_t>(m.steps, 1));
  m.scale = scaler_.get_scale();
  m.test_accuracy = evaluate();
  return m;
}

double Trainer::evaluate() {
  hg::NoGradGuard no_grad;
  model_.eval();
  // Distributed: each rank scores its shard and the counts are summed (a world size that does not
  // divide the test set counts a few padded samples twice, as PyTorch's DistributedSampler does).
  hg::data::DataLoader test_loader(test_set_, {.batch_size = 1000, .shuffle = false, .mean = stats_.mean, .std = stats_.std,
                                               .num_replicas = world_size(config_), .rank = rank(config_)});
  int64_t correct = 0, seen = 0;
  for (auto [x, y] : test_loader) {
    hg::amp::Autocast autocast(autocast_dtype_, autocast_);
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

void Trainer::save_checkpoint(const std::string& path) {
  std::map<std::string, hg::Tensor> state;
  merge(state, "model.", model_.state_dict());
  merge(state, "optimizer.", optimizer_->state_dict());
  merge(state, "scaler.", scaler_.state_dict());
  merge(state, "loader.", loader_.state_dict());
  const hg::random::GeneratorState rng = hg::random::get_state();
  state["rng.seed"] = hg::from_vector(std::vector<int64_t>{int64_t(rng.seed)}, {});
  state["rng.offset"] = hg::from_vector(std::vector<int64_t>{int64_t(rng.offset)}, {});
  state["trainer.epoch"] = hg::from_vector(std::vector<int64_t>{epoch_}, {});
  state["trainer.world_size"] = hg::from_vector(std::vector<int64_t>{world_size(config_)}, {});
  hg::save(path, state, {{"written_by", "hg-train"}, {"model", config_.model}, {"precision", config_.precision}});
}

void Trainer::load_checkpoint(const std::string& path) {
  const std::map<std::string, hg::Tensor> state = hg::load(path);
  // The loader's position counts batches of this rank's shard: only the same world size resumes it.
  const int64_t saved_world = state.count("trainer.world_size") ? state.at("trainer.world_size").item<int64_t>() : 1;
  HG_CHECK(saved_world == world_size(config_), path, " was written by a run on ", saved_world,
           " process(es); resume it with the same number (mpirun -np ", saved_world, "), not ", world_size(config_));
  model_.load_state_dict(extract(state, "model."));
  optimizer_->load_state_dict(extract(state, "optimizer."));
  if (scaler_.is_enabled()) scaler_.load_state_dict(extract(state, "scaler."));
  loader_.load_state_dict(extract(state, "loader."));
  hg::random::set_state({uint64_t(state.at("rng.seed").item<int64_t>()), uint64_t(state.at("rng.offset").item<int64_t>())});
  epoch_ = int(state.at("trainer.epoch").item<int64_t>());
}

}  // namespace hg_train
