// The FP8 recipes on a GPU (amp/fp8.h, kernels/cuda/fp8.h): the CUDA quantiser against the CPU
// quantiser, bit for bit; linear and matmul on cuBLASLt's FP8 GEMM (sm_89+) against the CPU
// emulation, forward and backward, under delayed and current scaling, in f32 and under a bf16
// autocast; the GEMM's amax output; and the errors for what cuBLASLt's FP8 GEMM cannot do. Every
// case skips itself without a GPU (the GEMM cases also on a GPU below sm_89).
//
// Tolerance of the FP8 GEMM against the emulation: both multiply the same FP8 values (scaled by
// powers of two), whose products are exact in f32, and differ only in how the K products are
// summed. NOTE: Hopper's FP8 tensor cores keep ~14 bits inside a block of K products before
// cuBLASLt promotes the partial sum to f32 (DeepSeek-V3, section 3.3.2), so the bound is 2^-11
// of the sum of |products| (|a| |b| summed over K), plus one bf16 rounding for bf16 outputs.
#include <cmath>
#include <string>
#include <vector>

#include "kernels/cuda/fp8.h"
#include "fp8_test_values.h"
#include "test_support.h"

using hg::Tensor;
using hg::amp::Fp8Autocast;
using hg::amp::Fp8Recipe;
using hg::amp::Fp8Scaling;
using hg::amp::Fp8State;

namespace {

const hg::Device kCpu = hg::Device::cpu();
hg::Device gpu() { return hg::Device::cuda(); }
bool fp8_gpu() { return hg_test::cuda_available() && hg::kernels::cuda::fp8_gemm_supported(gpu()); }

#define SKIP_WITHOUT_GPU doctest::skip(!hg_test::cuda_available())
#define SKIP_WITHOUT_FP8_GPU doctest::skip(!fp8_gpu())


bool same_float(float a, float b) { return (std::isnan(a) && std::isnan(b)) || a == b; }

// |actual - expected| <= 2^-11 * bound + rtol * |expected| everywhere (see the top of the file).
void expect_within_sum_of_products(const Tensor& actual, const Tensor& expected, const Tensor& bound, double rtol,
                                   const std::string& what) {
  INFO(what);
  REQUIRE(actual.shape() == expected.shape());
  const std::vector<float> a = actual.to(kCpu).to(hg::f32).to_vector<float>();
  const std::vector<float> e = expected.to(kCpu).to(hg::f32).to_vector<float>();
  const std::vector<float> b = bound.to(kCpu).to(hg::f32).to_vector<float>();
  int64_t bad = 0, first = -1;
  for (size_t i = 0; i < a.size(); ++i)
    if (!(std::fabs(double(a[i]) - e[i]) <= 0x1p-11 * b[i] + rtol * std::fabs(double(e[i])) + 1e-30)) {
      if (first < 0) first = int64_t(i);
      ++bad;
    }
  CHECK_MESSAGE(bad == 0, bad, " of ", a.size(), " elements off; first at ", first, ": ",
                first >= 0 ? a[size_t(first)] : 0.0f, " vs ", first >= 0 ? e[size_t(first)] : 0.0f);
}

// One linear (or matmul) step under a recipe on `device`, twice (so delayed scaling runs once from
// its empty history and once from the first step's amaxes): the second step's output and
// gradients, and the state.
struct Step {
  Tensor y, grad_x, grad_w, grad_b;
  Fp8State state;
};

Step run_steps(bool matmul, const Fp8Recipe& recipe, bool bf16_autocast, hg::Device device, const Tensor& x0,
               const Tensor& w0, const Tensor& b0, const Tensor& g0) {
  Step s{{}, {}, {}, {}, Fp8State(recipe)};
  for (int step = 0; step < 2; ++step) {
    const Tensor x = x0.to(device).requires_grad_(), w = w0.to(device).requires_grad_();
    const Tensor b = matmul ? Tensor() : b0.to(device).requires_grad_();
    Tensor y;
    {
      Fp8Autocast guard(s.state);
      hg::amp::Autocast autocast(hg::bf16, bf16_autocast);
      y = matmul ? hg::matmul(x, w) : hg::linear(x, w, b);
    }
    y.backward(g0.to(device).to(y.dtype()));
    s.y = y.to(kCpu);
    s.grad_x = x.grad().to(kCpu);
    s.grad_w = w.grad().to(kCpu);
    if (!matmul) s.grad_b = b.grad().to(kCpu);
  }
  return s;
}

void expect_same_states(const Fp8State& gpu_state, const Fp8State& cpu_state) {
  REQUIRE(gpu_state.slots().size() == cpu_state.slots().size());
  for (size_t k = 0; k < gpu_state.slots().size(); ++k) {
    const hg::amp::Fp8Slot &a = *gpu_state.slots()[k], &b = *cpu_state.slots()[k];
    CHECK(a.input.amax_history == b.input.amax_history);
    CHECK(a.weight.amax_history == b.weight.amax_history);
    CHECK(a.grad.amax_history == b.grad.amax_history);
    CHECK(a.input.scale == b.input.scale);
    CHECK(a.weight.scale == b.weight.scale);
    CHECK(a.grad.scale == b.grad.scale);
  }
}

Tensor abs_product(const Tensor& a, const Tensor& b) { return hg::matmul(hg::abs(a), hg::abs(b)); }

}  // namespace

