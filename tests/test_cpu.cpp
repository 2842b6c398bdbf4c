// The CPU levels (core/cpu_features.h), the thread pool (core/parallel.h) and every SIMD kernel
// at every level this CPU has: each level's GEMM, pooling and col2im against the naive f64
// reference, in one process (CI also reruns the whole suite under HG_CPU_ISA caps, and under
// qemu for CPUs it does not have).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/float_lanes.h"
#include "kernels/cpu/lane_sum.h"
#include "kernels/cpu/vector_math.h"
#include "ops_test_helpers.h"

using hg::cpu::Isa;

namespace {

constexpr Isa kLevels[] = {Isa::Generic, Isa::Avx2, Isa::Avx512, Isa::Avx512Bf16, Isa::Amx, Isa::Neon, Isa::NeonBf16};

// Runs f() once at every level up to the one in use, restoring it afterwards.
template <class F>
void at_every_level(F&& f) {
  const Isa in_use = hg::cpu::isa();
  for (Isa level : kLevels) {
    if (!hg::cpu::level_includes(in_use, level)) continue;
    const std::string name = hg::cpu::isa_name(level);
    CAPTURE(name);
    hg::cpu::set_isa(level);
    f(level);
  }
  hg::cpu::set_isa(in_use);
}

}  // namespace

TEST_CASE("cpu.levels_are_named_ordered_and_capped") {
  for (Isa level : kLevels) CHECK(hg::cpu::isa_from_name(hg::cpu::isa_name(level)) == level);
  CHECK_THROWS_HG(hg::cpu::isa_from_name("avx3"), "unknown CPU level 'avx3'");
  CHECK(hg::cpu::level_includes(Isa::Avx512Bf16, Isa::Avx2));
  CHECK(hg::cpu::level_includes(Isa::Amx, Isa::Avx512Bf16));
  CHECK(hg::cpu::level_includes(Isa::NeonBf16, Isa::Generic));
  CHECK_FALSE(hg::cpu::level_includes(Isa::Avx2, Isa::Avx512));
  CHECK_FALSE(hg::cpu::level_includes(Isa::Amx, Isa::Neon));  // different families
  CHECK(hg::cpu::level_includes(hg::cpu::detected_isa(), hg::cpu::isa()));
  // A cap can only lower the level: one of another family is always above what this CPU has.
  const Isa foreign = hg::cpu::level_includes(hg::cpu::detected_isa(), Isa::Neon) ? Isa::Avx2 : Isa::Neon;
  CHECK_THROWS_HG(hg::cpu::set_isa(foreign), "this CPU has only");
  const Isa in_use = hg::cpu::isa();
  CHECK(hg::cpu::set_isa(Isa::Generic) == in_use);
  CHECK(hg::cpu::isa() == Isa::Generic);
  CHECK_FALSE(hg::cpu::has_native_bf16());
  CHECK_FALSE(hg::cpu::has_f16c());
  hg::cpu::set_isa(in_use);
  MESSAGE("CPU level in use: " << hg::cpu::isa_summary());
  // CI states what the (possibly emulated) CPU must be detected as, e.g. avx2 under qemu -cpu max.
  if (const char* expected = std::getenv("HG_EXPECT_DETECTED_ISA"))
    CHECK(std::string(hg::cpu::isa_name(hg::cpu::detected_isa())) == expected);
}

