// Behaviour of the ops, docs/testing.md scenarios 4 and 5, one TEST_CASE per scenario and op family:
//   04 non-contiguous inputs give the results and gradients of their contiguous copy;
//   05 zero-size tensors.
// Helpers (normal(), tolerances, CHECK_CLOSE_WITH) are in ops_test_helpers.h.
#include <cmath>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "ops_test_helpers.h"

// ---- scenario 4: non-contiguous inputs behave like their contiguous copy ---------------------------

namespace {

using UnaryOp = std::function<Tensor(const Tensor&)>;

// A way to view a base tensor as a (rows, cols) input that is not contiguous.
struct Layout {
  const char* name;
  hg::Shape base_shape;
  UnaryOp view;
};

std::vector<Layout> layouts(int64_t rows, int64_t cols) {
  return {
      {"transposed", {cols, rows}, [](const Tensor& b) { return b.t(); }},
      {"step-sliced (every 2nd column)", {rows, 2 * cols},
       [=](const Tensor& b) { return hg::squeeze(hg::narrow(b.reshape({rows, cols, 2}), 2, 1, 1), 2); }},
      {"offset (an inner block)", {rows + 1, cols + 3},
       [=](const Tensor& b) { return hg::narrow(hg::narrow(b, 0, 1, rows), 1, 2, cols); }},
      {"broadcast (stride 0 rows)", {1, cols}, [=](const Tensor& b) { return hg::expand(b, {rows, cols}); }},
  };
}

// (N, C, H, W) inputs: channels-last memory, every 2nd column, an offset window, a stride-0 batch.
std::vector<Layout> image_layouts(int64_t N, int64_t C, int64_t H, int64_t W) {
  return {
      {"channels last (permuted)", {N, H, W, C}, [](const Tensor& b) { return b.permute({0, 3, 1, 2}); }},
      {"step-sliced (every 2nd column)", {N, C, H, 2 * W},
       [=](const Tensor& b) { return hg::squeeze(hg::narrow(b.reshape({N, C, H, W, 2}), 4, 0, 1), 4); }},
      {"offset (an inner window)", {N, C, H + 2, W + 1},
       [=](const Tensor& b) { return hg::narrow(hg::narrow(b, 2, 2, H), 3, 1, W); }},
      {"broadcast (stride 0 batch)", {1, C, H, W}, [=](const Tensor& b) { return hg::expand(b, {N, C, H, W}); }},
  };
}

// op(view of base) against op(contiguous copy of the same view): the outputs, and the gradients
// that reach the base through the view, with `tolerance` (kExact for elementwise ops).
void check_layout(const char* op_name, const UnaryOp& op, const Layout& layout, const Tensor& base_values,
                  Tolerance tolerance) {
  const std::string op_string = op_name, layout_name = layout.name;
  CAPTURE(op_string);
  CAPTURE(layout_name);
  try {  // an op that throws on a layout fails this pairing only, not the whole test case
    const Tensor base = base_values.clone().requires_grad_(), base_copy = base_values.clone().requires_grad_();
    const Tensor strided = layout.view(base), dense = layout.view(base_copy).contiguous();
    REQUIRE_FALSE(strided.is_contiguous());
    REQUIRE(dense.is_contiguous());
    const Tensor y = op(strided), y_dense = op(dense);
    CHECK_CLOSE_WITH(y, y_dense, tolerance);
    const Tensor g = hg::randn(y.shape()).to(y.dtype());
    y.backward(g);
    y_dense.backward(g);
    REQUIRE(base.grad().defined());
    REQUIRE(base_copy.grad().defined());
    CHECK_CLOSE_WITH(base.grad(), base_copy.grad(), tolerance);
  } catch (const hg::Error& e) {
    FAIL_CHECK("threw hg::Error: " << std::string(e.what()));
  }
}

}  // namespace

