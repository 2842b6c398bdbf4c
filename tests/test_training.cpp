// Training smoke tests: hg-train's recipes (SGD lr 0.05, momentum 0.9, batch 64, shuffled) on the
// first 2000 Fashion-MNIST training images. The MLP runs 200 steps and must learn (loss well
// below its start, and below 1); the CNN runs 30 steps and its loss must fall. Skipped when the
// dataset (Debian package dataset-fashion-mnist) is not installed.
#include <cmath>
#include <filesystem>
#include <numeric>

#include "test_support.h"

using hg::Tensor;
namespace nn = hg::nn;

namespace {

const bool kNoData = !std::filesystem::exists(hg::data::kFashionMnistRoot);

// Runs `steps` SGD steps over the loader (as many epochs as needed); returns every step's loss.
std::vector<double> train(nn::Sequential& model, hg::data::DataLoader& loader, int steps) {
  hg::optim::SGD opt(model.parameters(), {.lr = 0.05, .momentum = 0.9});
  model.train();
  std::vector<double> losses;
  while (int(losses.size()) < steps) {
    for (auto [x, y] : loader) {
      if (int(losses.size()) == steps) break;
      opt.zero_grad();
      const Tensor loss = hg::cross_entropy(model(x), y);
      loss.backward();
      opt.step();
      losses.push_back(loss.item<double>());
    }
  }
  return losses;
}

double mean_of(const std::vector<double>& v, size_t begin, size_t end) {
  return std::accumulate(v.begin() + long(begin), v.begin() + long(end), 0.0) / double(end - begin);
}

double accuracy(nn::Sequential& model, const hg::data::MNIST& data) {
  hg::NoGradGuard no_grad;
  model.eval();
  hg::data::DataLoader loader(data, {.batch_size = 500, .shuffle = false});
  int64_t correct = 0;
  for (auto [x, y] : loader) {
    const std::vector<int64_t> predicted = hg::argmax(model(x), 1).to_vector<int64_t>(), truth = y.to_vector<int64_t>();
    for (size_t i = 0; i < truth.size(); ++i) correct += predicted[i] == truth[i];
  }
  return double(correct) / double(data.size());
}

}  // namespace

TEST_CASE("training.mlp_learns_fashion_mnist_subset" * doctest::skip(kNoData)) {
  const hg::data::MNIST subset = hg::data::FashionMNIST(hg::data::kFashionMnistRoot).head(2000);
  REQUIRE(subset.size() == 2000);
  hg::manual_seed(0);
  nn::Sequential mlp{nn::Flatten(), nn::Linear(784, 256), nn::ReLU(), nn::Linear(256, 128), nn::ReLU(),
                     nn::Linear(128, 10)};
  hg::data::DataLoader loader(subset, {.batch_size = 64, .shuffle = true, .seed = 0});
  const std::vector<double> losses = train(mlp, loader, 200);
  for (double l : losses) REQUIRE(std::isfinite(l));
  const double first = mean_of(losses, 0, 20), last = mean_of(losses, 180, 200);
  MESSAGE("MLP: mean loss of steps 1-20 ", first, ", of steps 181-200 ", last);
  CHECK(first > 1.5);  // starts near ln(10) = 2.3: an untrained classifier
  CHECK(last < 0.6 * first);
  CHECK(last < 1.0);
  const double acc = accuracy(mlp, subset);
  MESSAGE("MLP: accuracy on the 2000 training images ", acc);
  CHECK(acc > 0.7);
}

TEST_CASE("training.cnn_loss_falls" * doctest::skip(kNoData)) {
  const hg::data::MNIST subset = hg::data::FashionMNIST(hg::data::kFashionMnistRoot).head(2000);
  hg::manual_seed(0);
  nn::Sequential cnn{nn::Conv2d(1, 16, 3, {.padding = 1}), nn::ReLU(), nn::MaxPool2d(2),
                     nn::Conv2d(16, 32, 3, {.padding = 1}), nn::ReLU(), nn::MaxPool2d(2), nn::Flatten(),
                     nn::Linear(32 * 7 * 7, 10)};
  hg::data::DataLoader loader(subset, {.batch_size = 64, .shuffle = true, .seed = 0});
  const std::vector<double> losses = train(cnn, loader, 30);
  for (double l : losses) REQUIRE(std::isfinite(l));
  const double first = mean_of(losses, 0, 5), last = mean_of(losses, 25, 30);
  MESSAGE("CNN: mean loss of steps 1-5 ", first, ", of steps 26-30 ", last);
  CHECK(first > 1.5);
  CHECK(last < 0.8 * first);
}