TEST_CASE("cpu.gemm_at_every_level_matches_the_reference") {
  struct Size {
    int64_t M, K, N;
  };
  // Edge tiles of every microkernel (6x16, 12x32, AMX's 32x32 with a half-height short panel),
  // AVX-512's 4- and 8-row tiles for a last panel that short (1, 13, 14, 64: 4 rows or fewer; 7,
  // 8, 17, 200: 5 to 8; 130: 10 rows, the full tile), AVX2's short last panel of 1 or 2 rows (2 x 32, on pairs of B panels: 8 = 6 + 2 rows x 4
  // panels, 14 = 12 + 2 x 3 panels, 13 = 12 + 1 x 2 + an edge panel), depths split into equal
  // slices of at most 256 (257 -> 136 + 121, 300 -> 152 + 148, 784 -> 4 x 196; AMX pads them to
  // 32: 784 -> 3 x 224 + 112), odd sizes; 200 x 48 x 600 spans several row blocks (96) and column
  // blocks (512), each of whose 16-bit results is rounded from a scratch block (one K slice).
  // A is row-major (read in place by AVX-512's tiles, except rows 2 KB apart: K = 512), column-major
  // (packed), or a column slice of a wider matrix (rows K + 3 apart, in place).
  const Size sizes[] = {{1, 1, 1},    {7, 13, 5},  {13, 300, 37}, {64, 257, 65}, {130, 17, 100}, {6, 512, 16},
                        {9, 784, 20}, {8, 40, 64}, {14, 300, 48}, {33, 64, 33},  {17, 31, 96},   {100, 96, 70},
                        {200, 48, 600}};
  hg::manual_seed(3);
  at_every_level([&](Isa) {
    for (const Size& s : sizes)
      for (int a_layout : {0, 1, 2})  // rows, transposed, a slice
        for (bool b_transposed : {false, true}) {
          CAPTURE(s.M);
          CAPTURE(s.K);
          CAPTURE(s.N);
          CAPTURE(a_layout);
          CAPTURE(b_transposed);
          const Tensor a = a_layout == 1   ? hg::randn({s.K, s.M}).transpose(0, 1)
                           : a_layout == 2 ? hg::narrow(hg::randn({s.M, s.K + 3}), 1, 2, s.K)
                                           : hg::randn({s.M, s.K});
          const Tensor b = b_transposed ? hg::randn({s.N, s.K}).transpose(0, 1) : hg::randn({s.K, s.N});
          const ref::Array expected = ref::matmul(ref::of(a.contiguous()), ref::of(b.contiguous()));
          CHECK_CLOSE_WITH(hg::matmul(a, b).to(hg::f64), ref::tensor(expected), gemm_tolerance(s.K));
          // 16-bit operands: the reference multiplies the same rounded values; one rounding of
          // the f32 result to the output dtype on top.
          for (hg::DType d : {hg::bf16, hg::f16}) {
            const Tensor a16 = a.to(d), b16 = b.to(d);
            const ref::Array rounded = ref::matmul(ref::of(a16.contiguous()), ref::of(b16.contiguous()));
            const Tolerance t = hg_test::tolerance_for(d);
            const Tolerance looser{t.rtol, t.atol * double(s.K)};
            CHECK_CLOSE_WITH(hg::matmul(a16, b16).to(hg::f64), ref::tensor(rounded), looser);
          }
        }
  });
}

namespace {
struct GemmSize {
  int64_t M, K, N;
};

// f(size, dtype) for every size and f32 / bf16 / f16 at every CPU level, named in failure messages.
template <class F>
void for_each_gemm_case_at_every_level(const std::vector<GemmSize>& sizes, F&& f) {
  at_every_level([&](Isa) {
    for (const GemmSize& s : sizes)
      for (hg::DType d : {hg::f32, hg::bf16, hg::f16}) {
        CAPTURE(s.M);
        CAPTURE(s.K);
        CAPTURE(s.N);
        CAPTURE(d);
        f(s, d);
      }
  });
}
}  // namespace

// linear's bias and relu, applied by the microkernels as they store C (GemmEpilogue): first and
// last K slices, full and edge tiles, 16-bit outputs, and NaN kept (relu(NaN) is NaN).
TEST_CASE("cpu.gemm_epilogue_at_every_level_matches_the_reference") {
  hg::manual_seed(5);
  for_each_gemm_case_at_every_level(
      {{1, 1, 1}, {7, 13, 5}, {13, 300, 37}, {130, 17, 100}, {12, 784, 64}, {5, 0, 3}, {8, 40, 64}, {14, 300, 48}},
      [](const GemmSize& s, hg::DType d) {
        const Tensor x = hg::randn({s.M, s.K}).to(d);
        const Tensor w = hg::randn({s.N, s.K}).to(d), b = hg::randn({s.N}).to(d);
        const int64_t nan_row = std::min<int64_t>(s.M - 1, 1);
        if (s.K > 0) {  // one NaN input value: relu keeps its row of the output NaN
          hg::NoGradGuard no_grad;
          hg::narrow(hg::narrow(x, 0, nan_row, 1), 1, s.K / 2, 1).fill_(std::nan(""));
        }
        const ref::Array linear = ref::linear(ref::of(x), ref::of(w), ref::of(b).v);
        const ref::Array expected = ref::map(linear, [](double v) { return v < 0 ? 0.0 : v; });
        const Tolerance t = d == hg::f32 ? gemm_tolerance(s.K) : hg_test::tolerance_for(d);
        const Tolerance looser{t.rtol, t.atol * double(std::max<int64_t>(s.K, 1))};
        const Tensor y = hg::linear(x, w, b, {.epilogue = hg::Epilogue::Relu});
        const auto relu_report = hg_test::compare(y.to(hg::f64), ref::tensor(expected), looser, /*equal_nan=*/true);
        CHECK_MESSAGE(!relu_report.has_value(), relu_report.value_or(""));
        const auto plain_report = hg_test::compare(hg::linear(x, w, b).to(hg::f64), ref::tensor(linear), looser, true);
        CHECK_MESSAGE(!plain_report.has_value(), plain_report.value_or(""));
        const std::vector<double> out = y.to(hg::f64).to_vector<double>();
        for (int64_t j = 0; j < s.N; ++j) CHECK(std::isnan(out[size_t(nan_row * s.N + j)]) == (s.K > 0));
      });
}

