// Lesson 14: why mixed precision keeps f32 master weights -- and how stochastic rounding trains
// without them.
//
// An f16 weight w has 11 significant bits: the gap to its neighbours is 2^-10 w (give or take a
// factor of 2 within a binade), so an update u rounds back to w whenever |u| is below half that
// gap -- roughly when lr * |g| < w * 2^-11 (bf16, 8 bits: w * 2^-8). Near the end of training almost every update is that
// small, and pure f16 weights stop moving: the model stalls while its gradients still say where to
// go. Two fixes:
//   - f32 master weights (what AMP does, `.master_weights = true`): the optimizer adds the update
//     to an f32 copy (24 bits) and only rounds the *result* into the f16 weight; 4 more bytes per
//     parameter, plus f32 optimizer state.
//   - stochastic rounding (`.rounding = hg::optim::Rounding::Stochastic`, hg::stochastic_round):
//     w + u rounds up with probability equal to its fraction of the way to the next value, so the
//     expected stored weight is exactly w + u. A tiny update moves the weight a whole ulp once in a
//     while -- on average, the right amount. No copy at all (what llm.c does for bf16).
//
//   1. the stall line: the share of updates nearest rounding loses, against update / weight;
//   2. a regression trained with SGD in pure f16, with f32 masters, and in pure f16 with
//      stochastic rounding (and the same three in bf16, whose line sits at 2^-8);
//   3. what each costs: bytes per parameter of weights + gradients + Adam state.
// With --csv DIR it writes the stall line and the loss curves (lesson14_*.csv).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <string>
#include <vector>

#include "halfgrad.h"

namespace {

using hg::optim::Rounding;

// ---- 1. the stall line ---------------------------------------------------------------------

// The share of updates u = ratio * w that nearest rounding loses (the stored weight does not
// change), over 4096 weights spread over [0.5, 8); and the share stochastic rounding loses.
struct LineRow {
  double ratio, lost_nearest, lost_stochastic;
};

std::vector<LineRow> stall_line(hg::DType dtype) {
  hg::manual_seed(14);
  const hg::Tensor w = (hg::exp(hg::rand({4096}) * std::log(16.0)) * 0.5).to(dtype).to(hg::f32);  // log-uniform
  std::vector<LineRow> rows;
  for (int k = -16; k <= -4; ++k) {
    const double ratio = std::ldexp(1.0, k);
    const hg::Tensor sum = w + w * ratio;  // in f32: w + u exactly (to f32's precision)
    const hg::Tensor nearest = sum.to(dtype).to(hg::f32);
    const hg::Tensor stochastic = hg::stochastic_round(sum, dtype, 1, uint64_t(k + 16) * 4096).to(hg::f32);
    const auto lost = [&](const hg::Tensor& stored) { return hg::mean(hg::eq(stored, w).to(hg::f32)).item<double>(); };
    rows.push_back({ratio, lost(nearest), lost(stochastic)});
  }
  return rows;
}

bool show_stall_line(const std::string& csv_dir) {
  std::cout << "1. The update a 16-bit weight cannot take: share of updates u = ratio x w lost to rounding\n"
            << "   (4096 weights log-uniform in [0.5, 8); lost = the stored weight did not change)\n"
            << "      ratio u/w     f16 nearest  f16 stochastic   bf16 nearest  bf16 stochastic\n";
  const std::vector<LineRow> f16 = stall_line(hg::f16), bf16 = stall_line(hg::bf16);
  bool ok = true;
  std::ofstream csv;
  if (!csv_dir.empty()) {
    csv.open(csv_dir + "/lesson14_stall_line.csv");
    csv << "ratio,f16_lost_nearest,f16_lost_stochastic,bf16_lost_nearest,bf16_lost_stochastic\n";
  }
  for (size_t i = 0; i < f16.size(); ++i) {
    const int exponent = int(std::lround(std::log2(f16[i].ratio)));
    std::cout << "   2^" << std::left << std::setw(4) << exponent << std::right << std::setw(8) << std::setprecision(3)
              << f16[i].ratio << std::setw(13) << f16[i].lost_nearest << std::setw(16) << f16[i].lost_stochastic
              << std::setw(15) << bf16[i].lost_nearest << std::setw(17) << bf16[i].lost_stochastic
              << (exponent == -11 ? "   <- f16's line, w x 2^-11" : exponent == -8 ? "   <- bf16's line, w x 2^-8" : "")
              << "\n";
    if (csv.is_open())
      csv << f16[i].ratio << ',' << f16[i].lost_nearest << ',' << f16[i].lost_stochastic << ',' << bf16[i].lost_nearest
          << ',' << bf16[i].lost_stochastic << '\n';
    // Two binades below the line nearest rounding loses every update, two above none; stochastic
    // rounding loses an update only with the probability 1 - u / ulp.
    if (exponent <= -13) ok = ok && f16[i].lost_nearest == 1.0;
    if (exponent >= -9) ok = ok && f16[i].lost_nearest == 0.0;
    if (exponent <= -10) ok = ok && bf16[i].lost_nearest == 1.0;
    if (exponent >= -6) ok = ok && bf16[i].lost_nearest == 0.0;
    if (exponent == -13) ok = ok && f16[i].lost_stochastic < 0.95;
  }
  std::cout << "   w x 2^-11 is at least half of f16's gap above w (equal at a power of two): nearest rounding loses\n"
            << "   every update below 2^-12 w and none from 2^-11 w up (bf16: 2^-9 and 2^-8). Below the line the\n"
            << "   weight is frozen. Stochastic rounding keeps a share u / ulp of the updates, each as a whole ulp,\n"
            << "   so the *expected* weight moves by exactly u.\n\n";
  return ok;
}

// ---- 2. training below the line --------------------------------------------------------------

constexpr int64_t kSamples = 256, kFeatures = 64;
constexpr int kSteps = 3000;

struct Data {
  hg::Tensor x, target, w_true;  // x (256, 64) f32, target (256, 1), w_true (1, 64) in [1.5, 2.5]
};

Data make_data() {
  hg::manual_seed(3);
  Data d;
  d.x = hg::randn({kSamples, kFeatures});
  d.w_true = hg::rand({1, kFeatures}) + 1.5;
  d.target = hg::linear(d.x, d.w_true);
  return d;
}

struct RunResult {
  std::string name;
  double first_loss = 0, last_loss = 0;
  double ratio_at_start = 0;  // median lr |g| / |w| of the first step
  double moved_share = 0;     // the share of weight elements a step changed, over the run
  double distance = 0;        // mean |w - w_true| at the end
  std::vector<double> losses;
};

double median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return double(v[v.size() / 2]);
}

