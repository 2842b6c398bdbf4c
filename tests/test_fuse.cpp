// Explicit fusion: the ReLU epilogue of linear and conv2d (ops/epilogue.h) and nn::fuse
// (nn/fuse.h). A fused op equals the unfused pair -- forward and gradients, exactly, NaN in the
// same places -- and stays the op the user called: the cast policy of "linear"/"conv2d" reaches
// it and a PrecisionReport lists it under that name. nn::Sequential itself never fuses.
#include <algorithm>
#include <cmath>
#include <functional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "test_support.h"

using hg::Tensor;
namespace amp = hg::amp;
namespace nn = hg::nn;

namespace {

constexpr hg::Epilogue kRelu = hg::Epilogue::Relu, kRelu6 = hg::Epilogue::Relu6;

// Equal values, NaN where the other has NaN (and -0 == +0: rounding before or after the ReLU
// may give a 16-bit zero either sign).
void check_same(const Tensor& actual, const Tensor& expected, const std::string& what) {
  INFO(what);
  REQUIRE(actual.defined());
  REQUIRE(expected.defined());
  CHECK(actual.dtype() == expected.dtype());
  const auto report = hg_test::compare(actual, expected, hg_test::Tolerance{0.0, 0.0}, /*equal_nan=*/true);
  CHECK_MESSAGE(!report.has_value(), report.value_or(""));
}

bool has_nan(const Tensor& t) {
  for (double v : t.to(hg::f64).contiguous().to_vector<double>())
    if (std::isnan(v)) return true;
  return false;
}

// Sets element `index` of the flattened tensor to NaN.
Tensor with_nan(Tensor t, int64_t index) {
  hg::NoGradGuard no_grad;
  hg::narrow(t.reshape({t.numel()}), 0, index, 1).fill_(std::nan(""));
  return t;
}

struct Grads {
  Tensor out;
  std::vector<Tensor> grads;
};

// Runs f on fresh leaf copies of `inputs`, backpropagates a fixed random gradient, and returns
// the output and every input's gradient.
Grads run(const std::function<Tensor(const std::vector<Tensor>&)>& f, const std::vector<Tensor>& inputs,
          const Tensor& grad_out_seed) {
  std::vector<Tensor> leaves;
  for (const Tensor& t : inputs) leaves.push_back(t.defined() ? t.detach().clone().requires_grad_() : Tensor());
  Grads g{f(leaves), {}};
  g.out.backward(grad_out_seed.to(g.out.dtype()).reshape(g.out.shape()));
  for (const Tensor& t : leaves) g.grads.push_back(t.defined() ? t.grad() : Tensor());
  return g;
}

void check_fused_equals_unfused(const std::string& what, const std::vector<Tensor>& inputs,
                                const std::function<Tensor(const std::vector<Tensor>&)>& fused,
                                const std::function<Tensor(const std::vector<Tensor>&)>& unfused) {
  const Tensor probe = fused(inputs);
  const Tensor seed = hg::randn(probe.shape());
  const Grads a = run(fused, inputs, seed), b = run(unfused, inputs, seed);
  check_same(a.out, b.out, what + ": output");
  for (size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i].defined()) check_same(a.grads[i], b.grads[i], what + ": gradient of input " + std::to_string(i));
}

}  // namespace

// ---- the epilogue on the ops ----------------------------------------------------------------------

