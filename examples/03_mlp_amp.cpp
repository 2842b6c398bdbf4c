// Lesson 3: training an MLP on Fashion-MNIST with automatic mixed precision (f16 + GradScaler).
//
// The loop is the one in halfgrad.h's header comment, four lines longer than an f32 loop:
//   - Autocast(f16) around the forward pass: linear layers run their GEMMs in f16 (half the bytes,
//     the fast path on GPUs), while softmax and the loss stay in f32 by the policy table.
//   - GradScaler: the loss is multiplied by a large scale (2^16) before backward, so gradients
//     that would be too small for f16 stay representable; step() divides them back in f32 and
//     skips the update if any overflowed to inf/NaN; update() adapts the scale.
// The weights themselves stay f32: autocast casts them to f16 on the way in (once per region,
// thanks to the weight-cast cache) and the cast's backward hands an f32 gradient back.
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <iomanip>
#include <iostream>

#include "halfgrad.h"

namespace {

constexpr int kSteps = 300;
constexpr int64_t kBatch = 64;
constexpr int64_t kTrainSubset = kSteps * kBatch;  // one pass over the first 19200 images
constexpr int64_t kTestImages = 2000;

// Accuracy on `data`, evaluated under the same f16 autocast the model trained with.
double accuracy(hg::nn::Sequential& model, const hg::data::MNIST& data) {
  hg::NoGradGuard no_grad;  // no graph: evaluation only
  model.eval();
  hg::data::DataLoader loader(data, {.batch_size = 500, .shuffle = false});
  int64_t correct = 0, seen = 0;
  for (auto [x, y] : loader) {
    hg::amp::Autocast autocast(hg::f16);
    const hg::Tensor predicted = hg::argmax(model(x), 1);  // (B) class indices, i64
    correct += hg::sum(hg::eq(predicted, y)).item<int64_t>();
    seen += y.numel();
  }
  model.train();
  return double(correct) / double(seen);
}

}  // namespace

int main() {
  // The dataset is a Debian package (dataset-fashion-mnist); HG_DATA may point elsewhere.
  const char* env = std::getenv("HG_DATA");
  const std::string root = (env && *env) ? env : hg::data::kFashionMnistRoot;
  if (!std::filesystem::exists(root)) {
    std::cout << "NOTE: Fashion-MNIST not found at " << root << ". Install the Debian package dataset-fashion-mnist "
              << "(apt-get install dataset-fashion-mnist) or set HG_DATA to a directory holding the four IDX files. "
              << "Skipping this lesson.\n";
    return 0;
  }
  const auto start = std::chrono::steady_clock::now();
  const hg::data::FashionMNIST train_full(root);
  const hg::data::FashionMNIST test_full(root, {.train = false});
  const hg::data::MNIST train = train_full.head(kTrainSubset);  // views: no copies
  const hg::data::MNIST test = test_full.head(kTestImages);
  std::cout << "Fashion-MNIST: training on " << train.size() << " of " << train_full.size() << " images, testing on "
            << test.size() << "\n";

  hg::manual_seed(0);
  hg::nn::Sequential model{hg::nn::Flatten(),      hg::nn::Linear(784, 256), hg::nn::ReLU(),
                           hg::nn::Linear(256, 128), hg::nn::ReLU(),         hg::nn::Linear(128, 10)};
  hg::optim::SGD opt(model.parameters(), {.lr = 0.05, .momentum = 0.9});
  hg::amp::GradScaler scaler;  // PyTorch's defaults: start at 2^16, double after 2000 clean steps
  hg::data::DataLoader loader(train, {.batch_size = kBatch, .shuffle = true, .seed = 0});

  const double accuracy_before = accuracy(model, test);
  std::cout << "test accuracy before training: " << std::fixed << std::setprecision(4) << accuracy_before << "\n\n";
  std::cout << " step    loss   mean since last row     scale   skipped so far\n";

  int step = 0, skipped = 0;
  double first_loss = 0, window_sum = 0, last_window = 0;
  int window_count = 0;
  hg::DType logits_dtype = hg::f32, loss_dtype = hg::f32;
  for (auto [x, y] : loader) {
    if (step == kSteps) break;
    opt.zero_grad();
    hg::Tensor loss;
    {
      hg::amp::Autocast autocast(hg::f16);  // linear in f16; cross_entropy in f32 (its policy)
      const hg::Tensor logits = model(x);   // (B, 10)
      loss = hg::cross_entropy(logits, y);
      logits_dtype = logits.dtype(), loss_dtype = loss.dtype();
    }
    scaler.scale(loss).backward();  // d(loss * scale): small gradients survive f16
    const hg::amp::StepResult result = scaler.step(opt);  // unscale in f32; skip on inf/NaN
    scaler.update();
    skipped += !result.applied;

    // One batch's loss is noisy; the mean over the last 50 steps shows the trend.
    const double value = loss.item<double>();
    if (step == 0) first_loss = value;
    window_sum += value, ++window_count;
    if (step % 50 == 0 || step == kSteps - 1) {
      const double mean = window_sum / window_count;
      last_window = mean;
      std::cout << std::setw(5) << step << std::setw(9) << std::setprecision(4) << value << std::setw(12) << mean
                << std::setw(20) << std::setprecision(0) << scaler.get_scale() << std::setw(10) << skipped << "\n";
      window_sum = 0, window_count = 0;
    }
    ++step;
  }

  const double accuracy_after = accuracy(model, test);
  const hg::Tensor w = model.named_parameters().front().second;  // "1.weight": Flatten has none
  std::cout << std::setprecision(4) << "\nunder autocast: logits " << logits_dtype << ", loss " << loss_dtype
            << "; the weights stay " << w.dtype() << " and so do their gradients (" << w.grad().dtype() << ")\n";
  std::cout << "final scale " << std::setprecision(0) << scaler.get_scale() << ", skipped steps " << skipped << " of "
            << step << "\n";
  std::cout << std::setprecision(4) << "test accuracy on " << test.size() << " images: " << accuracy_after
            << " (was " << accuracy_before << " untrained)\n";
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cout << std::setprecision(2) << "total time " << seconds << " s (loading included)\n";

  // Sanity: it learned, and the scaler did not throw most steps away.
  const bool ok = step == kSteps && last_window < 0.3 * first_loss && accuracy_after > 0.70 && skipped < kSteps / 10 &&
                  logits_dtype == hg::f16 && loss_dtype == hg::f32 && w.grad().dtype() == hg::f32;
  std::cout << (ok ? "mlp_amp: all checks passed\n" : "mlp_amp: CHECK FAILED\n");
  return ok ? 0 : 1;
}
