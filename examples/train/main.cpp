// hg-train: trains an MLP or a CNN on Fashion-MNIST from C++, in f32 or with mixed precision --
// or a character-level GPT on a text file.
//
//   hg-train --model cnn --epochs 2 --precision bf16 --out runs/cnn
//   hg-train --model gpt --steps 300                    # on /usr/share/common-licenses/GPL-3
//   hg-train --model lstm --steps 500
//   hg-train --model mlp --compare --epochs 1          # f32 vs f16+GradScaler vs bf16, one table
//   hg-train --model mlp --precision bf16-pure         # bf16 weights + optimizer state, stochastic rounding
//   hg-train --model cnn --precision fp8               # FP8 linear/conv2d (delayed scaling), emulated on a CPU
//   mpirun -np 2 hg-train --model cnn --batch-size 64  # data-parallel: 2 processes, global batch 128
//
// Prints a progress bar per epoch (on a terminal) and one line per epoch; with --out writes
// checkpoint.safetensors after every epoch (and every --checkpoint-every steps; resumable with
// --resume), then metrics.csv, model.safetensors (PyTorch names) and, when gnuplot is installed,
// metrics.png. Every error, bad input included, ends the program with one line and exit code 1.
// Under mpirun (or with --distributed) it trains data-parallel: --batch-size is per rank, rank 0
// prints and writes, every rank resumes from the same checkpoint (with any number of ranks and
// batch size: the loader continues with the samples the checkpoint had not reached). The ranks
// compare their settings at start-up (train/rank_settings.h) and refuse to train apart.
#include <CLI/CLI.hpp>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "core/file.h"
#include "train/precision_choice.h"
#include "train/rank_settings.h"
#include "train/text_trainer.h"
#include "train/trainer.h"

namespace {

using hg_train::EpochMetrics;
using hg_train::TrainConfig;

std::string mib(int64_t bytes) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.1f MiB", double(bytes) / (1 << 20));
  return buffer;
}

// The distributed run's process group, if any: an error on one rank ends all of them.
std::shared_ptr<hg::distributed::ProcessGroup> g_group;

void print_epoch(const EpochMetrics& m, int epochs, const std::string& ranks = "") {
  std::printf("epoch %d/%d  loss %.4f  test accuracy %.2f%%  %.0f samples/s%s  peak %s (step %s)  (%.1f s)\n", m.epoch,
              epochs, m.train_loss, 100 * m.test_accuracy, m.samples_per_s, ranks.c_str(), mib(m.peak_bytes).c_str(),
              mib(m.step_peak_bytes).c_str(), m.seconds);
  std::fflush(stdout);
}

bool gnuplot_available() { return std::system("command -v gnuplot > /dev/null 2>&1") == 0; }

// Before any training: --out must be (or become) a directory we can write to, or the run would
// fail only at its end. Temporaries of a checkpoint write that was killed are removed.
void prepare_output_dir(const std::string& dir) {
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  HG_CHECK(!error, "--out ", dir, ": cannot create the directory: ", error.message());
  HG_CHECK(std::filesystem::is_directory(dir, error), "--out ", dir, ": not a directory");
  const std::string probe = dir + "/.hg-train-write-check." + std::to_string(::getpid());
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  HG_CHECK(fd >= 0, "--out ", dir, ": cannot write there: ", std::strerror(errno));
  ::close(fd);
  ::unlink(probe.c_str());
  int stale = 0;
  for (const char* name : {"/checkpoint.safetensors", "/model.safetensors"})
    stale += hg::remove_stale_temporaries(dir + name);
  if (stale > 0)
    std::printf("hg-train: removed %d temporary file(s) left in %s by an interrupted write\n", stale, dir.c_str());
}

// Every file a run writes besides --out is created now, before any training, with a line saying
// it will be filled: a bad path, or a full disk (/dev/full), fails here and not after hours of
// training -- or never, with nothing written (a C++ stream reports a failed write only on flush).
void check_output_file(const std::string& path, const std::string& option) {
  if (path.empty()) return;
  hg::write_text_file(path, "# hg-train writes this file during the run\n", option + " " + path);
}

