// models_compare: hg-train's five models (examples/train/models.h: mlp, cnn, mnist-net, ResNet-20,
// MobileNetV2-tiny) trained by halfgrad and by LibTorch, layer for layer the same, in f32 and
// under bf16 autocast, at 1 and 2 threads; one table of samples/s and ratios.
//
//   build/bench/models_compare [--models resnet,mobilenet] [--steps-scale 1] [--rounds 1]
//
// Recipe: SGD lr 0.05 momentum 0.9, batch 128, cross-entropy, Fashion-MNIST batches in the same
// order for both (hg::data::DataLoader's); BatchNorm in training mode, dropout as the model has
// it. bf16: halfgrad's amp::Autocast(bf16) against LibTorch's CPU autocast (bf16) -- both keep
// f32 weights and run the convolutions and matmuls in bf16. Each measurement runs in a process of
// its own and is the best of 2 repeats of a model's step count (more steps for the small models);
// --rounds R alternates which framework goes first and keeps each one's best. HG_CPU_ISA caps
// both to one CPU level (bench/torch_bench_util.h). PyTorch 2.x from pip times the same recipe
// with bench/py/models_bench.py.
#include <ATen/autocast_mode.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <sstream>

#include "torch_bench_util.h"
#include "train/models.h"

namespace {

namespace tnn = torch::nn;

// ---- the models in LibTorch (bench/py/models.py is the same in Python) ---------------------------

struct TorchBasicBlockImpl : tnn::Module {
  tnn::Conv2d conv1, conv2;
  tnn::BatchNorm2d bn1, bn2;
  tnn::Sequential shortcut;
  TorchBasicBlockImpl(int64_t in, int64_t out, int64_t stride)
      : conv1(tnn::Conv2dOptions(in, out, 3).stride(stride).padding(1).bias(false)),
        conv2(tnn::Conv2dOptions(out, out, 3).padding(1).bias(false)),
        bn1(out),
        bn2(out) {
    register_module("conv1", conv1);
    register_module("bn1", bn1);
    register_module("conv2", conv2);
    register_module("bn2", bn2);
    if (stride != 1 || in != out) {
      shortcut = tnn::Sequential(tnn::Conv2d(tnn::Conv2dOptions(in, out, 1).stride(stride).bias(false)),
                                 tnn::BatchNorm2d(out));
      register_module("shortcut", shortcut);
    }
  }
  torch::Tensor forward(torch::Tensor x) {
    const torch::Tensor y = bn2(conv2(torch::relu(bn1(conv1(x)))));
    return torch::relu(y + (shortcut->size() == 0 ? x : shortcut->forward(x)));
  }
};

struct TorchInvertedResidualImpl : tnn::Module {
  tnn::Sequential conv;
  bool residual;
  TorchInvertedResidualImpl(int64_t in, int64_t out, int64_t stride, int64_t expansion)
      : residual(stride == 1 && in == out) {
    const int64_t hidden = in * expansion;
    if (expansion != 1) {
      conv->push_back(tnn::Conv2d(tnn::Conv2dOptions(in, hidden, 1).bias(false)));
      conv->push_back(tnn::BatchNorm2d(hidden));
      conv->push_back(tnn::ReLU6());
    }
    conv->push_back(tnn::Conv2d(tnn::Conv2dOptions(hidden, hidden, 3).stride(stride).padding(1).groups(hidden).bias(false)));
    conv->push_back(tnn::BatchNorm2d(hidden));
    conv->push_back(tnn::ReLU6());
    conv->push_back(tnn::Conv2d(tnn::Conv2dOptions(hidden, out, 1).bias(false)));
    conv->push_back(tnn::BatchNorm2d(out));
    register_module("conv", conv);
  }
  torch::Tensor forward(torch::Tensor x) { return residual ? x + conv->forward(x) : conv->forward(x); }
};

tnn::Sequential torch_model(const std::string& name) {
  tnn::Sequential m;
  const auto conv = [](int64_t in, int64_t out, int64_t k, int64_t padding, bool bias) {
    return tnn::Conv2d(tnn::Conv2dOptions(in, out, k).padding(padding).bias(bias));
  };
  if (name == "mlp") {
    m = tnn::Sequential(tnn::Flatten(), tnn::Linear(784, 256), tnn::ReLU(), tnn::Linear(256, 128), tnn::ReLU(),
                        tnn::Linear(128, 10));
  } else if (name == "cnn") {
    m = tnn::Sequential(conv(1, 16, 3, 1, true), tnn::ReLU(), tnn::MaxPool2d(2), conv(16, 32, 3, 1, true), tnn::ReLU(),
                        tnn::MaxPool2d(2), tnn::Flatten(), tnn::Linear(32 * 7 * 7, 10));
  } else if (name == "mnist-net") {
    m = tnn::Sequential(conv(1, 32, 3, 0, true), tnn::ReLU(), conv(32, 64, 3, 0, true), tnn::ReLU(), tnn::MaxPool2d(2),
                        tnn::Dropout(0.25), tnn::Flatten(), tnn::Linear(9216, 128), tnn::ReLU(), tnn::Dropout(0.5),
                        tnn::Linear(128, 10));
  } else if (name == "resnet") {
    m = tnn::Sequential(conv(1, 16, 3, 1, false), tnn::BatchNorm2d(16), tnn::ReLU());
    int64_t channels = 16;
    for (const int64_t width : {16, 32, 64})
      for (int block = 0; block < 3; ++block) {
        m->push_back(std::make_shared<TorchBasicBlockImpl>(channels, width, block == 0 && width != 16 ? 2 : 1));
        channels = width;
      }
    m->push_back(tnn::AdaptiveAvgPool2d(tnn::AdaptiveAvgPool2dOptions({1, 1})));
    m->push_back(tnn::Flatten());
    m->push_back(tnn::Linear(64, 10));
  } else if (name == "mobilenet") {
    m = tnn::Sequential(conv(1, 16, 3, 1, false), tnn::BatchNorm2d(16), tnn::ReLU6());
    int64_t channels = 16;
    struct Stage {
      int64_t expansion, width, blocks, stride;
    };
    for (const Stage& s : {Stage{1, 16, 1, 1}, Stage{6, 24, 2, 2}, Stage{6, 32, 2, 2}, Stage{6, 64, 2, 1}})
      for (int64_t block = 0; block < s.blocks; ++block) {
        m->push_back(std::make_shared<TorchInvertedResidualImpl>(channels, s.width, block == 0 ? s.stride : 1, s.expansion));
        channels = s.width;
      }
    m->push_back(conv(channels, 128, 1, 0, false));
    m->push_back(tnn::BatchNorm2d(128));
    m->push_back(tnn::ReLU6());
    m->push_back(tnn::AdaptiveAvgPool2d(tnn::AdaptiveAvgPool2dOptions({1, 1})));
    m->push_back(tnn::Flatten());
    m->push_back(tnn::Linear(128, 10));
  }
  return m;
}

// ---- timing ---------------------------------------------------------------------------------------

// Samples per second of `steps` steps after 3 warm-up steps, the best of 2 repeats.
template <class Step>
double samples_per_second(int steps, int64_t batch, Step&& step) {
  for (int i = 0; i < 3; ++i) step(i);
  double best = 0;
  for (int repeat = 0; repeat < 2; ++repeat) {
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < steps; ++i) step(i);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    best = std::max(best, double(steps * batch) / seconds);
  }
  return best;
}