TEST_CASE("fuse.linear_relu_epilogue_equals_relu_of_linear") {
  hg::manual_seed(31);
  for (const hg::DType dt : {hg::f32, hg::f64, hg::f16, hg::bf16}) {
    CAPTURE(dt);
    const Tensor x = hg::randn({5, 7}).to(dt), x3 = hg::randn({2, 3, 7}).to(dt);
    const Tensor w = (hg::randn({6, 7}) * 0.4).to(dt), b = hg::randn({6}).to(dt);
    const auto fused = [](const std::vector<Tensor>& in) {
      return hg::linear(in[0], in[1], in[2], {.epilogue = kRelu});
    };
    const auto unfused = [](const std::vector<Tensor>& in) { return hg::relu(hg::linear(in[0], in[1], in[2])); };
    check_fused_equals_unfused("with bias", {x, w, b}, fused, unfused);
    check_fused_equals_unfused("without bias", {x, w, Tensor()}, fused, unfused);
    check_fused_equals_unfused("3-D input", {x3, w, b}, fused, unfused);
    // NaN: relu(NaN) = NaN, so the NaN's row of the output is NaN in both, and so are the
    // gradients it reaches.
    const Tensor x_nan = with_nan(x.clone(), 9);  // row 1
    check_fused_equals_unfused("a NaN input", {x_nan, w, b}, fused, unfused);
    const Tensor y = hg::linear(x_nan, w, b, {.epilogue = kRelu});
    for (double v : hg::narrow(y, 0, 1, 1).to(hg::f64).to_vector<double>()) CHECK(std::isnan(v));
    CHECK_FALSE(has_nan(hg::narrow(y, 0, 0, 1)));
  }
}

// GELU's epilogue runs on each finished block of the product (GemmEpilogue::finish_block), so the
// shapes include products of several row and column blocks, split between tasks.
TEST_CASE("fuse.linear_gelu_epilogue_equals_gelu_of_linear") {
  hg::manual_seed(36);
  constexpr hg::Epilogue kGelu = hg::Epilogue::Gelu;
  for (const hg::DType dt : {hg::f32, hg::f64, hg::f16, hg::bf16}) {
    CAPTURE(dt);
    const Tensor x = hg::randn({5, 7}).to(dt), x3 = hg::randn({2, 3, 7}).to(dt);
    const Tensor w = (hg::randn({6, 7}) * 0.4).to(dt), b = hg::randn({6}).to(dt);
    const Tensor x_big = hg::randn({301, 70}).to(dt), w_big = (hg::randn({613, 70}) * 0.2).to(dt);
    const Tensor b_big = hg::randn({613}).to(dt);
    const auto fused = [](const std::vector<Tensor>& in) {
      return hg::linear(in[0], in[1], in[2], {.epilogue = kGelu});
    };
    const auto unfused = [](const std::vector<Tensor>& in) { return hg::gelu(hg::linear(in[0], in[1], in[2])); };
    check_fused_equals_unfused("with bias", {x, w, b}, fused, unfused);
    check_fused_equals_unfused("without bias", {x, w, Tensor()}, fused, unfused);
    check_fused_equals_unfused("3-D input", {x3, w, b}, fused, unfused);
    check_fused_equals_unfused("301x70 @ 70x613", {x_big, w_big, b_big}, fused, unfused);
    check_fused_equals_unfused("no input features", {hg::randn({4, 0}).to(dt), hg::randn({3, 0}).to(dt), hg::narrow(b, 0, 0, 3)},
                               fused, unfused);
    // Without a gradient to compute the value before GELU is not kept; the output is the same.
    {
      hg::NoGradGuard no_grad;
      check_same(hg::linear(x_big, w_big, b_big, {.epilogue = kGelu}), hg::gelu(hg::linear(x_big, w_big, b_big)),
                 "under NoGradGuard");
    }
    const Tensor x_nan = with_nan(x.clone(), 9);  // row 1: gelu(NaN) = NaN
    check_fused_equals_unfused("a NaN input", {x_nan, w, b}, fused, unfused);
    const Tensor y = hg::linear(x_nan, w, b, {.epilogue = kGelu});
    for (double v : hg::narrow(y, 0, 1, 1).to(hg::f64).to_vector<double>()) CHECK(std::isnan(v));
    CHECK_FALSE(has_nan(hg::narrow(y, 0, 0, 1)));
  }
}

