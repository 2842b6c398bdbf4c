// Lesson 15: training below 16 bits -- the two FP8 formats and the scaling that makes them work.
//
// An FP8 number has 8 bits for sign, exponent and mantissa together. E4M3 spends 3 on the
// mantissa (relative step 2^-3) and covers 2^-9 .. 448; E5M2 spends 2 (step 2^-2) and covers
// 2^-16 .. 57344. Neither covers what a tensor holds on its own: a tensor is multiplied by a
// scale s before it is rounded (x^ = Q(x s) / s), and the scale is chosen so that the tensor's
// largest magnitude, its amax, lands near the top of the format. Transformer Engine's recipe,
// which hg::amp::Fp8Autocast emulates exactly on the CPU:
//   - E4M3 (precision) for activations and weights, E5M2 (range) for gradients: "HYBRID";
//   - delayed scaling: the scale comes from the amax of *earlier* steps (a history), so a step
//     needs no extra pass over its tensors -- but a sudden spike saturates;
//   - current scaling: the scale from this step's own amax (one more pass; never saturates);
//   - block scaling: one scale per 1 x 128 tile of activations (128 x 128 of weights), so one
//     outlier channel costs only its own tile the precision (DeepSeek-V3's scheme).
//
//   1. the formats side by side, and what a few numbers become in each;
//   2. delayed against current scaling on a tensor whose amax jumps 20x for one step;
//   3. the amax history of a small MLP's first layer while it trains (delayed scaling);
//   4. an outlier channel: per-tensor against block scaling;
//   5. the MLP trained in f32, bf16 autocast and the three FP8 recipes: the same accuracy;
//   6. which of its layers loses most in FP8: the last delayed-scaling step under ShadowCheck.
// With --csv DIR it writes the amax history (lesson15_amax.csv) and every number it checks
// (lesson15.csv) for scripts/figures.sh, which puts them into docs/amp.md section 10.
#include <cmath>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "halfgrad.h"
#include "lesson_csv.h"  // --csv DIR: the numbers checked, for the docs