double run_halfgrad(const std::string& name, bool bf16, const std::vector<hg::data::Batch>& batches, int steps) {
  hg::manual_seed(0);
  hg::nn::Sequential model = hg_train::make_model(name);
  model.train();
  hg::optim::SGD opt(model.parameters(), {.lr = 0.05, .momentum = 0.9});
  return samples_per_second(steps, batches[0].x.shape()[0], [&](int i) {
    const hg::data::Batch& b = batches[size_t(i) % batches.size()];
    opt.zero_grad();
    hg::Tensor loss;
    {
      hg::amp::Autocast autocast(hg::bf16, bf16);
      loss = hg::cross_entropy(model(b.x), b.y);
    }
    loss.backward();
    opt.step();
  });
}

double run_libtorch(const std::string& name, bool bf16, const std::vector<hg::data::Batch>& batches, int steps) {
  torch::manual_seed(0);
  tnn::Sequential model = torch_model(name);
  model->train();
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  std::vector<std::pair<torch::Tensor, torch::Tensor>> tb;
  for (const hg::data::Batch& b : batches) tb.emplace_back(hg_bench::to_torch(b.x), hg_bench::to_torch(b.y));
  return samples_per_second(steps, batches[0].x.shape()[0], [&](int i) {
    const auto& [x, y] = tb[size_t(i) % tb.size()];
    opt.zero_grad();
    torch::Tensor loss;
    if (bf16) {  // what torch.autocast("cpu", torch.bfloat16) does around the forward
      at::autocast::set_cpu_enabled(true);
      at::autocast::set_autocast_cpu_dtype(at::kBFloat16);
      at::autocast::increment_nesting();
    }
    loss = torch::nn::functional::cross_entropy(model->forward(x), y);
    if (bf16) {
      if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
      at::autocast::set_cpu_enabled(false);
    }
    loss.backward();
    opt.step();
  });
}

// Steps per measurement: about the same time for each model (ResNet-20 and MobileNet take ~20x
// an MLP step).
int base_steps(const std::string& name) {
  if (name == "mlp") return 200;
  if (name == "cnn") return 60;
  if (name == "mnist-net") return 20;
  return 10;
}