TEST_CASE("cuda.fp8.quantiser_equals_the_cpu_quantiser_bit_for_bit" * SKIP_WITHOUT_GPU) {
  hg::manual_seed(5);
  const Tensor finite = hg::randn({333, 17}) * 3.0;  // a current scale that is not 1
  for (const Tensor& source : {hg_test::fp8_awkward_values(), finite})
    for (const hg::DType dtype : {hg::f32, hg::f16, hg::bf16, hg::f64})
      for (const hg::DType format : {hg::f8e4m3, hg::f8e5m2})
        for (const float fixed : {0.0f, 1.0f, 0x1p-3f, 0x1p+5f})
          for (const int margin : {0, 2}) {
            CAPTURE(dtype);
            CAPTURE(format);
            CAPTURE(fixed);
            CAPTURE(margin);
            const Tensor x = source.to(dtype);
            const float* fixed_scale = fixed > 0 ? &fixed : nullptr;
            const auto cpu = hg::amp::fp8_quantise(x, format, 0, 0, margin, fixed_scale);
            const auto dev = hg::amp::fp8_quantise(x.to(gpu()), format, 0, 0, margin, fixed_scale);
            CHECK(dev.values.device() == gpu());
            const auto mismatch = hg_test::compare(dev.values.to(kCpu), cpu.values, {0, 0}, /*equal_nan=*/true);
            CHECK_MESSAGE(!mismatch, mismatch.value_or(""));
            REQUIRE(dev.amaxes.size() == 1);
            CHECK(same_float(dev.amaxes[0], cpu.amaxes[0]));
            CHECK(dev.scales[0] == cpu.scales[0]);
            // The kernel's own outputs: FP8 codes whose values over the scale are the CPU's values,
            // and the scale and its inverse on the device.
            const auto raw = hg::kernels::cuda::fp8_quantise(x.to(gpu()), format, margin, fixed_scale, false);
            CHECK(raw.codes.dtype() == format);
            CHECK(raw.scale.item<float>() == cpu.scales[0]);
            CHECK(raw.scale_inv.item<float>() == 1.0f / cpu.scales[0]);
            const Tensor decoded = raw.codes.to(kCpu).to(hg::f32) / double(cpu.scales[0]);
            const auto code_mismatch = hg_test::compare(decoded, cpu.values, {0, 0}, true);
            CHECK_MESSAGE(!code_mismatch, code_mismatch.value_or(""));
          }
}

TEST_CASE("cuda.fp8.quantiser_handles_empty_and_zero_tensors" * SKIP_WITHOUT_GPU) {
  const auto empty = hg::amp::fp8_quantise(hg::zeros({0, 16}, {.device = gpu()}), hg::f8e4m3, 0, 0);
  CHECK(empty.values.shape() == hg::Shape{0, 16});
  CHECK(empty.amaxes[0] == 0.0f);
  CHECK(empty.scales[0] == 1.0f);
  const auto zeros = hg::amp::fp8_quantise(hg::zeros({4, 4}, {.device = gpu()}), hg::f8e5m2, 0, 0);
  CHECK(zeros.scales[0] == 1.0f);
  CHECK(hg::sum(hg::abs(zeros.values)).item<float>() == 0.0f);
}

