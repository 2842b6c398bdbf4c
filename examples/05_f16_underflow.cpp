// Lesson 5: why f16 training needs loss scaling -- gradients that underflow to zero.
//
// f16 has 5 exponent bits: nothing between 0 and 2^-24 = 5.96e-8 exists. Gradients of that size
// are common (deep nets, small activations, losses averaged over big batches), and in f16 they
// round to exactly 0: the optimizer then sees no signal at all. Loss scaling multiplies the loss
// by S before backward; by the chain rule every gradient is S times larger and clears the
// underflow line, and the optimizer divides by S again in f32, where 1e-8 is an ordinary number.
//
//   1. the underflow line, in numbers;
//   2. a toy model whose true gradients are ~1e-8, trained in f32, in pure f16, and in pure f16
//      with a GradScaler (f32 master weights in the optimizer for both f16 runs);
//   3. the GradScaler's dynamic scale over 40 steps: backoffs when scaled gradients overflow
//      f16's maximum (65504), growth after a run of clean steps;
//   4. the picture behind it all: hg::amp::GradientHistogram of the scaled run's gradients, bin by
//      base-2 exponent, before unscaling (x 65536) and after, beside f16's zero/subnormal/normal
//      zones. (With --csv DIR it writes the histogram; scripts/figures.sh plots it.)
#include <algorithm>
#include <cmath>
#include <cstring>
#include <iomanip>
#include <iostream>
#include <vector>

#include "halfgrad.h"

