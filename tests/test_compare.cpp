// Comparisons, logic and value tests (ops/compare.h): u8 masks against the obvious scalar
// loop, with broadcasting, mixed dtypes, NaN and inf, integer operands; no gradient; and the math
// functions' behaviour beyond the op_db checks (ops/math.h): ties, NaN, integer inputs, bounds
// crossing, errors.
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "ops_test_helpers.h"

namespace {

// The mask a comparison should give, element by element over the broadcast shape (ref::zip).
std::vector<uint8_t> expected_mask(const Tensor& a, const Tensor& b, const std::function<bool(double, double)>& f) {
  const ref::Array m = ref::zip(ref::of(a), ref::of(b), [&](double x, double y) { return f(x, y) ? 1.0 : 0.0; });
  return std::vector<uint8_t>(m.v.begin(), m.v.end());
}

struct Comparison {
  const char* name;
  Tensor (*op)(const Tensor&, const Tensor&);
  std::function<bool(double, double)> f;
};

const std::vector<Comparison>& comparisons() {
  static const std::vector<Comparison> all = {
      {"eq", hg::eq, [](double a, double b) { return a == b; }},
      {"ne", hg::ne, [](double a, double b) { return a != b; }},
      {"lt", hg::lt, [](double a, double b) { return a < b; }},
      {"le", hg::le, [](double a, double b) { return a <= b; }},
      {"gt", hg::gt, [](double a, double b) { return a > b; }},
      {"ge", hg::ge, [](double a, double b) { return a >= b; }},
      {"logical_and", hg::logical_and, [](double a, double b) { return a != 0 && b != 0; }},
      {"logical_or", hg::logical_or, [](double a, double b) { return a != 0 || b != 0; }},
  };
  return all;
}

}  // namespace

TEST_CASE("compare.masks_match_the_scalar_rule_with_broadcasting_nan_and_inf") {
  // Ties, NaN, infinities and zeros, against a broadcast column.
  const Tensor a = hg::from_vector<double>({1, 2, kNaN, kInf, -kInf, 0, -0.0, 3.5}, {2, 4});
  const Tensor b = hg::from_vector<double>({2, kNaN, 0}, {3, 1, 1});
  for (const Comparison& c : comparisons()) {
    const std::string name = c.name;
    CAPTURE(name);
    for (hg::DType dtype : {hg::f64, hg::f32, hg::f16, hg::bf16}) {
      const Tensor m = c.op(a.to(dtype), b.to(dtype));
      CHECK(m.dtype() == hg::u8);
      CHECK(m.shape() == hg::Shape{3, 2, 4});
      CHECK(m.to_vector<uint8_t>() == expected_mask(a, b, c.f));
      CHECK(c.op(b.to(dtype), a.to(dtype)).to_vector<uint8_t>() == expected_mask(b, a, c.f));
    }
  }
}

TEST_CASE("compare.mixed_dtypes_meet_in_the_promoted_dtype") {
  // 0.5 is lost by an integer comparison but not by the promoted (f32) one.
  const Tensor ints = hg::from_vector<int64_t>({0, 1, 2}, {3});
  const Tensor halves = hg::from_vector<float>({0.5f, 1.0f, 1.5f}, {3});
  CHECK(hg::lt(ints, halves).to_vector<uint8_t>() == std::vector<uint8_t>{1, 0, 0});
  CHECK(hg::eq(ints, halves).to_vector<uint8_t>() == std::vector<uint8_t>{0, 1, 0});
  CHECK(hg::ge(halves.to(hg::bf16), ints.to(hg::u8)).to_vector<uint8_t>() == std::vector<uint8_t>{1, 1, 0});
  // Integers compare exactly, beyond f32's 2^24.
  const Tensor big = hg::from_vector<int64_t>({(int64_t(1) << 40) + 1}, {1});
  CHECK(hg::gt(big, hg::from_vector<int64_t>({int64_t(1) << 40}, {1})).item<uint8_t>() == 1);
}

