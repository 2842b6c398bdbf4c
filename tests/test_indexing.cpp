// Indexing, sorting and the composed reductions beyond the op_db checks (values, gradients,
// 16-bit and the PyTorch fixtures are there): the indices sort/topk/max/min return, one_hot,
// repeated indices adding up, and every error path naming the op and what was wrong.
#include <cmath>
#include <string>
#include <vector>

#include "ops_test_helpers.h"

namespace {

std::vector<int64_t> ints(const Tensor& t) { return t.to_vector<int64_t>(); }
Tensor i64(std::vector<int64_t> values, hg::Shape shape) { return hg::from_vector(values, std::move(shape)); }

}  // namespace

TEST_CASE("indexing.sort_and_topk_return_stable_indices_with_nan_last") {
  const Tensor x = hg::from_vector<double>({3, kNaN, 1, 3, -2, 1}, {1, 6});
  auto [values, indices] = hg::sort(x);
  CHECK(indices.dtype() == hg::i64);
  CHECK(ints(indices) == std::vector<int64_t>{4, 2, 5, 0, 3, 1});  // ties keep their order; NaN last
  CHECK(std::isnan(values.to_vector<double>()[5]));
  auto [down, down_at] = hg::sort(x, 1, /*descending=*/true);
  CHECK(ints(down_at) == std::vector<int64_t>{1, 0, 3, 2, 5, 4});  // NaN first, ties still in order
  auto [top, top_at] = hg::topk(hg::from_vector<float>({0.5f, 4, -1, 2, 4.5f}, {5}), 2);
  CHECK(top.to_vector<double>() == std::vector<double>{4.5, 4});
  CHECK(ints(top_at) == std::vector<int64_t>{4, 1});
  auto [low, low_at] = hg::topk(hg::from_vector<float>({0.5f, 4, -1, 2, 4.5f}, {5}), 2, 0, /*largest=*/false);
  CHECK(ints(low_at) == std::vector<int64_t>{2, 0});
  // Along a middle dim of a 3-D tensor: each (i, k) column sorted on its own.
  hg::manual_seed(3);
  const Tensor y = hg::randn({2, 5, 3});
  auto [sorted, order] = hg::sort(y, 1);
  const std::vector<double> v = sorted.to_vector<double>();
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j + 1 < 5; ++j)
      for (int64_t k = 0; k < 3; ++k) CHECK(v[size_t((i * 5 + j) * 3 + k)] <= v[size_t((i * 5 + j + 1) * 3 + k)]);
  CHECK(hg::gather(y, 1, order).to_vector<double>() == sorted.to_vector<double>());
}

TEST_CASE("indexing.max_and_min_with_a_dim_give_the_first_extremum_and_send_it_the_gradient") {
  const Tensor x = hg::from_vector<double>({1, 5, 5, 2, -7, -7}, {2, 3}).requires_grad_(true);
  auto [best, at] = hg::max(x, 1);
  CHECK(best.to_vector<double>() == std::vector<double>{5, 2});
  CHECK(ints(at) == std::vector<int64_t>{1, 0});
  auto [least, least_at] = hg::min(x, 1, /*keepdim=*/true);
  CHECK(least.shape() == hg::Shape{2, 1});
  CHECK(ints(least_at) == std::vector<int64_t>{0, 1});
  CHECK(ints(hg::argmin(x, 1)) == std::vector<int64_t>{0, 1});
  hg::sum(best).backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{0, 1, 0, 1, 0, 0});  // the tie: first only
  // amin splits a tie as amax does.
  const Tensor z = hg::from_vector<double>({-7, 2, -7}, {3}).requires_grad_(true);
  hg::amin(z, 0).backward();
  CHECK(z.grad().to_vector<double>() == std::vector<double>{0.5, 0, 0.5});
  CHECK(ints(hg::argmin(hg::from_vector<uint8_t>({4, 0, 9}, {3}), 0).reshape({1})) == std::vector<int64_t>{1});
}