std::vector<std::string> split(const std::string& list) {
  std::vector<std::string> out;
  std::stringstream in(list);
  for (std::string item; std::getline(in, item, ',');) out.push_back(item);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string torch_caps = hg_bench::cap_torch_like_halfgrad(argv);
  std::string models_list = "mlp,cnn,mnist-net,resnet,mobilenet", threads_list = "1,2", precisions_list = "f32,bf16";
  double steps_scale = 1;
  int rounds = 1;
  const char* usage = "usage: models_compare [--models a,b] [--threads 1,2] [--precisions f32,bf16] [--steps-scale X] "
                      "[--rounds N]\n";
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      std::printf("%s", usage);
      return 0;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "models_compare: option '%s' needs a value\n%s", argv[i], usage);
      return 2;
    }
    const std::string value = argv[++i];
    if (flag == "--models") models_list = value;
    else if (flag == "--threads") threads_list = value;
    else if (flag == "--precisions") precisions_list = value;
    else if (flag == "--steps-scale") steps_scale = std::atof(value.c_str());
    else if (flag == "--rounds") rounds = std::atoi(value.c_str());
    else {
      std::fprintf(stderr, "models_compare: unknown option '%s'\n%s", flag.c_str(), usage);
      return 2;
    }
  }
  const std::vector<std::string> models = split(models_list), precisions = split(precisions_list);
  std::vector<int> thread_counts;
  for (const std::string& t : split(threads_list)) thread_counts.push_back(std::atoi(t.c_str()));
  for (const std::string& m : models)
    if (std::find(std::begin(hg_train::kModelNames), std::end(hg_train::kModelNames), m) == std::end(hg_train::kModelNames)) {
      std::fprintf(stderr, "models_compare: unknown model '%s' (mlp, cnn, mnist-net, resnet, mobilenet)\n", m.c_str());
      return 2;
    }
  for (const std::string& p : precisions)
    if (p != "f32" && p != "bf16") {
      std::fprintf(stderr, "models_compare: unknown precision '%s' (f32, bf16)\n", p.c_str());
      return 2;
    }
  if (!(steps_scale > 0) || rounds < 1 || thread_counts.empty() ||
      std::any_of(thread_counts.begin(), thread_counts.end(), [](int t) { return t < 1; })) {
    std::fprintf(stderr, "models_compare: --steps-scale must be > 0, --rounds and every thread count >= 1\n%s", usage);
    return 2;
  }
  try {
    hg::data::FashionMNIST train;
    const hg::data::PixelStatistics stats = hg::data::pixel_statistics(train);
    hg::data::DataLoader loader(train, {.batch_size = 128, .shuffle = true, .seed = 0, .mean = stats.mean, .std = stats.std});
    std::vector<hg::data::Batch> batches;
    for (auto batch : loader) {
      batches.push_back(batch);
      if (batches.size() == 16) break;
    }
    const std::string blas = hg_bench::torch_blas();
    std::printf("models_compare: batch 128, SGD, best of %d round(s) x 2 repeats; LibTorch %s (BLAS %s); halfgrad CPU "
                "level %s\n", rounds, TORCH_VERSION, blas.c_str(), hg::cpu::isa_summary().c_str());
    if (!torch_caps.empty()) std::printf("LibTorch capped to the same CPU level: %s\n", torch_caps.c_str());
    if (hg_bench::is_reference_blas(blas))
      std::printf("WARNING: LibTorch runs on the netlib reference BLAS: install libopenblas0-openmp for a fair reference\n");
    std::printf("\n| model | precision | threads | halfgrad samples/s | LibTorch samples/s | halfgrad / LibTorch |\n"
                "|---|---|---|---|---|---|\n");
    for (const std::string& name : models)
      for (const std::string& precision : precisions)
        for (const int threads : thread_counts) {
          const bool bf16 = precision == "bf16";
          const int steps = std::max(1, int(base_steps(name) * steps_scale));
          const auto ours_run = [&] {
            hg::set_num_threads(threads);
            return run_halfgrad(name, bf16, batches, steps);
          };
          const auto theirs_run = [&] {
            at::set_num_threads(threads);
            try {
              return run_libtorch(name, bf16, batches, steps);
            } catch (const c10::Error& e) {  // e.g. LibTorch 1.13 has no bf16 CPU kernel for hardtanh's backward
              const std::string what = e.what();
              std::fprintf(stderr, "LibTorch cannot train %s in %s: %s\n", name.c_str(), precision.c_str(),
                           what.substr(0, what.find('\n')).c_str());
              return 0.0;
            }
          };
          double ours = 0, theirs = 0;
          for (int round = 0; round < rounds; ++round) {
            if (round % 2 == 0) {
              ours = std::max(ours, hg_bench::measure_in_child(ours_run));
              theirs = std::max(theirs, hg_bench::measure_in_child(theirs_run));
            } else {
              theirs = std::max(theirs, hg_bench::measure_in_child(theirs_run));
              ours = std::max(ours, hg_bench::measure_in_child(ours_run));
            }
          }
          if (theirs > 0)
            std::printf("| %s | %s | %d | %.0f | %.0f | %.2fx |\n", name.c_str(), precision.c_str(), threads, ours, theirs,
                        ours / theirs);
          else
            std::printf("| %s | %s | %d | %.0f | cannot run | - |\n", name.c_str(), precision.c_str(), threads, ours);
          std::fflush(stdout);
        }
  } catch (const hg::Error& e) {
    std::fprintf(stderr, "models_compare: %s\n", e.what());
    return 1;
  }
  return 0;
}