// linear's GELU epilogue, applied to each finished block of C (GemmEpilogue::finish_block), at each
// level's packed kernel (or Eigen at generic): bit for bit gelu() of the unfused linear, which
// itself matches the reference within the GEMM's tolerance; several row and column blocks.
TEST_CASE("cpu.gelu_epilogue_at_every_level_equals_gelu_of_linear") {
  hg::manual_seed(6);
  for_each_gemm_case_at_every_level(
      {{1, 1, 1}, {13, 300, 37}, {130, 17, 100}, {300, 64, 700}, {5, 0, 3}}, [](const GemmSize& s, hg::DType d) {
        const Tensor x = hg::randn({s.M, s.K}).to(d), w = (hg::randn({s.N, s.K}) * 0.2).to(d), b = hg::randn({s.N}).to(d);
        const Tensor fused = hg::linear(x, w, b, {.epilogue = hg::Epilogue::Gelu});
        const auto same = hg_test::compare(fused, hg::gelu(hg::linear(x, w, b)), Tolerance{0.0, 0.0});
        CHECK_MESSAGE(!same.has_value(), same.value_or(""));
        const ref::Array expected = ref::map(ref::linear(ref::of(x), ref::of(w), ref::of(b).v),
                                             [](double v) { return 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0))); });
        const Tolerance t = d == hg::f32 ? gemm_tolerance(s.K) : hg_test::tolerance_for(d);
        const auto close = hg_test::compare(fused.to(hg::f64), ref::tensor(expected),
                                            Tolerance{t.rtol, t.atol * double(std::max<int64_t>(s.K, 1))});
        CHECK_MESSAGE(!close.has_value(), close.value_or(""));
      });
}

TEST_CASE("cpu.conv_and_pool_at_every_level_match_the_reference") {
  hg::manual_seed(4);
  // Widths that leave partial vectors in col2im (8 and 16 lanes) and in the 2x2 pool.
  for (int64_t width : {5, 13, 38}) {
    CAPTURE(width);
    const Tensor x = hg::randn({2, 3, 9, width}), w = hg::randn({4, 3, 3, 3}), b = hg::randn({4});
    const ref::Array expected = ref::conv2d(ref::of(x), ref::of(w), b.to_vector<double>(), 1, 1);
    Tensor generic_dx, generic_pool_dx;
    at_every_level([&](Isa level) {
      const Tensor xg = x.detach().requires_grad_();
      const Tensor y = hg::conv2d(xg, w, b, {.padding = 1});
      CHECK_CLOSE_WITH(y.to(hg::f64), ref::tensor(expected), gemm_tolerance(27));
      hg::sum(y * y).backward();
      // The input gradient goes through col2im: every level agrees with the portable one.
      if (level == Isa::Generic) generic_dx = xg.grad();
      else CHECK_CLOSE_WITH(xg.grad(), generic_dx, gemm_tolerance(36));
      Tensor p = x.clone();
      p.data_ptr<float>()[width + 1] = float(kNaN);  // max must not drop NaN
      const auto report = hg_test::compare(hg::max_pool2d(p, 2, 2).to(hg::f64), ref::tensor(ref::pool2d(ref::of(p), 2, 2, true)),
                                           kExact, /*equal_nan=*/true);
      CHECK_MESSAGE(!report.has_value(), report.value_or(""));
      // The pool's gradient goes where each level's kernel found the maximum.
      const Tensor xp = x.detach().requires_grad_();
      hg::sum(hg::max_pool2d(xp, 2, 2) * hg::arange(width / 2)).backward();
      if (level == Isa::Generic) generic_pool_dx = xp.grad();
      else CHECK_CLOSE_WITH(xp.grad(), generic_pool_dx, kExact);
    });
  }
}

// ---- vectorised math (kernels/cpu/vector_math.h) against libm ------------------------------------

namespace {

// Distance in units in the last place: how many floats lie between a and b (0 when equal, NaN
// equal to NaN; +0 and -0 are neighbours).
int64_t ulp_distance(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b) ? 0 : INT64_MAX;
  auto ordered = [](float x) {
    const int32_t bits = std::bit_cast<int32_t>(x);
    return bits < 0 ? int64_t(INT32_MIN) - bits : int64_t(bits);
  };
  return std::abs(ordered(a) - ordered(b));
}

// The number of random inputs per function: 10^7 (tenths of it below), or HG_MATH_TEST_INPUTS.
// scripts/ci-portability.sh sets 10^6 under qemu-x86_64, where every x86 level has already run
// the full 10^7 natively and the emulated run is there to catch instructions above AVX2.
int math_inputs(int tenths) {
  static const long total = [] {
    const char* env = std::getenv("HG_MATH_TEST_INPUTS");
    return env ? std::max(10L, std::atol(env)) : 10'000'000L;
  }();
  return int(total / 10 * tenths);
}

