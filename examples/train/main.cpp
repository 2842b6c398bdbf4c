// hg-train: trains an MLP or a CNN on Fashion-MNIST from C++, in f32 or with mixed precision.
//
//   hg-train --model cnn --epochs 2 --precision bf16 --out runs/cnn
//   hg-train --model mlp --compare --epochs 1          # f32 vs f16+GradScaler vs bf16, one table
//   mpirun -np 2 hg-train --model cnn --batch-size 64  # data-parallel: 2 processes, global batch 128
//
// Prints a progress bar per epoch (on a terminal) and one line per epoch; with --out writes
// metrics.csv, model.safetensors (PyTorch names), checkpoint.safetensors (resumable with
// --resume) and, when gnuplot is installed, metrics.png. Under mpirun (or with --distributed) it
// trains data-parallel: --batch-size is per rank, rank 0 prints and writes, every rank resumes
// from the same checkpoint (with the same number of ranks).
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "train/trainer.h"

namespace {

using hg_train::EpochMetrics;
using hg_train::TrainConfig;

std::string mib(int64_t bytes) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.1f MiB", double(bytes) / (1 << 20));
  return buffer;
}

void print_epoch(const EpochMetrics& m, int epochs, const std::string& ranks) {
  std::printf("epoch %d/%d  loss %.4f  test accuracy %.2f%%  %.0f samples/s%s  peak %s (step %s)  (%.1f s)\n", m.epoch,
              epochs, m.train_loss, 100 * m.test_accuracy, m.samples_per_s, ranks.c_str(), mib(m.peak_bytes).c_str(),
              mib(m.step_peak_bytes).c_str(), m.seconds);
  std::fflush(stdout);
}

bool gnuplot_available() { return std::system("command -v gnuplot > /dev/null 2>&1") == 0; }

void write_outputs(const std::string& dir, const std::vector<EpochMetrics>& epochs, hg_train::Trainer& trainer) {
  std::filesystem::create_directories(dir);
  std::ofstream csv(dir + "/metrics.csv");
  csv << "epoch,train_loss,test_accuracy,samples_per_s,peak_bytes\n";
  for (const EpochMetrics& m : epochs)
    csv << m.epoch << ',' << m.train_loss << ',' << m.test_accuracy << ',' << m.samples_per_s << ',' << m.peak_bytes << '\n';
  csv.close();
  hg::nn::save(trainer.model(), dir + "/model.safetensors");
  trainer.save_checkpoint(dir + "/checkpoint.safetensors");
  std::printf("wrote %s/metrics.csv, model.safetensors, checkpoint.safetensors", dir.c_str());
  if (!gnuplot_available()) {
    std::printf("\n(no plot: gnuplot is not installed; apt-get install gnuplot-nox)\n");
    return;
  }
  FILE* gp = popen("gnuplot", "w");
  if (gp == nullptr) return;
  std::fprintf(gp,
               "set terminal png size 800,400 noenhanced\nset output '%s/metrics.png'\nset datafile separator ','\n"
               "set xlabel 'epoch'\nset xtics 1\nset ylabel 'train loss'\nset y2label 'test accuracy'\n"
               "set ytics nomirror\nset y2tics\nset key center right\nplot '%s/metrics.csv' every ::1 using 1:2 "
               "with linespoints title 'train loss' axes x1y1, '' every ::1 using 1:3 with linespoints "
               "title 'test accuracy' axes x1y2\n",
               dir.c_str(), dir.c_str());
  const bool ok = pclose(gp) == 0;
  std::printf(ok ? ", metrics.png\n" : "\n(gnuplot failed; no plot)\n");
}