TEST_CASE("ops.scenario04.noncontiguous_elementwise_is_exact") {
  hg::manual_seed(401);
  const int64_t rows = 5, cols = 67;  // 335 elements: crosses the 256-element chunk
  const Tensor other = normal({rows, cols});
  const Tensor row = normal({cols});
  const std::pair<const char*, UnaryOp> ops[] = {
      {"neg", [](const Tensor& x) { return hg::neg(x); }},
      {"exp", [](const Tensor& x) { return hg::exp(x); }},
      {"log", [](const Tensor& x) { return hg::log(x); }},
      {"sqrt", [](const Tensor& x) { return hg::sqrt(x); }},
      {"abs", [](const Tensor& x) { return hg::abs(x); }},
      {"pow 3", [](const Tensor& x) { return hg::pow(x, 3.0); }},
      {"clamp", [](const Tensor& x) { return hg::clamp(x, 0.5, 2.0); }},
      {"scalar ops", [](const Tensor& x) { return (x * 3.0 - 1.0) / 4.0 + 0.5; }},
      {"relu", [](const Tensor& x) { return hg::relu(x - 1.0); }},
      {"leaky_relu", [](const Tensor& x) { return hg::leaky_relu(x - 1.0, 0.2); }},
      {"gelu", [](const Tensor& x) { return hg::gelu(x - 1.0); }},
      {"silu", [](const Tensor& x) { return hg::silu(x - 1.0); }},
      {"sigmoid", [](const Tensor& x) { return hg::sigmoid(x); }},
      {"tanh", [](const Tensor& x) { return hg::tanh(x); }},
      {"add", [&](const Tensor& x) { return hg::add(x, other); }},
      {"sub (strided on the right)", [&](const Tensor& x) { return hg::sub(other, x); }},
      {"mul", [&](const Tensor& x) { return hg::mul(x, other); }},
      {"div", [&](const Tensor& x) { return hg::div(other, x); }},
      {"mul with a broadcast row", [&](const Tensor& x) { return hg::mul(x, row); }},
      {"x * x", [](const Tensor& x) { return x * x; }},
      {"dropout", [](const Tensor& x) { hg::manual_seed(9); return hg::dropout(x, 0.4, true); }},
      {"cat", [&](const Tensor& x) { return hg::cat({other, x, other}, 1); }},
      {"to f64", [](const Tensor& x) { return x.to(hg::f64); }},
  };
  for (const Layout& layout : layouts(rows, cols)) {
    const Tensor base = positive(layout.base_shape, 0.25, 3.0);  // log and sqrt need x > 0
    for (const auto& [name, op] : ops) check_layout(name, op, layout, base, kExact);
  }
}

