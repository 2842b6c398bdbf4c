// Gradients of every differentiable op against central finite differences in f64 (TESTING.md
// scenario 2, tolerance T64: eps 1e-6, atol 1e-5, rtol 1e-3), and the same through the input
// layouts of scenario 4: non-contiguous leaves (transposed, permuted), step-sliced and offset
// leaves (as_strided), and broadcast views (expand, stride 0) taken inside the function.
//
// Inputs are small on purpose: gradcheck runs one backward per output element and two forwards
// per input element. Random inputs keep away from the kinks of abs/relu/clamp/amax/max_pool
// (a tie or a value within eps of a kink would make the finite difference meaningless).
#include <vector>

#include "test_support.h"

namespace {

using hg::Tensor;
using Inputs = std::vector<Tensor>;

// Fails with gradcheck's description of the first mismatching Jacobian entry.
#define CHECK_GRADIENTS(...)                                                              \
  do {                                                                                    \
    const auto gradcheck_report_ = hg::autograd::gradcheck_report(__VA_ARGS__);           \
    CHECK_MESSAGE(!gradcheck_report_.has_value(), gradcheck_report_.value_or(""));        \
  } while (0)

// A standard-normal f64 leaf that requires grad.
Tensor input(hg::Shape shape) { return hg::randn(std::move(shape), {.dtype = hg::f64, .requires_grad = true}); }

// An f64 leaf with values in [0.5, 1.5): for log, sqrt, fractional powers and denominators.
Tensor positive_input(hg::Shape shape) {
  return (hg::rand(std::move(shape), {.dtype = hg::f64}) + 0.5).detach().requires_grad_();
}

// An f64 tensor that gradcheck holds fixed (no requires_grad).
Tensor constant(hg::Shape shape) { return hg::randn(std::move(shape), {.dtype = hg::f64}); }

// A leaf whose memory is not row-major: the transpose of a contiguous (cols, rows) tensor.
Tensor transposed_input(int64_t rows, int64_t cols) {
  return hg::randn({cols, rows}, {.dtype = hg::f64}).t().detach().requires_grad_();
}

// A leaf that takes every second column from element 1 of a larger buffer (a step-2, offset view).
Tensor strided_input(int64_t rows, int64_t cols) {
  const Tensor base = hg::randn({rows * cols * 2 + 1}, {.dtype = hg::f64});
  return hg::as_strided(base, {rows, cols}, {cols * 2, 2}, 1).detach().requires_grad_();
}

}  // namespace

// ---- elementwise arithmetic ------------------------------------------------------------------------

TEST_CASE("gradcheck.add_sub_mul_div.same_shape") {
  hg::manual_seed(1);
  const Inputs in{input({2, 3}), input({2, 3})};
  const Inputs in_positive{input({2, 3}), positive_input({2, 3})};
  CHECK_GRADIENTS([](const Inputs& x) { return hg::add(x[0], x[1]); }, in);
  CHECK_GRADIENTS([](const Inputs& x) { return hg::sub(x[0], x[1]); }, in);
  CHECK_GRADIENTS([](const Inputs& x) { return hg::mul(x[0], x[1]); }, in);
  CHECK_GRADIENTS([](const Inputs& x) { return hg::div(x[0], x[1]); }, in_positive);
  CHECK_GRADIENTS([](const Inputs& x) { return x[0] * x[0]; }, in);  // one tensor on both sides
}

TEST_CASE("gradcheck.add_sub_mul_div.broadcasting") {
  hg::manual_seed(2);
  // (3,1,4) op (5,4) -> (3,5,4): each operand's gradient is summed back to its own shape.
  const Inputs in{input({3, 1, 4}), input({5, 4})};
  const Inputs in_positive{input({3, 1, 4}), positive_input({5, 4})};
  CHECK_GRADIENTS([](const Inputs& x) { return hg::add(x[0], x[1]); }, in);
  CHECK_GRADIENTS([](const Inputs& x) { return hg::sub(x[0], x[1]); }, in);
  CHECK_GRADIENTS([](const Inputs& x) { return hg::mul(x[0], x[1]); }, in);
  CHECK_GRADIENTS([](const Inputs& x) { return hg::div(x[0], x[1]); }, in_positive);
  // A 0-d operand broadcasts against everything.
  const Inputs scalar_and_matrix{input({}), positive_input({2, 3})};
  CHECK_GRADIENTS([](const Inputs& x) { return hg::mul(x[0], x[1]); }, scalar_and_matrix);
  CHECK_GRADIENTS([](const Inputs& x) { return hg::div(x[0], x[1]); }, scalar_and_matrix);
  CHECK_GRADIENTS([](const Inputs& x) { return hg::div(x[1], x[0] * x[0] + 1.0); }, scalar_and_matrix);
}