// 10^7 inputs: uniform over the whole useful range, a tenth of them near 0 (where the polynomial
// alone works), and the edge cases.
std::vector<float> exp_inputs() {
  std::mt19937 random(2024);
  std::uniform_real_distribution<float> wide(-104.5f, 89.5f), narrow(-1.f, 1.f);
  std::vector<float> x;
  x.reserve(size_t(math_inputs(10)) + 100);
  for (int i = 0; i < math_inputs(9); ++i) x.push_back(wide(random));
  for (int i = 0; i < math_inputs(1); ++i) x.push_back(narrow(random));
  const float inf = std::numeric_limits<float>::infinity(), denorm = std::numeric_limits<float>::denorm_min();
  for (float e : {0.f, -0.f, denorm, -denorm, 1e-40f, -1e-40f, 1e-30f, inf, -inf, std::numeric_limits<float>::quiet_NaN(),
                  88.7228f, 88.72283f, 88.72284f, 88.7229f, 89.f, 100.f, std::numeric_limits<float>::max(),
                  -87.33654f, -87.3366f, -100.f, -103.278f, -103.9720f, -103.98f, -104.f, -150.f,
                  -std::numeric_limits<float>::max(), 0.34657359f, -0.34657359f, 1.f, -1.f, 10.f, -10.f})
    x.push_back(e);
  return x;
}

// f at every level against libm's `reference` on x: within max_ulp (2) everywhere, the same bits
// at every level; then `edges()` checks the special values at each level.
template <class Vectorised, class Reference, class Edges>
void check_against_libm(const std::vector<float>& x, Reference reference, Vectorised f, Edges edges,
                        int64_t max_ulp = 2) {
  std::vector<float> libm(x.size()), baseline;
  for (size_t i = 0; i < x.size(); ++i) libm[i] = reference(x[i]);
  at_every_level([&](Isa level) {
    std::vector<float> y(x.size());
    f(x.data(), y.data(), int64_t(x.size()));
    int64_t worst = 0;
    size_t worst_at = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      const int64_t d = ulp_distance(y[i], libm[i]);
      if (d > worst) worst = d, worst_at = i;
    }
    CAPTURE(x[worst_at]);
    CAPTURE(y[worst_at]);
    CAPTURE(libm[worst_at]);
    CHECK(worst <= max_ulp);
    edges();
    if (level == Isa::Generic) baseline = y;
    else CHECK(std::memcmp(y.data(), baseline.data(), y.size() * sizeof(float)) == 0);
  });
}

}  // namespace

TEST_CASE("cpu.exp_f32_at_every_level_is_within_2_ulp_of_libm_and_the_same_bits_everywhere") {
  check_against_libm(exp_inputs(), [](float v) { return std::exp(v); }, hg::kernels::cpu::exp_f32, [] {
    // The special values exactly: exp(+-0) = 1, +inf, +0 for -inf and deep underflow, NaN.
    const float inf = std::numeric_limits<float>::infinity();
    float edge[] = {0.f, -0.f, inf, -inf, std::numeric_limits<float>::quiet_NaN(), 89.f, -104.f, -1e30f};
    hg::kernels::cpu::exp_f32(edge, edge, 8);  // in place
    CHECK(edge[0] == 1.f);
    CHECK(edge[1] == 1.f);
    CHECK(edge[2] == inf);
    CHECK(edge[3] == 0.f);
    CHECK(std::isnan(edge[4]));
    CHECK(edge[5] == inf);
    CHECK(edge[6] == 0.f);
    CHECK(edge[7] == 0.f);
  });
}

// exp_minus_f32 (attention's softmax rows) is exp_f32 of the rounded difference, bit for bit, at
// every level: shifts that make the difference overflow, underflow, inf - inf and NaN included.
TEST_CASE("cpu.exp_minus_f32_at_every_level_is_exp_f32_of_the_difference") {
  std::mt19937 random(2026);
  std::uniform_real_distribution<float> uniform(-120.0f, 120.0f);
  std::vector<float> x(100003);
  for (float& v : x) v = uniform(random);
  const float inf = std::numeric_limits<float>::infinity();
  x[0] = inf, x[1] = -inf, x[2] = std::numeric_limits<float>::quiet_NaN(), x[3] = 0.0f, x[4] = -0.0f;
  at_every_level([&](Isa) {
    for (const float shift : {0.0f, 3.5f, -40.0f, 1e30f, inf}) {
      CAPTURE(shift);
      std::vector<float> difference(x.size()), expected(x.size()), got(x.size());
      for (size_t i = 0; i < x.size(); ++i) difference[i] = x[i] - shift;
      hg::kernels::cpu::exp_f32(difference.data(), expected.data(), int64_t(x.size()));
      hg::kernels::cpu::exp_minus_f32(x.data(), shift, got.data(), int64_t(x.size()));
      CHECK(std::memcmp(got.data(), expected.data(), x.size() * sizeof(float)) == 0);
    }
  });
}

