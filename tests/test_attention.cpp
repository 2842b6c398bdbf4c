// scaled_dot_product_attention's behaviour beyond the op_db checks (values, gradients, 16-bit,
// strides and the PyTorch fixtures are there): the fused kernel's memory, which must grow
// linearly in T (FlashAttention's point), dropout that replays under manual_seed, the masked
// rows PyTorch defines, and the same result at every thread count.
#include <cmath>
#include <limits>
#include <vector>

#include "ops_test_helpers.h"

namespace {

struct Attention {
  Tensor q, k, v;
};

Attention random_attention(int64_t B, int64_t T, int64_t D, bool grad = true) {
  hg::manual_seed(11);
  Attention a{hg::randn({B, T, D}), hg::randn({B, T, D}), hg::randn({B, T, D})};
  if (grad)
    for (Tensor* t : {&a.q, &a.k, &a.v}) t->requires_grad_(true);
  return a;
}

// The most bytes held at once (beyond what was held before) by a forward and backward.
int64_t peak_bytes_of_a_step(int64_t T, double dropout_p) {
  const Attention a = random_attention(1, T, 16);
  const int64_t base = hg::memory::allocated();
  hg::memory::reset_peak();
  {
    const Tensor out = hg::scaled_dot_product_attention(a.q, a.k, a.v, {.dropout_p = dropout_p, .is_causal = true});
    hg::sum(out).backward();
  }
  return hg::memory::peak_allocated() - base;
}

struct ThreadCountGuard {
  int saved = hg::get_num_threads();
  ~ThreadCountGuard() { hg::set_num_threads(saved); }
};

}  // namespace

TEST_CASE("attention.fused_memory_grows_linearly_in_T_and_never_holds_the_score_matrix") {
  // The fused kernel saves O(T * D): doubling T doubles its peak; one f32 T x T score matrix
  // (what the composed path must hold) is more than the whole step needs.
  const int64_t fused_512 = peak_bytes_of_a_step(512, 0.0), fused_1024 = peak_bytes_of_a_step(1024, 0.0);
  CAPTURE(fused_512);
  CAPTURE(fused_1024);
  CHECK(fused_1024 < 512 * 512 * 4);
  CHECK(fused_1024 <= 2 * fused_512 + 4096);
  // With dropout too: the mask is redrawn from Philox's counters in backward, never stored.
  const int64_t dropout_512 = peak_bytes_of_a_step(512, 0.1), dropout_1024 = peak_bytes_of_a_step(1024, 0.1);
  CAPTURE(dropout_1024);
  CHECK(dropout_1024 < 512 * 512 * 4);
  CHECK(dropout_1024 <= 2 * dropout_512 + 4096);
  // The comparison can fail: the composed attention does hold the score matrix.
  const Attention a = random_attention(1, 512, 16);
  const int64_t base = hg::memory::allocated();
  hg::memory::reset_peak();
  {
    const Tensor p = hg::attention_probabilities(a.q, a.k, {}, true, 0.25);
    hg::sum(hg::matmul(p, a.v)).backward();
  }
  CHECK(hg::memory::peak_allocated() - base >= 512 * 512 * 4);
}

