// Behaviour of the ops, docs/testing.md scenarios 14-16: 14 NaN/Inf propagate;  15 extreme logits stay
// finite and match f64;  16 long reductions are accurate and independent of the thread count.
// The f64 reference (namespace ref) and the other helpers are in ops_test_helpers.h.
#include <cmath>
#include <string>
#include <vector>

#include "ops_test_helpers.h"

namespace {

// Bitwise-equal values (NaN equal to NaN), same shape.
#define CHECK_IDENTICAL(actual, expected)                                                        \
  do {                                                                                           \
    const auto close_report_ = hg_test::compare((actual), (expected), kExact, true);             \
    CHECK_MESSAGE(!close_report_.has_value(), close_report_.value_or(""));                       \
  } while (0)

// Restores the thread count a test changed.
struct ThreadCountGuard {
  int saved = hg::get_num_threads();
  ~ThreadCountGuard() { hg::set_num_threads(saved); }
};

}  // namespace

// ---- clamp with min > max ----------------------------------------------------------------------------

TEST_CASE("ops.clamp.min_above_max_sets_every_element_to_max") {
  // PyTorch and ONNX: every element becomes max (this used to throw); NaN still propagates, and
  // the gradient (where min <= x <= max) is zero everywhere (issue 11, item 7).
  const Tensor x = hg::from_vector(std::vector<double>{kNaN, kInf, -kInf, -1.0, 0.75, 2.0}, {6},
                                   {.dtype = hg::f32, .requires_grad = true});
  const Tensor y = hg::clamp(x, 1.0, 0.5);
  CHECK_CLOSE_NAN(y, hg::from_vector(std::vector<double>{kNaN, 0.5, 0.5, 0.5, 0.5, 0.5}, {6}, {.dtype = hg::f32}));
  (y * 1.0).backward(hg::ones({6}));
  CHECK(x.grad().to_vector<float>() == std::vector<float>(6, 0.0f));
  CHECK(hg::clamp(hg::full({3}, 7.0, {.dtype = hg::f16}), 3.0, -2.0).to_vector<float>() == std::vector<float>(3, -2.0f));
}

// ---- scenario 14: NaN and Inf propagate -------------------------------------------------------------