namespace {

using hg::Tensor;
using hg::amp::Fp8Autocast;
using hg::amp::Fp8Recipe;
using hg::amp::Fp8Scaling;
using hg::amp::Fp8State;

int failures = 0;
std::map<std::string, double> numbers;  // what --csv writes: every number the docs quote
void expect(bool ok, const std::string& what) {
  if (!ok) {
    std::cout << "  !! expected: " << what << "\n";
    ++failures;
  }
}

// ---- 1. the formats --------------------------------------------------------------------------

void formats_table() {
  std::cout << "1. The formats (e4m3 = OCP E4M3FN: no inf)\n";
  struct Row {
    const char* name;
    int mantissa_bits;
    double largest, smallest_normal, smallest_subnormal;
  };
  const Row rows[] = {
      {"f32", 23, 3.4028234663852886e38, std::ldexp(1.0, -126), std::ldexp(1.0, -149)},
      {"bf16", 7, 3.3895313892515355e38, std::ldexp(1.0, -126), std::ldexp(1.0, -133)},
      {"f16", 10, 65504.0, std::ldexp(1.0, -14), std::ldexp(1.0, -24)},
      {"e4m3", 3, hg::kFloat8E4M3Max, std::ldexp(1.0, -6), std::ldexp(1.0, -9)},
      {"e5m2", 2, hg::kFloat8E5M2Max, std::ldexp(1.0, -14), std::ldexp(1.0, -16)},
  };
  std::cout << "   format  mantissa  eps/2     largest     smallest normal  smallest subnormal  decades\n";
  for (const Row& r : rows)
    std::cout << "   " << std::left << std::setw(8) << r.name << std::right << std::setw(5) << r.mantissa_bits
              << "     " << std::setw(8) << std::setprecision(3) << std::ldexp(1.0, -r.mantissa_bits - 1) << "  "
              << std::setw(10) << r.largest << "  " << std::setw(15) << r.smallest_normal << "  " << std::setw(18)
              << r.smallest_subnormal << "  " << std::setw(7) << std::setprecision(3)
              << std::log10(r.largest / r.smallest_subnormal) << "\n";
  std::cout << "   value     e4m3        e5m2        (nearest, ties to even; beyond the largest: e4m3 NaN, e5m2 inf)\n";
  for (const double v : {0.1, 3.3, 300.0, 500.0, 1e-3, 1e-5}) {
    const float a = float(hg::float8_e4m3(v)), b = float(hg::float8_e5m2(v));
    std::cout << "   " << std::left << std::setw(8) << v << std::right << "  " << std::setw(10) << a << "  "
              << std::setw(10) << b << "\n";
  }
  expect(float(hg::float8_e4m3(0.1)) == 0.1015625f && float(hg::float8_e5m2(0.1)) == 0.09375f,
         "0.1 rounds to 0.1015625 (e4m3) and 0.09375 (e5m2)");
  expect(std::isnan(float(hg::float8_e4m3(500.0))) && float(hg::float8_e5m2(500.0)) == 512.0f,
         "500 overflows e4m3 (NaN) and is 512 in e5m2");
  std::cout << "   E4M3 spans 5.4 decades, E5M2 9.6: neither holds a gradient tensor without a scale.\n\n";
}

// ---- 2. delayed against current scaling --------------------------------------------------------

// The share of x's elements beyond the format's largest value at this scale: clipped to 448.
double saturated_share(const Tensor& x, float scale) {
  return hg::mean(hg::gt(hg::abs(x) * double(scale), hg::full({}, double(hg::kFloat8E4M3Max))).to(hg::f32))
      .item<double>();
}

double relative_error(const Tensor& approx, const Tensor& exact) {
  return std::sqrt(hg::sum((approx - exact) * (approx - exact)).item<double>() / hg::sum(exact * exact).item<double>());
}

void delayed_against_current() {
  std::cout << "2. Delayed against current scaling: a tensor whose amax jumps 20x at step 6\n"
            << "   step   amax   delayed scale  saturated  error   | current scale  saturated  error\n";
  Fp8State delayed({.scaling = Fp8Scaling::Delayed, .amax_history_len = 4});
  Fp8State current({.scaling = Fp8Scaling::Current});
  const Tensor w = hg::ones({1, 4096});
  double spike_delayed = 0, spike_current = 0;
  for (int step = 0; step < 10; ++step) {
    hg::manual_seed(uint64_t(step));
    const Tensor x = hg::randn({1, 4096}) * (step == 6 ? 20.0 : 1.0);
    double error[2] = {0, 0}, share[2] = {0, 0};
    float scale[2] = {0, 0};
    Fp8State* states[2] = {&delayed, &current};
    for (int k = 0; k < 2; ++k) {
      {
        Fp8Autocast guard(*states[k]);
        hg::linear(x, w);  // one FP8 op: its slot holds the scale it used for x
      }
      scale[k] = states[k]->slots()[0]->input.scale;
      share[k] = saturated_share(x, scale[k]);
      error[k] = relative_error(hg::amp::fp8_quantise(x, hg::f8e4m3, 0, 0, 0, &scale[k]).values, x);
    }
    std::cout << "   " << std::setw(4) << step << "  " << std::setw(5) << std::setprecision(3)
              << hg::amax(hg::abs(x), 1).item<double>() << "  " << std::setw(13) << scale[0] << "  " << std::setw(8)
              << std::setprecision(2) << 100 * share[0] << "%  " << std::setw(6) << std::setprecision(3) << error[0]
              << "  | " << std::setw(13) << scale[1] << "  " << std::setw(8) << std::setprecision(2) << 100 * share[1]
              << "%  " << std::setw(6) << std::setprecision(3) << error[1] << "\n";
    if (step == 6) {
      spike_delayed = share[0], spike_current = share[1];
      numbers["spike.delayed_clipped_pct"] = 100 * share[0];
      numbers["spike.delayed_error"] = error[0];
      numbers["spike.current_error"] = error[1];
      numbers["spike.delayed_scale"] = scale[0];
      numbers["spike.current_scale"] = scale[1];
    }
  }
  std::cout << "   At the spike, delayed scaling still uses the quiet steps' scale: " << std::setprecision(3)
            << 100 * spike_delayed << "% of the values\n"
            << "   clip at 448. Current scaling measured this step's amax first (one more pass over the\n"
            << "   tensor) and clips nothing. After it, the delayed scale stays low (coarser, not clipped)\n"
            << "   until the spike leaves the 4-step history.\n\n";
  expect(spike_delayed > 0.1 && spike_current == 0, "delayed scaling saturates >10% at the spike, current none");
}

// ---- 3 and 5. a small MLP trained with each recipe ---------------------------------------------

// 10 Gaussian clusters in 64 dimensions: a classification an MLP learns in a few hundred steps.
struct Task {
  Tensor train_x, train_y, test_x, test_y;
};

Task make_task() {
  hg::manual_seed(42);
  const Tensor centres = hg::randn({10, 64}) * 0.6;
  const auto draw = [&](int64_t n, Tensor& x, Tensor& y) {
    y = hg::randint(0, 10, {n}, {.dtype = hg::i64});
    x = hg::index_select(centres, 0, y) + hg::randn({n, 64});
  };
  Task t;
  draw(4096, t.train_x, t.train_y);
  draw(2048, t.test_x, t.test_y);
  return t;
}

struct Trained {
  double loss = 0, accuracy = 0;
};

// Adam, batch 128, 300 steps. `precision`: "f32", "bf16" (autocast) or an FP8 recipe's name.
// `history`, if given, gets the first layer's (input amax, input scale, grad amax, grad scale)
// after every step; `check`, if given, runs the last step's forward (the same step: it returns
// that run's loss and leaves the FP8 state and the random generator as they were).
Trained train(const Task& task, const std::string& precision, std::vector<std::vector<float>>* history = nullptr,
              hg::amp::ShadowCheck* check = nullptr) {
  hg::manual_seed(7);
  hg::nn::Sequential model(hg::nn::Linear(64, 256), hg::nn::ReLU(), hg::nn::Linear(256, 256), hg::nn::ReLU(),
                           hg::nn::Linear(256, 10));
  hg::optim::Adam opt(model.parameters(), {.lr = 1e-3});
  Fp8Recipe recipe;
  if (precision == "fp8-current") recipe.scaling = Fp8Scaling::Current;
  if (precision == "fp8-block") recipe.scaling = Fp8Scaling::Block;
  Fp8State fp8(recipe);
  const bool use_fp8 = precision.rfind("fp8", 0) == 0;
  Trained result;
  for (int step = 0; step < 300; ++step) {
    const int64_t start = (step * 128) % 4096;
    const Tensor x = hg::narrow(task.train_x, 0, start, 128), y = hg::narrow(task.train_y, 0, start, 128);
    opt.zero_grad();
    const auto forward = [&] {
      Fp8Autocast guard(fp8, use_fp8);
      return hg::cross_entropy(model(x), y);
    };
    Tensor loss;
    if (check != nullptr && step == 299) {
      loss = check->run(forward);  // under its own Autocast (none for ShadowCheck(f32))
    } else {
      hg::amp::Autocast autocast(hg::bf16, precision == "bf16");
      loss = forward();
    }
    loss.backward();
    opt.step();
    result.loss = loss.item<double>();
    if (history && use_fp8) {
      const hg::amp::Fp8Slot& first = *fp8.slots()[0];
      history->push_back({first.input.amax_history.back(), first.input.scale, first.grad.amax_history.back(),
                          first.grad.scale});
    }
  }
  hg::NoGradGuard no_grad;
  const Tensor predicted = hg::argmax(model(task.test_x), 1);
  result.accuracy = 100 * hg::mean(hg::eq(predicted, task.test_y).to(hg::f32)).item<double>();
  return result;
}

void amax_history(const Task& task, const std::string& csv_dir) {
  std::cout << "3. Delayed scaling while an MLP trains: the first layer's amax and scales\n"
            << "   step  input amax  input scale  gradient amax  gradient scale (E5M2)\n";
  std::vector<std::vector<float>> history;
  train(task, "fp8-delayed", &history);
  for (size_t step = 0; step < history.size(); step += 50)
    std::cout << "   " << std::setw(4) << step << "  " << std::setw(10) << std::setprecision(3) << history[step][0]
              << "  " << std::setw(11) << history[step][1] << "  " << std::setw(13) << history[step][2] << "  "
              << std::setw(14) << history[step][3] << "\n";
  std::cout << "   The gradients are ~10^-4 and smaller: step 0, with no history yet, quantises them at scale 1,\n"
            << "   where most fall among E5M2's subnormals (below 6.1e-5) or flush to 0. From step 1 the\n"
            << "   scale, 2^23 or so, lifts the largest gradient near the top of E5M2 (57344).\n\n";
  expect(history[0][3] == 1.0f && history.back()[3] > 1024.0f, "the gradient scale starts at 1 and climbs above 2^10");
  numbers["amax.grad_scale_log2_last"] = std::log2(history.back()[3]);
  numbers["amax.input_scale_last"] = history.back()[1];
  numbers["amax.grad_amax_last"] = history.back()[2];
  if (!csv_dir.empty()) {
    std::ofstream csv(csv_dir + "/lesson15_amax.csv");
    csv << "step,input_amax,input_scale,grad_amax,grad_scale\n";
    for (size_t step = 0; step < history.size(); ++step)
      csv << step << ',' << history[step][0] << ',' << history[step][1] << ',' << history[step][2] << ','
          << history[step][3] << '\n';
    std::cout << "   (wrote " << csv_dir << "/lesson15_amax.csv)\n\n";
  }
}

// ---- 4. an outlier channel -------------------------------------------------------------------------

void outlier_channel() {
  std::cout << "4. One activation channel 10^5 x the others (what large language models grow)\n";
  hg::manual_seed(9);
  Tensor x = hg::randn({64, 512}) * 0.01;
  Tensor outlier = hg::zeros({64, 512}), others = hg::ones({1, 512});
  hg::narrow(outlier, 1, 17, 1).fill_(1000.0);
  hg::narrow(others, 1, 0, 128).fill_(0.0);  // the outlier's tile (channels 0..127) left out
  x = x + outlier;
  const Tensor w = hg::randn({128, 512}) * 0.05;
  // What the 384 channels outside the outlier's tile contribute to the product, quantised against exact.
  const auto others_error = [&](const Tensor& q) { return relative_error(hg::linear(q * others, w), hg::linear(x * others, w)); };
  const hg::amp::Fp8Quantised per_tensor = hg::amp::fp8_quantise(x, hg::f8e4m3, 0, 0);
  const hg::amp::Fp8Quantised tiled = hg::amp::fp8_quantise(x, hg::f8e4m3, 1, 128);
  const double flushed = hg::mean(hg::eq(per_tensor.values, hg::zeros({64, 512})).to(hg::f32)).item<double>();
  const double error_tensor = others_error(per_tensor.values), error_tiled = others_error(tiled.values);
  std::cout << std::setprecision(3) << "   per tensor: scale " << per_tensor.scales[0] << ", " << 100 * flushed
            << "% of the activations flush to 0;\n"
            << "               the part of x w^T from channels 128..511 is off by " << error_tensor << " (relative)\n"
            << "   1 x 128 tiles (4 per row; channels 0..127 hold the outlier): the same part is off by " << error_tiled
            << ":\n               the tiles without the outlier keep E4M3's own precision\n\n";
  expect(error_tiled < error_tensor / 4, "block scaling keeps the other channels 4x+ more accurate");
  numbers["outlier.flushed_pct"] = 100 * flushed;
  numbers["outlier.error_tensor"] = error_tensor;
  numbers["outlier.error_tiled"] = error_tiled;
  numbers["outlier.scale"] = per_tensor.scales[0];
}

// ---- 6. which layer loses most ---------------------------------------------------------------------

void fp8_shadow_table(const hg::amp::ShadowCheck& check) {
  std::cout << "6. Which layer loses most in FP8: fp8-delayed's last step, each Linear against itself in f32\n"
            << "   on the same inputs (hg::amp::ShadowCheck(hg::f32): autocast off, so only the FP8 ops differ)\n";
  check.print(std::cout);
  expect(check.fp8_ops().size() == 3, "one FP8 row per Linear layer");
  for (const hg::amp::Fp8OpError& op : check.fp8_ops())
    expect(op.error.measured() && op.error.mean_error() < 1.0, "layer " + std::to_string(op.index) +
                                                                   ": mean error under one E4M3 epsilon");
}

}  // namespace

