// amp::ShadowCheck under an amp::Fp8Autocast (amp_tools/shadow_check.h): one row per FP8 op, its
// result against the plain op in f32 on the same unquantised inputs, in epsilons of E4M3, with the
// amax and scale of each operand. The numbers are what arithmetic says they must be: 0 where every
// input is an E4M3 value, the error of the same quantised product computed here where an outlier
// sets the scale; and the f32 re-run leaves the FP8 state as an unchecked step does.
#include <cmath>
#include <limits>
#include <sstream>

#include "test_support.h"

using hg::Tensor;
using hg::amp::Fp8Autocast;
using hg::amp::Fp8OpError;
using hg::amp::Fp8Scaling;
using hg::amp::Fp8State;

namespace {

// Multiples of 1/4 in [-2, 1.75]: each has at most 3 significant bits (E4M3 holds 4), and products
// and sums of a few of them are exact in f32, in any order.
Tensor quarters(const hg::Shape& shape) { return hg::randint(-8, 8, shape, {.dtype = hg::i64}).to(hg::f32) * 0.25; }

// The definition of the error (amp/precision_report.h), computed on its own: the largest
// |approx - exact| / max(|exact|, RMS of exact), in epsilons of E4M3 (2^-3).
double max_error_in_e4m3_epsilons(const Tensor& approx, const Tensor& exact) {
  const std::vector<float> a = approx.contiguous().to_vector<float>(), r = exact.contiguous().to_vector<float>();
  double sum_squares = 0;
  for (const float v : r) sum_squares += double(v) * v;
  const double rms = std::sqrt(sum_squares / double(r.size()));
  double largest = 0;
  for (size_t i = 0; i < a.size(); ++i)
    largest = std::max(largest, std::fabs(double(a[i]) - r[i]) / std::max(std::fabs(double(r[i])), rms) / 0.125);
  return largest;
}

// One FP8 linear under ShadowCheck(f32) with current scaling: its row.
Fp8OpError checked_linear(const Tensor& x, const Tensor& w, Fp8Scaling scaling = Fp8Scaling::Current) {
  Fp8State fp8({.scaling = scaling});
  hg::amp::ShadowCheck check(hg::f32);
  check.run([&] {
    Fp8Autocast guard(fp8);
    return hg::linear(x, w);
  });
  REQUIRE(check.fp8_ops().size() == 1);
  return check.fp8_ops()[0];
}

}  // namespace

TEST_CASE("amp.fp8_shadow.inputs_exact_in_e4m3_show_zero_error") {
  hg::manual_seed(3);
  const Tensor x = quarters({6, 16}), w = quarters({5, 16}), b = quarters({5});
  const Tensor a = quarters({4, 8}), m = quarters({8, 3});
  const Tensor image = quarters({1, 2, 6, 6}), kernel = quarters({3, 2, 3, 3}), kernel_bias = quarters({3});
  Fp8State fp8({.scaling = Fp8Scaling::Delayed});  // step 0: every scale 1, and these are E4M3 values
  hg::amp::ShadowCheck check(hg::f32);
  check.run([&] {
    Fp8Autocast guard(fp8);
    const Tensor y = hg::linear(x, w, b), z = hg::matmul(a, m);
    const Tensor c = hg::conv2d(image, kernel, kernel_bias, {.padding = 1});
    return hg::sum(y) + hg::sum(z) + hg::sum(c);
  });
  const std::vector<Fp8OpError>& rows = check.fp8_ops();
  REQUIRE(rows.size() == 3);  // one per FP8 op, in call order
  const char* ops[] = {"linear", "matmul", "conv2d"};
  const int64_t outputs[] = {6 * 5, 4 * 3, 3 * 6 * 6};
  for (size_t k = 0; k < rows.size(); ++k) {
    CAPTURE(k);
    CHECK(rows[k].index == int64_t(k));
    CHECK(rows[k].op == ops[k]);
    CHECK(rows[k].calls == 1);
    CHECK(rows[k].error.elements == outputs[k]);
    CHECK(rows[k].error.max_error == 0.0);
    CHECK(rows[k].error.sum_error == 0.0);
    CHECK(rows[k].input_scale == 1.0);
    CHECK(rows[k].weight_scale == 1.0);
  }
  CHECK(rows[0].input_shape == hg::Shape{6, 16});
  CHECK(rows[0].weight_shape == hg::Shape{5, 16});
  CHECK(rows[0].input_amax == hg::amax(hg::abs(x).reshape({-1}), 0).item<double>());
  CHECK(rows[1].weight_amax == hg::amax(hg::abs(m).reshape({-1}), 0).item<double>());
  // The report has the FP8 ops as one row each, compared in the FP8 table, not in its own columns.
  for (const hg::amp::PrecisionReport::Row& r : check.report().rows())
    if (r.compute == hg::f8e4m3) CHECK_FALSE(r.has_shadow);
}

