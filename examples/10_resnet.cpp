// Lesson 10: a ResNet-20 on Fashion-MNIST, trained the way vision models are trained -- random
// crops and flips, SGD with Nesterov momentum and weight decay, a linear warmup into a cosine
// decay, bf16 autocast on the CPU -- in plain C++.
//
//   build/examples/10_resnet [epochs = 15] [training images = all 60000]
//
// The network is He et al.'s CIFAR ResNet-20 on 28x28 grey images: a 3x3 stem with 16 channels,
// three stages of three basic blocks (16, 32, 64 channels; stages 2 and 3 start with stride 2 and
// a 1x1 projection shortcut), global average pooling and one linear layer. The block is
// hg-train's (examples/train/models.h: conv-BN-ReLU-conv-BN + shortcut, ReLU); the stages are
// ModuleLists here, so the keys read like torchvision's ("stages.1.0.shortcut.0.weight").
// Under bf16 autocast the convolutions and the linear layer run in bf16 (natively on CPUs with
// AVX512-BF16), BatchNorm, the loss and the optimizer stay in f32: no GradScaler is needed, bf16
// has f32's range. Measured results: docs/results.md, section 12.
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "halfgrad.h"
#include "train/models.h"

namespace nn = hg::nn;
namespace data = hg::data;
using hg::Tensor;

namespace {

struct ResNet20 : nn::Module {
  nn::Conv2d stem{1, 16, 3, {.padding = 1, .bias = false}};
  nn::BatchNorm2d stem_bn{16};
  nn::ModuleList stages;
  nn::Linear head{64, 10};
  ResNet20() {
    register_module("stem", stem);
    register_module("stem_bn", stem_bn);
    int64_t channels = 16;
    for (const int64_t width : {16, 32, 64}) {
      nn::ModuleList stage;
      for (int block = 0; block < 3; ++block) {
        stage.push_back(hg_train::BasicBlock(channels, width, block == 0 && width != 16 ? 2 : 1));
        channels = width;
      }
      stages.push_back(stage);
    }
    register_module("stages", stages);
    register_module("head", head);
  }
  Tensor forward(const Tensor& x) override {
    Tensor y = stem_bn.forward(stem(x), hg::Epilogue::Relu);  // relu(stem_bn(..)) in one op: [B, 16, 28, 28]
    for (nn::Module& stage : stages)        // -> [B, 32, 14, 14] -> [B, 64, 7, 7]
      for (nn::Module& block : static_cast<nn::ModuleList&>(stage)) y = block(y);
    return head(hg::adaptive_avg_pool2d(y, {1, 1}).flatten(1));
  }
};

double test_accuracy(ResNet20& model, const data::MNIST& test, const data::PixelStatistics& stats) {
  hg::NoGradGuard no_grad;
  model.eval();  // BatchNorm uses its running statistics
  data::DataLoader loader(test, {.batch_size = 500, .shuffle = false, .mean = stats.mean, .std = stats.std});
  int64_t correct = 0;
  for (auto [x, y] : loader) {
    hg::amp::Autocast autocast(hg::bf16);
    correct += hg::sum(hg::eq(hg::argmax(model(x), 1), y)).item<int64_t>();
  }
  model.train();
  return double(correct) / double(test.size());
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const int epochs = argc > 1 ? std::atoi(argv[1]) : 15;
    const int64_t limit = argc > 2 ? std::atoll(argv[2]) : 0;
    HG_CHECK(epochs > 0 && limit >= 0, "usage: 10_resnet [epochs > 0] [training images >= 0, 0 = all]");
    const data::FashionMNIST full_train, test("", {.train = false});
    const data::MNIST train = limit > 0 ? full_train.head(limit) : data::MNIST(full_train);
    const data::PixelStatistics stats = data::pixel_statistics(train);
    // Each image: a random 28x28 crop of it padded by 2, mirrored half the time (the loader's
    // seeded generator: the same augmentation on every run).
    data::DataLoader loader(train, {.batch_size = 128, .shuffle = true, .seed = 0, .mean = stats.mean, .std = stats.std,
                                    .transform = data::Compose({data::RandomCrop(28, {.padding = 2}),
                                                                data::RandomHorizontalFlip(0.5)})});
    hg::manual_seed(0);
    ResNet20 model;
    hg::optim::SGD opt(model.parameters(), {.lr = 0.1, .momentum = 0.9, .weight_decay = 5e-4, .nesterov = true});
    const int64_t steps = epochs * loader.num_batches(), warmup = std::min<int64_t>(loader.num_batches(), steps / 2);
    hg::optim::LinearWarmup warm(opt, warmup);
    hg::optim::CosineAnnealingLR cosine(opt, steps - warmup);
    hg::optim::SequentialLR schedule(opt, {warm, cosine}, {warmup});

    std::printf("ResNet-20, %zu parameter tensors, %lld training images, %d epoch(s), bf16 autocast, CPU level %s\n",
                model.parameters().size(), static_cast<long long>(train.size()), epochs,
                hg::cpu::isa_name(hg::cpu::isa()));
    const auto start = std::chrono::steady_clock::now();
    for (int epoch = 1; epoch <= epochs; ++epoch) {
      double loss_sum = 0;
      int64_t batches = 0;
      for (auto [x, y] : loader) {
        opt.zero_grad();
        Tensor loss;
        {
          hg::amp::Autocast autocast(hg::bf16);
          loss = hg::cross_entropy(model(x), y);
        }
        loss.backward();
        opt.step();
        schedule.step();
        loss_sum += loss.item<double>();
        if (++batches % 50 == 0) {  // a progress line: an epoch of 60000 images takes minutes
          std::printf("\r  epoch %d: %lld/%lld batches, loss %.4f", epoch, static_cast<long long>(batches),
                      static_cast<long long>(loader.num_batches()), loss_sum / double(batches));
          std::fflush(stdout);
        }
      }
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      std::printf("\repoch %d: loss %.4f, test accuracy %.2f%% (%.0f s so far)          \n", epoch,
                  loss_sum / double(batches), 100 * test_accuracy(model, test, stats), seconds);
    }
    nn::save(model, "resnet20.safetensors");
    std::printf("saved resnet20.safetensors\n");
  } catch (const hg::Error& e) {
    std::fprintf(stderr, "10_resnet: %s\n", e.what());
    return 1;
  }
  return 0;
}
