// ops_bench: forward+backward time of the ops that dominate training (linear, conv2d,
// softmax + cross_entropy) at the MLP and CNN sizes of hg-train, in f32, f16 and bf16; and GEMM
// throughput at 256/512/1024 next to the fp32 FMA peak of the CPU level in use (an AVX-512 loop
// for avx512*, an AVX2 loop for avx2), measured here with a register-resident FMA loop; and the
// 3x3 stride-1 convolutions of ResNet-20 on the CPU algorithms: im2col + GEMM, Winograd, the
// direct convolution on wide rows, and for the input gradient also the convolution of dy with the
// flipped weight; and their weight gradient (im2col + GEMM, wide rows). --dropout: the cost of
// dropout's mask, per element. --math: the vectorised math (kernels/cpu/vector_math.h) at the
// CPU level in use, ns per value, next to libm's scalar function where libm has one.
//
//   build/bench/ops_bench [--threads N] [--conv3x3 | --dropout | --math]   HG_CPU_ISA=avx2 build/bench/ops_bench
//   (--conv3x3, --dropout, --math: that table alone)
#include <cmath>
#include <cstring>
#include <vector>

#include "bench_util.h"
#include "core/cpu_features.h"
#include "core/simd_target.h"
#include "halfgrad.h"
#include "kernels/cpu/conv_wide_rows.h"
#include "kernels/cpu/vector_math.h"
#include "kernels/cpu/winograd_conv.h"
#include "kernels/dropout.h"

#if HG_X86
#include <immintrin.h>
#endif

namespace {

// ---- the CPU's fp32 FMA peak: independent FMA chains that never touch memory ------------------

#if HG_X86
HG_TARGET_BEGIN(HG_AVX512_FEATURES)
double fma_peak_avx512(int64_t iterations) {
  __m512 acc[12];
  for (int k = 0; k < 12; ++k) acc[k] = _mm512_set1_ps(float(k));
  const __m512 a = _mm512_set1_ps(0.9999f), b = _mm512_set1_ps(1e-7f);
  const auto start = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < iterations; ++i)
    for (int k = 0; k < 12; ++k) acc[k] = _mm512_fmadd_ps(acc[k], a, b);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  alignas(64) float lanes[16];
  float sink = 0;
  for (int k = 0; k < 12; ++k) {
    _mm512_store_ps(lanes, acc[k]);
    for (float v : lanes) sink += v;
  }
  if (sink == 42.0f) std::puts("");  // keeps the loop alive
  return double(iterations) * 12 * 16 * 2 / seconds / 1e9;
}
HG_TARGET_END

HG_TARGET_BEGIN(HG_AVX2_FEATURES)
double fma_peak_avx2(int64_t iterations) {
  __m256 acc[12];
  for (int k = 0; k < 12; ++k) acc[k] = _mm256_set1_ps(float(k));
  const __m256 a = _mm256_set1_ps(0.9999f), b = _mm256_set1_ps(1e-7f);
  const auto start = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < iterations; ++i)
    for (int k = 0; k < 12; ++k) acc[k] = _mm256_fmadd_ps(acc[k], a, b);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  alignas(32) float lanes[8];
  float sink = 0;
  for (int k = 0; k < 12; ++k) {
    _mm256_store_ps(lanes, acc[k]);
    for (float v : lanes) sink += v;
  }
  if (sink == 42.0f) std::puts("");
  return double(iterations) * 12 * 8 * 2 / seconds / 1e9;
}
HG_TARGET_END
#endif  // HG_X86

// The peak of the vector FMA the CPU level in use has, per core: the best of `runs` short runs
// (~25 ms each; on a shared machine a single run may land in another tenant's burst). 0 where no
// loop is written for the level.
double fma_peak_gflops(int runs) {
  [[maybe_unused]] const int64_t iterations = 12'500'000;
  double best = 0;
  for (int r = 0; r < runs; ++r) {
#if HG_X86
    if (hg::cpu::supports(hg::cpu::Isa::Avx512)) best = std::max(best, fma_peak_avx512(iterations));
    else if (hg::cpu::supports(hg::cpu::Isa::Avx2)) best = std::max(best, fma_peak_avx2(iterations));
#endif
  }
  return best;
}

// ---- op timings ------------------------------------------------------------------------------