int run_single(const TrainConfig& config, const hg::data::MNIST& train, const hg::data::MNIST& test,
               const std::string& out, const std::string& resume) {
  hg_train::Trainer trainer(config, train, test);
  if (!resume.empty()) trainer.load_checkpoint(resume);
  // Distributed: rank 0 speaks and writes for all; the others train in silence.
  const bool speaker = !config.group || config.group->rank() == 0;
  const int world = config.group ? config.group->world_size() : 1;
  std::string batch = std::to_string(config.batch_size);
  if (config.group) batch += " per rank x " + std::to_string(world) + " ranks = global batch " + std::to_string(trainer.global_batch());
  const std::string ranks = config.group ? " (" + std::to_string(world) + " ranks, global batch " +
                                               std::to_string(trainer.global_batch()) + ")"
                                         : "";
  if (speaker) {
    std::printf("hg-train: %s, %s, precision %s, lr %g, batch %s, %d epoch(s), %d thread(s)%s, %s\n", config.model.c_str(),
                config.optimizer.c_str(), config.precision.c_str(), config.lr, batch.c_str(), config.epochs,
                hg::get_num_threads(), config.group ? " per rank" : "", config.device.str().c_str());
    if (config.normalize)
      std::printf("inputs normalised with the training set's pixel mean %.4f and std %.4f\n",
                  trainer.input_statistics().mean, trainer.input_statistics().std);
  }
  std::vector<EpochMetrics> epochs;
  for (int e = 0; e < config.epochs; ++e) {
    epochs.push_back(trainer.run_epoch(speaker));
    if (speaker) print_epoch(epochs.back(), config.epochs, ranks);
  }
  if (!out.empty() && speaker) write_outputs(out, epochs, trainer);
  return 0;
}