TEST_CASE("gradcheck.add_sub_mul_div.scalar_forms") {
  hg::manual_seed(3);
  const Inputs in{input({2, 3})};
  const Inputs in_positive{positive_input({2, 3})};
  CHECK_GRADIENTS([](const Inputs& x) { return x[0] + 2.5; }, in);
  CHECK_GRADIENTS([](const Inputs& x) { return x[0] - 1.5; }, in);
  CHECK_GRADIENTS([](const Inputs& x) { return x[0] * -3.0; }, in);
  CHECK_GRADIENTS([](const Inputs& x) { return x[0] / 4.0; }, in);
  CHECK_GRADIENTS([](const Inputs& x) { return 2.5 + x[0]; }, in);
  CHECK_GRADIENTS([](const Inputs& x) { return 2.5 - x[0]; }, in);
  CHECK_GRADIENTS([](const Inputs& x) { return -0.5 * x[0]; }, in);
  CHECK_GRADIENTS([](const Inputs& x) { return 3.0 / x[0]; }, in_positive);
  CHECK_GRADIENTS([](const Inputs& x) { return -x[0]; }, in);
}

// ---- unary math ------------------------------------------------------------------------------------

TEST_CASE("gradcheck.unary_math") {
  hg::manual_seed(4);
  const Inputs in{input({3, 4})};
  const Inputs in_positive{positive_input({3, 4})};
  CHECK_GRADIENTS([](const Inputs& x) { return hg::neg(x[0]); }, in);
  CHECK_GRADIENTS([](const Inputs& x) { return hg::exp(x[0]); }, in);
  CHECK_GRADIENTS([](const Inputs& x) { return hg::log(x[0]); }, in_positive);
  CHECK_GRADIENTS([](const Inputs& x) { return hg::sqrt(x[0]); }, in_positive);
  CHECK_GRADIENTS([](const Inputs& x) { return hg::abs(x[0]); }, in);
  CHECK_GRADIENTS([](const Inputs& x) { return hg::clamp(x[0], -0.5, 0.5); }, in);
  CHECK_GRADIENTS([](const Inputs& x) { return hg::clamp(x[0], -10.0, 0.25); }, in);
}

TEST_CASE("gradcheck.pow") {
  hg::manual_seed(5);
  const Inputs in{input({3, 4})};
  const Inputs in_positive{positive_input({3, 4})};
  CHECK_GRADIENTS([](const Inputs& x) { return hg::pow(x[0], 2.0); }, in);
  CHECK_GRADIENTS([](const Inputs& x) { return hg::pow(x[0], 3.0); }, in);
  CHECK_GRADIENTS([](const Inputs& x) { return hg::pow(x[0], 0.5); }, in_positive);
  CHECK_GRADIENTS([](const Inputs& x) { return hg::pow(x[0], -1.5); }, in_positive);
  CHECK_GRADIENTS([](const Inputs& x) { return hg::pow(x[0], 1.0); }, in);
}

// ---- activations -----------------------------------------------------------------------------------

TEST_CASE("gradcheck.activations") {
  hg::manual_seed(6);
  // N(0, 4) rather than N(0, 1): reaches into the saturating tails.
  const Inputs leaf{(constant({3, 5}) * 2.0).requires_grad_()};
  CHECK_GRADIENTS([](const Inputs& x) { return hg::relu(x[0]); }, leaf);
  CHECK_GRADIENTS([](const Inputs& x) { return hg::leaky_relu(x[0]); }, leaf);
  CHECK_GRADIENTS([](const Inputs& x) { return hg::leaky_relu(x[0], 0.2); }, leaf);
  CHECK_GRADIENTS([](const Inputs& x) { return hg::gelu(x[0]); }, leaf);
  CHECK_GRADIENTS([](const Inputs& x) { return hg::silu(x[0]); }, leaf);
  CHECK_GRADIENTS([](const Inputs& x) { return hg::sigmoid(x[0]); }, leaf);
  CHECK_GRADIENTS([](const Inputs& x) { return hg::tanh(x[0]); }, leaf);
}