void write_outputs(const std::string& dir, const std::vector<EpochMetrics>& epochs, hg_train::Trainer& trainer) {
  std::ofstream csv(dir + "/metrics.csv");
  csv << "epoch,train_loss,test_accuracy,samples_per_s,peak_bytes\n";
  for (const EpochMetrics& m : epochs)
    csv << m.epoch << ',' << m.train_loss << ',' << m.test_accuracy << ',' << m.samples_per_s << ',' << m.peak_bytes << '\n';
  csv.close();
  HG_CHECK(csv, "--out ", dir, ": writing metrics.csv failed");
  hg::nn::save(trainer.model(), dir + "/model.safetensors");
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
  // Distributed: rank 0 speaks and writes for all; the others train in silence.
  const bool speaker = !config.group || config.group->rank() == 0;
  if (!resume.empty()) {
    trainer.load_checkpoint(resume);
    if (speaker) std::printf("resuming from %s: %d epoch(s) done", resume.c_str(), trainer.epochs_done());
    if (speaker && trainer.epoch_sample() > 0)
      std::printf(", %lld sample(s) into the next", (long long)trainer.epoch_sample());
    if (speaker) std::printf("\n");
  }
  // --epochs counts every epoch of the run, those before a resume included.
  if (trainer.epochs_done() >= config.epochs) {
    if (!speaker) return 0;
    std::printf("hg-train: the checkpoint has completed %d of --epochs %d: nothing to train (raise --epochs to go on)\n",
                trainer.epochs_done(), config.epochs);
    // A run killed after its last checkpoint but before its outputs gets its model now.
    if (!out.empty()) hg::nn::save(trainer.model(), out + "/model.safetensors");
    return 0;
  }
  const int world = config.group ? config.group->world_size() : 1;
  std::string batch = std::to_string(config.batch_size);
  if (config.group) batch += " per rank x " + std::to_string(world) + " ranks = global batch " + std::to_string(trainer.global_batch());
  const std::string ranks =
      config.group ? " (" + std::to_string(world) + " ranks, global batch " + std::to_string(trainer.global_batch()) + ")" : "";
  if (speaker) {
    const std::string precision = config.precision == "bf16-pure"
        ? config.precision + " (" + hg::optim::rounding_name(config.rounding) + " rounding)" : config.precision;
    std::printf("hg-train: %s, %s, precision %s, lr %g, batch %s, %d epoch(s), %d thread(s)%s, %s, CPU level %s\n",
                config.model.c_str(), config.optimizer.c_str(), precision.c_str(), config.lr, batch.c_str(),
                config.epochs, hg::get_num_threads(), config.group ? " per rank" : "", config.device.str().c_str(),
                hg::cpu::isa_summary().c_str());
    std::printf("memory: %s\n", hg_train::memory_per_parameter(trainer.optimizer()).c_str());
    if (config.normalize)
      std::printf("inputs normalised with the training set's pixel mean %.4f and std %.4f\n",
                  trainer.input_statistics().mean, trainer.input_statistics().std);
  }
  std::vector<EpochMetrics> epochs;
  while (trainer.epochs_done() < config.epochs) {  // each epoch ends with a checkpoint when --out is set
    epochs.push_back(trainer.run_epoch(speaker));
    if (speaker) print_epoch(epochs.back(), config.epochs, ranks);
  }
  if (!out.empty() && speaker) write_outputs(out, epochs, trainer);
  return 0;
}

// --compare: the same model, seed and data in f32, f16 + GradScaler and bf16, side by side.
// "runs/steps.csv" + "f16" -> "runs/steps_f16.csv" (--compare writes one file per precision).
std::string with_suffix(const std::string& path, const std::string& suffix) {
  if (path.empty()) return path;
  const std::filesystem::path p(path);
  return (p.parent_path() / (p.stem().string() + "_" + suffix + p.extension().string())).string();
}

