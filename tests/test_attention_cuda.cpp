// The fused CUDA attention kernel (kernels/cuda/attention.cu) against the CPU kernel
// (kernels/attention.cpp) on the same inputs: the output and dq, dk, dv of
// scaled_dot_product_attention in f32, f64, f16 and bf16; causal; float and boolean masks that
// broadcast ([L, S] and [B, 1, 1, S]); a fully masked row; L != S, E != Ev, lengths that are not
// whole blocks (77); dropout, whose mask the same seed must draw on both devices; the composed
// fallback past 128 features and in deterministic mode. Every case skips itself without a GPU
// (scripts/gpu-check.sh runs them on one).
//
// Tolerances: f32 and f64 as test_cuda.cpp's Gemm exception (the block products sum in another
// order than the CPU GEMM: f32 rtol 1e-5, atol 5e-5; f64 T(f64)). f16 and bf16: the tensor-core
// products take the probabilities P and the score gradients dS rounded to 16 bits, which the CPU
// keeps in f32 (FlashAttention rounds them too); the output allows 2 rtol and two 16-bit ulps at
// magnitude 1, the gradients 2 rtol and an atol of 2 rtol times their largest magnitude, because
// their sums cancel (each row of dS sums to 0), so a small gradient carries its row's error.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "test_support.h"

using hg::Tensor;

#define SKIP_WITHOUT_GPU doctest::skip(!hg_test::cuda_available())

namespace {

const hg::Device kCpu = hg::Device::cpu();
constexpr hg::DType kAllFloatTypes[] = {hg::f32, hg::f64, hg::f16, hg::bf16};

struct Inputs {
  Tensor q, k, v, grad;  // [B, H, L, E], [B, H, S, E], [B, H, S, Ev], [B, H, L, Ev]
};

Inputs random_inputs(hg::DType dtype, int64_t B, int64_t H, int64_t L, int64_t S, int64_t E, int64_t Ev) {
  hg::manual_seed(29);
  return {hg::randn({B, H, L, E}).to(dtype), hg::randn({B, H, S, E}).to(dtype), hg::randn({B, H, S, Ev}).to(dtype),
          hg::randn({B, H, L, Ev}).to(dtype)};
}

struct Result {
  Tensor out, dq, dk, dv;  // on the CPU
};

// One forward and backward on `device`; the generator is seeded first, so both devices draw
// the same dropout stream.
Result run(hg::Device device, const Inputs& in, hg::ScaledDotProductAttentionOptions options) {
  const auto leaf = [&](const Tensor& t) {
    Tensor copy = t.to(device).detach();
    copy.requires_grad_();
    return copy;
  };
  const Tensor q = leaf(in.q), k = leaf(in.k), v = leaf(in.v);
  if (options.attn_mask.defined()) options.attn_mask = options.attn_mask.to(device);
  hg::manual_seed(7);
  const Tensor out = hg::scaled_dot_product_attention(q, k, v, options);
  out.backward(in.grad.to(device));
  return {out.to(kCpu), q.grad().to(kCpu), k.grad().to(kCpu), v.grad().to(kCpu)};
}

hg_test::Tolerance output_tolerance(hg::DType dtype) {
  if (dtype == hg::f32) return {1e-5, 5e-5};
  if (dtype == hg::f64) return hg_test::tolerance_for(dtype);
  const double ulp_at_one = dtype == hg::f16 ? 0x1p-10 : 0x1p-7;
  return {2 * hg_test::tolerance_for(dtype).rtol, 2 * ulp_at_one};
}

hg_test::Tolerance gradient_tolerance(hg::DType dtype, const Tensor& expected) {
  if (!hg::is_16bit_floating(dtype)) return output_tolerance(dtype);
  const double rtol = 2 * hg_test::tolerance_for(dtype).rtol;
  double largest = 0;
  for (double value : expected.to(hg::f64).to_vector<double>())
    if (std::isfinite(value)) largest = std::max(largest, std::abs(value));
  return {rtol, rtol * largest};
}

void expect_close(const Tensor& actual, const Tensor& expected, hg_test::Tolerance tol, const std::string& what) {
  INFO(what);
  const auto report = hg_test::compare(actual, expected, tol, /*equal_nan=*/true);
  CHECK_MESSAGE(!report.has_value(), report.value_or(""));
}

// The CUDA kernel's output and gradients against the CPU kernel's, from the same inputs.
void check_matches_cpu(const Inputs& in, const hg::ScaledDotProductAttentionOptions& options) {
  const hg::DType dtype = in.q.dtype();
  const Result cpu = run(kCpu, in, options), cuda = run(hg::Device::cuda(), in, options);
  REQUIRE(cuda.out.dtype() == dtype);
  expect_close(cuda.out, cpu.out, output_tolerance(dtype), "output");
  expect_close(cuda.dq, cpu.dq, gradient_tolerance(dtype, cpu.dq), "dq");
  expect_close(cuda.dk, cpu.dk, gradient_tolerance(dtype, cpu.dk), "dk");
  expect_close(cuda.dv, cpu.dv, gradient_tolerance(dtype, cpu.dv), "dv");
}

struct DeterministicScope {
  bool previous = hg::are_deterministic_algorithms_enabled();
  explicit DeterministicScope(bool on) { hg::use_deterministic_algorithms(on); }
  ~DeterministicScope() { hg::use_deterministic_algorithms(previous); }
};

std::string name_of(hg::DType dtype) { return std::string(hg::dtype_name(dtype)); }

// A boolean mask of the given shape: element e takes part when keep(e).
template <class Keep>
Tensor bool_mask(hg::Shape shape, Keep keep) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::vector<uint8_t> values(static_cast<size_t>(n));
  for (int64_t e = 0; e < n; ++e) values[size_t(e)] = keep(e) ? 1 : 0;
  return hg::from_vector(values, shape);
}

}  // namespace