// ---- reductions ------------------------------------------------------------------------------------

TEST_CASE("gradcheck.sum_and_mean") {
  hg::manual_seed(7);
  const Inputs in{input({2, 3, 4})};
  CHECK_GRADIENTS([](const Inputs& x) { return hg::sum(x[0]); }, in);
  CHECK_GRADIENTS([](const Inputs& x) { return hg::sum(x[0], {1}); }, in);
  CHECK_GRADIENTS([](const Inputs& x) { return hg::sum(x[0], {0, 2}); }, in);  // non-adjacent dims
  CHECK_GRADIENTS([](const Inputs& x) { return hg::sum(x[0], {-1}, true); }, in);
  CHECK_GRADIENTS([](const Inputs& x) { return hg::sum(x[0], {0, 1}, true); }, in);
  CHECK_GRADIENTS([](const Inputs& x) { return hg::mean(x[0]); }, in);
  CHECK_GRADIENTS([](const Inputs& x) { return hg::mean(x[0], {1}); }, in);
  CHECK_GRADIENTS([](const Inputs& x) { return hg::mean(x[0], {0, 2}, true); }, in);
  CHECK_GRADIENTS([](const Inputs& x) { return hg::mean(x[0], {-2}, true); }, in);
  const Inputs scalar{input({})};
  CHECK_GRADIENTS([](const Inputs& x) { return hg::sum(x[0]) * 3.0; }, scalar);
}

TEST_CASE("gradcheck.amax") {
  hg::manual_seed(8);
  const Inputs in{input({3, 4, 5})};
  CHECK_GRADIENTS([](const Inputs& x) { return hg::amax(x[0], 0); }, in);
  CHECK_GRADIENTS([](const Inputs& x) { return hg::amax(x[0], 1); }, in);
  CHECK_GRADIENTS([](const Inputs& x) { return hg::amax(x[0], -1, true); }, in);
}

// ---- matmul / linear -------------------------------------------------------------------------------

TEST_CASE("gradcheck.matmul") {
  hg::manual_seed(9);
  const auto mm = [](const Inputs& x) { return hg::matmul(x[0], x[1]); };
  SUBCASE("2-D") { CHECK_GRADIENTS(mm, Inputs{input({3, 4}), input({4, 2})}); }
  SUBCASE("3-D batched") { CHECK_GRADIENTS(mm, Inputs{input({2, 3, 4}), input({2, 4, 2})}); }
  SUBCASE("3-D @ 2-D") { CHECK_GRADIENTS(mm, Inputs{input({2, 3, 4}), input({4, 2})}); }
  SUBCASE("2-D @ 3-D") { CHECK_GRADIENTS(mm, Inputs{input({3, 4}), input({2, 4, 2})}); }
  SUBCASE("batch of 1 broadcasts") { CHECK_GRADIENTS(mm, Inputs{input({1, 3, 4}), input({2, 4, 2})}); }
  SUBCASE("only one operand requires grad") { CHECK_GRADIENTS(mm, Inputs{input({3, 4}), constant({4, 2})}); }
}

TEST_CASE("gradcheck.linear") {
  hg::manual_seed(10);
  SUBCASE("with bias") {
    CHECK_GRADIENTS([](const Inputs& x) { return hg::linear(x[0], x[1], x[2]); },
                    Inputs{input({3, 4}), input({2, 4}), input({2})});
  }
  SUBCASE("without bias") {
    CHECK_GRADIENTS([](const Inputs& x) { return hg::linear(x[0], x[1]); }, Inputs{input({3, 4}), input({2, 4})});
  }
  SUBCASE("3-D input") {
    CHECK_GRADIENTS([](const Inputs& x) { return hg::linear(x[0], x[1], x[2]); },
                    Inputs{input({2, 3, 4}), input({2, 4}), input({2})});
  }
  SUBCASE("1-D input") {
    CHECK_GRADIENTS([](const Inputs& x) { return hg::linear(x[0], x[1], x[2]); },
                    Inputs{input({4}), input({3, 4}), input({3})});
  }
}