// SGD (lr 5e-4, no momentum) from w_true + 0.1 noise: the updates start near 2^-15 of the weight,
// below f16's line, and shrink as the model converges.
RunResult train(const Data& data, hg::DType dtype, bool masters, Rounding rounding, std::string name) {
  hg::manual_seed(4);
  hg::nn::Linear model(kFeatures, 1, /*bias=*/false);
  model.load_state_dict({{"weight", data.w_true + hg::randn({1, kFeatures}) * 0.1}});
  model.to(dtype);
  constexpr double kLr = 5e-4;
  hg::optim::SGD opt(model.parameters(), {.lr = kLr, .master_weights = masters, .rounding = rounding, .seed = 14});
  const hg::Tensor x = data.x.to(dtype);
  RunResult r;
  r.name = std::move(name);
  int64_t moved = 0;
  for (int step = 0; step < kSteps; ++step) {
    opt.zero_grad();
    const hg::Tensor loss = hg::mse_loss(model(x).to(hg::f32), data.target);  // the loss in f32
    loss.backward();
    const hg::Tensor before = model.weight.detach().clone();
    if (step == 0) {
      const hg::Tensor ratio = hg::abs(model.weight.grad().to(hg::f32)) * kLr / hg::abs(before.to(hg::f32));
      r.ratio_at_start = median(ratio.to_vector<float>());
    }
    opt.step();
    moved += hg::sum(hg::ne(model.weight.detach(), before)).item<int64_t>();
    r.losses.push_back(loss.item<double>());
  }
  r.first_loss = r.losses.front();
  r.last_loss = r.losses.back();
  r.moved_share = double(moved) / double(kSteps * kFeatures);
  r.distance = hg::mean(hg::abs(model.weight.detach().to(hg::f32) - data.w_true)).item<double>();
  return r;
}