TEST_CASE("cuda.attention.fused_kernel_matches_cpu_kernel" * SKIP_WITHOUT_GPU) {
  for (hg::DType dtype : kAllFloatTypes) SUBCASE(name_of(dtype).c_str()) {
    SUBCASE("77 x 77, 32 features") { check_matches_cpu(random_inputs(dtype, 2, 3, 77, 77, 32, 32), {}); }
    SUBCASE("causal, 77 x 77") { check_matches_cpu(random_inputs(dtype, 2, 2, 77, 77, 16, 16), {.is_causal = true}); }
    SUBCASE("causal, L = 50 < S = 77") {
      check_matches_cpu(random_inputs(dtype, 1, 2, 50, 77, 16, 16), {.is_causal = true});
    }
    SUBCASE("L = 40, S = 70, E = 24, Ev = 40, scale 0.3") {
      check_matches_cpu(random_inputs(dtype, 2, 1, 40, 70, 24, 40), {.scale = 0.3});
    }
    SUBCASE("128 features, the kernel's largest") { check_matches_cpu(random_inputs(dtype, 1, 2, 70, 45, 128, 128), {}); }
    SUBCASE("odd sizes: E = 3, Ev = 5, L = 1, S = 1") { check_matches_cpu(random_inputs(dtype, 1, 1, 1, 1, 3, 5), {}); }
  }
}

TEST_CASE("cuda.attention.masks_match_cpu_kernel" * SKIP_WITHOUT_GPU) {
  const int64_t B = 2, H = 2, L = 77, S = 77;
  for (hg::DType dtype : kAllFloatTypes) SUBCASE(name_of(dtype).c_str()) {
    const Inputs in = random_inputs(dtype, B, H, L, S, 16, 16);
    SUBCASE("float mask [L, S], broadcast over batch and heads") {
      hg::manual_seed(30);
      check_matches_cpu(in, {.attn_mask = hg::randn({L, S}).to(dtype)});
    }
    SUBCASE("boolean padding mask [B, 1, 1, S]") {
      // Batch entry 1 sees only its first 60 keys.
      check_matches_cpu(in, {.attn_mask = bool_mask({B, 1, 1, S}, [&](int64_t e) { return e / S == 0 || e % S < 60; })});
    }
    SUBCASE("boolean mask [L, S] with a fully masked row") {
      // Row 5 sees no key: its output is NaN and so are the gradients it reaches, on both devices.
      const Tensor mask = bool_mask({L, S}, [&](int64_t e) { return e / S != 5 && (e * 7) % 5 < 3; });
      const Result cuda = run(hg::Device::cuda(), in, {.attn_mask = mask});
      CHECK(std::isnan(cuda.out.to(hg::f64).to_vector<double>()[5 * 16]));
      check_matches_cpu(in, {.attn_mask = mask});
    }
  }
}

TEST_CASE("cuda.attention.dropout_draws_the_cpu_mask" * SKIP_WITHOUT_GPU) {
  for (hg::DType dtype : kAllFloatTypes) SUBCASE(name_of(dtype).c_str()) {
    const Inputs in = random_inputs(dtype, 2, 2, 77, 45, 16, 24);
    SUBCASE("p = 0.3") { check_matches_cpu(in, {.dropout_p = 0.3}); }
    SUBCASE("p = 0.3, causal") { check_matches_cpu(in, {.dropout_p = 0.3, .is_causal = true}); }
    SUBCASE("dropout changes the output") {
      const Result dropped = run(hg::Device::cuda(), in, {.dropout_p = 0.3}), kept = run(hg::Device::cuda(), in, {});
      CHECK(hg_test::compare(dropped.out, kept.out, output_tolerance(dtype)).has_value());
    }
  }
}

TEST_CASE("cuda.attention.composed_path_past_128_features_and_in_deterministic_mode" * SKIP_WITHOUT_GPU) {
  SUBCASE("E = 160") { check_matches_cpu(random_inputs(hg::f32, 1, 2, 33, 33, 160, 16), {.is_causal = true}); }
  SUBCASE("deterministic mode") {  // the fused backward's dq atomics would refuse
    const DeterministicScope on(true);
    check_matches_cpu(random_inputs(hg::f32, 1, 2, 33, 33, 16, 16), {.is_causal = true});
  }
}