void op_table() {
  std::printf("\n| op (forward + backward) | shape | f32 ms | f16 ms | bf16 ms |\n|---|---|---|---|---|\n");
  // Each case builds its inputs for a dtype once and returns the timed forward (a scalar loss).
  using Forward = std::function<hg::Tensor()>;
  struct Case {
    const char* name;
    const char* shape;
    std::function<Forward(hg::DType)> setup;
  };
  hg::manual_seed(0);
  const auto param = [](hg::Shape s, hg::DType d) { return (hg::randn(s) * 0.05).to(d).detach().requires_grad_(); };
  const auto input = [](hg::Shape s, hg::DType d) { return hg::randn(s).to(d).detach().requires_grad_(); };
  const auto linear_case = [&](int64_t n, int64_t in, int64_t out) {
    return [=](hg::DType d) -> Forward {
      const auto x = input({n, in}, d), w = param({out, in}, d), b = param({out}, d);
      return [=] { return hg::sum(hg::linear(x, w, b)); };
    };
  };
  const auto conv_case = [&](int64_t n, int64_t c, int64_t hw, int64_t o) {
    return [=](hg::DType d) -> Forward {
      const auto x = input({n, c, hw, hw}, d), w = param({o, c, 3, 3}, d), b = param({o}, d);
      return [=] { return hg::sum(hg::conv2d(x, w, b, {.padding = 1})); };
    };
  };
  const std::vector<Case> cases = {
      {"linear", "128x784 -> 256", linear_case(128, 784, 256)},
      {"linear", "128x256 -> 128", linear_case(128, 256, 128)},
      {"linear", "128x128 -> 10", linear_case(128, 128, 10)},
      {"conv2d", "128x1x28x28, 1->16 3x3 p1", conv_case(128, 1, 28, 16)},
      {"conv2d", "128x16x14x14, 16->32 3x3 p1", conv_case(128, 16, 14, 32)},
      {"softmax+cross_entropy", "128x10", [&](hg::DType d) -> Forward {
         const auto x = input({128, 10}, d);
         const auto y = hg::randint(0, 10, {128}, {.dtype = hg::i64});
         return [=] { return hg::cross_entropy(x, y); };
       }},
  };
  for (const Case& c : cases) {
    double ms[3];
    int k = 0;
    for (hg::DType d : {hg::f32, hg::f16, hg::bf16}) {
      const Forward forward = c.setup(d);
      ms[k++] = 1e3 * hg_bench::time_it([&] { forward().backward(); });
    }
    std::printf("| %s | %s | %.3f | %.3f | %.3f |\n", c.name, c.shape, ms[0], ms[1], ms[2]);
  }
}

// GEMM GFLOP/s: the median run, and the best run as a share of the FMA peak. NOTE: the peak is
// re-measured right before each size and the best of all its runs is used, so a burst of load
// during one measurement cannot make the GEMM look faster than the hardware (both are best-of).
void gemm_table(double& peak_per_core) {
  struct Row {
    int64_t n;
    double f32_median, f32_best, bf16, f16;  // GFLOP/s
  };
  std::vector<Row> rows;
  for (int64_t n : {256, 512, 1024}) {
    peak_per_core = std::max(peak_per_core, fma_peak_gflops(3));
    const double flops = 2.0 * double(n * n * n);
    Row row{n, 0, 0, 0, 0};
    for (hg::DType d : {hg::f32, hg::bf16, hg::f16}) {
      const hg::Tensor a = hg::randn({n, n}).to(d), b = hg::randn({n, n}).to(d);
      const hg_bench::Timing t = hg_bench::time_runs([&] { hg::matmul(a, b); });
      if (d == hg::f32) row.f32_median = flops / t.median / 1e9, row.f32_best = flops / t.best / 1e9;
      (d == hg::bf16 ? row.bf16 : row.f16) = flops / t.median / 1e9;
    }
    rows.push_back(row);
  }
  const double peak = peak_per_core * hg::get_num_threads();
  std::printf("\n| GEMM n x n x n | f32 GFLOP/s (median) | f32 best run, of FMA peak | bf16 GFLOP/s | f16 GFLOP/s |\n"
              "|---|---|---|---|---|\n");
  for (const Row& r : rows) {
    if (peak > 0)
      std::printf("| %lld | %.1f | %.1f = %.0f%% | %.1f | %.1f |\n", (long long)r.n, r.f32_median, r.f32_best,
                  100 * r.f32_best / peak, r.bf16, r.f16);
    else
      std::printf("| %lld | %.1f | %.1f | %.1f | %.1f |\n", (long long)r.n, r.f32_median, r.f32_best, r.bf16, r.f16);
  }
  const char* bf16_products = hg::cpu::supports(hg::cpu::Isa::Amx) ? "yes, on AMX tiles (tdpbf16ps)"
                              : hg::cpu::has_native_bf16()             ? "yes (vdpbf16ps)"
                                                                       : "no";
  std::printf("(FMA peak at this level, best of all %d runs: %.1f GFLOP/s per core. bf16 runs natively at this CPU "
              "level: %s; otherwise 16-bit operands are widened to f32 panels)\n",
              5 + 3 * int(rows.size()), peak_per_core, bf16_products);
}

