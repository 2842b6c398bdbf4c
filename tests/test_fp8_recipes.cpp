// The FP8 recipes (amp/fp8.h): the quantiser against Tensor::to's FP8 conversion, the scales,
// each op under Fp8Autocast against the same arithmetic written out with the quantiser, delayed
// scaling's history, block scaling on an outlier channel, bitwise resume from a checkpoint, and
// the errors.
#include <cmath>
#include <cstring>

#include "fp8_test_values.h"
#include "test_support.h"

using hg::Tensor;
using hg::amp::Fp8Autocast;
using hg::amp::Fp8Recipe;
using hg::amp::Fp8Scaling;
using hg::amp::Fp8State;

namespace {

Tensor quantised(const Tensor& t, hg::DType format, int64_t rows = 0, int64_t cols = 0) {
  return hg::amp::fp8_quantise(t, format, rows, cols).values;
}

bool bitwise_equal(const Tensor& a, const Tensor& b) {
  const Tensor x = a.contiguous().to(hg::f32), y = b.contiguous().to(hg::f32);
  return x.shape() == y.shape() && std::memcmp(x.raw_data(), y.raw_data(), size_t(x.numel()) * 4) == 0;
}


}  // namespace

TEST_CASE("fp8.quantiser_at_scale_1_is_the_saturating_conversion") {
  const Tensor x = hg_test::fp8_awkward_values();
  for (const hg::DType format : {hg::f8e4m3, hg::f8e5m2}) {
    CAPTURE(format);
    const float one = 1.0f;
    const Tensor got = hg::amp::fp8_quantise(x, format, 0, 0, 0, &one).values;
    const Tensor want = x.to(format, hg::Float8Overflow::Saturate).to(hg::f32);
    const auto mismatch = hg_test::compare(got, want, {0, 0}, /*equal_nan=*/true);
    CHECK_MESSAGE(!mismatch, *mismatch);
  }
}

TEST_CASE("fp8.scales_are_powers_of_two_that_fit_amax") {
  using hg::amp::fp8_scale_for;
  CHECK(fp8_scale_for(1.0f, hg::f8e4m3) == 256.0f);  // 448 / 1 = 448: 2^8 keeps 1 * 2^8 <= 448
  CHECK(fp8_scale_for(448.0f, hg::f8e4m3) == 1.0f);
  CHECK(fp8_scale_for(449.0f, hg::f8e4m3) == 0.5f);
  CHECK(fp8_scale_for(1.0f, hg::f8e5m2) == 32768.0f);
  CHECK(fp8_scale_for(1.0f, hg::f8e4m3, 2) == 64.0f);  // margin: 2^-2 more headroom
  CHECK(fp8_scale_for(0.0f, hg::f8e4m3) == 1.0f);
  CHECK(fp8_scale_for(INFINITY, hg::f8e4m3) == 1.0f);
  CHECK(fp8_scale_for(1e-30f, hg::f8e4m3) == std::ldexp(1.0f, 108));  // 448 / 1e-30 = 2^108.5
  // The quantiser uses them: amax 3 -> scale 128, the top of the tile lands on 384 <= 448.
  const auto q = hg::amp::fp8_quantise(hg::from_vector(std::vector<float>{3.f, -0.1f}, {2}), hg::f8e4m3, 0, 0);
  CHECK(q.amaxes[0] == 3.f);
  CHECK(q.scales[0] == 128.f);
  CHECK(q.values.to_vector<float>()[0] == 3.f);
  CHECK(q.values.to_vector<float>()[1] == float(hg::float8_e4m3(-12.8)) / 128);
}