TEST_CASE("ops.scenario14.nan_and_inf_propagate") {
  const auto f32 = [](std::vector<double> v, hg::Shape shape) { return hg::from_vector(v, shape, {.dtype = hg::f32}); };
  const auto f64 = [](std::vector<double> v, hg::Shape shape) { return hg::from_vector(v, shape); };
  const Tensor x = f32({kNaN, kInf, -kInf, -1.0, 2.0}, {5});
  // relu must not turn NaN into 0 (the "x > 0 ? x : 0" trap).
  CHECK_CLOSE_NAN(hg::relu(x), f64({kNaN, kInf, 0.0, 0.0, 2.0}, {5}));
  CHECK_CLOSE_NAN(hg::leaky_relu(x, 0.5), f64({kNaN, kInf, -kInf, -0.5, 2.0}, {5}));
  CHECK_CLOSE_NAN(hg::gelu(x), f64({kNaN, kInf, kNaN, ref::gelu(-1.0), ref::gelu(2.0)}, {5}).to(hg::f32));
  CHECK_CLOSE_NAN(hg::sigmoid(x), f64({kNaN, 1.0, 0.0, ref::sigmoid(-1.0), ref::sigmoid(2.0)}, {5}).to(hg::f32));
  CHECK_CLOSE_NAN(hg::tanh(x), f64({kNaN, 1.0, -1.0, std::tanh(-1.0), std::tanh(2.0)}, {5}).to(hg::f32));
  CHECK_CLOSE_NAN(hg::clamp(x, -0.5, 0.5), f64({kNaN, 0.5, -0.5, -0.5, 0.5}, {5}));  // no silent clamping of NaN
  CHECK_CLOSE_NAN(hg::abs(x), f64({kNaN, kInf, kInf, 1.0, 2.0}, {5}));
  CHECK_CLOSE_NAN(hg::exp(x), f64({kNaN, kInf, 0.0, std::exp(-1.0), std::exp(2.0)}, {5}).to(hg::f32));
  CHECK_CLOSE_NAN(x * 2.0, f64({kNaN, kInf, -kInf, -2.0, 4.0}, {5}));
  // Reductions: NaN wins, inf stays inf, inf - inf is NaN.
  CHECK(std::isnan(hg::sum(x).item<float>()));
  CHECK(std::isnan(hg::mean(x).item<float>()));
  CHECK(hg::sum(f32({1.0, kInf, 2.0}, {3})).item<float>() == float(kInf));
  CHECK(std::isnan(hg::sum(f32({kInf, -kInf}, {2})).item<float>()));
  const Tensor rows = f32({1.0, kNaN, 3.0, /**/ 4.0, 5.0, 6.0, /**/ kInf, 0.0, 1.0, /**/ 2.0, 1.0, kNaN}, {4, 3});
  CHECK_CLOSE_NAN(hg::sum(rows, {1}), f64({kNaN, 15.0, kInf, kNaN}, {4}));
  CHECK_CLOSE_NAN(hg::amax(rows, 1), f64({kNaN, 6.0, kInf, kNaN}, {4}));
  CHECK_CLOSE_NAN(hg::amax(rows, 0), f64({kInf, kNaN, kNaN}, {3}));
  CHECK(hg::argmax(rows, 1).to_vector<int64_t>() == std::vector<int64_t>{1, 2, 0, 2});  // NaN counts as the maximum
  // softmax: a NaN poisons its own row only; an inf logit takes all the mass... as NaN (inf - inf),
  // exactly as PyTorch, and never a silent finite number.
  const Tensor sm = hg::softmax(rows, 1);
  const std::vector<double> s = values(sm);
  for (int i : {0, 1, 2, 9, 10, 11}) CHECK(std::isnan(s[size_t(i)]));
  CHECK_CLOSE(hg::narrow(sm, 0, 1, 1), hg::softmax(f32({4.0, 5.0, 6.0}, {1, 3}), 1));
  CHECK(std::isnan(s[6]));
  CHECK(std::isnan(hg::log_softmax(rows, 1).to_vector<double>()[0]));
  // max_pool2d: a NaN anywhere in a window is that window's maximum.
  const Tensor image = f32({1, 2, 3, 4, /**/ 5, kNaN, 7, 8, /**/ 9, 10, kInf, 12, /**/ 13, 14, 15, kNaN}, {1, 1, 4, 4});
  CHECK_CLOSE_NAN(hg::max_pool2d(image, 2, 2), f64({kNaN, 8.0, 14.0, kNaN}, {1, 1, 2, 2}));
  CHECK_CLOSE_NAN(hg::max_pool2d(image, 3, 1), f64({kNaN, kNaN, kNaN, kNaN}, {1, 1, 2, 2}));
  CHECK_CLOSE_NAN(hg::avg_pool2d(image, 2, 2), f64({kNaN, 5.5, 11.5, kNaN}, {1, 1, 2, 2}));
  // matmul: a NaN reaches its whole output row, an inf its row as inf (or NaN where inf * 0).
  const Tensor a = f32({1.0, kNaN, /**/ 1.0, 1.0, /**/ kInf, 1.0}, {3, 2});
  const Tensor b = f32({1.0, 2.0, /**/ 3.0, 4.0}, {2, 2});
  CHECK_CLOSE_NAN(hg::matmul(a, b), f64({kNaN, kNaN, 4.0, 6.0, kInf, kInf}, {3, 2}));
  CHECK_CLOSE_NAN(hg::linear(a, b), f64({kNaN, kNaN, 3.0, 7.0, kInf, kInf}, {3, 2}));
  CHECK_CLOSE_NAN(hg::matmul(a, f32({0.0, 1.0, 1.0, 0.0}, {2, 2})), f64({kNaN, kNaN, 1.0, 1.0, kNaN, kInf}, {3, 2}));
  // Losses: a NaN logit or an inf difference reaches the loss.
  const Tensor target = hg::from_vector(std::vector<int64_t>{0, 1}, {2});
  CHECK(std::isnan(hg::cross_entropy(f32({kNaN, 0.0, 1.0, 2.0}, {2, 2}), target).item<float>()));
  CHECK(std::isnan(hg::cross_entropy(f32({0.0, 1.0, 1.0, kNaN}, {2, 2}), target, {.label_smoothing = 0.1}).item<float>()));
  CHECK(hg::mse_loss(f32({kInf, 0.0}, {2}), f32({0.0, 0.0}, {2})).item<float>() == float(kInf));
  CHECK(std::isnan(hg::mse_loss(f32({kNaN, 0.0}, {2}), f32({0.0, 0.0}, {2})).item<float>()));
  CHECK(std::isnan(values(hg::layer_norm(f32({1.0, kNaN, 3.0}, {1, 3}), {3}, {}, {}, 1e-5))[0]));
  CHECK(std::isnan(values(hg::batch_norm(f32({1.0, kNaN, 3.0, 4.0}, {4, 1}), {}, {}, {}, {}, true, 0.1, 1e-5))[0]));
  // Gradients carry NaN too: relu's backward at NaN is not silently 0 for the NaN upstream.
  const Tensor leaf = f32({1.0, 2.0}, {2}).requires_grad_();
  hg::relu(leaf).backward(f32({kNaN, 1.0}, {2}));
  CHECK(std::isnan(values(leaf.grad())[0]));
}