TEST_CASE("amp.fp8_shadow.an_outlier_sets_the_scale_and_costs_the_other_channels") {
  hg::manual_seed(5);
  Tensor x = hg::randn({16, 64}) * 0.01;
  Tensor w = hg::randn({32, 64}) * 0.05;
  const Fp8OpError quiet = checked_linear(x, w);
  // Channel 17 holds 1000 and its weights 0: the product is the other channels' alone, but the one
  // per-tensor scale is now 0.25 (448 / 1000, down to a power of 2), where 0.01 x 0.25 falls among
  // E4M3's subnormals (spacing 2^-9).
  hg::narrow(x, 1, 17, 1).fill_(1000.0);
  hg::narrow(w, 1, 17, 1).fill_(0.0);
  const Fp8OpError loud = checked_linear(x, w);
  CHECK(loud.input_amax == 1000.0);
  CHECK(loud.input_scale == 0.25);
  CHECK(loud.weight_scale == hg::amp::fp8_scale_for(float(loud.weight_amax), hg::f8e4m3));
  // The expected error: the same quantised operands multiplied here, against the exact product.
  const Tensor xq = hg::amp::fp8_quantise(x, hg::f8e4m3, 0, 0).values;
  const Tensor wq = hg::amp::fp8_quantise(w, hg::f8e4m3, 0, 0).values;
  CHECK(loud.error.max_error == doctest::Approx(max_error_in_e4m3_epsilons(hg::linear(xq, wq), hg::linear(x, w))));
  CHECK(quiet.error.max_error < 2.0);  // a few roundings of E4M3 (0.5 epsilon each)
  CHECK(loud.error.max_error > 4 * quiet.error.max_error);
  // At 10^5 the scale is 2^-8: 0.01 x 2^-8 is below half E4M3's smallest subnormal, every other
  // element flushes to 0, so does every output, and an output of typical size or more is off by
  // all of itself: 1 / 2^-3 = 8 epsilons.
  hg::narrow(x, 1, 17, 1).fill_(1e5);
  const Fp8OpError flushed = checked_linear(x, w);
  CHECK(flushed.input_scale == std::ldexp(1.0, -8));
  CHECK(flushed.error.max_error == 8.0);
  CHECK(flushed.error.flushed_to_zero == 16 * 32);
}