TEST_CASE("fp8.current_scaling_linear_is_the_quantised_product_forward_and_backward") {
  hg::manual_seed(0);
  const Tensor x = hg::randn({6, 40}).requires_grad_(), w = (hg::randn({5, 40}) * 0.1).requires_grad_();
  const Tensor b = hg::randn({5}).requires_grad_();
  const Tensor g = hg::randn({6, 5}) * 1e-3;
  Fp8State state({.scaling = Fp8Scaling::Current});
  Tensor y;
  {
    Fp8Autocast guard(state);
    y = hg::linear(x, w, b);
  }
  y.backward(g);
  // The same arithmetic written out: E4M3 operands, an f32 product, E5M2 gradients (HYBRID).
  const Tensor xq = quantised(x.detach(), hg::f8e4m3), wq = quantised(w.detach(), hg::f8e4m3);
  const Tensor gq = quantised(g, hg::f8e5m2);
  CHECK(bitwise_equal(y, hg::linear(xq, wq) + b.detach()));
  CHECK(bitwise_equal(x.grad(), hg::matmul(gq, wq)));
  CHECK(bitwise_equal(w.grad(), hg::matmul(gq.t(), xq)));
  CHECK(bitwise_equal(b.grad(), hg::sum(g, {0})));  // the bias gradient is not quantised
  // And it is close to the f32 linear: E4M3 keeps 3 mantissa bits.
  const auto far = hg_test::compare(y, hg::linear(x, w, b), {0.1, 0.3});
  CHECK_MESSAGE(!far, *far);
  CHECK_FALSE(bitwise_equal(y, hg::linear(x, w, b)));
}

TEST_CASE("fp8.matmul_and_conv2d_follow_the_same_recipe") {
  hg::manual_seed(1);
  Fp8State state({.scaling = Fp8Scaling::Current, .formats = hg::amp::Fp8Formats::E4M3});
  const Tensor a = hg::randn({2, 3, 8}), m = hg::randn({8, 4});
  const Tensor x = hg::randn({2, 3, 6, 6}), w = hg::randn({4, 3, 3, 3}), b = hg::randn({4});
  Tensor product, conv;
  {
    Fp8Autocast guard(state);
    product = hg::matmul(a, m);
    conv = hg::conv2d(x, w, b, {.padding = 1, .epilogue = hg::Epilogue::Relu});
  }
  CHECK(bitwise_equal(product, hg::matmul(quantised(a, hg::f8e4m3), quantised(m, hg::f8e4m3))));
  CHECK(bitwise_equal(conv, hg::relu(hg::conv2d(quantised(x, hg::f8e4m3), quantised(w, hg::f8e4m3), {}, {.padding = 1}) +
                                     b.reshape({1, 4, 1, 1}))));
  CHECK(state.slots().size() == 2);  // one slot per call site
}

TEST_CASE("fp8.backward_inside_the_guard_is_the_same_as_outside") {
  // The ops of a backward (linear's gradient is a matmul) must not be quantised again.
  hg::manual_seed(2);
  const Tensor x = hg::randn({4, 16}).requires_grad_(), w = hg::randn({3, 16}).requires_grad_();
  Fp8State inside({.scaling = Fp8Scaling::Current}), outside({.scaling = Fp8Scaling::Current});
  Tensor gx_inside, gx_outside;
  {
    Fp8Autocast guard(inside);
    hg::sum(hg::linear(x, w)).backward();
    gx_inside = x.grad().clone();
  }
  x.set_grad(Tensor());
  Tensor y;
  {
    Fp8Autocast guard(outside);
    y = hg::sum(hg::linear(x, w));
  }
  y.backward();
  CHECK(bitwise_equal(gx_inside, x.grad()));
}