int run_compare(TrainConfig config, const hg::data::MNIST& train, const hg::data::MNIST& test,
                const std::string& csv_path) {
  struct Row {
    std::string precision;
    EpochMetrics last;
    int64_t skipped = 0;
  };
  std::vector<Row> rows;
  const TrainConfig base = config;
  std::printf("hg-train: --compare, %s, %s, lr %g, batch %lld, %d epoch(s), %d thread(s), %s, CPU level %s\n",
              config.model.c_str(), config.optimizer.c_str(), config.lr, (long long)config.batch_size, config.epochs,
              hg::get_num_threads(), config.device.str().c_str(), hg::cpu::isa_summary().c_str());
  for (const char* precision : {"f32", "f16", "bf16"}) {
    config.precision = precision;
    config.step_log = with_suffix(base.step_log, precision);
    config.gradient_histogram = with_suffix(base.gradient_histogram, precision);
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
  if (!csv_path.empty()) {
    std::ofstream csv(csv_path);
    // New columns go at the end: scripts/figures.sh reads the first ones by position. The parts
    // (train/memory_parts.h) are the second step's; gradients exist only during a step.
    csv << "precision,isa,threads,batch_size,samples_per_s,peak_bytes,step_peak_bytes,activation_bytes,final_loss,"
           "test_accuracy,skipped,final_scale,dataset_bytes,weight_bytes,gradient_bytes,optimizer_state_bytes,"
           "batch_bytes,live_before_step_bytes\n";
    for (const Row& r : rows) {
      const hg_train::MemoryParts& m = r.last.memory;
      csv << r.precision << ',' << hg::cpu::isa_name(hg::cpu::isa()) << ',' << hg::get_num_threads() << ','
          << config.batch_size << ',' << r.last.samples_per_s << ',' << r.last.peak_bytes << ',' << r.last.step_peak_bytes
          << ',' << r.last.activation_bytes << ',' << r.last.train_loss << ',' << r.last.test_accuracy << ',' << r.skipped
          << ',' << r.last.scale << ',' << m.dataset << ',' << m.weights << ',' << m.gradients << ','
          << m.optimizer_state << ',' << m.batch << ',' << m.live_before_step << '\n';
    }
    csv.close();
    HG_CHECK(csv, "--compare-csv ", csv_path, ": writing failed");
    std::printf("wrote %s\n", csv_path.c_str());
  }
  return 0;
}

// --model gpt|lstm: hg-train's options mean the same where they apply (--lr, --batch-size, --seed,
// --precision, --out, --threads), with a text model's defaults where the user gave none (AdamW at
// lr 2e-3 (lstm 6e-3), batch 32, bf16 autocast); the image-only options are refused.
int run_text_model(const CLI::App& app, const TrainConfig& config, const std::string& device, int64_t steps,
                   bool checkpoint_activations, const std::string& data, const std::string& out, const std::string& resume,
                   bool compare) {
  HG_CHECK(resume.empty() && !compare && config.checkpoint_every == 0 && !config.augment && !app.count("--epochs"),
           "--model ", config.model, " trains for --steps on a text file: --resume, --compare, --checkpoint-every, "
           "--augment and --epochs are for the image models");
  HG_CHECK(!app.count("--optimizer") || config.optimizer == "adamw", "--model ", config.model, " trains with AdamW");
  HG_CHECK(!hg::distributed::launched_world_size() || hg::distributed::launched_world_size() == 1,
           "--model ", config.model, " trains in one process; start it without mpirun");
  HG_CHECK(device != "cuda", "--model ", config.model, " trains on the CPU for now (--device cpu)");
  hg_train::TextRunConfig text = hg_train::text_model_defaults(config.model);
  if (!data.empty()) text.data_path = data;
  text.precision = app.count("--precision") ? config.precision : "bf16";
  if (text.precision == "amp" || text.precision == "auto") text.precision = "bf16";
  if (app.count("--lr")) text.lr = config.lr;
  if (app.count("--weight-decay")) text.weight_decay = config.weight_decay;
  if (app.count("--batch-size")) text.batch_size = config.batch_size;
  text.seed = config.seed;
  text.steps = steps;
  text.checkpoint_activations = checkpoint_activations;
  if (!out.empty()) {
    prepare_output_dir(out);
    text.out = out;
  }
  hg_train::run_text(text);
  return 0;
}

// Number checks for options. CLI11's own NonNegativeNumber would print its range as "0.000000
// to 179769313486231570814527..."; NaN fails both checks.
CLI::Validator number_check(bool positive) {
  return CLI::Validator(
      [positive](std::string& input) {
        double value = 0;
        const bool ok = CLI::detail::lexical_cast(input, value) && (positive ? value > 0 : value >= 0);
        return ok ? std::string() : "must be a number " + std::string(positive ? "> 0" : ">= 0") + ", got " + input;
      },
      positive ? "NUMBER > 0" : "NUMBER >= 0");
}

// The whole program; main() turns any exception into one line and exit code 1.
int run(int argc, char** argv) {
  CLI::App app{"hg-train: train an MLP, a CNN, PyTorch's MNIST Net, a ResNet-20 or a MobileNetV2-tiny on Fashion-MNIST with halfgrad"};
  TrainConfig config;
  std::string device = "cpu", out, resume, data_root;
  int threads = 0;
  int64_t train_limit = 0;
  bool compare = false;
  const CLI::Validator non_negative = number_check(false), positive = number_check(true);
  std::vector<std::string> model_names(std::begin(hg_train::kModelNames), std::end(hg_train::kModelNames));
  model_names.insert(model_names.end(), std::begin(hg_train::kTextModelNames), std::end(hg_train::kTextModelNames));
  app.add_option("--model", config.model, "mlp, cnn, mnist-net (the Net of PyTorch's MNIST example), resnet (ResNet-20), "
                 "mobilenet (a MobileNetV2-tiny) on Fashion-MNIST, or gpt / lstm (a character-level GPT or LSTM on --data, "
                 "a text file)")
      ->check(CLI::IsMember(model_names))
      ->capture_default_str();
  int64_t text_steps = 300;
  app.add_option("--steps", text_steps, "text models: training steps (default 300)")->check(positive);
  bool checkpoint_activations = false;
  app.add_flag("--checkpoint-activations", checkpoint_activations,
               "gpt: recompute each block in backward instead of keeping its activations (less memory, more time)");
  app.add_option("--optimizer", config.optimizer, "sgd, adam or adamw")->check(CLI::IsMember({"sgd", "adam", "adamw"}))->capture_default_str();
  app.add_option("--lr", config.lr, "learning rate")->check(non_negative)->capture_default_str();
  app.add_option("--momentum", config.momentum, "SGD momentum")->check(non_negative)->capture_default_str();
  app.add_flag("--nesterov", config.nesterov, "SGD: Nesterov momentum");
  app.add_option("--weight-decay", config.weight_decay, "weight decay (AdamW: decoupled; default 0, AdamW's 0.01)")
      ->check(non_negative)->capture_default_str();
  app.add_option("--schedule", config.schedule, "learning rate: constant, or cosine (to 0 over the run)")
      ->check(CLI::IsMember({"constant", "cosine"}))->capture_default_str();
  app.add_option("--warmup-epochs", config.warmup_epochs, "linear learning-rate warmup over this many epochs")
      ->check(non_negative)->capture_default_str();
  app.add_flag("--augment", config.augment, "random crop (padding 2) and horizontal flip of the training images");
  app.add_option("--epochs", config.epochs, "epochs in all (a resumed run counts those before it)")
      ->check(positive)->capture_default_str();
  app.add_option("--batch-size", config.batch_size, "batch size (per rank under mpirun)")->check(positive)->capture_default_str();
  app.add_option("--seed", config.seed, "random seed (initialisation and shuffling)")->check(non_negative)->capture_default_str();
  app.add_option("--threads", threads, "CPU threads (0: the cores this process may use)")->check(non_negative)->capture_default_str();
  app.add_option("--device", device, "cpu, cuda, or auto (cuda when a GPU is available)")
      ->check(CLI::IsMember({"cpu", "cuda", "auto"}))->capture_default_str();
  app.add_option("--precision", config.precision,
                 "f32, f16 (autocast + GradScaler), bf16 (autocast), amp (mixed precision on the device: f16 on "
                 "CUDA, bf16 on a CPU), auto (the fastest: f16 on CUDA; on a CPU bf16 where a bf16 GEMM is measured "
                 "faster than f32, else f32), bf16-pure (bf16 weights and optimizer state, no f32 masters, updates "
                 "written back with --rounding), fp8 (linear/conv2d in FP8, E4M3 forward and E5M2 gradients with "
                 "delayed per-tensor scaling, the rest bf16 autocast; emulated exactly on a CPU) or fp8-block (the "
                 "same with 1x128 / 128x128 block scales)")
      ->check(CLI::IsMember({"f32", "f16", "bf16", "amp", "auto", "bf16-pure", "fp8", "fp8-block"}))->capture_default_str();
  std::string rounding = "stochastic";
  app.add_option("--rounding", rounding, "--precision bf16-pure: how updates are written into the bf16 weights and "
                 "state: stochastic (unbiased on average), kahan (the weights with a bf16 compensation, 2 more bytes "
                 "per parameter) or nearest (small updates are lost)")
      ->check(CLI::IsMember({"stochastic", "kahan", "nearest"}))->capture_default_str();
  app.add_option("--out", out, "directory for the checkpoint (after every epoch), metrics.csv and the model");
  app.add_option("--checkpoint-every", config.checkpoint_every, "also write the checkpoint every N steps (0: per epoch only)")
      ->check(non_negative)->capture_default_str();
  app.add_option("--resume", resume, "continue from a checkpoint.safetensors");
  app.add_option("--data", data_root, "dataset directory (default: $HG_DATA or /usr/share/datasets/fashion-mnist); "
                 "text models: a text file (default: /usr/share/common-licenses/GPL-3)");
  app.add_option("--train-limit", train_limit, "train on the first N samples only (0: all)")->check(non_negative);
  app.add_option("--max-steps", config.max_steps_per_epoch, "stop each epoch after N steps (0: full epochs)")
      ->check(non_negative);
  app.add_flag("--compare", compare, "train in f32, f16 and bf16 and print one comparison table");
  std::string compare_csv;
  app.add_option("--growth-interval", config.growth_interval,
                 "f16: clean steps before the GradScaler doubles the scale (PyTorch's default 2000)")
      ->check(positive)->capture_default_str();
  app.add_option("--compare-csv", compare_csv, "with --compare: also write the table as CSV to this file (with the memory by part: "
                 "dataset, weights, gradients, optimizer state, batch)");
  app.add_option("--log-steps", config.step_log,
                 "write each step's loss, loss scale and whether it applied to this CSV file (with --compare: one "
                 "file per precision, e.g. steps_f16.csv)");
  app.add_option("--gradient-histogram", config.gradient_histogram,
                 "write the base-2 exponent histogram of all gradients, before and after unscaling, to this CSV file "
                 "(with --compare: one per precision)");
  bool distributed = false;
  app.add_flag("--distributed", distributed,
               "data-parallel over the processes mpirun started (automatic when mpirun starts more than one)");
  bool raw_pixels = false, detect_anomaly = false;
  app.add_flag("--no-normalize", raw_pixels, "feed pixels in [0, 1] instead of normalising with the training set's mean/std");
  app.add_flag("--detect-anomaly", detect_anomaly,
               "check every backward for NaN and stop naming the op and where it was created (slow: for debugging)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help
    HG_FAIL(e.what(), " (hg-train --help lists the options)");
  }

  HG_CHECK(!app.count("--rounding") || config.precision == "bf16-pure", "--rounding is for --precision bf16-pure");
  config.rounding = hg_train::rounding_from_name(rounding);
  if (hg_train::is_text_model(config.model)) {
    HG_CHECK(config.precision != "bf16-pure", "--precision bf16-pure is for the image models for now");
    HG_CHECK(config.precision.rfind("fp8", 0) != 0, "--precision ", config.precision, " is for the image models for now");
    if (threads > 0) hg::set_num_threads(threads);
    return run_text_model(app, config, device, text_steps, checkpoint_activations, data_root, out, resume, compare);
  }
  HG_CHECK(!app.count("--steps") && !checkpoint_activations, "--steps and --checkpoint-activations are for text models (--model gpt)");
  HG_CHECK(!compare || (out.empty() && resume.empty() && config.checkpoint_every == 0),
           "--compare trains three fresh models and writes nothing: it cannot be combined with --out, --resume or "
           "--checkpoint-every");
  HG_CHECK(config.checkpoint_every == 0 || !out.empty(), "--checkpoint-every needs --out (the checkpoint goes there)");
  if (distributed || hg::distributed::launched_world_size() > 1) {
    HG_CHECK(!compare, "--compare runs in one process; start it without mpirun");
    config.group = g_group = hg::distributed::init();
    // The ranks on one machine share its cores (unless --threads says otherwise) and its GPUs.
    if (threads == 0) threads = std::max(1, hg::get_num_threads() / config.group->local_size());
  }
  if (threads > 0) hg::set_num_threads(threads);
  hg::autograd::AnomalyMode::set_enabled(detect_anomaly);
  if (device == "auto") device = hg::cuda::is_available() ? "cuda" : "cpu";
  const int gpu = config.group ? config.group->local_rank() : 0;  // one GPU per rank
  config.device = device == "cuda" ? hg::Device::cuda(gpu) : hg::Device::cpu();
  if (config.precision == "amp" || config.precision == "auto") {
    const bool fastest = config.precision == "auto";
    config.precision = fastest ? hg_train::auto_precision(config.device) : hg_train::amp_precision(config.device);
    const std::string why = fastest ? hg_train::auto_precision_reason(config.device)
                                    : hg_train::amp_precision_reason(config.device);
    if (!config.group || config.group->rank() == 0) std::printf("hg-train: --precision %s: %s\n", fastest ? "auto" : "amp", why.c_str());
  }
  config.normalize = !raw_pixels;
  HG_CHECK(!config.device.is_cuda() || hg::cuda::is_available(), "--device cuda, but no CUDA device is available (built "
           "with CUDA: ", hg::cuda::built_with_cuda() ? "yes" : "no", ")");
  if (!out.empty()) {
    prepare_output_dir(out);
    config.checkpoint_path = out + "/checkpoint.safetensors";
  }
  hg::data::MNIST train = hg::data::FashionMNIST(data_root, {.train = true});
  const hg::data::MNIST test = hg::data::FashionMNIST(data_root, {.train = false});
  if (train_limit > 0) train = train.head(train_limit);
  HG_CHECK(compare || compare_csv.empty(), "--compare-csv needs --compare");
  if (!config.group || config.group->rank() == 0) {  // the rank that writes them
    for (const char* precision : {"f32", "f16", "bf16"}) {  // --compare writes one file per precision
      check_output_file(compare ? with_suffix(config.step_log, precision) : config.step_log, "--log-steps");
      check_output_file(compare ? with_suffix(config.gradient_histogram, precision) : config.gradient_histogram,
                        "--gradient-histogram");
      if (!compare) break;
    }
    check_output_file(compare_csv, "--compare-csv");
  }
  // Distributed: every setting the ranks must share, compared once before anything trains (a
  // mismatch is one error on every rank, naming it, not a wrong model or a collective's timeout).
  if (config.group)
    hg::distributed::require_same_settings(*config.group, hg_train::rank_settings(config, train, test, resume));
  return compare ? run_compare(config, train, test, compare_csv) : run_single(config, train, test, out, resume);
}

}  // namespace

// Prints the one error line; in a distributed run names the rank and ends every rank now, rather
// than leave the others waiting for a collective until it times out.
int fail(const std::string& message) {
  if (g_group) {
    std::fprintf(stderr, "hg-train (rank %d of %d): %s\n", g_group->rank(), g_group->world_size(), message.c_str());
    g_group->abort(1);
  }
  std::fprintf(stderr, "hg-train: %s\n", message.c_str());
  return 1;
}

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const hg::Error& e) {
    return fail(e.what());
  } catch (const std::exception& e) {  // not expected: the library converts what it can into hg::Error
    return fail(std::string("unexpected error: ") + e.what());
  } catch (...) {
    return fail("unexpected error of an unknown type");
  }
}
