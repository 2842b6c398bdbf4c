// amp::GradientHistogram (amp_tools/gradient_histogram.h): gradient values binned by base-2 exponent,
// before and after unscaling, with f16's and bf16's ranges -- counted exactly on known values,
// then on lesson 05's underflowing toy, where scaling moves the mass out of f16's zero zone.
#include <cmath>
#include <fstream>
#include <sstream>

#include "test_support.h"

using hg::Tensor;
using Stage = hg::amp::GradientHistogram::Stage;

TEST_CASE("amp.gradient_histogram.bins_known_values_before_and_after_unscaling") {
  const double s = 1024;  // 2^10
  const float inf = INFINITY;
  const Tensor g = hg::from_vector(std::vector<float>{1.0f, -0.75f, std::ldexp(1.0f, -30), 0.0f, inf, 3.0f}, {6});
  hg::amp::GradientHistogram h;
  h.add({g}, s);
  // Before: 1 -> bin 0, 0.75 -> bin -1, 2^-30 -> bin -30, 3 -> bin 1; after: each 10 bins lower.
  CHECK(h.count(Stage::BeforeUnscale, 0) == 1);
  CHECK(h.count(Stage::BeforeUnscale, -1) == 1);
  CHECK(h.count(Stage::BeforeUnscale, -30) == 1);
  CHECK(h.count(Stage::BeforeUnscale, 1) == 1);
  CHECK(h.count(Stage::AfterUnscale, -10) == 1);
  CHECK(h.count(Stage::AfterUnscale, -11) == 1);
  CHECK(h.count(Stage::AfterUnscale, -40) == 1);
  CHECK(h.count(Stage::AfterUnscale, -9) == 1);
  CHECK(h.zeros(Stage::AfterUnscale) == 1);
  CHECK(h.nonfinite(Stage::BeforeUnscale) == 1);
  CHECK(h.total(Stage::BeforeUnscale) == 6);
  // Below 2^-24: the zero and 2^-30 before; after unscaling also the zero and 2^-40 only.
  CHECK(h.fraction_below(Stage::BeforeUnscale, -24) == doctest::Approx(2.0 / 6));
  CHECK(h.fraction_below(Stage::AfterUnscale, -10) == doctest::Approx(3.0 / 6));
  CHECK(h.fraction_at_or_above(Stage::BeforeUnscale, 0) == doctest::Approx(2.0 / 6));
  CHECK(h.nonzero_fraction_below(Stage::BeforeUnscale, -24) == doctest::Approx(1.0 / 4));  // 2^-30 of 4 nonzero finite
  CHECK(h.additions() == 1);
}

TEST_CASE("amp.gradient_histogram.regions_of_f16_and_bf16") {
  CHECK(std::string(hg::amp::f16_region(15)) == "normal");     // 32768 .. 65504
  CHECK(std::string(hg::amp::f16_region(16)) == "overflow");
  CHECK(std::string(hg::amp::f16_region(-14)) == "normal");    // smallest normal 2^-14
  CHECK(std::string(hg::amp::f16_region(-15)) == "subnormal");
  CHECK(std::string(hg::amp::f16_region(-24)) == "subnormal"); // smallest subnormal 2^-24
  CHECK(std::string(hg::amp::f16_region(-25)) == "zero");
  CHECK(std::string(hg::amp::bf16_region(-126)) == "normal");
  CHECK(std::string(hg::amp::bf16_region(-133)) == "subnormal");
  CHECK(std::string(hg::amp::bf16_region(-134)) == "zero");
  CHECK(std::string(hg::amp::bf16_region(128)) == "overflow");
}

TEST_CASE("amp.gradient_histogram.fp8_regions_and_what_a_per_tensor_scale_flushes") {
  CHECK(std::string(hg::amp::e4m3_region(8)) == "normal");      // 256 .. 448
  CHECK(std::string(hg::amp::e4m3_region(9)) == "overflow");
  CHECK(std::string(hg::amp::e4m3_region(-7)) == "subnormal");
  CHECK(std::string(hg::amp::e4m3_region(-10)) == "zero");
  CHECK(std::string(hg::amp::e5m2_region(15)) == "normal");     // 32768 .. 57344
  CHECK(std::string(hg::amp::e5m2_region(-16)) == "subnormal");
  CHECK(std::string(hg::amp::e5m2_region(-17)) == "zero");
  // 2^0, 2^-1, ..., 2^-60: the recipes' quantiser scales the top (1) to 2^8 (E4M3) / 2^15 (E5M2);
  // what it then flushes is what the histogram predicts from the bins alone.
  std::vector<float> values;
  for (int k = 0; k >= -60; --k) values.push_back(std::ldexp(1.0f, k));
  const Tensor g = hg::from_vector(values, {int64_t(values.size())});
  hg::amp::GradientHistogram h;
  h.add({g}, 1.0);
  for (const hg::DType format : {hg::f8e4m3, hg::f8e5m2}) {
    CAPTURE(format);
    const Tensor q = hg::amp::fp8_quantise(g, format, 0, 0).values;
    const double flushed = hg::mean(hg::eq(q, hg::zeros({int64_t(values.size())})).to(hg::f32)).item<double>();
    CHECK(h.fp8_flushed_fraction(Stage::AfterUnscale, format) == doctest::Approx(flushed));
  }
  CHECK(h.fp8_flushed_fraction(Stage::AfterUnscale, hg::f8e4m3) == doctest::Approx(43.0 / 61));  // 2^-18 and below
  CHECK(h.fp8_flushed_fraction(Stage::AfterUnscale, hg::f8e5m2) == doctest::Approx(29.0 / 61));  // 2^-32 and below
  CHECK_THROWS_HG(h.fp8_flushed_fraction(Stage::AfterUnscale, hg::bf16), "expected f8e4m3 or f8e5m2");
  std::ostringstream printed;
  h.print(printed);
  CHECK(printed.str().find("flush to 0 in E5M2") != std::string::npos);
}

