// Gradients against central finite differences in f64 (docs/testing.md scenario 2, tolerance T64:
// eps 1e-6, atol 1e-5, rtol 1e-3) for what is not one op's gradient. Each op's own gradient, on
// every sample of its entry in tests/op_db.cpp (shapes, broadcasts, arguments) and through
// strided, transposed and channels-last inputs, is checked by test_op_db (op_db.gradcheck_f64,
// op_db.strided_inputs_match_contiguous). Here: the operator spellings, one tensor used twice, the
// view and shape functions, dtype conversion, broadcast views taken inside the function, and the
// layouts of the leaves themselves.
//
// Inputs are small on purpose: gradcheck runs one backward per output element and two forwards
// per input element. Random inputs keep away from kinks and ties (a value within eps of a kink
// would make the finite difference meaningless).
#include <string>
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

// ---- operators and shared inputs ---------------------------------------------------------------------

// The operators with a scalar: `x op s` spells add/sub/mul/div(x, s), and `s - x`, `s / x` are
// compositions (add(neg(x), s), mul(pow(x, -1), s)) that no op_db entry runs.
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

// One tensor as two inputs of an op: the gradients of both uses add up in it.
TEST_CASE("gradcheck.an_input_used_twice_gets_both_gradients") {
  hg::manual_seed(1);
  CHECK_GRADIENTS([](const Inputs& x) { return x[0] * x[0]; }, Inputs{input({2, 3})});
  const Inputs wide{input({2, 1}), input({2, 3})};
  CHECK_GRADIENTS([](const Inputs& x) { return hg::cat({x[0], x[1], x[0]}, -1); }, wide);
}

// ---- shape ops -------------------------------------------------------------------------------------

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