TEST_CASE("indexing.repeated_indices_add_up_and_one_hot_counts_classes") {
  const Tensor x = hg::zeros({3}, {.dtype = hg::f64}).requires_grad_(true);
  const Tensor picked = hg::index_select(x, 0, i64({2, 2, 0, 2}, {4}));
  hg::sum(picked).backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{1, 0, 3});
  const Tensor added = hg::scatter_add(hg::zeros({2, 3}), 1, i64({1, 1, 0, 2, 2, 2}, {2, 3}), hg::ones({2, 3}));
  CHECK(added.to_vector<double>() == std::vector<double>{1, 2, 0, 0, 0, 3});
  const Tensor hot = hg::one_hot(i64({2, 0, 2}, {3}));
  CHECK(hot.dtype() == hg::i64);
  CHECK(hot.shape() == hg::Shape{3, 3});
  CHECK(ints(hot) == std::vector<int64_t>{0, 0, 1, 1, 0, 0, 0, 0, 1});
  CHECK(hg::one_hot(i64({1}, {1}), 4).shape() == hg::Shape{1, 4});
  CHECK(ints(hg::one_hot(i64({0, 1, 1, 0}, {2, 2}), 2).reshape({8})) == std::vector<int64_t>{1, 0, 0, 1, 0, 1, 1, 0});
}

TEST_CASE("indexing.cumsum_norm_and_logsumexp_edge_values") {
  CHECK(hg::cumsum(hg::ones({1000}), 0).to_vector<double>().back() == 1000);
  const Tensor minus_inf = hg::full({2, 3}, -kInf);
  for (double v : hg::logsumexp(minus_inf, {1}).to_vector<double>()) CHECK(v == -kInf);  // not NaN
  const Tensor big = hg::full({4}, 1000.0);
  CHECK(hg::logsumexp(big, {0}).item<double>() == doctest::Approx(1000 + std::log(4.0)));
  // The norm of zeros is 0 and its gradient 0, not NaN (PyTorch's).
  const Tensor z = hg::zeros({3}).requires_grad_(true);
  const Tensor n = hg::norm(z);
  CHECK(n.item<double>() == 0);
  n.backward();
  CHECK(z.grad().to_vector<double>() == std::vector<double>{0, 0, 0});
  CHECK(hg::norm(hg::from_vector<double>({3, -4}, {2}), kInf).item<double>() == 4);
  CHECK(hg::norm(hg::from_vector<double>({3, 0, -4}, {3}), 0).item<double>() == 2);
  CHECK(hg::var(hg::from_vector<double>({1, 2, 3, 4}, {4})).item<double>() == doctest::Approx(5.0 / 3));
  CHECK(hg::var(hg::from_vector<double>({1, 2, 3, 4}, {4}), {}, {.correction = 0}).item<double>() == 1.25);
  CHECK(hg::prod(hg::from_vector<double>({2, -3, 0.5, 4}, {4})).item<double>() == -12);
}