// ---- softmax and losses ----------------------------------------------------------------------------

TEST_CASE("gradcheck.softmax_and_log_softmax") {
  hg::manual_seed(11);
  const Inputs in{input({3, 4})};
  const Inputs in3{input({2, 3, 4})};
  for (int dim : {0, 1, -1}) {
    CAPTURE(dim);
    CHECK_GRADIENTS([dim](const Inputs& x) { return hg::softmax(x[0], dim); }, in);
    CHECK_GRADIENTS([dim](const Inputs& x) { return hg::log_softmax(x[0], dim); }, in);
  }
  CHECK_GRADIENTS([](const Inputs& x) { return hg::softmax(x[0], 1); }, in3);  // a middle dim
  CHECK_GRADIENTS([](const Inputs& x) { return hg::log_softmax(x[0], 1); }, in3);
  CHECK_GRADIENTS([](const Inputs& x) { return hg::log_softmax(x[0], 0); }, in3);
}

TEST_CASE("gradcheck.cross_entropy") {
  hg::manual_seed(12);
  const Inputs logits{input({4, 5})};
  const Tensor targets = hg::from_vector(std::vector<int64_t>{1, 0, 4, 2}, {4});
  SUBCASE("plain") {
    CHECK_GRADIENTS([&](const Inputs& x) { return hg::cross_entropy(x[0], targets); }, logits);
  }
  SUBCASE("label smoothing") {
    CHECK_GRADIENTS([&](const Inputs& x) { return hg::cross_entropy(x[0], targets, {.label_smoothing = 0.1}); },
                    logits);
  }
  SUBCASE("ignored rows get no gradient") {
    const Tensor some_ignored = hg::from_vector(std::vector<int64_t>{1, -100, 3, -100}, {4});
    CHECK_GRADIENTS([&](const Inputs& x) { return hg::cross_entropy(x[0], some_ignored); }, logits);
    CHECK_GRADIENTS(
        [&](const Inputs& x) { return hg::cross_entropy(x[0], some_ignored, {.label_smoothing = 0.2}); }, logits);
  }
  SUBCASE("a custom ignore_index") {
    const Tensor ignore_two = hg::from_vector(std::vector<int64_t>{2, 0, 2, 4}, {4});
    CHECK_GRADIENTS([&](const Inputs& x) { return hg::cross_entropy(x[0], ignore_two, {.ignore_index = 2}); },
                    logits);
  }
}

TEST_CASE("gradcheck.mse_loss") {
  hg::manual_seed(13);
  CHECK_GRADIENTS([](const Inputs& x) { return hg::mse_loss(x[0], x[1]); }, Inputs{input({3, 4}), input({3, 4})});
  CHECK_GRADIENTS([](const Inputs& x) { return hg::mse_loss(x[0], x[1]); }, Inputs{input({5}), constant({5})});
}

// ---- conv and pooling ------------------------------------------------------------------------------

TEST_CASE("gradcheck.conv2d") {
  hg::manual_seed(14);
  struct Case {
    const char* name;
    hg::Shape x, w;
    bool bias;
    hg::Conv2dOptions options;
  };
  const Case cases[] = {
      {"stride 1, padding 0, bias", {2, 3, 5, 5}, {4, 3, 3, 3}, true, {.stride = 1, .padding = 0}},
      {"stride 2, padding 1, bias", {1, 2, 5, 5}, {3, 2, 3, 3}, true, {.stride = 2, .padding = 1}},
      {"stride 1, padding 1, no bias", {1, 2, 4, 4}, {2, 2, 3, 3}, false, {.stride = 1, .padding = 1}},
      {"stride 2, padding 0, no bias, even kernel", {2, 2, 6, 5}, {3, 2, 2, 2}, false, {.stride = 2, .padding = 0}},
      {"1x1 kernel, one channel", {1, 1, 3, 3}, {2, 1, 1, 1}, true, {.stride = 1, .padding = 0}},
  };
  for (const Case& c : cases) {
    const std::string name = c.name;
    CAPTURE(name);
    const Inputs in{input(c.x), input(c.w), c.bias ? input({c.w[0]}) : Tensor()};
    CHECK_GRADIENTS([&](const Inputs& x) { return hg::conv2d(x[0], x[1], x[2], c.options); }, in);
  }
}