TEST_CASE("ops.scenario04.noncontiguous_reductions_softmax_losses_norms") {
  hg::manual_seed(402);
  const int64_t rows = 6, cols = 37;
  const Tensor targets = hg::randint(0, cols, {rows}, {.dtype = hg::i64});
  const Tensor w = normal({7, cols}), bias = normal({7}), right = normal({cols, 5});
  const Tensor gamma = normal({cols}), beta = normal({cols}), other = normal({rows, cols}), row_bias = normal({rows});
  const std::pair<const char*, UnaryOp> ops[] = {
      {"sum", [](const Tensor& x) { return hg::sum(x); }},
      {"sum dim 0", [](const Tensor& x) { return hg::sum(x, {0}); }},
      {"sum dim 1 keepdim", [](const Tensor& x) { return hg::sum(x, {1}, true); }},
      {"mean", [](const Tensor& x) { return hg::mean(x, {0, 1}); }},
      {"amax dim 0", [](const Tensor& x) { return hg::amax(x, 0); }},
      {"amax dim 1", [](const Tensor& x) { return hg::amax(x, 1, true); }},
      {"softmax dim 1", [](const Tensor& x) { return hg::softmax(x, 1); }},
      {"softmax dim 0", [](const Tensor& x) { return hg::softmax(x, 0); }},
      {"log_softmax", [](const Tensor& x) { return hg::log_softmax(x, -1); }},
      {"cross_entropy", [&](const Tensor& x) { return hg::cross_entropy(x, targets, {.label_smoothing = 0.1}); }},
      {"mse_loss", [&](const Tensor& x) { return hg::mse_loss(x, other); }},
      {"matmul (left)", [&](const Tensor& x) { return hg::matmul(x, right); }},
      {"matmul (right)", [&](const Tensor& x) { return hg::matmul(right.t(), x.t()); }},
      {"linear (input)", [&](const Tensor& x) { return hg::linear(x, w, bias); }},
      {"linear (weight)", [&](const Tensor& x) { return hg::linear(other, x, row_bias); }},
      {"batched matmul", [&](const Tensor& x) { return hg::matmul(hg::unsqueeze(x, 0), hg::unsqueeze(right, 0)); }},
      {"layer_norm", [&](const Tensor& x) { return hg::layer_norm(x, {cols}, gamma, beta, 1e-5); }},
      {"batch_norm", [](const Tensor& x) { return hg::batch_norm(x, {}, {}, {}, {}, true, 0.1, 1e-5); }},
      {"embedding (weight)", [](const Tensor& x) {
         return hg::embedding(hg::from_vector(std::vector<int64_t>{5, 0, 2, 5}, {4}), x);
       }},
  };
  for (const Layout& layout : layouts(rows, cols)) {
    const Tensor base = normal(layout.base_shape, 2.0);
    for (const auto& [name, op] : ops) {
      // The broadcast layout makes every row equal: batch_norm's variance is then 0 and the
      // backward divides 0 by ~sqrt(eps); skip that one degenerate pairing.
      if (std::string(name) == "batch_norm" && std::string(layout.name).starts_with("broadcast")) continue;
      const bool gemm = std::string(name).find("matmul") != std::string::npos || std::string(name).starts_with("linear");
      check_layout(name, op, layout, base, gemm ? gemm_tolerance(cols) : kF32);
    }
  }
}

TEST_CASE("ops.scenario04.noncontiguous_conv_and_pooling") {
  hg::manual_seed(403);
  const int64_t N = 2, C = 3, H = 7, W = 9;
  const Tensor kernel = normal({4, C, 3, 3}), bias = normal({4});
  const std::pair<const char*, UnaryOp> ops[] = {
      {"conv2d", [&](const Tensor& x) { return hg::conv2d(x, kernel, bias, {.stride = 1, .padding = 1}); }},
      {"conv2d stride 2", [&](const Tensor& x) { return hg::conv2d(x, kernel, {}, {.stride = 2, .padding = 0}); }},
      {"max_pool2d", [](const Tensor& x) { return hg::max_pool2d(x, 2, 2); }},
      {"max_pool2d overlapping", [](const Tensor& x) { return hg::max_pool2d(x, 3, 1); }},
      {"avg_pool2d", [](const Tensor& x) { return hg::avg_pool2d(x, 3, 2); }},
      {"batch_norm", [](const Tensor& x) { return hg::batch_norm(x, {}, {}, {}, {}, true, 0.1, 1e-5); }},
      {"layer_norm", [](const Tensor& x) { return hg::layer_norm(x, {H, W}, {}, {}, 1e-5); }},
      {"relu", [](const Tensor& x) { return hg::relu(x); }},
  };
  for (const Layout& layout : image_layouts(N, C, H, W)) {
    const Tensor base = normal(layout.base_shape);
    for (const auto& [name, op] : ops) {
      const bool conv = std::string(name).starts_with("conv");
      check_layout(name, op, layout, base, conv ? gemm_tolerance(C * 9) : kF32);
    }
  }
  // The kernel itself as a view: a transposed (O <-> C) weight.
  const Tensor x = normal({N, C, H, W});
  const Layout swapped{"weight with O and C swapped", {C, 4, 3, 3}, [](const Tensor& b) { return b.transpose(0, 1); }};
  check_layout("conv2d weight", [&](const Tensor& w) { return hg::conv2d(x, w, bias, {.stride = 1, .padding = 1}); },
               swapped, normal(swapped.base_shape), gemm_tolerance(C * 9));
}