bool show_training(const std::string& csv_dir) {
  const Data data = make_data();
  std::vector<RunResult> runs;
  runs.push_back(train(data, hg::f32, false, Rounding::Nearest, "f32"));
  runs.push_back(train(data, hg::f16, false, Rounding::Nearest, "f16, pure"));
  runs.push_back(train(data, hg::f16, true, Rounding::Nearest, "f16, f32 masters"));
  runs.push_back(train(data, hg::f16, false, Rounding::Stochastic, "f16, stochastic"));
  runs.push_back(train(data, hg::bf16, false, Rounding::Nearest, "bf16, pure"));
  runs.push_back(train(data, hg::bf16, true, Rounding::Nearest, "bf16, f32 masters"));
  runs.push_back(train(data, hg::bf16, false, Rounding::Stochastic, "bf16, stochastic"));
  std::cout << "2. Linear(64, 1) regression from w_true + noise, SGD lr 5e-4, " << kSteps << " steps\n"
            << "   run                 lr|g|/|w| at step 0   loss at step 0   loss at the end   weights a step moved"
               "   mean |w - w_true|\n";
  for (const RunResult& r : runs)
    std::cout << "   " << std::left << std::setw(20) << r.name << std::right << std::setprecision(3) << std::setw(11)
              << r.ratio_at_start << " = 2^" << std::setw(5) << std::setprecision(3) << std::log2(r.ratio_at_start)
              << std::setw(16) << r.first_loss << std::setw(18) << r.last_loss << std::setw(20)
              << 100 * r.moved_share << " %" << std::setw(20) << r.distance << "\n";
  std::cout << "   Every update is below the line (2^-11 for f16, 2^-8 for bf16): pure 16-bit weights never move\n"
            << "   and the loss stays where it started. f32 masters follow the f32 run; stochastic rounding gets\n"
            << "   there without any f32 copy, moving a weight in only a small share of the steps -- a whole ulp\n"
            << "   each time -- with a little noise from that ulp (more in bf16, whose ulp is 8x f16's).\n\n";
  if (!csv_dir.empty()) {
    std::ofstream csv(csv_dir + "/lesson14_losses.csv");
    csv << "step";
    for (const RunResult& r : runs) csv << ',' << r.name;
    csv << '\n';
    for (int step = 0; step < kSteps; ++step) {
      csv << step;
      for (const RunResult& r : runs) csv << ',' << r.losses[size_t(step)];
      csv << '\n';
    }
  }
  const RunResult &f32 = runs[0], &pure = runs[1], &masters = runs[2], &stochastic = runs[3];
  const RunResult &bf16_pure = runs[4], &bf16_masters = runs[5], &bf16_stochastic = runs[6];
  // Pure 16-bit: frozen (no step moved a weight); the fixes: within 1.5x (f16) or 3x (bf16) of f32's loss.
  return pure.ratio_at_start < std::ldexp(1.0, -12) && pure.moved_share == 0 && bf16_pure.moved_share == 0 &&
         pure.last_loss == pure.first_loss && bf16_pure.last_loss == bf16_pure.first_loss &&
         f32.last_loss < 0.05 * f32.first_loss && masters.last_loss < 1.5 * f32.last_loss &&
         stochastic.last_loss < 1.5 * f32.last_loss && bf16_masters.last_loss < 3 * f32.last_loss &&
         bf16_stochastic.last_loss < 3 * f32.last_loss;
}

// ---- 3. what each costs ------------------------------------------------------------------------

bool show_memory() {
  const hg::Tensor w16 = hg::zeros({1000}, {.dtype = hg::bf16, .requires_grad = true});
  const hg::Tensor w32 = hg::zeros({1000}, {.requires_grad = true});
  const hg::optim::Adam f32({w32}), masters({w16}, {.master_weights = true});
  const hg::optim::Adam stochastic({w16}, {.rounding = Rounding::Stochastic});
  const hg::optim::Adam kahan({w16}, {.rounding = Rounding::Kahan});
  std::cout << "3. Adam, bytes per parameter (weight + gradient + f32 master + state: optimizer.memory_use())\n";
  const auto row = [](const char* name, const hg::optim::Optimizer& opt) {
    const hg::optim::MemoryUse u = opt.memory_use();
    const double n = double(u.parameters);
    std::cout << "   " << std::left << std::setw(34) << name << std::right << std::setw(5) << u.bytes_per_parameter()
              << "  (weight " << u.weight_bytes / n << ", gradient " << u.gradient_bytes / n << ", master "
              << u.master_bytes / n << ", m + v and the rest " << u.state_bytes / n << ")\n";
    return u.bytes_per_parameter();
  };
  const double a = row("f32", f32), b = row("bf16 weights, f32 masters", masters);
  const double c = row("bf16, stochastic rounding", stochastic), d = row("bf16, Kahan (+ a bf16 compensation)", kahan);
  std::cout << "   Stochastic rounding halves the memory of the weights and their optimizer state.\n\n";
  return a == 16 && b == 16 && c == 8 && d == 10;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string csv_dir = argc == 3 && std::strcmp(argv[1], "--csv") == 0 ? argv[2] : "";
  bool ok = show_stall_line(csv_dir);
  ok = show_training(csv_dir) && ok;
  ok = show_memory() && ok;
  std::cout << (ok ? "master_weights: all checks passed\n" : "master_weights: CHECK FAILED\n");
  return ok ? 0 : 1;
}