TEST_CASE("gradcheck.max_pool2d") {
  hg::manual_seed(15);
  CHECK_GRADIENTS([](const Inputs& x) { return hg::max_pool2d(x[0], 2, 2); }, Inputs{input({1, 2, 4, 4})});
  CHECK_GRADIENTS([](const Inputs& x) { return hg::max_pool2d(x[0], 3, 1); }, Inputs{input({1, 1, 5, 5})});
  CHECK_GRADIENTS([](const Inputs& x) { return hg::max_pool2d(x[0], 3, 2); }, Inputs{input({2, 1, 6, 7})});
}

TEST_CASE("gradcheck.avg_pool2d") {
  hg::manual_seed(16);
  CHECK_GRADIENTS([](const Inputs& x) { return hg::avg_pool2d(x[0], 2, 2); }, Inputs{input({1, 2, 4, 4})});
  CHECK_GRADIENTS([](const Inputs& x) { return hg::avg_pool2d(x[0], 3, 1); }, Inputs{input({1, 1, 5, 5})});  // overlapping
  CHECK_GRADIENTS([](const Inputs& x) { return hg::avg_pool2d(x[0], 3, 2); }, Inputs{input({2, 1, 6, 7})});
}

// ---- normalisation ---------------------------------------------------------------------------------

TEST_CASE("gradcheck.batch_norm") {
  hg::manual_seed(17);
  const Tensor running_mean = constant({3}), running_var = hg::rand({3}, {.dtype = hg::f64}) + 0.5;
  SUBCASE("training, with weight and bias") {
    CHECK_GRADIENTS([](const Inputs& x) { return hg::batch_norm(x[0], {}, {}, x[1], x[2], true, 0.1, 1e-5); },
                    Inputs{input({3, 3, 2, 2}), input({3}), input({3})});
  }
  SUBCASE("training, updating running statistics") {
    // The running statistics change on every call but the training output does not read them.
    const Tensor rm = running_mean.clone(), rv = running_var.clone();
    CHECK_GRADIENTS([&](const Inputs& x) { return hg::batch_norm(x[0], rm, rv, x[1], x[2], true, 0.1, 1e-5); },
                    Inputs{input({4, 3}), input({3}), input({3})});
  }
  SUBCASE("training, without weight and bias") {
    CHECK_GRADIENTS([](const Inputs& x) { return hg::batch_norm(x[0], {}, {}, {}, {}, true, 0.1, 1e-5); },
                    Inputs{input({2, 3, 3})});
  }
  SUBCASE("eval, with weight and bias") {
    CHECK_GRADIENTS(
        [&](const Inputs& x) { return hg::batch_norm(x[0], running_mean, running_var, x[1], x[2], false, 0.1, 1e-5); },
        Inputs{input({2, 3, 2, 2}), input({3}), input({3})});
  }
  SUBCASE("eval, without weight and bias") {
    CHECK_GRADIENTS(
        [&](const Inputs& x) { return hg::batch_norm(x[0], running_mean, running_var, {}, {}, false, 0.1, 1e-5); },
        Inputs{input({2, 3, 2})});
  }
}

TEST_CASE("gradcheck.layer_norm") {
  hg::manual_seed(18);
  SUBCASE("one normalized dim, with weight and bias") {
    CHECK_GRADIENTS([](const Inputs& x) { return hg::layer_norm(x[0], {4}, x[1], x[2], 1e-5); },
                    Inputs{input({3, 4}), input({4}), input({4})});
  }
  SUBCASE("one normalized dim, without weight and bias") {
    CHECK_GRADIENTS([](const Inputs& x) { return hg::layer_norm(x[0], {5}, {}, {}, 1e-5); }, Inputs{input({2, 5})});
  }
  SUBCASE("two normalized dims") {
    CHECK_GRADIENTS([](const Inputs& x) { return hg::layer_norm(x[0], {3, 4}, x[1], x[2], 1e-5); },
                    Inputs{input({2, 3, 4}), input({3, 4}), input({3, 4})});
  }
}