// ---- leaky_relu: NaN, the kink, the slope ---------------------------------------------------------

// PyTorch's rule, in every floating dtype: forward x > 0 ? x : slope * x (NaN stays NaN); backward
// g where x > 0, else slope * g -- at x = 0 too, and at x = NaN (PyTorch's gradient there is finite).
TEST_CASE("ops.leaky_relu.nan_zero_and_slope_follow_pytorch") {
  for (const hg::DType dtype : {hg::f32, hg::f64, hg::f16, hg::bf16}) {
    CAPTURE(dtype);
    const auto make = [&](std::vector<double> v) { return hg::from_vector(v, {5}, {.dtype = dtype}); };
    const Tensor x = make({kNaN, -2.0, 0.0, 3.0, -kInf}).requires_grad_();
    const Tensor y = hg::leaky_relu(x, 0.25);
    CHECK(y.dtype() == dtype);
    CHECK_CLOSE_NAN(y, make({kNaN, -0.5, 0.0, 3.0, -kInf}));
    y.backward(make({1.0, 1.0, 1.0, 1.0, 1.0}));
    CHECK_CLOSE_NAN(x.grad(), make({0.25, 0.25, 0.25, 1.0, 0.25}));
  }
  // The default slope is PyTorch's 0.01; a NaN upstream gradient stays NaN.
  const Tensor leaf = hg::from_vector(std::vector<double>{-1.0, 1.0}, {2}).requires_grad_();
  const Tensor y = hg::leaky_relu(leaf);
  CHECK(values(y) == std::vector<double>{-0.01, 1.0});
  y.backward(hg::from_vector(std::vector<double>{kNaN, kNaN}, {2}));
  CHECK(std::isnan(values(leaf.grad())[0]));
  CHECK(std::isnan(values(leaf.grad())[1]));
}

// ---- relu and relu6 on 16-bit values (kernels/relu_bits.h) -------------------------------------------

namespace {

// relu and relu6 of `inputs` in dtype against the f64 formula: forward x < 0 ? 0 : x (and
// min(x, 6)), -0 kept; backward g where 0 < x < max (relu: +inf included).
void check_relu_bits(hg::DType dtype, const std::vector<double>& inputs) {
  const int64_t n = int64_t(inputs.size());
  const Tensor x = hg::from_vector(inputs, {n}, {.dtype = dtype}).requires_grad_();
  const Tensor g = hg::full({n}, 1.5, {.dtype = dtype});
  for (const double max : {kInf, 6.0}) {
    CAPTURE(max);
    const Tensor y = std::isinf(max) ? hg::relu(x) : hg::relu6(x);
    y.backward(g);
    std::vector<double> forward(inputs.size()), backward(inputs.size());
    for (size_t i = 0; i < inputs.size(); ++i) {
      const double v = inputs[i];
      forward[i] = v < 0 ? 0.0 : v > max ? max : v;
      backward[i] = v > 0 && (v < max || std::isinf(max)) ? 1.5 : 0.0;
    }
    CHECK_IDENTICAL(y, hg::from_vector(forward, {n}, {.dtype = dtype}));
    CHECK_IDENTICAL(x.grad(), hg::from_vector(backward, {n}, {.dtype = dtype}));
    // The signs of the zeros (equal as values): -0 stays -0, a negative input gives +0.
    const std::vector<double> out = values(y);
    int64_t wrong_zeros = 0;
    for (size_t i = 0; i < inputs.size(); ++i)
      if (inputs[i] <= 0) wrong_zeros += std::signbit(out[i]) != (inputs[i] == 0.0 && std::signbit(inputs[i]));
    CHECK(wrong_zeros == 0);
    x.set_grad(Tensor());
  }
}

}  // namespace