TEST_CASE("cuda.fp8.linear_on_fp8_tensor_cores_matches_the_emulation_forward_and_backward" * SKIP_WITHOUT_FP8_GPU) {
  hg::manual_seed(0);
  const Tensor x = hg::randn({4, 16, 96}), w = hg::randn({48, 96}) * 0.1, b = hg::randn({48});
  const Tensor g = hg::randn({4, 16, 48}) * 1e-3;
  const Tensor x2 = x.reshape({64, 96}), g2 = g.reshape({64, 48});
  for (const Fp8Scaling scaling : {Fp8Scaling::Delayed, Fp8Scaling::Current})
    for (const bool bf16_autocast : {false, true}) {
      CAPTURE(int(scaling));
      CAPTURE(bf16_autocast);
      const Fp8Recipe recipe{.scaling = scaling, .amax_history_len = 4};
      const Step cpu = run_steps(false, recipe, bf16_autocast, kCpu, x, w, b, g);
      const Step dev = run_steps(false, recipe, bf16_autocast, gpu(), x, w, b, g);
      const double rtol = bf16_autocast ? 0x1p-7 : 0.0;  // one bf16 rounding apart at most
      CHECK(dev.y.dtype() == cpu.y.dtype());
      // y - b is the product; the bias is added after it in the same way on both devices.
      const Tensor bias_bound = hg::abs(b).reshape({1, 1, 48}) * 0x1p-9;
      expect_within_sum_of_products(dev.y, cpu.y, abs_product(x, w.transpose(0, 1)) + bias_bound, rtol, "y");
      expect_within_sum_of_products(dev.grad_x, cpu.grad_x, abs_product(g, w), rtol, "grad_x");
      expect_within_sum_of_products(dev.grad_w, cpu.grad_w, abs_product(g2.transpose(0, 1), x2), rtol, "grad_w");
      CHECK_CLOSE_TOL(dev.grad_b, cpu.grad_b, 1e-5, 1e-7);
      // The same amaxes went into the same histories, and the same scales came out.
      expect_same_states(dev.state, cpu.state);
    }
}

TEST_CASE("cuda.fp8.matmul_on_fp8_tensor_cores_matches_the_emulation_forward_and_backward" * SKIP_WITHOUT_FP8_GPU) {
  hg::manual_seed(1);
  const Tensor a = hg::randn({32, 64}), b = hg::randn({64, 48}) * 0.1, g = hg::randn({32, 48}) * 1e-2;
  for (const Fp8Scaling scaling : {Fp8Scaling::Delayed, Fp8Scaling::Current}) {
    CAPTURE(int(scaling));
    const Fp8Recipe recipe{.scaling = scaling, .formats = hg::amp::Fp8Formats::Hybrid, .amax_history_len = 4};
    const Step cpu = run_steps(true, recipe, false, kCpu, a, b, Tensor(), g);
    const Step dev = run_steps(true, recipe, false, gpu(), a, b, Tensor(), g);
    expect_within_sum_of_products(dev.y, cpu.y, abs_product(a, b), 0, "y");
    expect_within_sum_of_products(dev.grad_x, cpu.grad_x, abs_product(g, b.transpose(0, 1)), 0, "grad_a");
    expect_within_sum_of_products(dev.grad_w, cpu.grad_w, abs_product(a.transpose(0, 1), g), 0, "grad_b");
    expect_same_states(dev.state, cpu.state);
  }
}

TEST_CASE("cuda.fp8.shapes_the_fp8_gemm_cannot_take_run_emulated" * SKIP_WITHOUT_GPU) {
  // M = 10 is not a multiple of 16: the emulation runs (on cuBLASLt's f32 GEMM), on any GPU.
  hg::manual_seed(2);
  const Tensor x = hg::randn({10, 40}), w = hg::randn({24, 40}) * 0.1;
  const Fp8Recipe recipe{.scaling = Fp8Scaling::Current};
  const Step cpu = run_steps(false, recipe, false, kCpu, x, w, hg::zeros({24}), hg::ones({10, 24}));
  const Step dev = run_steps(false, recipe, false, gpu(), x, w, hg::zeros({24}), hg::ones({10, 24}));
  CHECK_CLOSE_TOL(dev.y, cpu.y, 1e-5, 5e-5);
  CHECK_CLOSE_TOL(dev.grad_x, cpu.grad_x, 1e-5, 5e-5);
  CHECK_CLOSE_TOL(dev.grad_w, cpu.grad_w, 1e-5, 5e-5);
  expect_same_states(dev.state, cpu.state);
}