// ResNet-20's 3x3 stride-1 convolutions (batch 128, Fashion-MNIST's 28x28) and the CNN's second,
// forward and input gradient, on im2col + GEMM and on Winograd F(2x2, 3x3)
// (kernels/cpu/winograd_conv.h), the input gradient also as the convolution of dy with the flipped
// weight (ConvAlgorithm::Im2colFlipped), and the weight gradient on im2col + GEMM and as Auto
// computes it (wide rows where kernels/conv.cpp says so): the measurements behind kernels/conv.cpp's
// choices. bf16 on a CPU with native bf16 products adds the forward and the flipped input gradient
// on wide columns (ConvAlgorithm::WideColumns: no im2col); f32 at the AVX2 and AVX-512 levels a
// second table, the direct convolutions on wide rows (ConvAlgorithm::WideRows) next to Winograd
// and im2col. Best of the runs (the machine may be shared), and im2col / the other (above 1: the
// other is faster).
void conv3x3_table() {
  using hg::kernels::cpu::ConvAlgorithm;
  struct Layer {
    int64_t c, hw, o;
  };
  const Layer layers[] = {{16, 28, 16}, {32, 14, 32}, {64, 7, 64}, {16, 14, 32}, {3, 28, 16}, {8, 28, 8}};
  std::printf("\n| conv2d 3x3 p1, batch 128 | dtype | forward im2col ms | forward Winograd ms | ratio | input grad im2col ms "
              "| input grad Winograd ms | ratio | input grad flipped ms | ratio | weight grad ms | weight grad auto ms | ratio "
              "| forward wide ms | ratio | input grad flipped wide ms | ratio |\n"
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  hg::manual_seed(0);
  std::vector<std::string> wide_rows_lines;  // f32 on wide rows, where this CPU level has them: a table of their own
  for (const Layer& l : layers)
    for (hg::DType d : {hg::f32, hg::bf16}) {
      const hg::kernels::ConvGeometry g{128, l.c, l.hw, l.hw, l.o, 3, 3, 1, 1, l.hw, l.hw};
      const hg::Tensor x = hg::randn({128, l.c, l.hw, l.hw}).to(d), w = (hg::randn({l.o, l.c, 3, 3}) * 0.1).to(d);
      const hg::Tensor dy = hg::randn({128, l.o, l.hw, l.hw}).to(d);
      double ms[7];
      int k = 0;
      for (ConvAlgorithm a : {ConvAlgorithm::Im2col, ConvAlgorithm::Winograd}) {
        ms[k++] = 1e3 * hg_bench::time_runs([&] { hg::kernels::cpu::conv2d_with(a, x, w, hg::Tensor(), g, false); }).best;
        ms[k++] = 1e3 * hg_bench::time_runs([&] {
                    hg::kernels::cpu::conv2d_backward_with(a, x, w, dy, hg::Tensor(), g, true, false, false);
                  }).best;
      }
      ms[k++] = 1e3 * hg_bench::time_runs([&] {
                  hg::kernels::cpu::conv2d_backward_with(ConvAlgorithm::Im2colFlipped, x, w, dy, hg::Tensor(), g, true, false, false);
                }).best;
      ms[k++] = 1e3 * hg_bench::time_runs([&] {
                  hg::kernels::cpu::conv2d_backward_with(ConvAlgorithm::Im2col, x, w, dy, hg::Tensor(), g, false, true, false);
                }).best;
      ms[k++] = 1e3 * hg_bench::time_runs([&] {  // (Auto: on wide rows where kernels/conv.cpp says so)
                  hg::kernels::cpu::conv2d_backward_with(ConvAlgorithm::Auto, x, w, dy, hg::Tensor(), g, false, true, false);
                }).best;
      if (d == hg::f32 && hg::kernels::cpu::wide_rows_apply(g)) {
        const double forward = 1e3 * hg_bench::time_runs([&] {
                                 hg::kernels::cpu::conv2d_with(ConvAlgorithm::WideRows, x, w, hg::Tensor(), g, false);
                               }).best;
        const double input = 1e3 * hg_bench::time_runs([&] {
                               hg::kernels::cpu::conv2d_backward_with(ConvAlgorithm::WideRows, x, w, dy, hg::Tensor(), g, true,
                                                                      false, false);
                             }).best;
        const double weight = 1e3 * hg_bench::time_runs([&] {
                                hg::kernels::cpu::conv2d_backward_with(ConvAlgorithm::WideRows, x, w, dy, hg::Tensor(), g, false,
                                                                       true, false);
                              }).best;
        char line[256];
        std::snprintf(line, sizeof line, "| %lldx%lldx%lld -> %lld | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f |\n",
                      (long long)l.c, (long long)l.hw, (long long)l.hw, (long long)l.o, forward, ms[2], ms[0], input, ms[3],
                      ms[1], weight, ms[5]);
        wide_rows_lines.push_back(line);
      }
      std::printf("| %lldx%lldx%lld -> %lld | %s | %.2f | %.2f | %.2fx | %.2f | %.2f | %.2fx | %.2f | %.2fx | %.2f | %.2f | %.2fx |",
                  (long long)l.c, (long long)l.hw, (long long)l.hw, (long long)l.o, std::string(hg::dtype_name(d)).c_str(),
                  ms[0], ms[2], ms[0] / ms[2], ms[1], ms[3], ms[1] / ms[3], ms[4], ms[1] / ms[4], ms[5], ms[6], ms[5] / ms[6]);
      if (d == hg::bf16 && hg::cpu::has_native_bf16()) {
        const double wide = 1e3 * hg_bench::time_runs([&] {
                              hg::kernels::cpu::conv2d_with(ConvAlgorithm::WideColumns, x, w, hg::Tensor(), g, false);
                            }).best;
        const double wide_grad = 1e3 * hg_bench::time_runs([&] {
                                   hg::kernels::cpu::conv2d_backward_with(ConvAlgorithm::WideColumns, x, w, dy, hg::Tensor(),
                                                                          g, true, false, false);
                                 }).best;
        std::printf(" %.2f | %.2fx | %.2f | %.2fx |\n", wide, ms[0] / wide, wide_grad, ms[4] / wide_grad);
      } else {
        std::printf(" - | - | - | - |\n");
      }
    }
  if (wide_rows_lines.empty()) return;
  std::printf("\n| conv2d 3x3 p1, batch 128, f32 | forward wide rows ms | Winograd ms | im2col ms | input grad wide rows ms "
              "| Winograd ms | im2col ms | weight grad wide rows ms | im2col ms |\n|---|---|---|---|---|---|---|---|---|\n");
  for (const std::string& line : wide_rows_lines) std::printf("%s", line.c_str());
}


// The vectorised math, ns per value (the best of the runs) on 4096 values in L1, spread over the
// range where the functions do their work; libm's scalar function beside it where there is one.
// A level whose loops did not vectorise shows here as libm's speed or slower.
void math_table() {
  constexpr int64_t n = 4096;
  std::vector<float> x(n), positive(n), g(n, 1.0f), y(n);
  for (int64_t i = 0; i < n; ++i) {
    x[size_t(i)] = -8.0f + 16.0f * float(i) / float(n);
    positive[size_t(i)] = std::exp2(-10.0f + 20.0f * float(i) / float(n));
  }
  namespace cpu = hg::kernels::cpu;
  const auto ns = [&](const std::function<void()>& run) { return 1e9 * hg_bench::time_runs(run).best / double(n); };
  const auto libm = [&](float (*f)(float), const std::vector<float>& in) {
    return ns([&] {
      for (int64_t i = 0; i < n; ++i) y[size_t(i)] = f(in[size_t(i)]);
    });
  };
  struct Row {
    const char* name;
    double vectorised, scalar;  // scalar < 0: libm has no such function
  };
  const Row rows[] = {
      {"exp", ns([&] { cpu::exp_f32(x.data(), y.data(), n); }), libm(std::exp, x)},
      {"erf", ns([&] { cpu::erf_f32(x.data(), y.data(), n); }), libm(std::erf, x)},
      {"log", ns([&] { cpu::log_f32(positive.data(), y.data(), n); }), libm(std::log, positive)},
      {"tanh", ns([&] { cpu::tanh_f32(x.data(), y.data(), n); }), libm(std::tanh, x)},
      {"sigmoid", ns([&] { cpu::sigmoid_f32(x.data(), y.data(), n); }), -1},
      {"silu", ns([&] { cpu::silu_f32(x.data(), y.data(), n); }), -1},
      {"softplus", ns([&] { cpu::softplus_f32(x.data(), y.data(), n); }), -1},
      {"gelu", ns([&] { cpu::gelu_f32(x.data(), y.data(), n); }), -1},
      {"gelu backward", ns([&] { cpu::gelu_backward_f32(x.data(), g.data(), y.data(), n); }), -1},
  };
  std::printf("\n| function (f32) | vectorised ns/value | libm scalar ns/value |\n|---|---|---|\n");
  for (const Row& row : rows) {
    std::printf("| %s | %.3f |", row.name, row.vectorised);
    if (row.scalar >= 0) std::printf(" %.3f |\n", row.scalar);
    else std::printf(" - |\n");
  }
}

// Dropout's cost per element, the best of the runs: the kernel (x -> x * mask / (1 - p), the mask
// drawn from Philox), and attention's dropout on the probabilities, as the difference between
// the attention forward with and without it, per probability (GPT-sized: 4 heads, 128 x 128).
void dropout_table() {
  std::printf("\n| dropout p = 0.1 | f32 ns/element | f16 ns/element | bf16 ns/element |\n|---|---|---|---|\n");
  constexpr int64_t n = 1 << 20;
  const hg::random::GeneratorState stream{1234, 0};
  std::printf("| kernel, %lld elements |", (long long)n);
  for (hg::DType d : {hg::f32, hg::f16, hg::bf16}) {
    const hg::Tensor x = hg::randn({n}).to(d);
    std::printf(" %.3f |", 1e9 * hg_bench::time_runs([&] { hg::kernels::dropout_masked(x, 0.1, stream); }).best / double(n));
  }
  const int64_t batch = 8, heads = 4, length = 128, head_dim = 32;
  std::printf("\n| attention forward, %lldx%lldx%lldx%lld, per probability |", (long long)batch, (long long)heads,
              (long long)length, (long long)head_dim);
  for (hg::DType d : {hg::f32, hg::f16, hg::bf16}) {
    const hg::Tensor q = hg::randn({batch, heads, length, head_dim}).to(d), k = hg::randn(q.shape()).to(d),
                     v = hg::randn(q.shape()).to(d);
    const auto seconds = [&](double p) {
      return hg_bench::time_runs([&] { hg::scaled_dot_product_attention(q, k, v, {.dropout_p = p, .is_causal = true}); }).best;
    };
    std::printf(" %.3f |", 1e9 * (seconds(0.1) - seconds(0.0)) / double(batch * heads * length * length));
  }
  std::printf("\n");
}

}  // namespace