TEST_CASE("fuse.gelu_epilogue_is_linear_only") {
  const Tensor x = hg::randn({1, 2, 5, 5}), w = hg::randn({3, 2, 3, 3});
  CHECK_THROWS_WITH_AS(hg::conv2d(x, w, {}, {.padding = 1, .epilogue = hg::Epilogue::Gelu}),
                       doctest::Contains("the Gelu epilogue is linear's only"), hg::Error);
}

TEST_CASE("fuse.relu6_epilogue_is_batch_norm_only") {
  const Tensor x = hg::randn({1, 2, 5, 5}), w = hg::randn({3, 2, 3, 3});
  CHECK_THROWS_WITH_AS(hg::conv2d(x, w, {}, {.padding = 1, .epilogue = kRelu6}),
                       doctest::Contains("the Relu6 epilogue is batch_norm's only (write relu6(conv2d(...)))"),
                       hg::Error);
  CHECK_THROWS_WITH_AS(hg::linear(hg::randn({2, 4}), hg::randn({3, 4}), {}, {.epilogue = kRelu6}),
                       doctest::Contains("the Relu6 epilogue is batch_norm's only (write relu6(linear(...)))"),
                       hg::Error);
}

TEST_CASE("fuse.conv2d_relu_epilogue_equals_relu_of_conv2d") {
  hg::manual_seed(32);
  for (const hg::DType dt : {hg::f32, hg::f64, hg::f16, hg::bf16}) {
    CAPTURE(dt);
    const Tensor x = hg::randn({2, 3, 7, 6}).to(dt), w = (hg::randn({4, 3, 3, 3}) / 5.0).to(dt);
    const Tensor b = (hg::randn({4}) * 0.5).to(dt);
    for (const hg::Conv2dFuncOptions options : {hg::Conv2dFuncOptions{.stride = 1, .padding = 1},
                                            hg::Conv2dFuncOptions{.stride = 2, .padding = 0}}) {
      CAPTURE(options.stride);
      hg::Conv2dFuncOptions with_relu = options;
      with_relu.epilogue = kRelu;
      const auto fused = [&](const std::vector<Tensor>& in) { return hg::conv2d(in[0], in[1], in[2], with_relu); };
      const auto unfused = [&](const std::vector<Tensor>& in) {
        return hg::relu(hg::conv2d(in[0], in[1], in[2], options));
      };
      check_fused_equals_unfused("with bias", {x, w, b}, fused, unfused);
      check_fused_equals_unfused("without bias", {x, w, Tensor()}, fused, unfused);
      check_fused_equals_unfused("a NaN pixel", {with_nan(x.clone(), 20), w, b}, fused, unfused);
      CHECK(has_nan(hg::conv2d(with_nan(x.clone(), 20), w, b, with_relu)));
    }
  }
}

namespace {

// batch_norm of in = {x, weight, bias[, residual]} (3 channels): fresh running statistics in
// training (it updates them in place), fixed ones in eval. `fused` hands the epilogue and the
// residual to batch_norm; otherwise they are composed after it: relu(batch_norm(x) + residual).
Tensor batch_norm_of(const std::vector<Tensor>& in, bool training, hg::Epilogue epilogue, bool fused) {
  const Tensor mean = training ? hg::zeros({3}) : hg::from_vector(std::vector<double>{0.2, -0.1, 0.3}, {3});
  const Tensor var = training ? hg::ones({3}) : hg::from_vector(std::vector<double>{0.7, 1.3, 0.9}, {3});
  const Tensor residual = in.size() > 3 ? in[3] : Tensor();
  if (fused) return hg::batch_norm(in[0], mean, var, in[1], in[2], training, 0.1, 1e-5, epilogue, residual);
  Tensor y = hg::batch_norm(in[0], mean, var, in[1], in[2], training, 0.1, 1e-5);
  if (residual.defined()) y = y + residual;
  return epilogue == kRelu ? hg::relu(y) : epilogue == kRelu6 ? hg::relu6(y) : y;
}

}  // namespace