// The CPU computes f16/bf16 relu and relu6 as compares of bit patterns, 32 values at a time and
// the rest one by one: a few values alone (one by one), then every pattern that is not a NaN
// (63490 in f16, 65282 in bf16) and a NaN of each sign.
TEST_CASE("ops.relu_16bit_bit_patterns_match_the_formula") {
  for (const hg::DType dtype : {hg::f16, hg::bf16}) {
    CAPTURE(dtype);
    const double tiny = dtype == hg::f16 ? 5.96e-8 : 9.2e-41;  // the smallest subnormal
    check_relu_bits(dtype, {-1.0, -0.0, 0.0, tiny, -tiny, 1.0, 6.0, 7.0, kInf, -kInf, kNaN, -kNaN});
    std::vector<double> all;
    for (uint32_t b = 0; b < 65536; ++b) {
      const double v = dtype == hg::f16 ? double(float(hg::half::from_bits(uint16_t(b))))
                                        : double(float(hg::bfloat16::from_bits(uint16_t(b))));
      if (!std::isnan(v)) all.push_back(v);
    }
    CHECK(all.size() == (dtype == hg::f16 ? 63490u : 65282u));
    all.push_back(kNaN);
    all.push_back(-kNaN);
    check_relu_bits(dtype, all);
  }
}

// ---- scenario 15: extreme logits --------------------------------------------------------------------

TEST_CASE("ops.scenario15.extreme_logits_stay_finite_and_match_f64") {
  struct Case {
    hg::DType dtype;
    std::vector<double> logits;  // (3, 4)
  };
  // +-1e4 in f32; +-6e4 in f16 (the largest f16 is 65504). f16 rows keep max - min below 65504
  // so that the exact log-probabilities are themselves representable.
  const Case cases[] = {
      {hg::f32, {1e4, -1e4, 0.0, 9999.5, /**/ -1e4, -1e4, -9999.0, -1e4 + 3, /**/ 1e4, 1e4, 1e4, -1e4}},
      {hg::f16, {6e4, 5.99e4, 0.0, 6e4 - 5, /**/ -6e4, -5.99e4, -6e4, -5.998e4, /**/ 6e4, -3e3, 5.9e4, 100.0}},
      {hg::bf16, {6e4, 5.99e4, 0.0, 6e4 - 5, /**/ -6e4, -5.99e4, -6e4, -5.998e4, /**/ 6e4, -3e3, 5.9e4, 100.0}},
  };
  for (const Case& c : cases) {
    const std::string dtype_name(hg::dtype_name(c.dtype));
    CAPTURE(dtype_name);
    const Tensor logits = hg::from_vector(c.logits, {3, 4}, {.dtype = c.dtype});
    const ref::Array exact = ref::of(logits);  // the f64 truth of the logits as stored
    const Tolerance tol = hg_test::tolerance_for(c.dtype);
    // Columns mix +6e4 and -6e4: their log-probabilities (-1.2e5) exceed the f16 range, so f16
    // is checked along rows only.
    for (int dim : c.dtype == hg::f16 ? std::vector<int>{1} : std::vector<int>{1, 0}) {
      CAPTURE(dim);
      const Tensor p = hg::softmax(logits, dim), lp = hg::log_softmax(logits, dim);
      for (double v : values(p)) CHECK(std::isfinite(v));
      for (double v : values(lp)) CHECK(std::isfinite(v));
      CHECK_MATCHES_REF(p, ref::softmax(exact, dim, false), tol);
      CHECK_MATCHES_REF(lp, ref::softmax(exact, dim, true), tol);
    }
    // Targets on the row maxima, so that each loss is small enough to be representable.
    const std::vector<int64_t> t{0, 1, 0};
    const Tensor targets = hg::from_vector(t, {3});
    for (double smoothing : {0.0, 0.1}) {
      CAPTURE(smoothing);
      const Tensor loss = hg::cross_entropy(logits, targets, {.label_smoothing = smoothing});
      CHECK(std::isfinite(loss.item<double>()));
      CHECK_MATCHES_REF(loss, (ref::Array{{}, {ref::cross_entropy(exact, t, smoothing)}}), tol);
    }
    // The gradient is finite too.
    const Tensor leaf = logits.detach().requires_grad_();
    hg::cross_entropy(leaf, targets).backward();
    for (double v : values(leaf.grad())) CHECK(std::isfinite(v));
  }
}