TEST_CASE("fp8.delayed_scaling_uses_the_amax_of_earlier_steps") {
  Fp8State state({.scaling = Fp8Scaling::Delayed, .amax_history_len = 3});
  const Tensor w = hg::ones({1, 2});
  const auto step = [&](float amax) {
    Fp8Autocast guard(state);
    return hg::linear(hg::from_vector(std::vector<float>{amax, 0.5f}, {1, 2}), w);
  };
  step(3.0f);  // step 0: scale 1, records amax 3
  REQUIRE(state.slots().size() == 1);
  CHECK(state.slots()[0]->input.scale == 1.0f);
  step(1.0f);  // scale from max(3) = 128
  CHECK(state.slots()[0]->input.scale == 128.0f);
  step(0.1f);  // max(3, 1) still 128
  CHECK(state.slots()[0]->input.scale == 128.0f);
  step(0.1f);  // history (3, 1, 0.1): still 128
  step(0.1f);  // history (1, 0.1, 0.1): the 3 fell out -> 256
  CHECK(state.slots()[0]->input.scale == 256.0f);
  CHECK(state.slots()[0]->input.amax_history.size() == 3);
  CHECK(state.slots()[0]->weight.scale == 256.0f);  // weight amax 1 every step

  Fp8State recent({.scaling = Fp8Scaling::Delayed, .amax_history_len = 5, .amax_compute_algo = "most_recent",
                   .margin = 1});
  for (const float amax : {3.0f, 0.1f}) {
    Fp8Autocast guard(recent);
    hg::linear(hg::from_vector(std::vector<float>{amax}, {1, 1}), hg::ones({1, 1}));
  }
  { Fp8Autocast guard(recent); }  // a region uses the scale from the last step's amax 0.1, margin 1
  CHECK(recent.slots()[0]->input.scale == 2048.0f);  // 448 / 0.1 = 4480 -> 2^12, / 2^1
  // Values above the delayed scale's range saturate instead of overflowing.
  Fp8State saturating({.scaling = Fp8Scaling::Delayed});
  for (const float amax : {1.0f, 1000.0f}) {
    Fp8Autocast guard(saturating);
    const Tensor y = hg::linear(hg::from_vector(std::vector<float>{amax}, {1, 1}), hg::ones({1, 1}));
    if (amax == 1000.0f) CHECK(y.item<float>() == 448.0f / 256);  // scale 256 from step 0's amax 1
  }
}

TEST_CASE("fp8.block_scaling_protects_the_other_channels_from_an_outlier") {
  // One activation channel 10^6 x the others (what LLM activations have): with one scale per
  // tensor the small values fall below E4M3's smallest subnormal and flush to 0; with 1 x 128
  // tiles, the tile without the outlier keeps E4M3's relative precision (2^-4).
  hg::manual_seed(4);
  Tensor x = hg::randn({4, 256}) * 0.01;
  Tensor big = hg::zeros({4, 256});
  hg::narrow(big, 1, 200, 1).fill_(10000.0);
  x = x + big;
  const Tensor per_tensor = quantised(x, hg::f8e4m3);
  const Tensor tiled = quantised(x, hg::f8e4m3, 1, 128);
  const Tensor low = hg::narrow(x, 1, 0, 128);
  const auto largest_error = [&](const Tensor& q) {
    return hg::amax(hg::amax(hg::abs(hg::narrow(q, 1, 0, 128) - low), 1), 0).item<double>();
  };
  const double error_tensor = largest_error(per_tensor), error_tiled = largest_error(tiled);
  CHECK(error_tiled < error_tensor / 10);
  CHECK(hg::sum(hg::eq(hg::narrow(per_tensor, 1, 0, 128), hg::zeros({4, 128}))).item<int64_t>() > 400);  // flushed
  // Under Fp8Autocast, Block: the linear is the product of the tiled operands (weights 128 x 128).
  const Tensor w = hg::randn({130, 256});
  Fp8State state({.scaling = Fp8Scaling::Block});
  Tensor y;
  {
    Fp8Autocast guard(state);
    y = hg::linear(x, w);
  }
  CHECK(bitwise_equal(y, hg::linear(tiled, quantised(w, hg::f8e4m3, 128, 128))));
}

