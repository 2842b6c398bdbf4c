// The DataLoader's background prefetch: when does building the next batch beside the training
// step help? One epoch of CIFAR-shaped data (3x32x32, 2048 examples, batch 128) is read with and
// without .prefetch, with and without per-example transforms (RandomCrop with padding 4,
// RandomHorizontalFlip, Normalize), alone and with a small CNN's training step per batch, at 1
// and 2 threads. Prints seconds per epoch (median of 3) and the prefetch/plain ratio.
//
//   build/bench/loader_bench
#include <cstdio>

#include "bench_util.h"
#include "halfgrad.h"

namespace {

using hg::Tensor;
namespace data = hg::data;
namespace nn = hg::nn;

struct SmallCnn : nn::Module {
  nn::Conv2d conv1{3, 16, 3, {.padding = 1}}, conv2{16, 32, 3, {.padding = 1}};
  nn::Linear fc{32 * 8 * 8, 10};
  SmallCnn() {
    register_module("conv1", conv1);
    register_module("conv2", conv2);
    register_module("fc", fc);
  }
  Tensor forward(const Tensor& x) override {
    Tensor y = hg::max_pool2d(hg::relu(conv1(x)), 2);
    y = hg::max_pool2d(hg::relu(conv2(y)), 2);
    return fc(y.reshape({y.shape()[0], -1}));
  }
};

double epoch_seconds(const data::TensorDataset& dataset, bool transforms, bool prefetch, bool train) {
  data::DataLoaderOptions options{.batch_size = 128, .seed = 1, .prefetch = prefetch};
  if (transforms)
    options.transform = data::Compose({data::RandomCrop(32, {.padding = 4}), data::RandomHorizontalFlip(0.5),
                                       data::Normalize({0.49, 0.48, 0.45}, {0.25, 0.24, 0.26})});
  data::DataLoader loader(dataset, options);
  hg::manual_seed(0);
  SmallCnn model;
  hg::optim::SGD opt(model.parameters(), {.lr = 0.01, .momentum = 0.9});
  return hg_bench::time_runs(
             [&] {
               for (auto [x, y] : loader) {
                 if (!train) continue;
                 opt.zero_grad();
                 hg::cross_entropy(model(x), y).backward();
                 opt.step();
               }
             },
             0.0)
      .median;
}

}  // namespace

int main() {
  const data::TensorDataset dataset(hg::rand({2048, 3, 32, 32}), hg::randint(0, 10, {2048}, {.dtype = hg::i64}));
  std::printf("DataLoader prefetch, CIFAR-shaped epoch (2048 examples, batch 128), s per epoch (median of 3)\n\n");
  std::printf("| threads | transforms | work           | plain s | prefetch s | prefetch / plain |\n");
  std::printf("|---|---|---|---|---|---|\n");
  for (int threads : {1, 2}) {
    hg::set_num_threads(threads);
    for (bool transforms : {false, true})
      for (bool train : {false, true}) {
        const double plain = epoch_seconds(dataset, transforms, false, train);
        const double fetched = epoch_seconds(dataset, transforms, true, train);
        std::printf("| %d | %-3s | %-14s | %7.3f | %10.3f | %16.2f |\n", threads, transforms ? "yes" : "no",
                    train ? "CNN step/batch" : "loading only", plain, fetched, fetched / plain);
        std::fflush(stdout);
      }
  }
  return 0;
}