// ---- scenario 5: zero-size tensors ------------------------------------------------------------------

TEST_CASE("ops.scenario05.zero_size_elementwise_and_activations") {
  const Tensor e = hg::zeros({0, 3}), row = hg::ones({1, 3}), full_row = hg::ones({3});
  const std::pair<const char*, UnaryOp> ops[] = {
      {"neg", [](const Tensor& x) { return hg::neg(x); }},       {"exp", [](const Tensor& x) { return hg::exp(x); }},
      {"log", [](const Tensor& x) { return hg::log(x); }},       {"sqrt", [](const Tensor& x) { return hg::sqrt(x); }},
      {"abs", [](const Tensor& x) { return hg::abs(x); }},       {"pow", [](const Tensor& x) { return hg::pow(x, 2.0); }},
      {"clamp", [](const Tensor& x) { return hg::clamp(x, 0.0, 1.0); }},
      {"scalar", [](const Tensor& x) { return 1.0 - x * 2.0 / 3.0; }},
      {"relu", [](const Tensor& x) { return hg::relu(x); }},     {"gelu", [](const Tensor& x) { return hg::gelu(x); }},
      {"leaky_relu", [](const Tensor& x) { return hg::leaky_relu(x); }},
      {"silu", [](const Tensor& x) { return hg::silu(x); }},     {"sigmoid", [](const Tensor& x) { return hg::sigmoid(x); }},
      {"tanh", [](const Tensor& x) { return hg::tanh(x); }},
      {"dropout", [](const Tensor& x) { return hg::dropout(x, 0.5, true); }},
      {"to f16", [](const Tensor& x) { return x.to(hg::f16); }},
  };
  for (const auto& [name, op] : ops) {
    const std::string op_name = name;
    CAPTURE(op_name);
    CHECK(op(e).shape() == hg::Shape{0, 3});
    CHECK(op(hg::zeros({2, 0, 5})).shape() == hg::Shape{2, 0, 5});
  }
  CHECK(hg::add(e, row).shape() == hg::Shape{0, 3});
  CHECK(hg::mul(full_row, e).shape() == hg::Shape{0, 3});
  CHECK(hg::div(e, full_row).shape() == hg::Shape{0, 3});
  CHECK(hg::sub(hg::zeros({4, 1, 0}), hg::ones({3, 1})).shape() == hg::Shape{4, 3, 0});
  // Backward through empty tensors gives empty gradients of the right shape.
  const Tensor x = hg::zeros({0, 3}).requires_grad_();
  hg::sum(hg::exp(x) * 2.0).backward();
  REQUIRE(x.grad().defined());
  CHECK(x.grad().shape() == hg::Shape{0, 3});
}

TEST_CASE("ops.scenario05.zero_size_reductions") {
  const Tensor e = hg::zeros({0, 3});
  CHECK(hg::sum(e).shape() == hg::Shape{});
  CHECK(hg::sum(e).item<float>() == 0.0f);  // the empty sum is 0
  CHECK(hg::sum(hg::zeros({0})).item<float>() == 0.0f);
  CHECK(values(hg::sum(e, {0})) == std::vector<double>{0, 0, 0});
  CHECK(hg::sum(e, {1}).shape() == hg::Shape{0});
  CHECK(hg::sum(e, {0}, true).shape() == hg::Shape{1, 3});
  CHECK(hg::sum(hg::zeros({0}, {.dtype = hg::i64})).item<int64_t>() == 0);
  CHECK(std::isnan(hg::mean(e).item<float>()));  // 0/0: PyTorch's documented choice
  const std::vector<double> column_means = values(hg::mean(e, {0}));
  REQUIRE(column_means.size() == 3);
  for (double m : column_means) CHECK(std::isnan(m));
  CHECK(hg::mean(e, {1}).shape() == hg::Shape{0});
  // Reducing over a non-empty dim of an empty tensor gives an empty result (as in PyTorch);
  // the maximum over an empty dim does not exist and is an error.
  CHECK(hg::amax(e, 1).shape() == hg::Shape{0});
  CHECK(hg::amax(e, 1, true).shape() == hg::Shape{0, 1});
  CHECK(hg::argmax(e, 1).shape() == hg::Shape{0});
  CHECK_THROWS_HG(hg::amax(e, 0), "amax");
  CHECK_THROWS_HG(hg::argmax(e, 0), "argmax");
  // Gradients through an empty sum/mean.
  const Tensor x = hg::zeros({0, 3}).requires_grad_();
  hg::sum(x).backward();
  CHECK(x.grad().shape() == hg::Shape{0, 3});
}