namespace {

using Op = std::function<Tensor(const std::vector<Tensor>&)>;

// A weight and bias for batch_norm, and what to call the case.
struct AffineCase {
  std::string name;
  Tensor weight, bias;
};

// The checks of batch_norm's epilogue in one dtype, in training and evaluation, over shapes with
// rows longer than the kernel's block of 256 values and (N, C) input (one value per row): for
// x = randn * x_scale + x_shift, fused equals unfused -- output and gradients -- for each affine
// case, and for a NaN input (with the first case), whose NaN stays; then more_checks(fused, x).
void check_batch_norm_epilogue(hg::Epilogue epilogue, hg::DType dt, double x_scale, double x_shift,
                               const std::vector<AffineCase>& affines,
                               const std::function<void(const Op& fused, const Tensor& x)>& more_checks = {}) {
  for (const bool training : {true, false}) {
    CAPTURE(training);
    const Op fused = [&](const std::vector<Tensor>& in) { return batch_norm_of(in, training, epilogue, true); };
    const Op unfused = [&](const std::vector<Tensor>& in) { return batch_norm_of(in, training, epilogue, false); };
    for (const hg::Shape& shape : std::vector<hg::Shape>{{2, 3, 5, 6}, {2, 3, 17, 19}, {7, 3}}) {
      CAPTURE(shape);
      const Tensor x = (hg::randn(shape) * x_scale + x_shift).to(dt);
      for (const AffineCase& a : affines) check_fused_equals_unfused(a.name, {x, a.weight, a.bias}, fused, unfused);
      const Tensor w = affines[0].weight, b = affines[0].bias;
      check_fused_equals_unfused("a NaN input", {with_nan(x.clone(), 4), w, b}, fused, unfused);
      CHECK(has_nan(fused({with_nan(x.clone(), 4), w, b})));
      if (more_checks) more_checks(fused, x);
    }
  }
}

}  // namespace

// batch_norm's ReLU epilogue: applied in its affine pass to the value rounded to x's dtype, and the
// backward masks the gradient by the saved output inside batch_norm's backward.
TEST_CASE("fuse.batch_norm_relu_epilogue_equals_relu_of_batch_norm") {
  hg::manual_seed(38);
  for (const hg::DType dt : {hg::f32, hg::f64, hg::f16, hg::bf16}) {
    CAPTURE(dt);
    const Tensor w = (hg::randn({3}) + 1.0).to(dt), b = (hg::randn({3}) * 0.5).to(dt);
    check_batch_norm_epilogue(
        kRelu, dt, 2.0, 0.3,
        {{"with weight and bias", w, b}, {"without weight and bias", {}, {}}, {"weight only", w, {}}});
  }
  CHECK_THROWS_WITH_AS(hg::batch_norm(hg::randn({2, 3}), {}, {}, {}, {}, true, 0.1, 1e-5, hg::Epilogue::Gelu),
                       doctest::Contains("the Gelu epilogue is linear's only"), hg::Error);
}