namespace {

constexpr int64_t kSamples = 256, kFeatures = 64;

// Linear regression data: t = x . w_true with small features, so gradients 2 mean(r x) are ~1e-8.
struct ToyData {
  hg::Tensor x16;     // (256, 64) f16 features, ~1e-3
  hg::Tensor x32;     // the same values in f32 (x16 widened, so all runs see identical data)
  hg::Tensor target;  // (256, 1) f32
};

ToyData make_data() {
  hg::manual_seed(5);
  ToyData d;
  d.x16 = (hg::randn({kSamples, kFeatures}) * 1e-3).to(hg::f16);
  d.x32 = d.x16.to(hg::f32);
  // w_true = +-0.005 with random signs: every gradient component then starts near 1e-8.
  const hg::Tensor signs = hg::randn({1, kFeatures});
  const hg::Tensor w_true = signs / hg::abs(signs) * 0.005;
  d.target = hg::linear(d.x32, w_true);  // (256, 1)
  return d;
}

struct ToyRun {
  double first_loss = 0, last_loss = 0;
  int64_t zero_grads = 0, grad_elements = 0;  // weight-gradient elements exactly 0, over all steps
  double tiny_first = 0, tiny_last = 0;       // the scaler's diagnostic at the first and last step
  std::vector<float> first_grad;             // the step-0 weight gradient, unscaled (f32 runs: the truth)
  bool f16 = false;
  hg::amp::GradientHistogram histogram;      // every step's gradients, before and after unscaling
};

// Adam on a bias-free Linear(64, 1) started at zero. dtype f16 makes the model pure f16 (weights,
// activations, gradients); Adam then keeps f32 master weights. scale = 1 is no scaling at all:
// multiplying by 1 and dividing by 1 is exact, so that run is plain f16 training.
ToyRun train_toy(const ToyData& data, hg::DType dtype, double scale, int steps) {
  hg::nn::Linear model(kFeatures, 1, /*bias=*/false);
  model.load_state_dict({{"weight", hg::zeros({1, kFeatures})}});
  model.to(dtype);
  hg::optim::Adam opt(model.parameters(), {.lr = 2e-3, .master_weights = dtype != hg::f32});
  hg::amp::GradScaler scaler({.init_scale = scale, .growth_interval = 1'000'000});  // a fixed scale here
  const hg::Tensor& x = dtype == hg::f16 ? data.x16 : data.x32;
  ToyRun run;
  run.f16 = dtype == hg::f16;
  for (int step = 0; step < steps; ++step) {
    opt.zero_grad();
    // The loss in f32, as autocast would do it (mse_loss's policy is F32): its value is ~1e-8.
    const hg::Tensor loss = hg::mse_loss(model(x).to(hg::f32), data.target);
    scaler.scale(loss).backward();
    run.histogram.add(opt, scaler);
    const std::vector<float> grad = model.weight.grad().to_vector<float>();  // still scaled
    run.zero_grads += std::count(grad.begin(), grad.end(), 0.0f);
    run.grad_elements += int64_t(grad.size());
    if (step == 0)
      for (float g : grad) run.first_grad.push_back(float(g / scale));
    scaler.step(opt);
    scaler.update();
    (step == 0 ? run.tiny_first : run.tiny_last) = scaler.diagnostics().tiny_fraction();
    (step == 0 ? run.first_loss : run.last_loss) = loss.item<double>();
  }
  return run;
}

// 1. The underflow line.
bool show_underflow_line() {
  const float tiny = 1e-8f;
  const float smallest = hg::half::from_bits(0x0001);  // exponent 0, mantissa 1: 2^-24
  std::cout << "1. f16 cannot hold 1e-8\n"
            << "   hg::half(1e-8f)                  = " << float(hg::half(tiny)) << "  (bits 0x" << std::hex
            << hg::half(tiny).bits << std::dec << ")\n"
            << "   smallest f16 subnormal (0x0001)  = " << smallest << " = 2^" << std::log2(smallest) << "\n"
            << "   hg::half(3e-8f)                  = " << float(hg::half(3e-8f)) << "  (over half of 2^-24: rounds up)\n"
            << "   hg::half(1e-8f * 65536)          = " << float(hg::half(tiny * 65536.0f))
            << "  -> divided by 65536 in f32: " << float(hg::half(tiny * 65536.0f)) / 65536.0f << "\n\n";
  return float(hg::half(tiny)) == 0.0f && smallest == std::ldexp(1.0f, -24);
}

void print_run(const char* name, const ToyRun& r) {
  std::cout << "   " << std::left << std::setw(20) << name << std::right << std::setw(14) << r.first_loss
            << std::setw(17) << r.last_loss << std::setw(16) << r.zero_grads << " of " << r.grad_elements
            << std::setw(13);
  if (r.f16) std::cout << r.tiny_first << ", " << r.tiny_last << "\n";
  else std::cout << "-" << "  (f32 gradients)\n";
}

// 2. The toy model in three precisions, 100 Adam steps each. Returns the scaled run.
bool show_three_runs(const ToyData& data, ToyRun& scaled) {
  constexpr int kSteps = 100;
  const ToyRun f32 = train_toy(data, hg::f32, 1.0, kSteps);
  const ToyRun f16 = train_toy(data, hg::f16, 1.0, kSteps);
  scaled = train_toy(data, hg::f16, 65536.0, kSteps);

  std::vector<float> magnitudes;
  for (float g : f32.first_grad) magnitudes.push_back(std::fabs(g));
  std::sort(magnitudes.begin(), magnitudes.end());
  std::cout << "2. Linear(64, 1) regression, " << kSteps << " Adam steps; true (f32) weight gradients at step 0: "
            << "median |g| = " << magnitudes[magnitudes.size() / 2] << ", max |g| = " << magnitudes.back() << "\n";
  std::cout << "   run                 loss at step 0  loss at the end  zero gradient elements  tiny_fraction: first, last\n";
  print_run("f32", f32);
  print_run("f16, no scaling", f16);
  print_run("f16, scale 65536", scaled);
  std::cout << "   tiny_fraction = scaler.diagnostics().tiny_fraction(): the share of f16 gradient elements that\n"
            << "   were zero or subnormal before unscaling. At the end the scaled run has converged, its gradients\n"
            << "   are ~1e-11, and even x65536 they are subnormal again: a fixed scale is not enough (part 3).\n\n";
  const bool f16_learned_nothing = f16.zero_grads == f16.grad_elements && f16.last_loss == f16.first_loss;
  const bool scaled_learned = scaled.zero_grads < scaled.grad_elements / 20 && scaled.last_loss < 0.05 * scaled.first_loss;
  return f16_learned_nothing && scaled_learned && f32.last_loss < 0.05 * f32.first_loss && f16.tiny_first == 1.0 &&
         scaled.tiny_first < 0.05;
}

// 3. The dynamic scale. Our gradients are so small that only scales past ~2^35 overflow f16 (in
// the gradient of the model's output, the largest one), so we start above that, at 2^40, to
// watch the backoffs; on real models PyTorch's 2^16 start often backs off for the first few
// steps the same way. growth_interval 3 makes growth visible; max_scale is raised from
// halfgrad's default cap of 2^24. As the model converges its gradients shrink, and the scale
// climbs after them: the largest scale that does not overflow keeps them out of the subnormals.
bool show_scale_trajectory(const ToyData& data, const ToyRun& fixed_scale_run) {
  std::cout << "3. GradScaler({.init_scale = 2^40, .growth_interval = 3, .max_scale = 2^44}) on the f16 toy\n"
            << "   step   scale  found_inf  applied        loss\n";
  hg::nn::Linear model(kFeatures, 1, /*bias=*/false);
  model.load_state_dict({{"weight", hg::zeros({1, kFeatures})}});
  model.to(hg::f16);
  hg::optim::Adam opt(model.parameters(), {.lr = 2e-3, .master_weights = true});
  hg::amp::GradScaler scaler({.init_scale = std::ldexp(1.0, 40), .growth_interval = 3, .max_scale = std::ldexp(1.0, 44)});
  int backoffs = 0, growths = 0, skipped = 0;
  for (int step = 0; step < 40; ++step) {
    opt.zero_grad();
    const hg::Tensor loss = hg::mse_loss(model(data.x16).to(hg::f32), data.target);
    scaler.scale(loss).backward();
    const hg::amp::StepResult r = scaler.step(opt);  // r.scale: the scale this step used
    scaler.update();
    backoffs += scaler.get_scale() < r.scale, growths += scaler.get_scale() > r.scale, skipped += !r.applied;
    std::cout << std::setw(7) << step << "    2^" << std::left << std::setw(4) << std::log2(r.scale) << std::right
              << std::setw(8) << (r.found_inf ? "yes" : "no") << std::setw(9) << (r.applied ? "yes" : "SKIP")
              << std::setw(12) << loss.item<double>() << "\n";
  }
  const double tiny_fraction = scaler.diagnostics().tiny_fraction();
  std::cout << "   " << backoffs << " backoffs, " << growths << " growths, " << skipped
            << " skipped steps; final scale 2^" << std::log2(scaler.get_scale()) << "; tiny_fraction at the last step "
            << tiny_fraction << " (the fixed 65536 of part 2 ended at " << fixed_scale_run.tiny_last << ")\n";
  return backoffs >= 3 && growths >= 2 && skipped == backoffs && tiny_fraction < 0.05;
}

// 4. The histogram of the x65536 run's gradients over its 100 steps.
bool show_histogram(const ToyRun& scaled, const std::string& csv_dir) {
  using Stage = hg::amp::GradientHistogram::Stage;
  const hg::amp::GradientHistogram& h = scaled.histogram;
  std::cout << "4. Where the gradients of the f16 x 65536 run sit, bin by base-2 exponent (B: as backward left them,\n"
            << "   x 65536; A: unscaled, what the optimizer uses). f16 flushes everything left of 2^-24 to 0.\n";
  h.print(std::cout);
  if (!csv_dir.empty()) h.write_csv(csv_dir + "/lesson05_gradient_histogram.csv");
  const double lost_unscaled = h.fraction_below(Stage::AfterUnscale, -24);  // exact zeros included
  const double lost_scaled = h.fraction_below(Stage::BeforeUnscale, -24);
  std::cout << "   Without the scale " << 100 * lost_unscaled << "% of these gradient values would be 0 in f16; with it "
            << 100 * lost_scaled << "% are (the " << h.zeros(Stage::BeforeUnscale)
            << " elements that underflowed even x 65536, late in the run).\n\n";
  return lost_unscaled > 0.9 && lost_scaled < 0.5 && h.fraction_at_or_above(Stage::BeforeUnscale, 16) == 0.0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string csv_dir = argc == 3 && std::strcmp(argv[1], "--csv") == 0 ? argv[2] : "";
  std::cout << std::setprecision(4);
  bool ok = show_underflow_line();
  const ToyData data = make_data();
  ToyRun scaled;
  ok = show_three_runs(data, scaled) && ok;
  ok = show_scale_trajectory(data, scaled) && ok;
  ok = show_histogram(scaled, csv_dir) && ok;
  std::cout << (ok ? "f16_underflow: all checks passed\n" : "f16_underflow: CHECK FAILED\n");
  return ok ? 0 : 1;
}