TEST_CASE("compare.unary_tests_and_logical_not") {
  const Tensor x = hg::from_vector<double>({0, -0.0, 1, kNaN, kInf, -kInf, -2}, {7});
  for (hg::DType dtype : {hg::f64, hg::f32, hg::f16, hg::bf16}) {
    const Tensor t = x.to(dtype);
    CHECK(hg::isnan(t).to_vector<uint8_t>() == std::vector<uint8_t>{0, 0, 0, 1, 0, 0, 0});
    CHECK(hg::isinf(t).to_vector<uint8_t>() == std::vector<uint8_t>{0, 0, 0, 0, 1, 1, 0});
    CHECK(hg::logical_not(t).to_vector<uint8_t>() == std::vector<uint8_t>{1, 1, 0, 0, 0, 0, 0});
    CHECK(hg::isnan(t).dtype() == hg::u8);
  }
  const Tensor ints = hg::from_vector<int64_t>({0, 3, -1}, {3});
  CHECK(hg::isnan(ints).to_vector<uint8_t>() == std::vector<uint8_t>{0, 0, 0});
  CHECK(hg::isinf(ints).to_vector<uint8_t>() == std::vector<uint8_t>{0, 0, 0});
  CHECK(hg::logical_not(ints).to_vector<uint8_t>() == std::vector<uint8_t>{1, 0, 0});
  CHECK(hg::logical_not(hg::logical_not(ints)).to_vector<uint8_t>() == std::vector<uint8_t>{0, 1, 1});
}

TEST_CASE("compare.masks_have_no_gradient_and_feed_where_and_arithmetic") {
  const Tensor x = hg::randn({4, 5}).requires_grad_(true);
  const Tensor mask = hg::gt(x, hg::zeros({}));
  CHECK_FALSE(mask.requires_grad());
  // A mask counts (sum of a u8 mask is an integer count) and selects.
  const int64_t positives = hg::sum(mask).to(hg::i64).item<int64_t>();
  int64_t expected = 0;
  for (double v : x.to_vector<double>()) expected += v > 0;
  CHECK(positives == expected);
  const Tensor relu = hg::where(mask, x, hg::zeros({}));
  hg::sum(relu * mask).backward();
  const std::vector<double> g = x.grad().to_vector<double>(), xv = x.to_vector<double>();
  for (size_t i = 0; i < g.size(); ++i) CHECK(g[i] == (xv[i] > 0 ? 1.0 : 0.0));
}

TEST_CASE("compare.errors_name_the_op_and_both_shapes") {
  CHECK_THROWS_HG(hg::lt(hg::zeros({2, 3}), hg::zeros({4})), "lt");
  CHECK_THROWS_HG(hg::lt(hg::zeros({2, 3}), hg::zeros({4})), "[2, 3]");
  CHECK_THROWS_HG(hg::logical_and(hg::zeros({2}), hg::zeros({3})), "logical_and");
  CHECK_THROWS_HG(hg::eq(Tensor(), hg::zeros({3})), "eq: expected two defined tensors");
  CHECK_THROWS_HG(hg::isnan(Tensor()), "isnan: expected a defined tensor");
}

// ---- ops/math.h beyond op_db -------------------------------------------------------------------

TEST_CASE("math.maximum_and_minimum_propagate_nan_and_split_ties") {
  const Tensor a = hg::from_vector<double>({1, kNaN, 3, 2}, {4}).requires_grad_(true);
  const Tensor b = hg::from_vector<double>({2, 0, kNaN, 2}, {4}).requires_grad_(true);
  const std::vector<double> mx = hg::maximum(a, b).to_vector<double>(), mn = hg::minimum(a, b).to_vector<double>();
  CHECK(mx[0] == 2);
  CHECK(std::isnan(mx[1]));
  CHECK(std::isnan(mx[2]));
  CHECK(mx[3] == 2);
  CHECK(mn[0] == 1);
  CHECK(std::isnan(mn[1]));
  CHECK(std::isnan(mn[2]));
  hg::sum(hg::maximum(a, b)).backward();
  CHECK(a.grad().to_vector<double>()[0] == 0);
  CHECK(b.grad().to_vector<double>()[0] == 1);
  CHECK(a.grad().to_vector<double>()[3] == 0.5);  // the tie: half each, as PyTorch
  CHECK(b.grad().to_vector<double>()[3] == 0.5);
  // Integers: exact, and no graph.
  const Tensor i = hg::from_vector<int64_t>({5, -7}, {2}), j = hg::from_vector<int64_t>({3, 4}, {2});
  CHECK(hg::maximum(i, j).to_vector<int64_t>() == std::vector<int64_t>{5, 4});
  CHECK(hg::minimum(i, j).to_vector<int64_t>() == std::vector<int64_t>{3, -7});
}