TEST_CASE("cpu.erf_f32_at_every_level_is_within_2_ulp_of_libm_and_the_same_bits_everywhere") {
  // 10^7 inputs over every piece of the approximation ([0, 1), [1, 2), [2, 4), beyond) and both
  // signs, a tenth near 0, plus the edge cases.
  std::mt19937 random(2025);
  std::uniform_real_distribution<float> wide(-5.f, 5.f), narrow(-1e-3f, 1e-3f);
  std::vector<float> x;
  for (int i = 0; i < math_inputs(9); ++i) x.push_back(wide(random));
  for (int i = 0; i < math_inputs(1); ++i) x.push_back(narrow(random));
  const float inf = std::numeric_limits<float>::infinity();
  for (float e : {0.f, -0.f, 1e-40f, -1e-40f, 1.f, -1.f, 2.f, -2.f, 4.f, -4.f, 3.9999998f, 0.99999994f, 1.9999999f, 10.f,
                  inf, -inf, std::numeric_limits<float>::quiet_NaN()})
    x.push_back(e);
  check_against_libm(x, [](float v) { return std::erf(v); }, hg::kernels::cpu::erf_f32, [inf] {
    float edge[] = {0.f, -0.f, inf, -inf, std::numeric_limits<float>::quiet_NaN()};
    hg::kernels::cpu::erf_f32(edge, edge, 5);
    CHECK((edge[0] == 0.f && !std::signbit(edge[0])));
    CHECK((edge[1] == 0.f && std::signbit(edge[1])));
    CHECK(edge[2] == 1.f);
    CHECK(edge[3] == -1.f);
    CHECK(std::isnan(edge[4]));
  });
}

// sigmoid and tanh against the correctly rounded value (double's, rounded once): 10^7 inputs over
// both pieces of tanh (|x| below and above 0.625), the saturated tails and near 0.
std::vector<float> sigmoid_tanh_inputs() {
  std::mt19937 random(2026);
  std::uniform_real_distribution<float> wide(-30.f, 30.f), middle(-1.f, 1.f), narrow(-1e-3f, 1e-3f);
  std::vector<float> x;
  for (int i = 0; i < math_inputs(5); ++i) x.push_back(wide(random));
  for (int i = 0; i < math_inputs(4); ++i) x.push_back(middle(random));
  for (int i = 0; i < math_inputs(1); ++i) x.push_back(narrow(random));
  for (float e : {0.f, -0.f, 1e-40f, -1e-40f, 0.625f, -0.625f, 0.62499994f, 44.f, 45.f, -45.f, 88.f, -88.f, 104.f, -104.f,
                  std::numeric_limits<float>::max(), -std::numeric_limits<float>::max()})
    x.push_back(e);
  return x;
}

TEST_CASE("cpu.sigmoid_f32_at_every_level_is_within_2_ulp_and_the_same_bits_everywhere") {
  check_against_libm(sigmoid_tanh_inputs(), [](float v) { return float(1.0 / (1.0 + std::exp(-double(v)))); },
                     hg::kernels::cpu::sigmoid_f32, [] {
                       const float inf = std::numeric_limits<float>::infinity();
                       float edge[] = {0.f, -0.f, inf, -inf, std::numeric_limits<float>::quiet_NaN(), -200.f};
                       hg::kernels::cpu::sigmoid_f32(edge, edge, 6);
                       CHECK(edge[0] == 0.5f);
                       CHECK(edge[1] == 0.5f);
                       CHECK(edge[2] == 1.f);
                       CHECK(edge[3] == 0.f);
                       CHECK(std::isnan(edge[4]));
                       CHECK(edge[5] == 0.f);
                     });
}

TEST_CASE("cpu.tanh_f32_at_every_level_is_within_2_ulp_and_the_same_bits_everywhere") {
  check_against_libm(sigmoid_tanh_inputs(), [](float v) { return float(std::tanh(double(v))); },
                     hg::kernels::cpu::tanh_f32, [] {
                       const float inf = std::numeric_limits<float>::infinity();
                       float edge[] = {0.f, -0.f, inf, -inf, std::numeric_limits<float>::quiet_NaN(), 50.f};
                       hg::kernels::cpu::tanh_f32(edge, edge, 6);
                       CHECK((edge[0] == 0.f && !std::signbit(edge[0])));
                       CHECK((edge[1] == 0.f && std::signbit(edge[1])));
                       CHECK(edge[2] == 1.f);
                       CHECK(edge[3] == -1.f);
                       CHECK(std::isnan(edge[4]));
                       CHECK(edge[5] == 1.f);
                     });
}