// ---- dropout / embedding ---------------------------------------------------------------------------

TEST_CASE("gradcheck.dropout") {
  hg::manual_seed(19);
  // gradcheck calls fn many times; reseeding inside fn gives every call the same mask.
  const auto fn = [](const Inputs& x) {
    hg::manual_seed(123);
    return hg::dropout(x[0], 0.3, true);
  };
  const Inputs in{input({4, 5})};
  // The mask is not trivial: some elements are dropped, some kept (scaled by 1/0.7).
  const std::vector<double> y = fn(in).to_vector<double>(), x = in[0].to_vector<double>();
  int dropped = 0;
  for (size_t i = 0; i < y.size(); ++i) dropped += y[i] == 0.0;
  CHECK(dropped > 0);
  CHECK(dropped < int(y.size()));
  CHECK_GRADIENTS(fn, in);
}

TEST_CASE("gradcheck.embedding") {
  hg::manual_seed(20);
  // Index 2 is used twice: its row's gradient is the sum of both uses.
  const Tensor indices = hg::from_vector(std::vector<int64_t>{0, 2, 2, 4, 1, 2}, {2, 3});
  CHECK_GRADIENTS([&](const Inputs& x) { return hg::embedding(indices, x[0]); }, Inputs{input({5, 3})});
}

// ---- shape ops -------------------------------------------------------------------------------------

TEST_CASE("gradcheck.cat") {
  hg::manual_seed(21);
  const Inputs in{input({2, 3}), input({1, 3}), input({3, 3})};
  CHECK_GRADIENTS([](const Inputs& x) { return hg::cat({x[0], x[1], x[2]}, 0); }, in);
  const Inputs wide{input({2, 1}), input({2, 3}), input({2, 2})};
  CHECK_GRADIENTS([](const Inputs& x) { return hg::cat({x[0], x[1], x[2]}, 1); }, wide);
  CHECK_GRADIENTS([](const Inputs& x) { return hg::cat({x[0], x[1], x[0]}, -1); }, wide);  // one input twice
}

TEST_CASE("gradcheck.views") {
  hg::manual_seed(22);
  const Inputs in{input({2, 3, 4})};
  CHECK_GRADIENTS([](const Inputs& x) { return x[0].reshape({6, 4}) * 2.0; }, in);
  CHECK_GRADIENTS([](const Inputs& x) { return x[0].reshape({4, -1}); }, in);
  CHECK_GRADIENTS([](const Inputs& x) { return x[0].view({24}); }, in);
  CHECK_GRADIENTS([](const Inputs& x) { return x[0].transpose(0, 2); }, in);
  CHECK_GRADIENTS([](const Inputs& x) { return x[0].transpose(1, 2).reshape({2, 12}); }, in);  // copying reshape
  CHECK_GRADIENTS([](const Inputs& x) { return x[0].permute({2, 0, 1}); }, in);
  CHECK_GRADIENTS([](const Inputs& x) { return x[0].flatten(1); }, in);
  CHECK_GRADIENTS([](const Inputs& x) { return x[0].flatten(); }, in);
  CHECK_GRADIENTS([](const Inputs& x) { return hg::narrow(x[0], 2, 1, 2); }, in);
  CHECK_GRADIENTS([](const Inputs& x) { return hg::narrow(x[0], 0, 1, 1) * hg::narrow(x[0], 0, 0, 1); }, in);
  CHECK_GRADIENTS([](const Inputs& x) { return hg::unsqueeze(x[0], 1); }, in);
  CHECK_GRADIENTS([](const Inputs& x) { return hg::squeeze(hg::narrow(x[0], 1, 2, 1), 1); }, in);
  CHECK_GRADIENTS([](const Inputs& x) { return x[0].transpose(0, 1).contiguous(); }, in);
  CHECK_GRADIENTS([](const Inputs& x) { return x[0].clone(); }, in);
}

