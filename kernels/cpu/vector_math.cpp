// kernels/cpu/vector_math.h at each CPU level: the one body (vector_math_body.inc), compiled
// for AVX-512, for AVX2 and for the build's baseline (SSE2 on x86-64, NEON on aarch64), each in
// a namespace of its own so that no definition compiled for one level can be linked into
// another's place.
#include "kernels/cpu/vector_math.h"

#include <bit>
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

void exp_f32(const float* x, float* y, int64_t n) {
#if HG_X86
  if (hg::cpu::supports(hg::cpu::Isa::Avx512)) return avx512::exp_f32(x, y, n);
  if (hg::cpu::supports(hg::cpu::Isa::Avx2)) return avx2::exp_f32(x, y, n);
#endif
  baseline::exp_f32(x, y, n);
}

}  // namespace hg::kernels::cpu