TEST_CASE("ops.scenario05.zero_size_matmul_and_linear") {
  // K = 0: the sum over nothing is 0 everywhere (cuBLAS once returned garbage, pytorch#31421).
  const Tensor a = hg::zeros({3, 0}).requires_grad_(), b = hg::zeros({0, 4}).requires_grad_();
  const Tensor y = hg::matmul(a, b);
  CHECK(y.shape() == hg::Shape{3, 4});
  CHECK(values(y) == std::vector<double>(12, 0.0));
  hg::sum(y).backward();
  CHECK(a.grad().shape() == hg::Shape{3, 0});
  CHECK(b.grad().shape() == hg::Shape{0, 4});
  // K = 0 must write zeros even into memory that held something before.
  for (int i = 0; i < 3; ++i) {
    const Tensor junk = hg::full({64, 64}, 7.0);
    CHECK(values(hg::matmul(hg::empty({64, 0}), hg::empty({0, 64}))) == std::vector<double>(64 * 64, 0.0));
  }
  CHECK(values(hg::matmul(hg::zeros({2, 3, 0}), hg::zeros({2, 0, 5}))) == std::vector<double>(30, 0.0));
  // (3,0,0)@(0,0) -> (3,0,0) (pytorch#63352), and other empty batch/row/column cases.
  CHECK(hg::matmul(hg::zeros({3, 0, 0}), hg::zeros({0, 0})).shape() == hg::Shape{3, 0, 0});
  CHECK(hg::matmul(hg::zeros({0, 0}), hg::zeros({3, 0, 0})).shape() == hg::Shape{3, 0, 0});
  CHECK(hg::matmul(hg::zeros({0, 3}), hg::zeros({3, 4})).shape() == hg::Shape{0, 4});
  CHECK(hg::matmul(hg::zeros({3, 4}), hg::zeros({4, 0})).shape() == hg::Shape{3, 0});
  CHECK(hg::matmul(hg::zeros({0, 2, 3}), hg::zeros({0, 3, 4})).shape() == hg::Shape{0, 2, 4});
  CHECK(hg::matmul(hg::zeros({0, 2, 3}), hg::zeros({3, 4})).shape() == hg::Shape{0, 2, 4});
  // linear with in_features = 0 is the bias alone; with no rows it is empty.
  const Tensor bias = hg::from_vector(std::vector<float>{1, 2, 3}, {3});
  CHECK(values(hg::linear(hg::zeros({2, 0}), hg::zeros({3, 0}), bias)) == std::vector<double>{1, 2, 3, 1, 2, 3});
  CHECK(values(hg::linear(hg::zeros({2, 0}), hg::zeros({3, 0}))) == std::vector<double>(6, 0.0));
  CHECK(hg::linear(hg::zeros({0, 4}), hg::zeros({3, 4}), bias).shape() == hg::Shape{0, 3});
  CHECK(hg::linear(hg::zeros({2, 0, 4}), hg::zeros({3, 4})).shape() == hg::Shape{2, 0, 3});
  CHECK(hg::linear(hg::zeros({2, 4}), hg::zeros({0, 4}), hg::zeros({0})).shape() == hg::Shape{2, 0});
}