TEST_CASE("fp8.delayed_scaling_state_resumes_bitwise_from_a_checkpoint") {
  const auto make = [] {
    hg::manual_seed(5);
    return hg::nn::Sequential(hg::nn::Linear(8, 16), hg::nn::ReLU(), hg::nn::Linear(16, 3));
  };
  const auto train = [](hg::nn::Sequential& model, hg::optim::Adam& opt, Fp8State& fp8, int from, int to) {
    for (int step = from; step < to; ++step) {
      hg::manual_seed(100 + step);
      const Tensor x = hg::randn({5, 8});
      const Tensor target = hg::randint(0, 3, {5}, {.dtype = hg::i64});
      opt.zero_grad();
      Tensor loss;
      {
        Fp8Autocast guard(fp8);
        loss = hg::cross_entropy(model(x), target);
      }
      loss.backward();
      opt.step();
    }
  };
  const Fp8Recipe recipe{.scaling = Fp8Scaling::Delayed, .amax_history_len = 4};
  auto straight = make();
  hg::optim::Adam straight_opt(straight.parameters(), {.lr = 1e-2});
  Fp8State straight_fp8(recipe);
  train(straight, straight_opt, straight_fp8, 0, 8);

  auto first = make();
  hg::optim::Adam first_opt(first.parameters(), {.lr = 1e-2});
  Fp8State first_fp8(recipe);
  train(first, first_opt, first_fp8, 0, 4);
  const std::string path = hg_test::temp_path("fp8_resume.safetensors");
  hg::Checkpoint saver;
  saver.add("model", first).add("optimizer", first_opt).add("fp8", first_fp8);
  saver.save(path);

  auto second = make();
  hg::optim::Adam second_opt(second.parameters(), {.lr = 1e-2});
  Fp8State second_fp8(recipe);
  hg::Checkpoint loader;
  loader.add("model", second).add("optimizer", second_opt).add("fp8", second_fp8);
  loader.load(path);
  CHECK(second_fp8.slots().size() == 2);
  train(second, second_opt, second_fp8, 4, 8);
  const auto a = straight.parameters(), b = second.parameters();
  for (size_t i = 0; i < a.size(); ++i) CHECK(bitwise_equal(a[i], b[i]));
}

TEST_CASE("fp8.a_precision_report_shows_each_fp8_op_as_one_row") {
  Fp8State state({.scaling = Fp8Scaling::Current});
  hg::amp::PrecisionReport report;
  {
    Fp8Autocast guard(state);
    hg::linear(hg::ones({2, 4}), hg::ones({3, 4}), hg::ones({3}));
    hg::linear(hg::ones({2, 4}), hg::ones({3, 4}), hg::ones({3}));
  }
  REQUIRE(report.rows().size() == 1);  // no rows for the quantisers, the product, the bias add
  const auto& row = report.rows()[0];
  CHECK(row.op == "linear");
  CHECK(row.policy == "FP8 current (E4M3, E5M2 gradients)");
  CHECK(row.compute == hg::f8e4m3);
  CHECK(row.calls == 2);
}

TEST_CASE("fp8.errors_name_the_problem") {
  CHECK_THROWS_HG(Fp8State({.amax_history_len = 0}), "amax_history_len must be at least 1");
  CHECK_THROWS_HG(Fp8State({.amax_compute_algo = "mean"}), "\"max\" or \"most_recent\"");
  CHECK_THROWS_HG(Fp8State({.block = 0}), "block must be at least 1");
  CHECK_THROWS_HG(hg::amp::fp8_quantise(hg::ones({2}), hg::bf16, 0, 0), "expected f8e4m3 or f8e5m2");
  CHECK_THROWS_HG(hg::amp::fp8_quantise(hg::ones({2}, {.dtype = hg::i64}), hg::f8e4m3, 0, 0),
                  "expected an f32, f64, f16 or bf16 tensor");
  Fp8State delayed({.scaling = Fp8Scaling::Delayed}), current({.scaling = Fp8Scaling::Current});
  { Fp8Autocast guard(delayed); hg::linear(hg::ones({1, 2}), hg::ones({1, 2})); }
  CHECK_THROWS_HG(current.load_state_dict(delayed.state_dict()), "saved with scaling 0");
  auto state = delayed.state_dict();
  state.erase("slot0.grad.scale");
  Fp8State other({.scaling = Fp8Scaling::Delayed});
  CHECK_THROWS_HG(other.load_state_dict(state), "expected \"scaling\" and 6 per slot");
}