TEST_CASE("amp.gradient_histogram.scaling_lifts_tiny_gradients_out_of_the_f16_zero_zone") {
  // Lesson 05's toy: a Linear(64, 1) on features ~1e-3 whose gradients are ~1e-8.
  hg::manual_seed(5);
  const Tensor x = hg::randn({256, 64}) * 1e-3;
  const Tensor target = hg::linear(x, hg::full({1, 64}, 0.005));
  hg::nn::Linear model(64, 1, /*bias=*/false);
  model.load_state_dict({{"weight", hg::zeros({1, 64})}});
  hg::optim::SGD opt(model.parameters(), {.lr = 0.1});
  hg::amp::GradScaler scaler;  // 2^16
  hg::amp::GradientHistogram h;
  for (int step = 0; step < 3; ++step) {
    opt.zero_grad();
    scaler.scale(hg::mse_loss(model(x), target)).backward();
    h.add(opt, scaler);
    scaler.step(opt);
    scaler.update();
  }
  CHECK(h.additions() == 3);
  CHECK(h.total(Stage::AfterUnscale) == 3 * 64);
  CHECK(h.fraction_below(Stage::AfterUnscale, -24) > 0.6);   // true gradients: mostly below f16's reach
  CHECK(h.fraction_below(Stage::BeforeUnscale, -24) == 0.0); // x 2^16: all of them representable
  CHECK(h.fraction_at_or_above(Stage::BeforeUnscale, 16) == 0.0);
  // Every value moved exactly 16 bins.
  for (int e = -60; e < 0; ++e) CHECK(h.count(Stage::AfterUnscale, e - 16) == h.count(Stage::BeforeUnscale, e));

  std::ostringstream os;
  h.print(os);
  CHECK(os.str().find("of the nonzero values, below 2^-24 (f16 flushes them to 0): 0% before unscaling, 100% after")
        != std::string::npos);
  const std::string path = hg_test::temp_path("gradient_histogram.csv");
  h.write_csv(path);
  std::ifstream in(path);
  std::string comment, header, first;
  std::getline(in, comment), std::getline(in, header), std::getline(in, first);
  CHECK(header == "exponent,before,after,f16_region,bf16_region,e4m3_region,e5m2_region");
  CHECK(first == "-160,0,0,zero,zero,zero,zero");
}

TEST_CASE("amp.gradient_histogram.a_disabled_scaler_means_scale_1") {
  const Tensor w = hg::full({4}, 0.5, {.requires_grad = true});
  hg::optim::SGD opt({w}, {.lr = 0.1});
  hg::amp::GradScaler scaler({.enabled = false});
  hg::sum(w * 2.0).backward();  // gradient 2 everywhere
  hg::amp::GradientHistogram h;
  h.add(opt, scaler);
  CHECK(h.count(Stage::BeforeUnscale, 1) == 4);
  CHECK(h.count(Stage::AfterUnscale, 1) == 4);
}

TEST_CASE("amp.gradient_histogram.errors") {
  hg::amp::GradientHistogram h;
  CHECK_THROWS_HG(h.add({hg::ones({2})}, 0.0), "the scale must be positive and finite, got 0");
  CHECK_THROWS_HG(h.add({hg::ones({2}, {.dtype = hg::i64})}, 1.0), "gradients must be floating-point tensors, got i64");
  CHECK_THROWS_HG(h.add({Tensor()}, 1.0), "got an undefined one");
  CHECK_THROWS_HG(h.count(Stage::AfterUnscale, 500), "exponent 500 is outside [-160, 140]");
  // All or nothing (issue 25, item 8): a bad second gradient leaves the first one uncounted.
  CHECK_THROWS_HG(h.add({hg::ones({3}), hg::ones({2}, {.dtype = hg::i64})}, 1.0), "(gradient 1); nothing was added");
  CHECK(h.total(Stage::BeforeUnscale) == 0);
  CHECK(h.additions() == 0);
  // A file that cannot be written (a full disk) is an error, not an empty file.
  CHECK_THROWS_HG(h.write_csv("/dev/full"), "write failed");
}