TEST_CASE("cpu.silu_f32_at_every_level_is_within_3_ulp_and_the_same_bits_everywhere") {
  // x * sigmoid(x): sigmoid's 2 ulp and one product (measured worst: 3 ulp, near x = -14.5).
  // Inputs below -80 are left out: there x * exp(x) is subnormal (-104: -7e-44) and both this and
  // x / (1 + exp(-x)) in float give -0 (the edge below).
  std::vector<float> x;
  for (float v : sigmoid_tanh_inputs())
    if (!(v < -80.f)) x.push_back(v);
  check_against_libm(x, [](float v) { return float(double(v) / (1.0 + std::exp(-double(v)))); },
                     hg::kernels::cpu::silu_f32, [] {
                       const float inf = std::numeric_limits<float>::infinity();
                       float edge[] = {0.f, inf, -inf, std::numeric_limits<float>::quiet_NaN(), -200.f};
                       hg::kernels::cpu::silu_f32(edge, edge, 5);
                       CHECK(edge[0] == 0.f);
                       CHECK(edge[1] == inf);
                       CHECK(std::isnan(edge[2]));  // -inf * 0, as x / (1 + exp(-x)) = -inf / inf
                       CHECK(std::isnan(edge[3]));
                       CHECK(edge[4] == 0.f);
                     }, 3);
}

// A 16-bit result larger than the cache, over several K slices, is rounded block by block from a
// scratch (no f32 C): the same values as the product accumulated onto a zero C, which goes
// through an f32 C. Row blocks, two column blocks, both 16-bit types, A as stored and transposed.
TEST_CASE("cpu.gemm_16bit_result_without_an_f32_c_equals_the_one_through_it") {
  using namespace hg::kernels::cpu;
  constexpr int64_t M = 260, K = 300, N = 1024;  // M * N above the 2^18 values kept in cache
  at_every_level([&](Isa) {
    if (!has_packed_gemm()) return;
    for (const hg::DType dtype : {hg::bf16, hg::f16})
      for (bool a_transposed : {false, true}) {
        CAPTURE(dtype);
        CAPTURE(a_transposed);
        hg::manual_seed(11);
        const Tensor a = (a_transposed ? hg::randn({K, M}).t() : hg::randn({M, K})).to(dtype);
        const Tensor b = hg::randn({K, N}).to(dtype);
        Tensor overwritten = hg::empty({M, N}, {.dtype = dtype}), accumulated = hg::zeros({M, N}, {.dtype = dtype});
        gemm(dtype, matrix_view(a), matrix_view(b), overwritten.raw_data(), false);
        gemm(dtype, matrix_view(a), matrix_view(b), accumulated.raw_data(), true);
        // (compared as values: a -0 sum plus a +0 C is +0)
        CHECK(overwritten.to(hg::f32).to_vector<float>() == accumulated.to(hg::f32).to_vector<float>());
        const Tolerance t = hg_test::tolerance_for(dtype);
        const Tolerance looser{t.rtol, t.atol * double(K)};
        CHECK_CLOSE_WITH(overwritten.to(hg::f64), hg::matmul(a.to(hg::f32), b.to(hg::f32)).to(hg::f64), looser);
      }
  });
}

TEST_CASE("cpu.gemm_with_a_prepacked_right_operand_is_bitwise_the_packed_gemm") {
  // pack_rhs once, then products with many left operands (an RNN's recurrent weight): the same
  // bits as packed_gemm packing B itself, for K in several slices, N not a multiple of the tile,
  // small M (split by columns), large M (split by rows, several row blocks per task) and wide N
  // (two column blocks at AVX-512), f32 and both 16-bit types. Not large M with wide N: it adds
  // no case the others miss, and it was three quarters of this program's time under qemu.
  using namespace hg::kernels::cpu;
  at_every_level([&](Isa) {
    if (!has_packed_gemm()) return;
    for (const hg::DType dtype : {hg::f32, hg::bf16, hg::f16})
      for (const int64_t K : {7, 256, 600})  // (600: three slices, each at most 256 deep)
        for (const int64_t N : {33, 1024})
          for (const int64_t M : {1, 32, 300}) {
            if (M == 300 && N == 1024) continue;
            CAPTURE(dtype);
            CAPTURE(K);
            CAPTURE(N);
            CAPTURE(M);
            hg::manual_seed(uint64_t(K * N + M));
            const Tensor a = hg::randn({M, K}).to(dtype), b = hg::randn({N, K}).to(dtype).t();  // B column-major
            std::vector<float> direct(size_t(M * N)), prepacked(size_t(M * N));
            hg::visit_floating(dtype, "test", [&]<class T> {
              if constexpr (!std::is_same_v<T, double>) {
                packed_gemm<T>(matrix_view(a), matrix_view(b), direct.data(), N, false);
                const PackedRhs packed = pack_rhs<T>(matrix_view(b));
                packed_gemm<T>(matrix_view(a), packed, prepacked.data(), N, false);
              }
            });
            CHECK(std::memcmp(direct.data(), prepacked.data(), direct.size() * sizeof(float)) == 0);
          }
  });
}