TEST_CASE("cuda.fp8.gemm_amax_output_is_the_largest_magnitude_of_d" * SKIP_WITHOUT_FP8_GPU) {
  hg::manual_seed(4);
  const auto a = hg::kernels::cuda::fp8_quantise(hg::randn({64, 32}, {.device = gpu()}), hg::f8e4m3, 0, nullptr, false);
  const auto b = hg::kernels::cuda::fp8_quantise(hg::randn({48, 32}, {.device = gpu()}), hg::f8e4m3, 0, nullptr, false);
  for (const hg::DType out_dtype : {hg::f32, hg::bf16}) {
    CAPTURE(out_dtype);
    const Tensor out = hg::empty({64, 48}, {.dtype = out_dtype, .device = gpu()});
    const Tensor amax = hg::empty({}, {.device = gpu()});
    hg::kernels::cuda::fp8_gemm(a.codes, a.scale_inv, b.codes, b.scale_inv, out, amax);
    const float largest = hg::amax(hg::abs(out.to(hg::f32)).reshape({64 * 48}), 0).item<float>();
    // cuBLASLt takes the amax of the f32 results, before the bf16 rounding of D.
    CHECK(std::fabs(amax.item<float>() - largest) <= (out_dtype == hg::bf16 ? 0x1p-8 * largest : 0.0f));
  }
}

TEST_CASE("cuda.fp8.fp8_gemm_refuses_what_cublaslt_cannot_do" * SKIP_WITHOUT_GPU) {
  const auto codes = [](int64_t rows, int64_t cols, hg::DType format) {
    return hg::kernels::cuda::fp8_quantise(hg::randn({rows, cols}, {.device = gpu()}), format, 0, nullptr, false);
  };
  const auto e4 = codes(32, 32, hg::f8e4m3), e5 = codes(32, 32, hg::f8e5m2), odd = codes(24, 40, hg::f8e4m3);
  const Tensor out = hg::empty({32, 32}, {.device = gpu()}), out24 = hg::empty({24, 32}, {.device = gpu()});
  using hg::kernels::cuda::fp8_gemm;
  CHECK_THROWS_WITH_AS(fp8_gemm(e5.codes, e5.scale_inv, e5.codes, e5.scale_inv, out, {}),
                       doctest::Contains("no f8e5m2 x f8e5m2"), hg::Error);
  CHECK_THROWS_WITH_AS(fp8_gemm(odd.codes, odd.scale_inv, e4.codes, e4.scale_inv, out24, {}),
                       doctest::Contains("expected a (M, K), b (N, K)"), hg::Error);
  const auto k40 = codes(32, 40, hg::f8e4m3);
  const Tensor out_24_32 = hg::empty({24, 32}, {.device = gpu()});
  CHECK_THROWS_WITH_AS(fp8_gemm(odd.codes, odd.scale_inv, k40.codes, k40.scale_inv, out_24_32, {}),
                       doctest::Contains("multiples of 16"), hg::Error);
  CHECK_THROWS_WITH_AS(fp8_gemm(e4.codes, e4.scale_inv, e4.codes, e4.scale_inv,
                                hg::empty({32, 32}, {.dtype = hg::f16, .device = gpu()}), {}),
                       doctest::Contains("must be f32 or bf16"), hg::Error);
  const Tensor f32_operand = hg::randn({32, 32}, {.device = gpu()});
  CHECK_THROWS_WITH_AS(fp8_gemm(f32_operand, e4.scale_inv, e4.codes, e4.scale_inv, out, {}),
                       doctest::Contains("must be f8e4m3 or f8e5m2"), hg::Error);
  if (!hg::kernels::cuda::fp8_gemm_supported(gpu()))
    CHECK_THROWS_WITH_AS(fp8_gemm(e4.codes, e4.scale_inv, e4.codes, e4.scale_inv, out, {}),
                         doctest::Contains("compute capability 8.9"), hg::Error);
  else
    CHECK_NOTHROW(fp8_gemm(e4.codes, e4.scale_inv, e5.codes, e5.scale_inv, out, {}));  // E4M3 x E5M2 is allowed
}