TEST_CASE("amp.fp8_shadow.block_scaling_reports_per_tile_and_conv2d_per_tensor") {
  hg::manual_seed(6);
  const Tensor x = hg::randn({4, 256}), w = hg::randn({8, 256});
  const Fp8OpError linear = checked_linear(x, w, Fp8Scaling::Block);
  CHECK(std::isnan(linear.input_scale));
  CHECK(std::isnan(linear.weight_scale));
  CHECK(linear.error.max_error > 0.0);
  Fp8State fp8({.scaling = Fp8Scaling::Block});
  hg::amp::ShadowCheck check(hg::f32);
  const Tensor image = hg::randn({1, 2, 5, 5}) * 3.0, kernel = hg::randn({4, 2, 3, 3});
  check.run([&] {
    Fp8Autocast guard(fp8);
    return hg::conv2d(image, kernel);
  });
  REQUIRE(check.fp8_ops().size() == 1);
  const Fp8OpError& conv = check.fp8_ops()[0];  // block scaling's conv2d is scaled per tensor
  CHECK(conv.input_scale == hg::amp::fp8_scale_for(float(conv.input_amax), hg::f8e4m3));
  std::ostringstream printed;
  check.print(printed);
  CHECK(printed.str().find("FP8 ops (") != std::string::npos);
  CHECK(printed.str().find("2^" + std::to_string(std::ilogb(conv.input_scale))) != std::string::npos);
  std::ostringstream tiles;
  hg::amp::ShadowCheck tiled(hg::f32);
  tiled.run([&] {
    Fp8State block({.scaling = Fp8Scaling::Block});
    Fp8Autocast guard(block);
    return hg::linear(x, w);
  });
  tiled.print(tiles);
  CHECK(tiles.str().find("per tile") != std::string::npos);
}

TEST_CASE("amp.fp8_shadow.an_mlp_gives_a_row_per_layer_and_the_fp8_state_is_left_alone") {
  hg::manual_seed(8);
  hg::nn::Sequential model(hg::nn::Linear(16, 32), hg::nn::ReLU(), hg::nn::Linear(32, 32), hg::nn::ReLU(),
                           hg::nn::Linear(32, 4));
  const Tensor x = hg::randn({8, 16}), y = hg::randint(0, 4, {8}, {.dtype = hg::i64});
  Fp8State checked({.scaling = Fp8Scaling::Delayed}), plain({.scaling = Fp8Scaling::Delayed});
  hg::amp::ShadowCheck check(hg::bf16);
  for (int step = 0; step < 2; ++step) {
    const auto forward = [&](Fp8State& state) {
      return [&] {
        Fp8Autocast guard(state);
        return hg::cross_entropy(model(x), y);
      };
    };
    const Tensor loss = check.run(forward(checked));
    Tensor unchecked;
    {
      hg::amp::Autocast autocast(hg::bf16);
      unchecked = forward(plain)();
    }
    CHECK(loss.item<float>() == unchecked.item<float>());  // the FP8 run's result
    loss.backward();                                        // its graph: the gradients quantised
    unchecked.backward();
  }
  REQUIRE(check.fp8_ops().size() == 3);  // three Linear layers, each met by both runs
  for (const Fp8OpError& r : check.fp8_ops()) {
    CHECK(r.op == "linear");
    CHECK(r.calls == 2);
    CHECK(r.error.measured());
    CHECK(r.error.max_error > 0.0);
    CHECK(r.error.max_error < 8.0);
  }
  CHECK(check.fp8_ops()[1].input_shape == hg::Shape{8, 32});
  // The main table has no errors in the FP8 rows ("-"); its legend sends the reader to their table.
  std::ostringstream printed;
  check.print(printed);
  CHECK(printed.str().find("an f8e4m3 row: its errors are in the FP8 ops table below") != std::string::npos);
  // The f32 re-runs neither recorded an amax nor moved a scale: the same state as unchecked steps.
  const auto checked_state = checked.state_dict(), plain_state = plain.state_dict();
  REQUIRE(checked_state.size() == plain_state.size());
  for (const auto& entry : plain_state) {
    CAPTURE(entry.first);
    const Tensor& mine = checked_state.at(entry.first);
    CHECK(mine.to(hg::f64).to_vector<double>() == entry.second.to(hg::f64).to_vector<double>());
  }
  CHECK(checked.slots()[0]->input.amax_history.size() == 2);  // one amax per step, both steps
  CHECK_FALSE(hg::amp::fp8_enabled());
}
