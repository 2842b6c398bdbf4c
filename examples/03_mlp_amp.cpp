// Lesson 3: training an MLP on Fashion-MNIST with automatic mixed precision (f16 + GradScaler).
//
// The loop is the one in halfgrad.h's header comment, a few lines longer than an f32 loop:
//   - Autocast(f16) around the forward pass: linear layers run their GEMMs in f16 (half the bytes,
//     the fast path on GPUs), while softmax and the loss stay in f32 by the policy table.
//   - GradScaler: the loss is multiplied by a large scale (2^16) before backward, so gradients
//     that would be too small for f16 stay representable; step() divides them back in f32 and
//     skips the update if any overflowed to inf/NaN; update() adapts the scale.
// The weights themselves stay f32: autocast casts them to f16 on the way in (once per region,
// thanks to the weight-cast cache) and the cast's backward hands an f32 gradient back.
// In 300 steps the scale will not move: nothing overflows at 2^16 and growth needs 2000 clean
// steps in a row. Lesson 5 shows a scale at work.
#include <chrono>
#include <cmath>
#include <iomanip>
#include <iostream>

#include "halfgrad.h"
#include "lesson_data.h"

namespace {

constexpr int kSteps = 300;
constexpr int64_t kBatch = 64;
constexpr int64_t kTrainSubset = kSteps * kBatch;  // one pass over the first 19200 images
constexpr int64_t kTestImages = 2000;

// Accuracy on `data`, evaluated under the same autocast the model trained with.
double accuracy(hg::nn::Sequential& model, const hg::data::MNIST& data, bool use_amp) {
  hg::NoGradGuard no_grad;  // no graph: evaluation only
  model.eval();
  hg::data::DataLoader loader(data, {.batch_size = 500, .shuffle = false});
  int64_t correct = 0, seen = 0;
  for (auto [x, y] : loader) {
    hg::amp::Autocast autocast(hg::f16, use_amp);
    const hg::Tensor predicted = hg::argmax(model(x), 1);  // (B) class indices, i64
    correct += hg::sum(hg::eq(predicted, y)).item<int64_t>();
    seen += y.numel();
  }
  model.train();
  return double(correct) / double(seen);
}

struct RunResult {
  double first_loss = 0, last_mean_loss = 0, accuracy_before = 0, accuracy_after = 0, scale = 1;
  int steps = 0, skipped = 0;
  hg::DType logits_dtype = hg::f32, loss_dtype = hg::f32, weight_grad_dtype = hg::f32;
};

// The training loop. use_amp = false turns Autocast and GradScaler into pass-throughs (their
// `enabled` switches), which leaves the plain f32 loop: one code path for both, as in PyTorch.
RunResult train_mlp(const hg::data::MNIST& train, const hg::data::MNIST& test, bool use_amp, bool verbose) {
  hg::manual_seed(0);  // the same initial weights and batches for both runs
  hg::nn::Sequential model{hg::nn::Flatten(),      hg::nn::Linear(784, 256), hg::nn::ReLU(),
                           hg::nn::Linear(256, 128), hg::nn::ReLU(),         hg::nn::Linear(128, 10)};
  hg::optim::SGD opt(model.parameters(), {.lr = 0.05, .momentum = 0.9});
  // PyTorch's defaults: start at 2^16, halve on overflow, double after 2000 clean steps in a row.
  hg::amp::GradScaler scaler({.enabled = use_amp});
  hg::data::DataLoader loader(train, {.batch_size = kBatch, .shuffle = true, .seed = 0});

  RunResult r;
  r.accuracy_before = accuracy(model, test, use_amp);
  if (verbose) std::cout << " step    loss   mean since last row     scale   skipped so far\n";
  double window_sum = 0;
  int window_count = 0;
  for (auto [x, y] : loader) {
    if (r.steps == kSteps) break;
    opt.zero_grad();
    hg::Tensor loss;
    {
      hg::amp::Autocast autocast(hg::f16, use_amp);  // linear in f16; cross_entropy in f32 (its policy)
      const hg::Tensor logits = model(x);             // (B, 10)
      loss = hg::cross_entropy(logits, y);
      r.logits_dtype = logits.dtype(), r.loss_dtype = loss.dtype();
    }
    scaler.scale(loss).backward();                        // d(loss * scale): small gradients survive f16
    const hg::amp::StepResult result = scaler.step(opt);  // unscales in f32; skips the update on inf/NaN
    scaler.update();                                      // grows or backs off the scale
    r.skipped += !result.applied;

    // One batch's loss is noisy; the mean since the previous row shows the trend.
    const double value = loss.item<double>();
    if (r.steps == 0) r.first_loss = value;
    window_sum += value, ++window_count;
    if (r.steps % 50 == 0 || r.steps == kSteps - 1) {
      r.last_mean_loss = window_sum / window_count;
      if (verbose)
        std::cout << std::setw(5) << r.steps << std::setw(9) << std::setprecision(4) << value << std::setw(12)
                  << r.last_mean_loss << std::setw(20) << std::setprecision(0) << scaler.get_scale() << std::setw(10)
                  << r.skipped << "\n";
      window_sum = 0, window_count = 0;
    }
    ++r.steps;
  }
  r.scale = scaler.get_scale();
  r.weight_grad_dtype = model.parameters().front().grad().dtype();
  r.accuracy_after = accuracy(model, test, use_amp);
  return r;
}

}  // namespace