int main(int argc, char** argv) try {
  bool conv3x3_only = false, dropout_only = false, math_only = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--threads") == 0 && i + 1 < argc) hg::set_num_threads(std::atoi(argv[i + 1]));
    if (std::strcmp(argv[i], "--conv3x3") == 0) conv3x3_only = true;
    if (std::strcmp(argv[i], "--dropout") == 0) dropout_only = true;
    if (std::strcmp(argv[i], "--math") == 0) math_only = true;
  }
  if (math_only) {
    std::printf("ops_bench: CPU level %s, %d thread(s)\n", hg::cpu::isa_summary().c_str(), hg::get_num_threads());
    math_table();
    return 0;
  }
  if (dropout_only) {
    std::printf("ops_bench: CPU level %s, %d thread(s)\n", hg::cpu::isa_summary().c_str(), hg::get_num_threads());
    dropout_table();
    return 0;
  }
  if (conv3x3_only) {
    std::printf("ops_bench: CPU level %s, %d thread(s)\n", hg::cpu::isa_summary().c_str(), hg::get_num_threads());
    conv3x3_table();
    return 0;
  }
  double peak_per_core = fma_peak_gflops(5);
  std::printf("ops_bench: CPU level %s, %d thread(s); measured fp32 FMA peak at this level %.1f GFLOP/s per core "
              "(register-resident loop, best of 5 runs)\n",
              hg::cpu::isa_summary().c_str(), hg::get_num_threads(), peak_per_core);
  gemm_table(peak_per_core);
  op_table();
  conv3x3_table();
  return 0;
} catch (const hg::Error& e) {
  std::fprintf(stderr, "ops_bench: %s\n", e.what());
  return 1;
}