TEST_CASE("ops.scenario05.zero_size_softmax_losses_conv_pool_norm") {
  CHECK(hg::softmax(hg::zeros({0, 5}), 1).shape() == hg::Shape{0, 5});
  CHECK(hg::log_softmax(hg::zeros({0, 5}), 0).shape() == hg::Shape{0, 5});
  CHECK(hg::softmax(hg::zeros({4, 0}), 1).shape() == hg::Shape{4, 0});
  CHECK(std::isnan(hg::mse_loss(hg::zeros({0}), hg::zeros({0})).item<float>()));  // a mean over nothing
  const Tensor kernel = hg::zeros({3, 2, 3, 3});
  CHECK(hg::conv2d(hg::zeros({0, 2, 5, 5}), kernel, hg::zeros({3})).shape() == hg::Shape{0, 3, 3, 3});
  CHECK(hg::conv2d(hg::zeros({1, 2, 5, 5}), hg::zeros({0, 2, 3, 3})).shape() == hg::Shape{1, 0, 3, 3});
  CHECK(hg::max_pool2d(hg::zeros({0, 2, 4, 4}), 2, 2).shape() == hg::Shape{0, 2, 2, 2});
  CHECK(hg::avg_pool2d(hg::zeros({2, 0, 4, 4}), 2, 2).shape() == hg::Shape{2, 0, 2, 2});
  CHECK(hg::layer_norm(hg::zeros({0, 4}), {4}, {}, {}, 1e-5).shape() == hg::Shape{0, 4});
  CHECK(hg::batch_norm(hg::zeros({0, 3}), hg::zeros({3}), hg::ones({3}), {}, {}, false, 0.1, 1e-5).shape() ==
        hg::Shape{0, 3});
  CHECK(hg::batch_norm(hg::zeros({2, 0, 4}), {}, {}, {}, {}, true, 0.1, 1e-5).shape() == hg::Shape{2, 0, 4});
  // Training statistics of an empty batch do not exist: an error, as in PyTorch.
  CHECK_THROWS_HG(hg::batch_norm(hg::zeros({0, 3}), {}, {}, {}, {}, true, 0.1, 1e-5), "batch_norm");
}

TEST_CASE("ops.scenario05.zero_size_shape_ops_embedding_cat") {
  const Tensor e = hg::zeros({2, 0, 3});
  CHECK(e.reshape({0, 6}).shape() == hg::Shape{0, 6});
  CHECK(e.reshape({3, -1, 2}).shape() == hg::Shape{3, 0, 2});
  CHECK(e.view({0}).shape() == hg::Shape{0});
  CHECK(e.transpose(0, 2).shape() == hg::Shape{3, 0, 2});
  CHECK(e.permute({1, 2, 0}).shape() == hg::Shape{0, 3, 2});
  CHECK(e.flatten().shape() == hg::Shape{0});
  CHECK(e.flatten(1).shape() == hg::Shape{2, 0});
  CHECK(e.contiguous().shape() == hg::Shape{2, 0, 3});
  CHECK(hg::expand(hg::zeros({1, 0}), {4, 0}).shape() == hg::Shape{4, 0});
  CHECK(hg::narrow(hg::zeros({5, 3}), 0, 2, 0).shape() == hg::Shape{0, 3});
  CHECK(hg::narrow(hg::zeros({5, 3}), 0, 5, 0).shape() == hg::Shape{0, 3});  // at the end
  CHECK(hg::unsqueeze(e, 0).shape() == hg::Shape{1, 2, 0, 3});
  const Tensor table = hg::randn({4, 3});
  CHECK(hg::embedding(hg::zeros({0}, {.dtype = hg::i64}), table).shape() == hg::Shape{0, 3});
  CHECK(hg::embedding(hg::zeros({2, 0}, {.dtype = hg::i64}), table).shape() == hg::Shape{2, 0, 3});
  const Tensor a = hg::randn({2, 3});
  CHECK(values(hg::cat({a, hg::zeros({0, 3})}, 0)) == values(a));
  CHECK(values(hg::cat({hg::zeros({2, 0}), a}, 1)) == values(a));
  CHECK(hg::cat({hg::zeros({0, 3}), hg::zeros({0, 3})}, 0).shape() == hg::Shape{0, 3});
}