TEST_CASE("cpu.log_f32_at_every_level_is_within_2_ulp_of_libm_and_the_same_bits_everywhere") {
  // 10^7 inputs: bit patterns uniform over the positive finite floats (every binade, subnormals
  // included), a tenth in [0.5, 2) around log's zero, and the edge cases.
  std::mt19937 random(2027);
  std::uniform_int_distribution<uint32_t> positive(1u, 0x7f7fffffu);
  std::uniform_real_distribution<float> near_one(0.5f, 2.0f);
  std::vector<float> x;
  for (int i = 0; i < math_inputs(9); ++i) x.push_back(std::bit_cast<float>(positive(random)));
  for (int i = 0; i < math_inputs(1); ++i) x.push_back(near_one(random));
  const float inf = std::numeric_limits<float>::infinity();
  for (float e : {std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::min(), 1.f, 0.99999994f,
                  1.0000001f, 0.70710677f, 0.7071068f, 2.f, std::numeric_limits<float>::max()})
    x.push_back(e);
  check_against_libm(x, [](float v) { return std::log(v); }, hg::kernels::cpu::log_f32, [inf] {
    float edge[] = {0.f, -0.f, -1.f, -inf, inf, std::numeric_limits<float>::quiet_NaN(), 1.f};
    hg::kernels::cpu::log_f32(edge, edge, 7);
    CHECK(edge[0] == -inf);
    CHECK(edge[1] == -inf);
    CHECK(std::isnan(edge[2]));
    CHECK(std::isnan(edge[3]));
    CHECK(edge[4] == inf);
    CHECK(std::isnan(edge[5]));
    CHECK((edge[6] == 0.f && !std::signbit(edge[6])));
  });
}

TEST_CASE("cpu.softplus_f32_at_every_level_is_within_4_ulp_and_the_same_bits_everywhere") {
  // log1p(exp(x)) against the correctly rounded value: exp's 2 ulp pass through log1p almost
  // whole where exp(x) is small (there log1p(u) ~ u), plus log1p's own rounding.
  std::vector<float> x = sigmoid_tanh_inputs();
  for (float e : {-150.f, -103.f, -87.f, 19.999998f, 20.f, 20.000002f, 100.f}) x.push_back(e);
  check_against_libm(x, [](float v) {
    return v > 20.f ? v : float(std::log1p(std::exp(double(v))));
  }, hg::kernels::cpu::softplus_f32, [] {
    const float inf = std::numeric_limits<float>::infinity();
    float edge[] = {-inf, inf, std::numeric_limits<float>::quiet_NaN(), 0.f};
    hg::kernels::cpu::softplus_f32(edge, edge, 4);
    CHECK(edge[0] == 0.f);
    CHECK(edge[1] == inf);
    CHECK(std::isnan(edge[2]));
    CHECK(edge[3] == doctest::Approx(std::log(2.0)).epsilon(1e-7));
  }, 4);
  // The backward is g * sigmoid(x) (g above the threshold), on sigmoid's 2-ulp lanes.
  std::vector<float> xs{-30.f, -1.f, 0.f, 2.5f, 19.f, 21.f}, g(6, 3.f), dx(6);
  hg::kernels::cpu::softplus_backward_f32(xs.data(), g.data(), dx.data(), 6);
  for (size_t i = 0; i < xs.size(); ++i)
    CHECK(dx[i] == doctest::Approx(xs[i] > 20.f ? 3.0 : 3.0 / (1.0 + std::exp(-double(xs[i])))).epsilon(1e-6));
}

TEST_CASE("parallel.every_index_once_for_any_split") {
  const int saved = hg::get_num_threads();
  for (int threads : {1, 2, 3}) {
    hg::set_num_threads(threads);
    for (int64_t n : {0, 1, 7, 1000, 100003})
      for (int64_t grain : {1, 10, 4096}) {
        std::vector<std::atomic<int>> seen(static_cast<size_t>(n));
        hg::parallel_for(0, n, grain, [&](int64_t lo, int64_t hi) {
          CHECK(lo < hi);
          for (int64_t i = lo; i < hi; ++i) seen[size_t(i)].fetch_add(1);
        });
        int64_t wrong = 0;
        for (auto& s : seen) wrong += s.load() != 1;
        CHECK(wrong == 0);
      }
  }
  hg::set_num_threads(saved);
}