// MobileNetV2's pair, relu6(batch_norm(x)), in one pass: clamped in the affine pass to [0, 6]
// and the gradient passed where 0 < y < 6 -- read from the output, the same test hardtanh's
// backward makes on its input. Inputs spread past both ends, and channels whose output is
// exactly 6 and exactly 0 (weight 0, bias 6 and 0: hardtanh passes no gradient at either end).
TEST_CASE("fuse.batch_norm_relu6_epilogue_equals_relu6_of_batch_norm") {
  hg::manual_seed(41);
  for (const hg::DType dt : {hg::f32, hg::f64, hg::f16, hg::bf16}) {
    CAPTURE(dt);
    const Tensor w = (hg::randn({3}) * 3.0 + 4.0).to(dt), b = (hg::randn({3}) + 2.0).to(dt);
    const Tensor w_ends = hg::from_vector(std::vector<double>{0.0, 0.0, 1.0}, {3}).to(dt);
    const Tensor b_ends = hg::from_vector(std::vector<double>{6.0, 0.0, 0.0}, {3}).to(dt);
    check_batch_norm_epilogue(
        kRelu6, dt, 3.0, 1.0,
        {{"with weight and bias", w, b}, {"without weight and bias", {}, {}}, {"outputs exactly 6 and 0", w_ends, b_ends}},
        [&](const Op& fused, const Tensor& x) {
          const std::vector<double> y = fused({x, w, b}).to(hg::f64).contiguous().to_vector<double>();
          CHECK(*std::min_element(y.begin(), y.end()) == 0.0);  // both ends reached: the clamp is tested
          CHECK(*std::max_element(y.begin(), y.end()) == 6.0);
        });
  }
}

// A ResNet block's end, relu(batch_norm(z) + shortcut), in one pass: batch_norm's output rounded
// to z's dtype before the add (as the composition rounds it), the add in Acc<T>, then relu; the
// residual's gradient is relu's masked gradient. Without the epilogue: batch_norm(z) + residual.
TEST_CASE("fuse.batch_norm_residual_relu_equals_the_composition") {
  hg::manual_seed(40);
  for (const hg::DType dt : {hg::f32, hg::f64, hg::f16, hg::bf16}) {
    CAPTURE(dt);
    const Tensor w = (hg::randn({3}) + 1.0).to(dt), b = (hg::randn({3}) * 0.5).to(dt);
    for (const bool training : {true, false})
      for (const hg::Epilogue epilogue : {kRelu, kRelu6, hg::Epilogue::None}) {
        CAPTURE(training);
        CAPTURE(static_cast<int>(epilogue));
        const auto fused = [&](const std::vector<Tensor>& in) { return batch_norm_of(in, training, epilogue, true); };
        const auto unfused = [&](const std::vector<Tensor>& in) { return batch_norm_of(in, training, epilogue, false); };
        for (const hg::Shape& shape : std::vector<hg::Shape>{{2, 3, 5, 6}, {2, 3, 17, 19}, {7, 3}}) {
          CAPTURE(shape);
          const Tensor x = (hg::randn(shape) * 2.0 + 0.3).to(dt), r = hg::randn(shape).to(dt);
          check_fused_equals_unfused("with weight and bias", {x, w, b, r}, fused, unfused);
          check_fused_equals_unfused("without weight and bias", {x, Tensor(), Tensor(), r}, fused, unfused);
          check_fused_equals_unfused("a NaN input", {with_nan(x.clone(), 4), w, b, r}, fused, unfused);
          check_fused_equals_unfused("a NaN residual", {x, w, b, with_nan(r.clone(), 5)}, fused, unfused);
          // A residual of another dtype: the add promotes, so the op composes (the same results).
          if (dt != hg::f64)
            check_fused_equals_unfused("an f64 residual", {x, w, b, r.to(hg::f64)}, fused, unfused);
        }
      }
  }
  CHECK_THROWS_WITH_AS(hg::batch_norm(hg::randn({2, 3}), {}, {}, {}, {}, true, 0.1, 1e-5, kRelu, hg::randn({2, 4})),
                       doctest::Contains("the residual must have the input's shape"), hg::Error);
}