int main(int argc, char** argv) {
  const std::string csv_dir = csv_dir_argument(argc, argv);
  std::cout << "Lesson 15: FP8 -- formats, scaling recipes, and training with them (" << hg::cpu::isa_summary()
            << ")\n\n";
  formats_table();
  delayed_against_current();
  const Task task = make_task();
  amax_history(task, csv_dir);
  outlier_channel();

  std::cout << "5. The MLP (64-256-256-10, Adam, 300 steps of 128) trained five ways\n"
            << "   precision     final loss  test accuracy\n";
  double f32_accuracy = 0;
  hg::amp::ShadowCheck check(hg::f32);  // f32: autocast off, the FP8 ops are all that differs
  for (const std::string precision : {"f32", "bf16", "fp8-delayed", "fp8-current", "fp8-block"}) {
    const Trained t = train(task, precision, nullptr, precision == "fp8-delayed" ? &check : nullptr);
    if (precision == "f32") f32_accuracy = t.accuracy;
    numbers["train." + precision + ".accuracy"] = t.accuracy;
    numbers["train." + precision + ".loss"] = t.loss;
    std::cout << "   " << std::left << std::setw(12) << precision << std::right << "  " << std::setw(10)
              << std::setprecision(4) << t.loss << "  " << std::setw(12) << std::setprecision(4) << t.accuracy << "%\n";
    expect(std::fabs(t.accuracy - f32_accuracy) < 1.5, precision + " within 1.5 points of f32's test accuracy");
  }
  std::cout << "   FP8 with HYBRID formats and a scale per tensor (or tile) trains as f32 does here; on an H100\n"
            << "   its GEMMs would run at twice bf16's rate. On a CPU the recipe is emulated: slower, not faster.\n\n";
  fp8_shadow_table(check);
  if (!csv_dir.empty()) write_numbers_csv(numbers, csv_dir, "lesson15.csv");
  if (failures > 0) {
    std::cout << "\n" << failures << " expectation(s) not met\n";
    return 1;
  }
  return 0;
}