// ---- scenario 16: long reductions, thread counts ----------------------------------------------------

TEST_CASE("ops.scenario16.long_sums_are_accurate_and_thread_count_independent") {
  ThreadCountGuard restore;
  SUBCASE("1e7 x 0.1f") {
    const Tensor x = hg::full({10'000'000}, 0.1);  // 0.1f = 0.100000001490116...
    const double truth = 1e7 * double(0.1f);
    hg::set_num_threads(1);
    const float one = hg::sum(x).item<float>(), mean_one = hg::mean(x).item<float>();
    hg::set_num_threads(2);
    const float two = hg::sum(x).item<float>(), mean_two = hg::mean(x).item<float>();
    CHECK(std::fabs(double(one) - truth) / truth <= 1e-6);
    CHECK(std::fabs(double(mean_one) - double(0.1f)) / 0.1 <= 1e-6);
    CHECK(one == two);  // bitwise: fixed chunks, combined in order
    CHECK(mean_one == mean_two);
  }
  SUBCASE("cancelling sequence 1e8, 1, -1e8, 1, ... (pytorch#59863)") {
    std::vector<float> v;
    for (int i = 0; i < 1'000'000; ++i) v.insert(v.end(), {1e8f, 1.0f, -1e8f, 1.0f});
    const Tensor x = hg::from_vector(v, {int64_t(v.size())});
    double truth = 0;
    for (float f : v) truth += double(f);  // exact: every partial sum is an integer below 2^53
    REQUIRE(truth == 2e6);
    hg::set_num_threads(1);
    const float one = hg::sum(x).item<float>();
    const std::vector<double> per_row_one = values(hg::sum(x.reshape({1000, 4000}), {1}));
    const std::vector<double> per_column_one = values(hg::sum(x.reshape({4000, 1000}), {0}));
    hg::set_num_threads(2);
    const float two = hg::sum(x).item<float>();
    CHECK(std::fabs(double(one) - truth) / truth <= 1e-6);
    CHECK(one == two);
    // Along a dim too: each row of 4000 sums to 2000; each column alternates +-1e8 with 1s.
    CHECK(per_row_one == std::vector<double>(1000, 2000.0));
    CHECK(values(hg::sum(x.reshape({1000, 4000}), {1})) == per_row_one);
    CHECK(values(hg::sum(x.reshape({4000, 1000}), {0})) == per_column_one);
  }
}

TEST_CASE("ops.scenario16.elementwise_matmul_softmax_conv_agree_across_thread_counts") {
  ThreadCountGuard restore;
  hg::manual_seed(1601);
  const Tensor x = normal({1 << 20}), y = normal({1 << 20});
  const Tensor a = normal({192, 160}), b = normal({160, 176}), batch = normal({8, 64, 48}), rhs = normal({8, 48, 40});
  const Tensor logits = normal({512, 257}), image = normal({8, 3, 32, 32}), kernel = normal({8, 3, 3, 3});
  const auto run = [&] {
    return std::vector<Tensor>{hg::gelu(x) * y + hg::exp(y / 4.0), hg::matmul(a, b), hg::matmul(batch, rhs),
                               hg::linear(a, b.t()), hg::softmax(logits, 1), hg::conv2d(image, kernel, {}, {.padding = 1}),
                               hg::sum(x.reshape({1024, 1024}), {0}), hg::max_pool2d(image, 2, 2)};
  };
  hg::set_num_threads(1);
  const std::vector<Tensor> one = run();
  hg::set_num_threads(2);
  REQUIRE(hg::get_num_threads() == 2);
  const std::vector<Tensor> two = run();
  for (size_t i = 0; i < one.size(); ++i) {
    CAPTURE(i);
    CHECK_CLOSE_WITH(two[i], one[i], kF32);
  }
  CHECK_IDENTICAL(two[0], one[0]);  // elementwise: the same function per element, whatever the split
}