TEST_CASE("fuse.epilogue_gradients_pass_gradcheck") {
  hg::manual_seed(33);
  const auto input = [](hg::Shape s) { return hg::randn(std::move(s), {.dtype = hg::f64, .requires_grad = true}); };
  const std::vector<Tensor> lin{input({3, 4}), input({5, 4}), input({5})};
  CHECK(hg::autograd::gradcheck(
      [](const std::vector<Tensor>& in) { return hg::linear(in[0], in[1], in[2], {.epilogue = kRelu}); }, lin));
  CHECK(hg::autograd::gradcheck(
      [](const std::vector<Tensor>& in) { return hg::linear(in[0], in[1], in[2], {.epilogue = hg::Epilogue::Gelu}); },
      lin));
  const std::vector<Tensor> conv{input({1, 2, 5, 5}), input({3, 2, 3, 3}), input({3})};
  CHECK(hg::autograd::gradcheck(
      [](const std::vector<Tensor>& in) { return hg::conv2d(in[0], in[1], in[2], {.padding = 1, .epilogue = kRelu}); },
      conv));
  const std::vector<Tensor> bn{input({3, 2, 3, 2}), input({2}), input({2})};
  CHECK(hg::autograd::gradcheck(
      [](const std::vector<Tensor>& in) { return hg::batch_norm(in[0], {}, {}, in[1], in[2], true, 0.1, 1e-5, kRelu); },
      bn));
  CHECK(hg::autograd::gradcheck(
      [](const std::vector<Tensor>& in) {
        const Tensor mean = hg::zeros({2}, {.dtype = hg::f64}) + 0.1, var = hg::ones({2}, {.dtype = hg::f64}) * 1.5;
        return hg::batch_norm(in[0], mean, var, in[1], in[2], false, 0.1, 1e-5, kRelu);
      },
      bn));
  std::vector<Tensor> bn_residual = bn;
  bn_residual.push_back(input({3, 2, 3, 2}));
  CHECK(hg::autograd::gradcheck(
      [](const std::vector<Tensor>& in) {
        return hg::batch_norm(in[0], {}, {}, in[1], in[2], true, 0.1, 1e-5, kRelu, in[3]);
      },
      bn_residual));
  // relu6: a weight and bias that put the outputs on both sides of 6 as well as of 0
  const std::vector<Tensor> bn6{input({3, 2, 3, 2}), hg::full({2}, 4.0, {.dtype = hg::f64, .requires_grad = true}),
                                hg::full({2}, 3.0, {.dtype = hg::f64, .requires_grad = true})};
  CHECK(hg::autograd::gradcheck(
      [](const std::vector<Tensor>& in) { return hg::batch_norm(in[0], {}, {}, in[1], in[2], true, 0.1, 1e-5, kRelu6); },
      bn6));
  std::vector<Tensor> bn6_residual = bn6;
  bn6_residual.push_back(input({3, 2, 3, 2}));
  CHECK(hg::autograd::gradcheck(
      [](const std::vector<Tensor>& in) {
        return hg::batch_norm(in[0], {}, {}, in[1], in[2], true, 0.1, 1e-5, kRelu6, in[3]);
      },
      bn6_residual));
}

// ---- nn::fuse ----------------------------------------------------------------------------------

namespace {
nn::Sequential make_cnn() {
  return nn::Sequential{nn::Conv2d(1, 4, 3, {.padding = 1}), nn::ReLU(), nn::MaxPool2d(2),
                        nn::Conv2d(4, 6, 3, {.padding = 1}), nn::ReLU(), nn::Flatten(), nn::Linear(6 * 3 * 3, 8),
                        nn::ReLU(), nn::Linear(8, 3)};
}

// Runs m on x into y and returns how many times `op` ran, as a PrecisionReport counts them.
int64_t calls_of(const std::string& op, nn::Sequential& m, const Tensor& x, Tensor& y) {
  amp::PrecisionReport report;
  y = m(x);
  int64_t n = 0;
  for (const amp::PrecisionReport::Row& r : report.rows()) n += r.op == op ? r.calls : 0;
  return n;
}

std::set<std::string> report_ops(const amp::PrecisionReport& report) {
  std::set<std::string> ops;
  for (const amp::PrecisionReport::Row& r : report.rows()) ops.insert(r.op);
  return ops;
}
}  // namespace