TEST_CASE("attention.fused_dropout_keeps_what_dropout_keeps_on_the_composed_path") {
  // The fused kernel draws element (b, i, j)'s mask where dropout() on the [batch, L, S]
  // probabilities would: with one seed, the composition softmax -> dropout -> matmul gives the
  // same output and gradients (70 rows: across the 64-row blocks).
  for (hg::DType dtype : {hg::f64, hg::f32})
    for (bool causal : {false, true}) {
      CAPTURE(causal);
      hg::manual_seed(21);
      const Tensor q = hg::randn({2, 3, 70, 8}, {.dtype = dtype}).requires_grad_(true),
                   k = hg::randn({2, 3, 70, 8}, {.dtype = dtype}).requires_grad_(true),
                   v = hg::randn({2, 3, 70, 5}, {.dtype = dtype}).requires_grad_(true);
      const Tensor g = hg::randn({2, 3, 70, 5}, {.dtype = dtype});
      hg::manual_seed(7);
      const Tensor fused = hg::scaled_dot_product_attention(q, k, v, {.dropout_p = 0.3, .is_causal = causal});
      fused.backward(g);
      const std::vector<double> fused_grads[] = {q.grad().to_vector<double>(), k.grad().to_vector<double>(),
                                                 v.grad().to_vector<double>()};
      for (const Tensor* t : {&q, &k, &v}) t->set_grad(Tensor());
      hg::manual_seed(7);
      const Tensor p = hg::dropout(hg::attention_probabilities(q, k, {}, causal, 1 / std::sqrt(8.0)), 0.3, true);
      const Tensor composed = hg::matmul(p, v);
      composed.backward(g);
      const Tolerance tol = dtype == hg::f64 ? Tolerance{1e-12, 1e-12} : Tolerance{2e-5, 2e-5};
      CHECK_CLOSE_WITH(fused, composed, tol);
      const Tensor* inputs[] = {&q, &k, &v};
      for (int i = 0; i < 3; ++i)
        CHECK_CLOSE_WITH(hg::from_vector(fused_grads[i], inputs[i]->shape()), inputs[i]->grad().to(hg::f64), tol);
    }
}

TEST_CASE("attention.dropout_replays_its_mask_under_manual_seed") {
  const Attention a = random_attention(2, 6, 4, false);
  auto run = [&](uint64_t seed, double p) {
    hg::manual_seed(seed);
    return hg::scaled_dot_product_attention(a.q, a.k, a.v, {.dropout_p = p});
  };
  const Tensor first = run(3, 0.5), again = run(3, 0.5), other = run(4, 0.5), none = run(3, 0.0);
  CHECK(first.to_vector<float>() == again.to_vector<float>());
  CHECK(first.to_vector<float>() != other.to_vector<float>());
  CHECK(first.to_vector<float>() != none.to_vector<float>());
  // p = 1 drops every probability: the output is 0.
  for (float x : run(3, 1.0).to_vector<float>()) CHECK(x == 0.f);
}

TEST_CASE("attention.a_fully_masked_row_is_nan_as_pytorch_and_leaves_the_others_alone") {
  const Attention a = random_attention(1, 3, 4, false);
  const Tensor mask = hg::from_vector<uint8_t>({1, 0, 0, /**/ 0, 0, 0, /**/ 1, 1, 1}, {3, 3});
  const std::vector<float> out = hg::scaled_dot_product_attention(a.q, a.k, a.v, {.attn_mask = mask}).to_vector<float>();
  // Row 0 sees key 0 only: its output is v[0].
  const std::vector<float> v = a.v.to_vector<float>();
  for (int d = 0; d < 4; ++d) CHECK(out[size_t(d)] == doctest::Approx(v[size_t(d)]).epsilon(1e-6));
  for (int d = 4; d < 8; ++d) CHECK(std::isnan(out[size_t(d)]));
  for (int d = 8; d < 12; ++d) CHECK(std::isfinite(out[size_t(d)]));
}

TEST_CASE("attention.the_result_does_not_depend_on_the_thread_count") {
  ThreadCountGuard guard;
  const Attention a = random_attention(3, 130, 8);
  auto run = [&](int threads) {
    hg::set_num_threads(threads);
    for (const Tensor* t : {&a.q, &a.k, &a.v}) t->set_grad(Tensor());
    const Tensor out = hg::scaled_dot_product_attention(a.q, a.k, a.v, {.is_causal = true});
    hg::sum(out * out).backward();
    std::vector<float> all = out.to_vector<float>();
    for (const Tensor* t : {&a.q, &a.k, &a.v})
      for (float x : t->grad().to_vector<float>()) all.push_back(x);
    return all;
  };
  CHECK(run(1) == run(2));
}