TEST_CASE("indexing.errors_name_the_op_and_what_is_wrong") {
  const Tensor x = hg::randn({3, 4});
  CHECK_THROWS_HG(hg::index_select(x, 0, i64({0, 3}, {2})), "index_select: index 3 at position 1 is out of range for dimension 0 of size 3");
  CHECK_THROWS_HG(hg::index_select(x, 0, i64({-1}, {1})), "index_select: index -1");
  CHECK_THROWS_HG(hg::index_select(x, 0, hg::zeros({2})), "index_select: index must be i64 (or i32), got f32");
  CHECK_THROWS_HG(hg::index_select(x, 0, i64({0, 1}, {1, 2})), "index_select: index must be a 1-D tensor");
  CHECK_THROWS_HG(hg::index_select(x, 2, i64({0}, {1})), "index_select");
  CHECK_THROWS_HG(hg::gather(x, 1, i64({0, 4}, {1, 2})), "gather: index 4 at position 1 is out of range for dimension 1 of size 4");
  CHECK_THROWS_HG(hg::gather(x, 1, i64({0}, {1})), "gather: index must have as many dimensions as the input (2)");
  CHECK_THROWS_HG(hg::gather(x, 1, hg::zeros({4, 1}, {.dtype = hg::i64})), "gather: index shape [4, 1] is larger than the input's [3, 4] in dimension 0");
  CHECK_THROWS_HG(hg::scatter_add(x, 1, i64({5}, {1, 1}), hg::ones({1, 1})), "scatter_add: index 5");
  CHECK_THROWS_HG(hg::scatter_add(x, 1, hg::zeros({1, 3}, {.dtype = hg::i64}), hg::ones({1, 2})), "scatter_add: index shape [1, 3] is larger than src's [1, 2]");
  CHECK_THROWS_HG(hg::scatter_add(x.to(hg::i64), 1, hg::zeros({1, 1}, {.dtype = hg::i64}), hg::ones({1, 1}, {.dtype = hg::i64})), "scatter_add: expected floating tensors");
  CHECK_THROWS_HG(hg::flip(x, {0, -2}), "flip: dim 0 appears multiple times");
  CHECK_THROWS_HG(hg::repeat(x, {2}), "repeat: the number of repeats (1) cannot be smaller than the number of dimensions of the tensor (2)");
  CHECK_THROWS_HG(hg::repeat(x, {2, -1}), "repeat: repeats must be non-negative");
  CHECK_THROWS_HG(hg::pad(x, {1, 1}, {.mode = "circular"}), "pad: mode must be \"constant\", \"reflect\" or \"replicate\", got \"circular\"");
  CHECK_THROWS_HG(hg::pad(x, {1}), "pad: pads must come in pairs");
  CHECK_THROWS_HG(hg::pad(x, {1, 1, 1, 1, 1, 1}), "pad: 3 pairs of pads for a 2-d tensor");
  CHECK_THROWS_HG(hg::pad(x, {4, 0}, {.mode = "reflect"}), "pad: reflect padding (4, 0) must be smaller than the size 4 of dimension 1");
  CHECK_THROWS_HG(hg::pad(x, {-3, -2}), "leave dimension 1 of size 4 with a negative size");
  CHECK_THROWS_HG(hg::pad(x.to(hg::i64), {1, 1}, {.value = 0.5}), "pad: value 0.5 cannot be held by a i64 tensor");
  CHECK_THROWS_HG(hg::one_hot(i64({0, 3}, {2}), 3), "one_hot: class value 3 is out of range for num_classes = 3");
  CHECK_THROWS_HG(hg::one_hot(i64({-1}, {1})), "one_hot: class values must be non-negative, got -1");
  CHECK_THROWS_HG(hg::one_hot(hg::zeros({0}, {.dtype = hg::i64})), "one_hot: cannot infer the number of classes from an empty tensor");
  CHECK_THROWS_HG(hg::topk(x, 5, 1), "topk: k (5) is out of range for dimension 1 of size 4");
  CHECK_THROWS_HG(hg::var(x.to(hg::i64)), "var: expected a floating tensor, got i64");
  CHECK_THROWS_HG(hg::logsumexp(x, {0, 0}), "logsumexp: dim 0 appears multiple times");
  CHECK_THROWS_HG(hg::cumsum(x, 2), "cumsum");
  CHECK_THROWS_HG(hg::sort(Tensor()), "sort: expected a defined tensor");
}

TEST_CASE("indexing.split_pieces_share_one_node_whose_gradient_is_linear_in_the_input") {
  const Tensor x = hg::randn({2, 5}, {.dtype = hg::f64}).requires_grad_(true);
  const std::vector<Tensor> pieces = hg::split(x, {2, 1, 2}, 1);
  (hg::sum(pieces[0] * 2.0) + hg::sum(pieces[2] * 3.0)).backward();  // the middle piece gets no gradient
  CHECK(x.grad().to_vector<double>() == std::vector<double>{2, 2, 0, 3, 3, 2, 2, 0, 3, 3});
  // One node for all pieces: its backward is one cat, linear in x. (A narrow per piece gives each
  // piece a gradient the size of x: a loop over T steps became quadratic in T.)
  REQUIRE(pieces[0].grad_fn() != nullptr);
  CHECK(pieces[0].grad_fn() == pieces[2].grad_fn());
  const Tensor seq = hg::randn({16, 512, 16}).requires_grad_(true);
  Tensor h = hg::zeros({16, 1, 16});
  for (const Tensor& step : hg::split(seq, 1, 1)) h = h * 0.5 + step;
  const int64_t before = hg::memory::allocated();
  hg::memory::reset_peak();
  hg::sum(h).backward();
  CHECK(hg::memory::peak_allocated() - before < 8 * seq.numel() * int64_t(sizeof(float)));
  CHECK(hg::chunk(seq, 3, 1).size() == 3);
}