TEST_CASE("fuse.sequential_fuses_only_when_asked_and_gives_the_same_results") {
  hg::manual_seed(34);
  nn::Sequential model = make_cnn();
  const nn::Sequential fused = nn::fuse(model);
  CHECK_FALSE(model.fuses_activations());
  CHECK(fused.fuses_activations());
  // The same layers: the fused model's parameters are the model's.
  REQUIRE(fused.parameters().size() == model.parameters().size());
  for (size_t i = 0; i < model.parameters().size(); ++i)
    CHECK(fused.parameters()[i].data_ptr<float>() == model.parameters()[i].data_ptr<float>());

  Tensor x = hg::randn({2, 1, 6, 6});
  x = with_nan(x, 7);  // one NaN pixel in the first image
  nn::Sequential run_fused = fused;
  const auto forward_backward = [&](nn::Sequential& m) {
    m.zero_grad();
    const Tensor y = m(x);
    hg::sum(y).backward();  // (the NaN in y does not enter the backward: sum passes ones down)
    std::vector<Tensor> grads;
    for (const Tensor& p : m.parameters()) grads.push_back(p.grad().clone());
    return std::pair{y, grads};
  };
  const auto [y_plain, g_plain] = forward_backward(model);
  const auto [y_fused, g_fused] = forward_backward(run_fused);
  check_same(y_fused, y_plain, "output");
  CHECK(has_nan(hg::narrow(y_plain, 0, 0, 1)));  // the NaN reached the first image's logits
  CHECK_FALSE(has_nan(hg::narrow(y_plain, 0, 1, 1)));
  for (size_t i = 0; i < g_plain.size(); ++i) check_same(g_fused[i], g_plain[i], "gradient " + std::to_string(i));
}

TEST_CASE("fuse.a_fused_model_reports_and_obeys_the_ops_it_calls") {
  hg::manual_seed(35);
  nn::Sequential model = make_cnn();
  nn::Sequential fused = nn::fuse(model);
  const Tensor x = hg::randn({2, 1, 6, 6});

  SUBCASE("the PrecisionReport lists linear and conv2d, never a fused name") {
    amp::PrecisionReport plain_report;
    {
      amp::Autocast region(hg::bf16);
      model(x);
    }
    CHECK(report_ops(plain_report) == std::set<std::string>{"conv2d", "relu", "max_pool2d", "linear"});
    amp::PrecisionReport fused_report;
    {
      amp::Autocast region(hg::bf16);
      fused(x);
    }
    // The last Linear has no ReLU after it; the others ran with their ReLU as an epilogue.
    CHECK(report_ops(fused_report) == std::set<std::string>{"conv2d", "max_pool2d", "linear"});
  }

  SUBCASE("set_policy(\"linear\", F32) reaches a fused linear") {
    nn::Sequential mlp = nn::fuse(nn::Sequential{nn::Linear(5, 4), nn::ReLU()});
    const Tensor v = hg::randn({3, 5});
    {
      amp::Autocast region(hg::f16);
      CHECK(mlp(v).dtype() == hg::f16);
    }
    amp::set_policy("linear", amp::CastPolicy::F32);
    Tensor y;
    amp::PrecisionReport report;
    {
      amp::Autocast region(hg::f16);
      y = mlp(v);
    }
    amp::set_policy("linear", amp::CastPolicy::Lower);
    CHECK(y.dtype() == hg::f32);
    REQUIRE(report.rows().size() == 1);
    CHECK(report.rows()[0].op == "linear");
    CHECK(report.rows()[0].policy == "F32");
    check_same(y, hg::relu(hg::linear(v, mlp.parameters()[0], mlp.parameters()[1])), "f32 result");
  }
}

