// train_compare: the same model, recipe and data trained by halfgrad and by LibTorch in one run,
// printing samples/s of each and the ratio at 1 and 2 threads.
//
//   build/bench/train_compare [--steps 200] [--model mlp|cnn|both] [--busy N] [--rounds 2]
//
// Each measurement is the best of 3 repeats; --rounds R measures both frameworks R times,
// alternating which goes first, and keeps each one's best: on a shared machine a neighbour's
// burst then slows both sides alike instead of deciding the ratio. The last column is the median
// of the R per-round ratios (each from two runs next to each other in time): the steadier figure
// when the machine's speed drifts during the run.
//
// --busy N starts N processes that spin for the whole run (a browser or a build on a laptop), to
// measure how both frameworks cope when a core is taken. HG_CPU_ISA caps halfgrad's kernels
// and LibTorch's (OpenBLAS, ATen, oneDNN) to the same level, the comparison a user of that CPU sees.
//
// Recipe (hg-train's): SGD lr 0.05 momentum 0.9, batch 128, cross-entropy, f32, Fashion-MNIST
// batches in the same order for both (taken from hg::data::DataLoader).
#include <torch/torch.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>

#include "bench_util.h"
#include "torch_bench_util.h"
#include "halfgrad.h"

namespace {

using hg_bench::to_torch;

struct TorchMlp : torch::nn::Module {
  torch::nn::Linear fc1{784, 256}, fc2{256, 128}, fc3{128, 10};
  TorchMlp() {
    register_module("fc1", fc1);
    register_module("fc2", fc2);
    register_module("fc3", fc3);
  }
  torch::Tensor forward(torch::Tensor x) {
    x = x.flatten(1);
    return fc3(torch::relu(fc2(torch::relu(fc1(x)))));
  }
};

struct TorchCnn : torch::nn::Module {
  torch::nn::Conv2d c1{torch::nn::Conv2dOptions(1, 16, 3).padding(1)}, c2{torch::nn::Conv2dOptions(16, 32, 3).padding(1)};
  torch::nn::Linear fc{32 * 7 * 7, 10};
  TorchCnn() {
    register_module("c1", c1);
    register_module("c2", c2);
    register_module("fc", fc);
  }
  torch::Tensor forward(torch::Tensor x) {
    x = torch::max_pool2d(torch::relu(c1(x)), 2);
    x = torch::max_pool2d(torch::relu(c2(x)), 2);
    return fc(x.flatten(1));
  }
};

// Samples per second of `steps` training steps after 10 warm-up steps: the best of 3 repeats
// (this shared 2-core machine has noisy neighbours; the best run is the least disturbed).
template <class Step>
double samples_per_second(const std::vector<hg::data::Batch>& batches, int steps, Step&& step) {
  for (int i = 0; i < 10; ++i) step(batches[size_t(i) % batches.size()]);
  double best = 0;
  for (int repeat = 0; repeat < 3; ++repeat) {
    const auto start = std::chrono::steady_clock::now();
    int64_t samples = 0;
    for (int i = 0; i < steps; ++i) {
      const hg::data::Batch& b = batches[size_t(i) % batches.size()];
      step(b);
      samples += b.x.shape()[0];
    }
    best = std::max(best, double(samples) / std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return best;
}

double run_halfgrad(const std::string& model_name, const std::vector<hg::data::Batch>& batches, int steps) {
  using namespace hg::nn;
  hg::manual_seed(0);
  // Fused like hg-train's models: Linear/Conv2d -> ReLU pairs run as one op (nn::fuse).
  Sequential model = hg::nn::fuse(model_name == "mlp"
                              ? Sequential{Flatten(), Linear(784, 256), ReLU(), Linear(256, 128), ReLU(), Linear(128, 10)}
                              : Sequential{Conv2d(1, 16, 3, {.padding = 1}), ReLU(), MaxPool2d(2),
                                           Conv2d(16, 32, 3, {.padding = 1}), ReLU(), MaxPool2d(2), Flatten(),
                                           Linear(1568, 10)});
  hg::optim::SGD opt(model.parameters(), {.lr = 0.05, .momentum = 0.9});
  return samples_per_second(batches, steps, [&](const hg::data::Batch& b) {
    opt.zero_grad();
    hg::cross_entropy(model(b.x), b.y).backward();
    opt.step();
  });
}

template <class Net>
double run_torch(const std::vector<hg::data::Batch>& batches, int steps) {
  torch::manual_seed(0);
  auto net = std::make_shared<Net>();
  torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  std::vector<std::pair<torch::Tensor, torch::Tensor>> tb;
  for (const hg::data::Batch& b : batches) tb.emplace_back(to_torch(b.x), to_torch(b.y));
  size_t next = 0;
  return samples_per_second(batches, steps, [&](const hg::data::Batch&) {
    const auto& [x, y] = tb[next++ % tb.size()];
    opt.zero_grad();
    torch::nn::functional::cross_entropy(net->forward(x), y).backward();
    opt.step();
  });
}

// Processes that spin until killed: the load of another program on the machine.
std::vector<pid_t> start_spinners(int count) {
  std::vector<pid_t> spinners;
  for (int i = 0; i < count; ++i) {
    const pid_t child = fork();
    if (child == 0) {
      volatile uint64_t counter = 0;
      for (;;) counter = counter + 1;
    }
    if (child > 0) spinners.push_back(child);
  }
  return spinners;
}

void stop_spinners(const std::vector<pid_t>& spinners) {
  for (pid_t child : spinners) kill(child, SIGKILL);
  for (pid_t child : spinners) waitpid(child, nullptr, 0);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string torch_caps = hg_bench::cap_torch_like_halfgrad(argv);
  int steps = 200, busy = 0, rounds = 2;
  std::string which = "both";
  const char* usage = "usage: train_compare [--steps N] [--model mlp|cnn|both] [--busy N] [--rounds N]\n";
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      std::printf("%s", usage);
      return 0;
    }
    if (i + 1 >= argc || (flag != "--steps" && flag != "--model" && flag != "--busy" && flag != "--rounds")) {
      std::fprintf(stderr, "train_compare: unknown or incomplete option '%s'\n%s", argv[i], usage);
      return 2;
    }
    const char* value = argv[++i];
    if (flag == "--model") which = value;
    else (flag == "--steps" ? steps : flag == "--busy" ? busy : rounds) = std::atoi(value);
  }
  if (steps < 1 || busy < 0 || rounds < 1 || (which != "mlp" && which != "cnn" && which != "both")) {
    std::fprintf(stderr, "train_compare: --steps and --rounds must be >= 1, --busy >= 0, --model mlp|cnn|both\n%s", usage);
    return 2;
  }
  std::vector<pid_t> spinners;
  try {
    hg::data::FashionMNIST train;
    const hg::data::PixelStatistics stats = hg::data::pixel_statistics(train);  // the recipe hg-train uses
    hg::data::DataLoader loader(train, {.batch_size = 128, .shuffle = true, .seed = 0, .mean = stats.mean, .std = stats.std});
    std::vector<hg::data::Batch> batches;
    for (auto batch : loader) {
      batches.push_back(batch);
      if (batches.size() == 64) break;
    }
    const std::string blas = hg_bench::torch_blas();
    std::printf("train_compare: best of %d rounds x 3 repeats x %d steps of batch 128 after 10 warm-up steps (LibTorch %s, "
                "%s, BLAS %s); halfgrad CPU level %s; %d spinning process(es) running beside\n\n",
                rounds, steps, TORCH_VERSION, at::hasMKL() ? "MKL" : "no MKL", blas.c_str(), hg::cpu::isa_summary().c_str(), busy);
    if (!torch_caps.empty()) std::printf("LibTorch capped to the same CPU level: %s\n\n", torch_caps.c_str());
    else if (std::getenv("HG_CPU_ISA") != nullptr)
      std::printf("LibTorch runs uncapped (its best kernels for this CPU): the ratios below are a lower bound\n\n");
    if (hg_bench::is_reference_blas(blas))
      std::printf("WARNING: LibTorch is using the netlib reference BLAS (~50x slower than OpenBLAS): its numbers and the "
                  "ratios below are not a fair reference. Install OpenBLAS: apt-get install libopenblas0-openmp\n\n");
    spinners = start_spinners(busy);
    std::printf("| model | threads | halfgrad samples/s | LibTorch samples/s | halfgrad / LibTorch | median of the %d "
                "rounds' ratios |\n|---|---|---|---|---|---|\n", rounds);
    const auto measure = hg_bench::measure_in_child;
    for (const std::string model : {"mlp", "cnn"}) {
      if (which != "both" && which != model) continue;
      for (int threads : {1, 2}) {
        const auto run_ours = [&] {
          hg::set_num_threads(threads);
          return run_halfgrad(model, batches, steps);
        };
        const auto run_theirs = [&] {
          at::set_num_threads(threads);
          return model == "mlp" ? run_torch<TorchMlp>(batches, steps) : run_torch<TorchCnn>(batches, steps);
        };
        double ours = 0, theirs = 0;
        std::vector<double> round_ratios;
        for (int round = 0; round < rounds; ++round) {
          double ours_now = 0, theirs_now = 0;
          if (round % 2 == 0) ours_now = measure(run_ours), theirs_now = measure(run_theirs);
          else theirs_now = measure(run_theirs), ours_now = measure(run_ours);
          ours = std::max(ours, ours_now), theirs = std::max(theirs, theirs_now);
          round_ratios.push_back(ours_now / theirs_now);
        }
        std::sort(round_ratios.begin(), round_ratios.end());
        const size_t middle = round_ratios.size() / 2;
        const double median_ratio = round_ratios.size() % 2 ? round_ratios[middle]
                                                            : (round_ratios[middle - 1] + round_ratios[middle]) / 2;
        std::printf("| %s | %d | %.0f | %.0f | %.2fx | %.2fx |\n", model.c_str(), threads, ours, theirs, ours / theirs,
                    median_ratio);
        std::fflush(stdout);
      }
    }
  } catch (const hg::Error& e) {
    stop_spinners(spinners);
    std::fprintf(stderr, "train_compare: %s\n", e.what());
    return 1;
  }
  stop_spinners(spinners);
  return 0;
}