TEST_CASE("gradcheck.expand") {
  hg::manual_seed(23);
  // Every copy of an expanded element sends its gradient back to the one element it came from.
  CHECK_GRADIENTS([](const Inputs& x) { return hg::expand(x[0], {2, 3, 4}); }, Inputs{input({3, 1})});
  CHECK_GRADIENTS([](const Inputs& x) { return hg::expand(x[0], {3, 2}); }, Inputs{input({})});
  CHECK_GRADIENTS([](const Inputs& x) { return hg::expand(x[0], {2, 4}) * x[1]; }, Inputs{input({1, 4}), input({2, 4})});
}

TEST_CASE("gradcheck.to_dtype") {
  hg::manual_seed(24);
  const Inputs in{input({2, 3})};
  // to(f64) on an f64 tensor is the identity.
  CHECK_GRADIENTS([](const Inputs& x) { return x[0].to(hg::f64) * 3.0; }, in);
  // Through f32 and back: the perturbation must be large against f32 rounding (2^-24 relative),
  // so this one uses eps 1e-2 on a function that is linear in x (no truncation error).
  CHECK_GRADIENTS([](const Inputs& x) { return x[0].to(hg::f32).to(hg::f64) * 2.0; }, in,
                  {.eps = 1e-2, .atol = 1e-4, .rtol = 1e-4});
  // The gradient arrives in the source's dtype: f64 through an f32 (and an f16) computation.
  for (hg::DType low : {hg::f32, hg::f16, hg::bf16}) {
    const std::string low_name(hg::dtype_name(low));
    CAPTURE(low_name);
    const Tensor x = hg::from_vector(std::vector<double>{0.5, -1.0, 2.0}, {3}).requires_grad_();
    hg::sum(x.to(low) * 4.0).backward();
    REQUIRE(x.grad().defined());
    CHECK(x.grad().dtype() == hg::f64);
    CHECK(x.grad().to_vector<double>() == std::vector<double>{4.0, 4.0, 4.0});
  }
}

// ---- scenario 4: non-contiguous, offset and broadcast inputs ----------------------------------------

TEST_CASE("gradcheck.noncontiguous.leaf_layouts_are_what_they_claim") {
  hg::manual_seed(25);
  const Tensor t = transposed_input(4, 3), s = strided_input(3, 4);
  CHECK_FALSE(t.is_contiguous());
  CHECK(t.is_leaf());
  CHECK(t.requires_grad());
  CHECK(t.shape() == hg::Shape{4, 3});
  CHECK_FALSE(s.is_contiguous());
  CHECK(s.is_leaf());
  CHECK(s.storage_offset() == 1);
  CHECK(s.strides() == hg::Shape{8, 2});
}

TEST_CASE("gradcheck.noncontiguous.elementwise_and_activations") {
  hg::manual_seed(26);
  for (const Tensor& leaf : {transposed_input(4, 3), strided_input(4, 3)}) {
    const Inputs in{leaf, input({4, 3})};
    CHECK_GRADIENTS([](const Inputs& x) { return hg::add(x[0], x[1]); }, in);
    CHECK_GRADIENTS([](const Inputs& x) { return hg::mul(x[0], x[1]); }, in);
    CHECK_GRADIENTS([](const Inputs& x) { return hg::div(x[1], x[0] * x[0] + 1.0); }, in);
    CHECK_GRADIENTS([](const Inputs& x) { return hg::exp(x[0]); }, in);
    CHECK_GRADIENTS([](const Inputs& x) { return hg::gelu(x[0]) + hg::relu(x[1]); }, in);
    CHECK_GRADIENTS([](const Inputs& x) { return hg::tanh(x[0]); }, in);
    CHECK_GRADIENTS([](const Inputs& x) { return hg::clamp(x[0], -0.5, 0.5); }, in);
  }
}

