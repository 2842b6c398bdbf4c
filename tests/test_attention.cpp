// scaled_dot_product_attention's behaviour beyond the op_db checks (values, gradients, 16-bit,
// strides and the PyTorch fixtures are there): the fused kernel's memory, which must grow
// linearly in T (FlashAttention's point), dropout that replays under manual_seed, the masked
// rows PyTorch defines, and the same result at every thread count.
#include <cmath>
#include <limits>
#include <utility>
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
  // same output and gradients (100 rows: across the 96-row blocks, 64-row for f64).
  for (hg::DType dtype : {hg::f64, hg::f32})
    for (bool causal : {false, true}) {
      CAPTURE(causal);
      hg::manual_seed(21);
      const Tensor q = hg::randn({2, 3, 100, 8}, {.dtype = dtype}).requires_grad_(true),
                   k = hg::randn({2, 3, 100, 8}, {.dtype = dtype}).requires_grad_(true),
                   v = hg::randn({2, 3, 100, 5}, {.dtype = dtype}).requires_grad_(true);
      const Tensor g = hg::randn({2, 3, 100, 5}, {.dtype = dtype});
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

// Causal with more keys than queries (top-left aligned, as PyTorch): keys past the last query are
// seen by none, so their gradients are zero -- the kernel writes dK and dV block by block and
// must zero the key blocks no query block reaches -- and the rest match the composed path.
TEST_CASE("attention.causal_keys_no_query_sees_get_zero_gradients") {
  for (const hg::DType dtype : {hg::f64, hg::f32, hg::bf16}) {
    CAPTURE(dtype);
    hg::manual_seed(31);
    const int64_t L = 100, S = 300;
    const Tensor q = hg::randn({2, L, 8}).to(dtype).detach().requires_grad_(true),
                 k = hg::randn({2, S, 8}).to(dtype).detach().requires_grad_(true),
                 v = hg::randn({2, S, 4}).to(dtype).detach().requires_grad_(true);
    const Tensor g = hg::randn({2, L, 4}).to(dtype);
    hg::scaled_dot_product_attention(q, k, v, {.is_causal = true}).backward(g);
    const std::vector<double> dk = k.grad().to_vector<double>(), dv = v.grad().to_vector<double>();
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t j = 0; j < S; ++j) {
        const bool seen = j < L;
        double k_sum = 0, v_sum = 0;
        for (int64_t e = 0; e < 8; ++e) k_sum += std::fabs(dk[size_t((b * S + j) * 8 + e)]);
        for (int64_t e = 0; e < 4; ++e) v_sum += std::fabs(dv[size_t((b * S + j) * 4 + e)]);
        if (!seen) {
          CHECK(k_sum == 0.0);
          CHECK(v_sum == 0.0);
        } else if (j < L - 1) {
          CHECK(v_sum > 0.0);  // (key L - 1 is seen by the last query only, with probability < 1)
        }
      }
    if (dtype != hg::f64) continue;
    const Tensor dk_fused = k.grad(), dv_fused = v.grad(), dq_fused = q.grad();
    for (const Tensor* t : {&q, &k, &v}) t->set_grad(Tensor());
    const Tensor mask = hg::tril(hg::ones({L, S}, {.dtype = hg::u8}));
    hg::scaled_dot_product_attention(q, k, v, {.attn_mask = mask}).backward(g);
    const Tolerance tol{1e-12, 1e-12};
    CHECK_CLOSE_WITH(dq_fused, q.grad(), tol);
    CHECK_CLOSE_WITH(dk_fused, k.grad(), tol);
    CHECK_CLOSE_WITH(dv_fused, v.grad(), tol);
  }
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

namespace {

// q, k, v as nn::MultiheadAttention makes them: [B, H, T, D] views of one [B, T, 3 * H * D]
// projection (strides (T*3*H*D, D, 3*H*D, 1)), leaves of their own so each gets a gradient.
std::vector<Tensor> head_views(int64_t B, int64_t H, int64_t T, int64_t D, hg::DType dtype) {
  const Tensor projection = hg::randn({B, T, 3 * H * D}, {.dtype = dtype});
  std::vector<Tensor> views;
  for (int64_t i = 0; i < 3; ++i)
    views.push_back(hg::as_strided(projection, {B, H, T, D}, {T * 3 * H * D, D, 3 * H * D, 1}, i * H * D));
  return views;
}

// The output, then dq, dk, dv, of one forward and backward, as f64 values (exact for f32 and f64).
std::vector<std::vector<double>> attention_step(const std::vector<Tensor>& qkv, const Tensor& grad,
                                                hg::ScaledDotProductAttentionOptions options) {
  std::vector<Tensor> leaves;
  for (const Tensor& t : qkv) leaves.push_back(t.detach().requires_grad_(true));
  hg::manual_seed(5);  // the dropout draws
  const Tensor out = hg::scaled_dot_product_attention(leaves[0], leaves[1], leaves[2], options);
  out.backward(grad);
  std::vector<std::vector<double>> values{out.to_vector<double>()};
  for (const Tensor& t : leaves) values.push_back(t.grad().to_vector<double>());
  return values;
}

}  // namespace

TEST_CASE("attention.strided_views_give_the_bits_of_their_contiguous_copies") {
  // The kernel reads compute-type operands with a contiguous last dim in place, through their
  // strides: only the addressing changes, so the bits must be those of .contiguous() copies --
  // forward, and backward (which reads the saved output and the incoming gradient the same way).
  const int64_t B = 2, H = 3, T = 100, D = 8;  // 100 rows: across the 96-row blocks (64 for f64)
  for (hg::DType dtype : {hg::f32, hg::f64}) {
    hg::manual_seed(31);
    const std::vector<Tensor> views = head_views(B, H, T, D, dtype);
    std::vector<Tensor> dense;
    for (const Tensor& t : views) dense.push_back(t.contiguous());
    // The gradient as heads merging back gives it: a [B, H, T, D] view of [B, T, H, D].
    const Tensor grad_buffer = hg::randn({B, T, H, D}, {.dtype = dtype});
    const Tensor grad = hg::as_strided(grad_buffer, {B, H, T, D}, {T * H * D, D, H * D, 1}, 0);
    const Tensor mask = hg::randn({T, T}, {.dtype = dtype});
    const hg::ScaledDotProductAttentionOptions cases[] = {
        {.is_causal = true}, {.attn_mask = mask}, {.dropout_p = 0.3, .is_causal = true}, {.attn_mask = mask, .dropout_p = 0.3}};
    for (const hg::ScaledDotProductAttentionOptions& options : cases) {
      CAPTURE(dtype);
      CAPTURE(options.is_causal);
      CAPTURE(options.dropout_p);
      CHECK(attention_step(views, grad, options) == attention_step(dense, grad.contiguous(), options));
    }
    // A last dim that is not contiguous (k^T's storage) is gathered: the same bits too.
    const Tensor k_columns = hg::randn({B, H, D, T}, {.dtype = dtype}).transpose(-1, -2);
    CHECK(attention_step({views[0], k_columns, views[2]}, grad, {.is_causal = true}) ==
          attention_step({dense[0], k_columns.contiguous(), dense[2]}, grad, {.is_causal = true}));
  }
}

TEST_CASE("attention.four_d_output_merges_heads_without_a_copy") {
  // [B, H, L, Ev] returned as the transpose of a contiguous [B, L, H, Ev] (kernels/attention.h):
  // nn::MultiheadAttention's transpose(1, 2).reshape({B, L, H * Ev}) is a view. 16-bit too.
  for (hg::DType dtype : {hg::f32, hg::bf16}) {
    CAPTURE(dtype);
    hg::manual_seed(3);
    const Tensor q = hg::randn({2, 3, 5, 4}).to(dtype), k = hg::randn({2, 3, 6, 4}).to(dtype),
                 v = hg::randn({2, 3, 6, 7}).to(dtype);
    const Tensor out = hg::scaled_dot_product_attention(q, k, v);
    CHECK(out.shape() == hg::Shape{2, 3, 5, 7});
    CHECK(out.transpose(1, 2).is_contiguous());
    const Tensor reference = hg::matmul(hg::softmax(hg::matmul(q.to(hg::f32), k.to(hg::f32).transpose(-1, -2)) * 0.5, -1),
                                        v.to(hg::f32));
    CHECK_CLOSE_WITH(out.to(hg::f32), reference, (dtype == hg::f32 ? Tolerance{1e-5, 1e-5} : Tolerance{2e-2, 2e-2}));
  }
}

// 16-bit inputs: the kernel multiplies 16-bit operands (Q, K, V, dO as given; P and dS rounded to
// the input's type before their products, FlashAttention-2's scheme) and accumulates in f32, so
// it is not an op that rounds once (op_db's 16-bit check): each output is within the rounding of
// P, u per probability (u = 2^-8 bf16, 2^-11 f16), of the f64 truth computed from the same
// rounded inputs, plus its own rounding: |y - t| <= u |t| + 2 u sum_j p_ij |v_jd|, the sum being
// attention over |v|. The gradients, through dS's rounding as well, within 8 u of the largest
// f64 gradient of their tensor. Blocks of 128 are crossed (T = 140), with and without causality,
// and with dropout (the same mask for every dtype: Philox's counters; its 16-bit P Z is rounded
// as a block, P without dropout row by row).
TEST_CASE("attention.16_bit_inputs_are_within_the_rounding_of_their_16_bit_operands") {
  for (const hg::DType dtype : {hg::bf16, hg::f16}) {
    for (const std::pair<bool, double>& setting : {std::pair{false, 0.0}, std::pair{true, 0.0}, std::pair{true, 0.3}}) {
      // (named copies, not structured bindings: Clang 14 cannot capture those in CAPTURE's lambda)
      const bool causal = setting.first;
      const double dropout_p = setting.second;
      CAPTURE(causal);
      CAPTURE(dropout_p);
      const double u = dtype == hg::bf16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11);
      hg::manual_seed(21);
      std::vector<Tensor> low, wide;
      for (int i = 0; i < 3; ++i) {
        low.push_back(hg::randn({2, 3, 140, 16}).to(dtype).detach().requires_grad_(true));
        wide.push_back(low.back().detach().to(hg::f64).requires_grad_(true));
      }
      const hg::ScaledDotProductAttentionOptions options{.dropout_p = dropout_p, .is_causal = causal};
      hg::manual_seed(7);
      const Tensor y = hg::scaled_dot_product_attention(low[0], low[1], low[2], options);
      hg::manual_seed(7);
      const Tensor t = hg::scaled_dot_product_attention(wide[0], wide[1], wide[2], options);
      hg::manual_seed(7);
      const Tensor weight =
          hg::scaled_dot_product_attention(wide[0].detach(), wide[1].detach(), hg::abs(wide[2].detach()), options);
      CHECK(y.dtype() == dtype);
      const std::vector<double> a = y.to_vector<double>(), truth = t.to_vector<double>(), w = weight.to_vector<double>();
      int64_t outside = 0;
      for (size_t i = 0; i < a.size(); ++i) outside += std::fabs(a[i] - truth[i]) > u * std::fabs(truth[i]) + 2 * u * w[i];
      CHECK(outside == 0);
      hg::manual_seed(22);
      const Tensor g = hg::randn(y.shape()).to(dtype);
      y.backward(g);
      t.backward(g.to(hg::f64));
      for (int i = 0; i < 3; ++i) {
        CAPTURE(i);
        REQUIRE(low[size_t(i)].grad().dtype() == dtype);
        const std::vector<double> got = low[size_t(i)].grad().to_vector<double>(),
                                  expected = wide[size_t(i)].grad().to_vector<double>();
        double largest = 0, error = 0;
        for (size_t e = 0; e < got.size(); ++e)
          largest = std::max(largest, std::fabs(expected[e])), error = std::max(error, std::fabs(got[e] - expected[e]));
        CHECK(error <= 8 * u * largest);
      }
    }
  }
}
