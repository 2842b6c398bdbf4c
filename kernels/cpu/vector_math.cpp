// kernels/cpu/vector_math.h at each CPU level: the one body (vector_math_body.inc), compiled
// for AVX-512, for AVX2 and for the build's baseline (SSE2 on x86-64, NEON on aarch64), each in
// a namespace of its own so that no definition compiled for one level can be linked into
// another's place.
#include "kernels/cpu/vector_math.h"

#include <bit>
#include <cmath>
#include <cstdint>

#include "core/cpu_features.h"
#include "core/simd_target.h"

namespace hg::kernels::cpu {

namespace {
namespace baseline {
#include "kernels/cpu/vector_math_body.inc"
}  // namespace baseline

#if HG_X86
HG_TARGET_BEGIN(HG_AVX2_FEATURES)
namespace avx2 {
#include "kernels/cpu/vector_math_body.inc"
}  // namespace avx2
HG_TARGET_END

HG_TARGET_BEGIN(HG_AVX512_FEATURES)
namespace avx512 {
#include "kernels/cpu/vector_math_body.inc"
}  // namespace avx512
HG_TARGET_END
#endif
}  // namespace

// The level's version of `function`, called with `args`.
#if HG_X86
#define HG_AT_LEVEL(function, ...)                                                              \
  do {                                                                                          \
    if (hg::cpu::supports(hg::cpu::Isa::Avx512)) return avx512::function(__VA_ARGS__);         \
    if (hg::cpu::supports(hg::cpu::Isa::Avx2)) return avx2::function(__VA_ARGS__);             \
    return baseline::function(__VA_ARGS__);                                                     \
  } while (0)
#else
#define HG_AT_LEVEL(function, ...) return baseline::function(__VA_ARGS__)
#endif

void exp_f32(const float* x, float* y, int64_t n) { HG_AT_LEVEL(exp_f32, x, y, n); }
void exp_minus_f32(const float* x, float shift, float* y, int64_t n) { HG_AT_LEVEL(exp_minus_f32, x, shift, y, n); }
void erf_f32(const float* x, float* y, int64_t n) { HG_AT_LEVEL(erf_f32, x, y, n); }
void log_f32(const float* x, float* y, int64_t n) { HG_AT_LEVEL(log_f32, x, y, n); }
void softplus_f32(const float* x, float* y, int64_t n) { HG_AT_LEVEL(softplus_f32, x, y, n); }
void softplus_backward_f32(const float* x, const float* g, float* dx, int64_t n) {
  HG_AT_LEVEL(softplus_backward_f32, x, g, dx, n);
}
void sigmoid_f32(const float* x, float* y, int64_t n) { HG_AT_LEVEL(sigmoid_f32, x, y, n); }
void tanh_f32(const float* x, float* y, int64_t n) { HG_AT_LEVEL(tanh_f32, x, y, n); }
void silu_f32(const float* x, float* y, int64_t n) { HG_AT_LEVEL(silu_f32, x, y, n); }
void silu_backward_f32(const float* x, const float* g, float* dx, int64_t n) {
  HG_AT_LEVEL(silu_backward_f32, x, g, dx, n);
}
void gelu_f32(const float* x, float* y, int64_t n) { HG_AT_LEVEL(gelu_f32, x, y, n); }
void gelu_backward_f32(const float* x, const float* g, float* dx, int64_t n) {
  HG_AT_LEVEL(gelu_backward_f32, x, g, dx, n);
}

}  // namespace hg::kernels::cpu