TEST_CASE("math.rounding_sends_halves_to_even_and_passes_integers_through") {
  const Tensor x = hg::from_vector<double>({0.5, 1.5, 2.5, -0.5, -1.5, 2.4999, -2.6, kNaN, kInf}, {9});
  for (hg::DType dtype : {hg::f64, hg::f32, hg::bf16}) {
    const std::vector<double> r = hg::round(x.to(dtype)).to_vector<double>();
    CHECK(r[0] == 0);
    CHECK(r[1] == 2);
    CHECK(r[2] == 2);
    CHECK(r[3] == 0);
    CHECK(r[4] == -2);
    CHECK(r[6] == -3);
    CHECK(std::isnan(r[7]));
    CHECK(r[8] == kInf);
  }
  const Tensor ints = hg::from_vector<int64_t>({-3, 7}, {2});
  for (auto op : {hg::floor, hg::ceil, hg::round, hg::sign}) CHECK(op(ints).dtype() == hg::i64);
  CHECK(hg::sign(ints).to_vector<int64_t>() == std::vector<int64_t>{-1, 1});
  CHECK(hg::sign(hg::full({1}, kNaN)).item<double>() == 0);  // PyTorch: sign(NaN) = 0
  CHECK(hg::floor(ints).to_vector<int64_t>() == std::vector<int64_t>{-3, 7});
  // A graph through floor reaches its leaf with a zero gradient (PyTorch's), not an error.
  const Tensor y = hg::randn({3}).requires_grad_(true);
  hg::sum(hg::floor(y) + y).backward();
  CHECK(y.grad().to_vector<double>() == std::vector<double>{1, 1, 1});
}

TEST_CASE("math.clamp_with_tensor_bounds_sends_each_gradient_where_pytorch_does") {
  const Tensor x = hg::from_vector<double>({-2, 0, 2, 0.5}, {4}).requires_grad_(true);
  const Tensor lo = hg::from_vector<double>({-1, -1, -1, 1}, {4}).requires_grad_(true);
  // NOTE: not {1, 1, 1, 0}: GCC 12.2 with -march=znver4 builds that initializer as four 1s.
  const Tensor hi = hg::from_vector<double>({1, 1, 1.5, 0}, {4}).requires_grad_(true);  // last: lo > hi
  const Tensor y = hg::clamp(x, lo, hi);
  CHECK(y.to_vector<double>() == std::vector<double>{-1, 0, 1.5, 0});
  hg::sum(y).backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{0, 1, 0, 0});
  CHECK(lo.grad().to_vector<double>() == std::vector<double>{1, 0, 0, 0});  // lo > hi: the output is hi
  CHECK(hi.grad().to_vector<double>() == std::vector<double>{0, 0, 1, 1});
  CHECK(std::isnan(hg::clamp(hg::full({1}, kNaN), hg::zeros({}), hg::ones({})).item<double>()));
}

TEST_CASE("math.errors_name_the_op") {
  const Tensor ints = hg::arange(4, {.dtype = hg::i64});
  for (auto op : {hg::reciprocal, hg::rsqrt, hg::log1p, hg::expm1, hg::erf, hg::sin, hg::cos}) {
    std::string message;
    try {
      op(ints);
    } catch (const hg::Error& e) {
      message = e.what();
    }
    CHECK_MESSAGE(message.find("expected a floating tensor, got i64") != std::string::npos, message);
  }
  CHECK_THROWS_HG(hg::rsqrt(ints), "rsqrt: expected a floating tensor, got i64");
  CHECK_THROWS_HG(hg::pow(ints, ints), "pow: expected floating tensors, got i64 and i64");
  CHECK_THROWS_HG(hg::maximum(hg::zeros({2}), hg::zeros({3})), "maximum");
  CHECK_THROWS_HG(hg::clamp(hg::zeros({2}), Tensor(), hg::ones({2})), "clamp: expected defined tensors");
  CHECK_THROWS_HG(hg::clamp(ints, hg::zeros({}), hg::ones({})), "clamp: expected a floating tensor, got i64");
  CHECK_THROWS_HG(hg::clamp(hg::zeros({2}), hg::zeros({3}), hg::ones({})), "clamp");
}