TEST_CASE("parallel.exceptions_nesting_and_fork") {
  const int saved = hg::get_num_threads();
  hg::set_num_threads(2);
  // The first task's exception reaches the caller, and the pool keeps working.
  CHECK_THROWS_HG(hg::parallel_for(0, 64, 1,
                                   [](int64_t lo, int64_t) {
                                     if (lo == 0) throw hg::Error("task 0 failed");
                                   }),
                  "task 0 failed");
  // A parallel_for inside a task runs inline on that task's thread.
  std::atomic<int64_t> total{0};
  hg::parallel_for(0, 8, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i)
      hg::parallel_for(0, 100, 1, [&](int64_t a, int64_t b) { total.fetch_add(b - a); });
  });
  CHECK(total.load() == 800);
  // A forked child (train_compare measures in children) gets working threads of its own.
  const pid_t child = fork();
  if (child == 0) {
    alarm(60);  // a child that deadlocks dies with SIGALRM: a failure below, not a CTest timeout
    std::atomic<int64_t> sum{0};
    hg::parallel_for(0, 10000, 1, [&](int64_t lo, int64_t hi) { sum.fetch_add(hi - lo); });
    hg::set_num_threads(3);
    hg::parallel_for(0, 10000, 1, [&](int64_t lo, int64_t hi) { sum.fetch_add(hi - lo); });
    _exit(sum.load() == 20000 ? 0 : 1);
  }
  int status = -1;
  REQUIRE(child > 0);
  waitpid(child, &status, 0);
  CHECK_MESSAGE(!(WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM), "the forked child hung for 60 s");
  CHECK((WIFEXITED(status) && WEXITSTATUS(status) == 0));
  hg::set_num_threads(saved);
}

// lane_accumulate_pair is batch_norm's backward sums in one pass: each of its two sums must be
// the one lane_accumulate gives on its own, bit for bit (the same lanes, the same order), over
// several runs whose lengths leave tails of every size.
// float_lanes.h's row maximum keeps its NaN rule whether the NaN falls in a full vector or the
// tail (nan_wins: NaN; otherwise the NaN loses), starts from init, and its sum matches a double
// sum within float rounding -- for lengths around the 16-lane vectors.
TEST_CASE("cpu.float_row_max_and_sum_keep_their_nan_rules_for_any_length") {
  std::mt19937 random(7);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (const int64_t n : {0, 1, 15, 16, 17, 31, 33, 256, 300}) {
    CAPTURE(n);
    std::vector<float> row(static_cast<size_t>(n));
    for (float& v : row) v = normal(random);
    float largest = -1e30f;
    double total = 0, magnitude = 0;
    for (const float v : row) largest = std::max(largest, v), total += v, magnitude += std::fabs(v);
    CHECK(hg::kernels::cpu::float_row_max(row.data(), n, -1e30f, true) == largest);
    CHECK(hg::kernels::cpu::float_row_max(row.data(), n, -1e30f, false) == largest);
    CHECK(hg::kernels::cpu::float_row_max(row.data(), n, 1e30f, false) == 1e30f);  // init counts
    CHECK(std::fabs(hg::kernels::cpu::float_row_sum(row.data(), n) - total) <= 1e-6 * magnitude + 1e-30);
    for (const int64_t at : {int64_t(0), n / 2, n - 1}) {  // a NaN in a vector or in the tail
      if (n == 0) continue;
      CAPTURE(at);
      std::vector<float> with_nan = row;
      with_nan[size_t(at)] = std::numeric_limits<float>::quiet_NaN();
      CHECK(std::isnan(hg::kernels::cpu::float_row_max(with_nan.data(), n, -1e30f, true)));
      float others = -1e30f;
      for (int64_t i = 0; i < n; ++i) if (i != at) others = std::max(others, row[size_t(i)]);
      CHECK(hg::kernels::cpu::float_row_max(with_nan.data(), n, -1e30f, false) == others);
    }
  }
}

TEST_CASE("cpu.lane_accumulate_pair_equals_two_single_sums") {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (const int64_t n : {0, 1, 15, 16, 17, 49, 256, 301}) {
    std::vector<float> a(static_cast<size_t>(n)), b(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) a[size_t(i)] = normal(rng) * 1e3f, b[size_t(i)] = normal(rng);
    float first[16] = {}, second[16] = {}, alone_first[16] = {}, alone_second[16] = {};
    for (int run = 0; run < 3; ++run) {  // runs add into the same lanes, as batch_norm's short rows do
      const auto term_a = [&](int64_t i) { return a[size_t(i)] * float(run + 1); };
      const auto term_ab = [&](int64_t i) { return a[size_t(i)] * b[size_t(i)]; };
      hg::kernels::cpu::lane_accumulate_pair(first, second, n, [&](int64_t i) {
        return std::pair<float, float>{term_a(i), term_ab(i)};
      });
      hg::kernels::cpu::lane_accumulate(alone_first, n, term_a);
      hg::kernels::cpu::lane_accumulate(alone_second, n, term_ab);
    }
    for (int k = 0; k < 16; ++k) {
      CHECK(std::bit_cast<uint32_t>(first[k]) == std::bit_cast<uint32_t>(alone_first[k]));
      CHECK(std::bit_cast<uint32_t>(second[k]) == std::bit_cast<uint32_t>(alone_second[k]));
    }
    CHECK(hg::kernels::cpu::combine_lanes(first) == hg::kernels::cpu::combine_lanes(alone_first));
  }
}