TEST_CASE("fuse.sequential_fuses_linear_gelu_but_not_the_tanh_approximation") {
  hg::manual_seed(37);
  nn::Sequential model{nn::Linear(6, 16), nn::GELU(), nn::Linear(16, 8), nn::GELU("tanh"), nn::Linear(8, 3)};
  nn::Sequential fused = nn::fuse(model);
  const Tensor x = hg::randn({4, 6});
  // The fused run calls gelu once (the tanh form, not an epilogue's formula); the plain run twice.
  Tensor y_plain, y_fused;
  CHECK(calls_of("gelu", model, x, y_plain) == 2);
  CHECK(calls_of("gelu", fused, x, y_fused) == 1);
  check_same(y_fused, y_plain, "output");
  model.zero_grad();
  hg::sum(model(x)).backward();
  std::vector<Tensor> g_plain;
  for (const Tensor& p : model.parameters()) g_plain.push_back(p.grad().clone());
  fused.zero_grad();
  hg::sum(fused(x)).backward();
  for (size_t i = 0; i < g_plain.size(); ++i) check_same(fused.parameters()[i].grad(), g_plain[i], "gradient " + std::to_string(i));
}

namespace {

// Two models from make() (the same seed: the same initial parameters, their own running
// statistics), one of them fused: `op` (the activation after each batch norm) runs no more in the
// fused one -- its calls counted by a PrecisionReport -- and outputs, gradients and running
// statistics are the plain model's, in training and in evaluation.
void check_fuses_batch_norm_pairs(const std::function<nn::Sequential()>& make, const std::string& op, const Tensor& x) {
  nn::Sequential model = make();
  nn::Sequential fused = nn::fuse(make());
  for (const bool training : {true, false}) {
    CAPTURE(training);
    model.train(training);
    fused.train(training);
    model.zero_grad();
    fused.zero_grad();
    Tensor y_plain, y_fused;
    CHECK(calls_of(op, model, x, y_plain) == 2);
    CHECK(calls_of(op, fused, x, y_fused) == 0);
    check_same(y_fused, y_plain, "output");
    hg::sum(y_plain * y_plain).backward();
    hg::sum(y_fused * y_fused).backward();
    for (size_t i = 0; i < model.parameters().size(); ++i)
      check_same(fused.parameters()[i].grad(), model.parameters()[i].grad(), "gradient " + std::to_string(i));
    for (size_t i = 0; i < model.buffers().size(); ++i)
      check_same(fused.buffers()[i], model.buffers()[i], "buffer " + std::to_string(i));
  }
}

}  // namespace

// BatchNorm2d -> ReLU and BatchNorm1d -> ReLU fuse.
TEST_CASE("fuse.sequential_fuses_batch_norm_relu") {
  const auto make = [] {
    hg::manual_seed(39);
    return nn::Sequential{nn::Conv2d(1, 4, 3, {.padding = 1, .bias = false}), nn::BatchNorm2d(4), nn::ReLU(),
                          nn::Flatten(), nn::Linear(4 * 5 * 5, 8), nn::BatchNorm1d(8), nn::ReLU(), nn::Linear(8, 3)};
  };
  check_fuses_batch_norm_pairs(make, "relu", hg::randn({6, 1, 5, 5}));
}

// BatchNorm2d -> ReLU6 and BatchNorm1d -> ReLU6 fuse (MobileNetV2's pair, examples/train/models.cpp).
TEST_CASE("fuse.sequential_fuses_batch_norm_relu6") {
  const auto make = [] {
    hg::manual_seed(42);
    nn::Sequential m{nn::Conv2d(1, 4, 3, {.padding = 1, .bias = false}), nn::BatchNorm2d(4), nn::ReLU6(),
                     nn::Flatten(), nn::Linear(4 * 5 * 5, 8), nn::BatchNorm1d(8), nn::ReLU6(), nn::Linear(8, 3)};
    hg::NoGradGuard no_grad;
    for (const size_t i : {1, 5}) static_cast<nn::BatchNorm&>(m[i]).weight.fill_(4.0);  // outputs past 6 too
    return m;
  };
  check_fuses_batch_norm_pairs(make, "relu6", hg::randn({6, 1, 5, 5}));
}