TEST_CASE("gradcheck.noncontiguous.reductions_softmax_losses") {
  hg::manual_seed(27);
  const Tensor targets = hg::from_vector(std::vector<int64_t>{2, 0, 1, 2}, {4});
  for (const Tensor& leaf : {transposed_input(4, 3), strided_input(4, 3)}) {
    const Inputs in{leaf};
    CHECK_GRADIENTS([](const Inputs& x) { return hg::sum(x[0], {0}); }, in);
    CHECK_GRADIENTS([](const Inputs& x) { return hg::mean(x[0], {1}, true); }, in);
    CHECK_GRADIENTS([](const Inputs& x) { return hg::amax(x[0], 1); }, in);
    CHECK_GRADIENTS([](const Inputs& x) { return hg::softmax(x[0], 1); }, in);
    CHECK_GRADIENTS([](const Inputs& x) { return hg::log_softmax(x[0], 0); }, in);
    CHECK_GRADIENTS([&](const Inputs& x) { return hg::cross_entropy(x[0], targets, {.label_smoothing = 0.1}); }, in);
    CHECK_GRADIENTS([](const Inputs& x) { return hg::mse_loss(x[0], x[0].t().t() * 0.5 + 1.0); }, in);
    CHECK_GRADIENTS([](const Inputs& x) { return hg::layer_norm(x[0], {3}, {}, {}, 1e-5); }, in);
    CHECK_GRADIENTS([](const Inputs& x) { return hg::batch_norm(x[0], {}, {}, {}, {}, true, 0.1, 1e-5); }, in);
    CHECK_GRADIENTS([](const Inputs& x) { return hg::cat({x[0], x[0] * 2.0}, 1); }, in);
  }
}

TEST_CASE("gradcheck.noncontiguous.matmul_and_linear") {
  hg::manual_seed(28);
  const auto mm = [](const Inputs& x) { return hg::matmul(x[0], x[1]); };
  CHECK_GRADIENTS(mm, Inputs{transposed_input(3, 4), input({4, 2})});
  CHECK_GRADIENTS(mm, Inputs{input({3, 4}), transposed_input(4, 2)});
  CHECK_GRADIENTS(mm, Inputs{strided_input(3, 4), strided_input(4, 2)});  // neither rows nor columns contiguous
  // A batched operand with its last two dims swapped.
  const Tensor batched = hg::randn({2, 4, 3}, {.dtype = hg::f64}).transpose(1, 2).detach().requires_grad_();
  CHECK_GRADIENTS(mm, Inputs{batched, input({2, 4, 2})});
  // linear with a transposed weight (how a tied embedding is often used) and a strided input.
  CHECK_GRADIENTS([](const Inputs& x) { return hg::linear(x[0], x[1], x[2]); },
                  Inputs{strided_input(3, 4), transposed_input(2, 4), input({2})});
}

TEST_CASE("gradcheck.noncontiguous.conv_pool") {
  hg::manual_seed(29);
  // An NHWC buffer seen as NCHW through permute: channels are the innermost stride.
  const Tensor x = hg::randn({1, 5, 5, 2}, {.dtype = hg::f64}).permute({0, 3, 1, 2}).detach().requires_grad_();
  REQUIRE_FALSE(x.is_contiguous());
  CHECK_GRADIENTS([](const Inputs& in) { return hg::conv2d(in[0], in[1], in[2], {.stride = 2, .padding = 1}); },
                  Inputs{x, input({3, 2, 3, 3}), input({3})});
  CHECK_GRADIENTS([](const Inputs& in) { return hg::max_pool2d(in[0], 2, 1); }, Inputs{x});
  CHECK_GRADIENTS([](const Inputs& in) { return hg::avg_pool2d(in[0], 3, 2); }, Inputs{x});
}

TEST_CASE("gradcheck.broadcast_views") {
  hg::manual_seed(30);
  // Stride-0 operands built inside fn with expand: gradients sum over the copies.
  const Inputs in{input({3, 1}), input({3, 4})};
  CHECK_GRADIENTS([](const Inputs& x) { return hg::mul(hg::expand(x[0], {3, 4}), x[1]); }, in);
  CHECK_GRADIENTS([](const Inputs& x) { return hg::exp(hg::expand(x[0], {2, 3, 4})); }, in);
  CHECK_GRADIENTS([](const Inputs& x) { return hg::softmax(hg::expand(x[0], {3, 4}) + x[1], 0); }, in);
  CHECK_GRADIENTS([](const Inputs& x) { return hg::matmul(hg::expand(x[0], {3, 3}), x[1]); }, in);
  CHECK_GRADIENTS([](const Inputs& x) { return hg::sum(hg::expand(x[0], {2, 3, 4}), {0, 2}); }, in);
}
