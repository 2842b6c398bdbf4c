// Lesson 4: a small CNN trained with bf16 autocast, no GradScaler, and a look inside one step.
//
// bf16 keeps f32's 8 exponent bits and drops 16 mantissa bits. Its range is f32's range (the
// smallest normal is 1.2e-38), so gradients of 1e-8 or 1e-20 are representable and there is
// nothing for loss scaling to rescue. Scaling by a power of two would not help bf16's real weak
// spot either: it only shifts exponents and leaves its 8 significant bits as coarse as they were.
// (f16 is the opposite: 11 significant bits, but nothing below 6e-8: lesson 5.)
//
// Then two measurements of one training step:
//   - hg::amp::PrecisionReport: every op that ran, its policy, the dtypes in and out, the casts.
//   - hg::memory::peak_allocated: the most bytes the step held, in f32 and under bf16 autocast.
#include <chrono>
#include <iomanip>
#include <iostream>

#include "halfgrad.h"
#include "lesson_data.h"

namespace {

constexpr int kSteps = 100;
constexpr int64_t kBatch = 64;
constexpr int64_t kTestImages = 2000;

hg::nn::Sequential make_cnn() {
  using namespace hg::nn;
  return Sequential{Conv2d(1, 16, 3, {.padding = 1}), ReLU(), MaxPool2d(2),   // (B, 16, 14, 14)
                    Conv2d(16, 32, 3, {.padding = 1}), ReLU(), MaxPool2d(2),  // (B, 32, 7, 7)
                    Flatten(), Linear(32 * 7 * 7, 10)};                       // (B, 10)
}

// One training step; with bf16 autocast when `use_bf16`. No scaler: plain backward and step.
double train_step(hg::nn::Sequential& model, hg::optim::Optimizer& opt, const hg::Tensor& x, const hg::Tensor& y,
                  bool use_bf16) {
  opt.zero_grad();
  hg::Tensor loss;
  {
    hg::amp::Autocast autocast(hg::bf16, use_bf16);  // conv and linear in bf16, the loss in f32
    loss = hg::cross_entropy(model(x), y);
  }
  loss.backward();
  opt.step();
  return loss.item<double>();
}

double accuracy(hg::nn::Sequential& model, const hg::data::MNIST& data) {
  hg::NoGradGuard no_grad;
  hg::data::DataLoader loader(data, {.batch_size = 500, .shuffle = false});
  int64_t correct = 0;
  for (auto [x, y] : loader) {
    hg::amp::Autocast autocast(hg::bf16);
    correct += hg::sum(hg::eq(hg::argmax(model(x), 1), y)).item<int64_t>();
  }
  return double(correct) / double(data.size());
}

// The bytes one training step holds at its peak, above what was live before it (parameters,
// momentum buffers, the batch).
int64_t step_peak_bytes(hg::nn::Sequential& model, hg::optim::Optimizer& opt, const hg::Tensor& x, const hg::Tensor& y,
                        bool use_bf16) {
  const int64_t before = hg::memory::allocated();
  hg::memory::reset_peak();
  train_step(model, opt, x, y, use_bf16);
  return hg::memory::peak_allocated() - before;
}

// 1. Train for 100 steps under bf16 autocast. No GradScaler: bf16 has f32's range.
bool train_cnn(hg::nn::Sequential& model, hg::optim::Optimizer& opt, const hg::data::MNIST& train,
               const hg::data::MNIST& test) {
  hg::data::DataLoader loader(train, {.batch_size = kBatch, .shuffle = true, .seed = 0});
  std::cout << "1. CNN on " << train.size() << " Fashion-MNIST images, bf16 autocast, no scaler: a gradient of 1e-8 is "
            << std::scientific << std::setprecision(3) << float(hg::bfloat16(1e-8f)) << " in bf16 (and "
            << float(hg::half(1e-8f)) << " in f16)\n step    loss\n" << std::fixed << std::setprecision(4);
  int step = 0;
  double first_loss = 0, last_loss = 0;
  for (auto [x, y] : loader) {
    if (step == kSteps) break;
    last_loss = train_step(model, opt, x, y, /*use_bf16=*/true);
    if (step == 0) first_loss = last_loss;
    if (step % 25 == 0 || step == kSteps - 1) std::cout << std::setw(5) << step << std::setw(9) << last_loss << "\n";
    ++step;
  }
  const double test_accuracy = accuracy(model, test);
  std::cout << "test accuracy on " << test.size() << " images: " << test_accuracy << "\n\n";
  return last_loss < 0.5 * first_loss && test_accuracy > 0.6;
}

// 2. What one step did, op by op. The forward ops go through the policy table. Backward passes
// run in the dtype their forward ran in; those written with other ops (linear's: two matmuls and
// a bias sum) show up as rows with policy "backward", while conv, pool and the loss have backward
// kernels of their own that never consult the table, so they have no rows.
bool show_report(hg::nn::Sequential& model, hg::optim::Optimizer& opt, const hg::data::Batch& batch) {
  std::cout << "2. PrecisionReport of one bf16 training step (batch of " << kBatch << ")\n";
  int64_t lower_calls = 0, f32_calls = 0, casts = 0, cache_hits = 0;
  {
    hg::amp::PrecisionReport report;
    train_step(model, opt, batch.x, batch.y, /*use_bf16=*/true);
    report.print(std::cout);
    std::cout << "(the backward rows are linear's backward; conv, pool and loss backward are kernels, not ops)\n";
    for (const auto& row : report.rows()) {
      if (row.policy == "Lower") lower_calls += row.calls;
      if (row.policy == "F32") f32_calls += row.calls;
      casts += row.casts;
    }
  }
  // The cache: inside one region each f32 weight is cast to bf16 once. Two micro-batches in one
  // region (gradient accumulation) cast the weights for the first and reuse them for the second.
  {
    hg::amp::PrecisionReport report;
    hg::amp::Autocast autocast(hg::bf16);
    const int64_t half = kBatch / 2;
    const hg::Tensor loss = hg::cross_entropy(model(narrow(batch.x, 0, 0, half)), narrow(batch.y, 0, 0, half)) +
                            hg::cross_entropy(model(narrow(batch.x, 0, half, half)), narrow(batch.y, 0, half, half));
    int64_t lower_casts = 0;
    for (const auto& row : report.rows())
      if (row.policy == "Lower") lower_casts += row.casts, cache_hits += row.cache_hits;
    std::cout << "forward of two micro-batches in one autocast region: " << lower_casts << " casts by Lower ops, "
              << cache_hits << " more served by the weight-cast cache (the second micro-batch's weights and biases)\n\n";
  }
  return lower_calls > 0 && f32_calls > 0 && casts > 0 && cache_hits > 0;
}

// 3. Peak memory of one step in f32 and in bf16 (the step after a warm-up, same batch).
bool show_peak_memory(const hg::data::Batch& batch) {
  hg::manual_seed(0);
  hg::nn::Sequential model = make_cnn();
  hg::optim::SGD opt(model.parameters(), {.lr = 0.05, .momentum = 0.9});
  step_peak_bytes(model, opt, batch.x, batch.y, false);  // warm-up: creates the momentum buffers
  const int64_t peak_f32 = step_peak_bytes(model, opt, batch.x, batch.y, false);
  const int64_t peak_bf16 = step_peak_bytes(model, opt, batch.x, batch.y, true);
  std::cout << "3. peak bytes held by one training step (batch " << kBatch << ", above the parameters and batch):\n"
            << "   f32:  " << std::setw(9) << peak_f32 << " bytes\n"
            << "   bf16: " << std::setw(9) << peak_bf16 << " bytes (" << std::setprecision(2)
            << double(peak_bf16) / double(peak_f32) << " of f32: activations are stored in 2 bytes; weights, "
            << "gradients and momentum stay f32)\n";
  return peak_bf16 < peak_f32;
}

}  // namespace

int main() {
  const std::optional<std::string> found = fashion_mnist_root();
  if (!found) return 0;
  const std::string& root = *found;
  const auto start = std::chrono::steady_clock::now();
  const hg::data::FashionMNIST train_full(root);
  const hg::data::FashionMNIST test_full(root, {.train = false});
  const hg::data::MNIST train = train_full.head(kSteps * kBatch);
  const hg::data::MNIST test = test_full.head(kTestImages);
  std::cout << std::fixed << std::setprecision(4);

  hg::manual_seed(0);
  hg::nn::Sequential model = make_cnn();
  hg::optim::SGD opt(model.parameters(), {.lr = 0.05, .momentum = 0.9});
  bool ok = train_cnn(model, opt, train, test);
  hg::data::DataLoader first_batch(train, {.batch_size = kBatch, .shuffle = false});
  const hg::data::Batch batch = *first_batch.begin();
  ok = show_report(model, opt, batch) && ok;
  ok = show_peak_memory(batch) && ok;

  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cout << "total time " << seconds << " s\n";
  std::cout << (ok ? "cnn_amp: all checks passed\n" : "cnn_amp: CHECK FAILED\n");
  return ok ? 0 : 1;
}