// --compare: the same model, seed and data in f32, f16 + GradScaler and bf16, side by side.
int run_compare(TrainConfig config, const hg::data::MNIST& train, const hg::data::MNIST& test) {
  struct Row {
    std::string precision;
    EpochMetrics last;
    int64_t skipped = 0;
  };
  std::vector<Row> rows;
  for (const char* precision : {"f32", "f16", "bf16"}) {
    config.precision = precision;
    hg_train::Trainer trainer(config, train, test);
    Row row{precision, {}, 0};
    double samples_per_s = 0;
    int64_t peak = 0, step_peak = 0;
    for (int e = 0; e < config.epochs; ++e) {
      row.last = trainer.run_epoch(true);
      row.skipped += row.last.skipped_steps;
      samples_per_s += row.last.samples_per_s / config.epochs;
      peak = std::max(peak, row.last.peak_bytes);
      step_peak = std::max(step_peak, row.last.step_peak_bytes);
    }
    row.last.samples_per_s = samples_per_s;
    row.last.peak_bytes = peak;
    row.last.step_peak_bytes = step_peak;
    std::printf("  %-5s done: loss %.4f, accuracy %.2f%%\n", precision, row.last.train_loss, 100 * row.last.test_accuracy);
    rows.push_back(row);
  }
  std::printf("\n%s, %d epoch(s), batch %lld, %d thread(s), %s\n", config.model.c_str(), config.epochs,
              (long long)config.batch_size, hg::get_num_threads(), config.device.str().c_str());
  std::printf("| precision | samples/s | vs f32 | peak memory | step peak | vs f32 | saved for backward | vs f32 | final loss | test acc | skipped | final scale |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const Row& r : rows) {
    std::printf("| %s | %.0f | %.2fx | %s | %s | %.2fx | %s | %.2fx | %.4f | %.2f%% | %lld | %g |\n", r.precision.c_str(),
                r.last.samples_per_s, r.last.samples_per_s / rows[0].last.samples_per_s, mib(r.last.peak_bytes).c_str(),
                mib(r.last.step_peak_bytes).c_str(), double(r.last.step_peak_bytes) / double(rows[0].last.step_peak_bytes),
                mib(r.last.activation_bytes).c_str(), double(r.last.activation_bytes) / double(rows[0].last.activation_bytes),
                r.last.train_loss, 100 * r.last.test_accuracy, (long long)r.skipped, r.last.scale);
  }
  std::printf("(peak memory: the most held during training, dataset included; step peak: the most one training step "
              "allocated above what was live before it; saved for backward: what the graph held after the forward)\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"hg-train: train an MLP or CNN on Fashion-MNIST with halfgrad"};
  TrainConfig config;
  std::string device = "cpu", out, resume, data_root;
  int threads = 0;
  int64_t train_limit = 0;
  bool compare = false;
  app.add_option("--model", config.model, "mlp or cnn")->check(CLI::IsMember({"mlp", "cnn"}))->capture_default_str();
  app.add_option("--optimizer", config.optimizer, "sgd, adam or adamw")->check(CLI::IsMember({"sgd", "adam", "adamw"}))->capture_default_str();
  app.add_option("--lr", config.lr, "learning rate")->capture_default_str();
  app.add_option("--momentum", config.momentum, "SGD momentum")->capture_default_str();
  app.add_option("--epochs", config.epochs, "epochs")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--batch-size", config.batch_size, "batch size (per rank under mpirun)")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--seed", config.seed, "random seed (initialisation and shuffling)")->capture_default_str();
  app.add_option("--threads", threads, "CPU threads (0: OpenMP's default)")->capture_default_str();
  app.add_option("--device", device, "cpu, cuda, or auto (cuda when a GPU is available)")
      ->check(CLI::IsMember({"cpu", "cuda", "auto"}))->capture_default_str();
  app.add_option("--precision", config.precision,
                 "f32, f16 (autocast + GradScaler), bf16 (autocast), or auto (f16 on CUDA, bf16 on the CPU)")
      ->check(CLI::IsMember({"f32", "f16", "bf16", "auto"}))->capture_default_str();
  app.add_option("--out", out, "directory for metrics.csv, model and checkpoint");
  app.add_option("--resume", resume, "continue from a checkpoint.safetensors");
  app.add_option("--data", data_root, "dataset directory (default: $HG_DATA or /usr/share/datasets/fashion-mnist)");
  app.add_option("--train-limit", train_limit, "train on the first N samples only (0: all)");
  app.add_option("--max-steps", config.max_steps_per_epoch, "stop each epoch after N steps (0: full epochs)");
  app.add_flag("--compare", compare, "train in f32, f16 and bf16 and print one comparison table");
  bool distributed = false;
  app.add_flag("--distributed", distributed,
               "data-parallel over the processes mpirun started (automatic when mpirun starts more than one)");
  bool raw_pixels = false, detect_anomaly = false;
  app.add_flag("--no-normalize", raw_pixels, "feed pixels in [0, 1] instead of normalising with the training set's mean/std");
  app.add_flag("--detect-anomaly", detect_anomaly,
               "check every backward for NaN and stop naming the op and where it was created (slow: for debugging)");
  CLI11_PARSE(app, argc, argv);

  try {
    if (distributed || hg::distributed::launched_world_size() > 1) {
      HG_CHECK(!compare, "--compare runs in one process; start it without mpirun");
      config.group = hg::distributed::init();
      // The ranks on one machine share its cores (unless --threads says otherwise) and its GPUs.
      if (threads == 0) threads = std::max(1, hg::get_num_threads() / config.group->local_size());
    }
    if (threads > 0) hg::set_num_threads(threads);
    hg::autograd::AnomalyMode::set_enabled(detect_anomaly);
    if (device == "auto") device = hg::cuda::is_available() ? "cuda" : "cpu";
    const int gpu = config.group ? config.group->local_rank() : 0;  // one GPU per rank
    config.device = device == "cuda" ? hg::Device::cuda(gpu) : hg::Device::cpu();
    // f16 needs tensor cores to pay off and a GradScaler to be safe; on a CPU with AVX512-BF16,
    // bf16 GEMMs run natively at twice the f32 rate and need no scaling.
    if (config.precision == "auto") config.precision = config.device.is_cuda() ? "f16" : "bf16";
    config.normalize = !raw_pixels;
    if (config.device.is_cuda() && !hg::cuda::is_available()) {
      std::fprintf(stderr, "hg-train: --device cuda, but no CUDA device is available (built with CUDA: %s)\n",
                   hg::cuda::built_with_cuda() ? "yes" : "no");
      return 1;
    }
    hg::data::MNIST train = hg::data::FashionMNIST(data_root, {.train = true});
    const hg::data::MNIST test = hg::data::FashionMNIST(data_root, {.train = false});
    if (train_limit > 0) train = train.head(train_limit);
    return compare ? run_compare(config, train, test) : run_single(config, train, test, out, resume);
  } catch (const hg::Error& e) {
    if (config.group) {
      std::fprintf(stderr, "hg-train (rank %d of %d): %s\n", config.group->rank(), config.group->world_size(), e.what());
      // One rank cannot go on alone: end every rank now rather than leave them waiting (a timeout).
      config.group->abort(1);
    }
    std::fprintf(stderr, "hg-train: %s\n", e.what());
    return 1;
  }
}
