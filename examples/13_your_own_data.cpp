// Lesson 13: your own data, your own model, a schedule of your own -- written from docs/api.md.
//
// Everything here is what a user brings rather than what halfgrad ships:
//   - the data are tensors made by this program (4 kinds of 16x16 pattern, noisy), wrapped in a
//     hg::data::TensorDataset and read by the one DataLoader, which shuffles, crops and flips
//     each example with its own seeded random stream and normalises it;
//   - the model is a residual network whose blocks sit in a hg::nn::ModuleList, so its
//     state_dict keys read "blocks.0.conv1.weight" as PyTorch's would;
//   - the optimizer is RMSprop, its learning rate a linear warmup followed by a cosine decay,
//     chained by SequentialLR;
//   - the model ends in log_softmax and the loss is nll_loss (together: cross_entropy).
// The lesson checks its own result: it fails unless the test accuracy passes 90%.
#include <cmath>
#include <cstdio>
#include <vector>

#include <halfgrad/halfgrad.h>

namespace {

using hg::Tensor;
namespace nn = hg::nn;
namespace data = hg::data;
namespace optim = hg::optim;

constexpr int64_t kSize = 16, kClasses = 4;

// n images [n, 1, 16, 16] of four kinds -- horizontal stripes, vertical stripes, a checkerboard,
// a ring -- each with a random phase or radius and Gaussian noise; y is the kind. All four are
// unchanged by a left-right flip, so RandomHorizontalFlip is a fair augmentation for them.
data::TensorDataset make_patterns(int64_t n, uint64_t seed) {
  hg::manual_seed(seed);
  const std::vector<float> noise = (hg::randn({n, kSize, kSize}) * 0.8).to_vector<float>();
  const std::vector<float> phase = hg::rand({n}).to_vector<float>();
  std::vector<float> pixels(size_t(n * kSize * kSize));
  std::vector<int64_t> labels(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const int64_t kind = i % kClasses;
    const double p = phase[size_t(i)];
    labels[size_t(i)] = kind;
    for (int64_t r = 0; r < kSize; ++r)
      for (int64_t c = 0; c < kSize; ++c) {
        double v = 0;
        if (kind == 0) v = std::sin(double(r) * 1.6 + 6.28 * p);
        if (kind == 1) v = std::sin(double(c) * 1.6 + 6.28 * p);
        if (kind == 2) v = std::sin(double(r) * 1.6 + 6.28 * p) * std::sin(double(c) * 1.6 + 6.28 * p) * 2;
        if (kind == 3) v = std::cos(std::hypot(double(r) - 7.5, double(c) - 7.5) * 1.2 + 6.28 * p);
        const size_t at = size_t((i * kSize + r) * kSize + c);
        pixels[at] = float(0.5 + 0.4 * v) + noise[at];
      }
  }
  return data::TensorDataset(hg::from_vector(pixels, {n, 1, kSize, kSize}), hg::from_vector(labels, {n}));
}

// x + relu(bn2(conv2(relu(bn1(conv1(x)))))): the block of a ResNet, width unchanged.
struct ResidualBlock : nn::Module {
  nn::Conv2d conv1, conv2;
  nn::BatchNorm2d bn1, bn2;
  explicit ResidualBlock(int64_t channels)
      : conv1(channels, channels, 3, {.padding = 1, .bias = false}),
        conv2(channels, channels, 3, {.padding = 1, .bias = false}),
        bn1(channels),
        bn2(channels) {
    register_module("conv1", conv1);
    register_module("bn1", bn1);
    register_module("conv2", conv2);
    register_module("bn2", bn2);
  }
  Tensor forward(const Tensor& x) override { return hg::relu(x + bn2(conv2(hg::relu(bn1(conv1(x)))))); }
};

struct ResNet : nn::Module {
  nn::Conv2d stem{1, 16, 3, {.padding = 1}};
  nn::ModuleList blocks;
  nn::Linear head{16, kClasses};
  ResNet() {
    register_module("stem", stem);
    for (int i = 0; i < 2; ++i) blocks.push_back(ResidualBlock(16));
    register_module("blocks", blocks);
    register_module("head", head);
  }
  Tensor forward(const Tensor& x) override {
    Tensor y = hg::max_pool2d(hg::relu(stem(x)), 2);  // [B, 16, 8, 8]
    for (nn::Module& block : blocks) y = block(y);
    return hg::log_softmax(head(hg::mean(y, {2, 3})), 1);  // log-probabilities, for nll_loss
  }
};

double accuracy(ResNet& model, const data::TensorDataset& test, const data::Normalize& normalize) {
  hg::NoGradGuard no_grad;
  model.eval();
  data::DataLoader loader(test, {.batch_size = 256, .shuffle = false, .transform = normalize});
  int64_t correct = 0;
  for (auto [x, y] : loader) correct += hg::sum(hg::eq(hg::argmax(model(x), 1), y)).item<int64_t>();
  model.train();
  return double(correct) / double(test.size());
}

}  // namespace

int main() {
  const data::TensorDataset train = make_patterns(2048, 1), test = make_patterns(512, 2);
  const data::Normalize normalize({0.5}, {0.5});
  data::DataLoader loader(train, {.batch_size = 64, .shuffle = true, .seed = 7,
                                  .transform = data::Compose({data::RandomCrop(kSize, {.padding = 2}),
                                                              data::RandomHorizontalFlip(0.5), normalize})});

  hg::manual_seed(0);
  ResNet model;
  std::printf("%zu parameters; the first block's first conv is \"%s\"\n", model.parameters().size(),
              model.named_parameters()[2].first.c_str());

  constexpr int kEpochs = 6;
  const int64_t steps = kEpochs * loader.num_batches(), warmup = 20;
  optim::RMSprop opt(model.parameters(), {.lr = 3e-3});
  optim::LinearWarmup warm(opt, warmup);
  optim::CosineAnnealingLR cosine(opt, steps - warmup);
  optim::SequentialLR schedule(opt, {warm, cosine}, {warmup});

  std::printf("before training: test accuracy %.3f\n", accuracy(model, test, normalize));
  for (int epoch = 1; epoch <= kEpochs; ++epoch) {
    double loss_sum = 0;
    int64_t batches = 0;
    for (auto [x, y] : loader) {
      opt.zero_grad();
      const Tensor loss = hg::nll_loss(model(x), y);
      loss.backward();
      opt.step();
      schedule.step();
      loss_sum += loss.item<double>();
      ++batches;
    }
    std::printf("epoch %d: mean loss %.4f, lr now %.2e, test accuracy %.3f\n", epoch, loss_sum / double(batches),
                opt.lr(), accuracy(model, test, normalize));
  }
  nn::save(model, "your_own_model.safetensors");
  const double final_accuracy = accuracy(model, test, normalize);
  std::printf("saved your_own_model.safetensors (keys as PyTorch's: blocks.0.conv1.weight, ...)\n");
  if (final_accuracy < 0.9) {
    std::printf("FAILED: test accuracy %.3f is below 0.9\n", final_accuracy);
    return 1;
  }
  return 0;
}