int main() {
  const std::optional<std::string> found = fashion_mnist_root();
  if (!found) return 0;
  const std::string& root = *found;
  const auto start = std::chrono::steady_clock::now();
  const hg::data::FashionMNIST train_full(root);
  const hg::data::FashionMNIST test_full(root, {.train = false});
  const hg::data::MNIST train = train_full.head(kTrainSubset);  // views: no copies
  const hg::data::MNIST test = test_full.head(kTestImages);
  std::cout << "Fashion-MNIST: training on " << train.size() << " of " << train_full.size() << " images (" << kSteps
            << " steps of " << kBatch << "), testing on " << test.size() << "\n\n";
  std::cout << std::fixed;

  const RunResult amp = train_mlp(train, test, /*use_amp=*/true, /*verbose=*/true);
  std::cout << std::setprecision(4) << "\nunder autocast: logits " << amp.logits_dtype << ", loss " << amp.loss_dtype
            << "; the weights stay f32 and so do their gradients (" << amp.weight_grad_dtype << ")\n";
  std::cout << "final scale " << std::setprecision(0) << amp.scale << ", skipped steps " << amp.skipped << " of "
            << amp.steps << "\n";
  std::cout << std::setprecision(4) << "test accuracy, f16 AMP: " << amp.accuracy_after << " (untrained "
            << amp.accuracy_before << ")\n";

  // The same seed, batches and loop with both switches off: pure f32, for comparison.
  const RunResult f32 = train_mlp(train, test, /*use_amp=*/false, /*verbose=*/false);
  std::cout << "test accuracy, f32:     " << f32.accuracy_after << " (last mean loss " << f32.last_mean_loss
            << " vs " << amp.last_mean_loss << " with AMP)\n";
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cout << std::setprecision(2) << "total time " << seconds << " s (loading and both runs)\n";

  // Sanity: it learned, the scaler did not throw steps away, and AMP is as good as f32 (two short
  // runs whose rounding differs end a point or two apart either way; that is noise, not precision).
  const bool ok = amp.steps == kSteps && amp.last_mean_loss < 0.3 * amp.first_loss && amp.accuracy_after > 0.70 &&
                  amp.skipped < kSteps / 10 && amp.logits_dtype == hg::f16 && amp.loss_dtype == hg::f32 &&
                  amp.weight_grad_dtype == hg::f32 && std::abs(amp.accuracy_after - f32.accuracy_after) < 0.05;
  std::cout << (ok ? "mlp_amp: all checks passed\n" : "mlp_amp: CHECK FAILED\n");
  return ok ? 0 : 1;
}
