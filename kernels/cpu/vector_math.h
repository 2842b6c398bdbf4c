// Vectorised transcendental functions for the CPU kernels, f32, over arrays. libm's expf is a
// scalar call per element; these run 8 (AVX2) or 16 (AVX-512) elements per instruction (4 with
// NEON on aarch64, 4 with SSE2 at the generic level) and give the same bits at every level. Their
// polynomials run on fused multiply-adds (std::fma: an instruction at AVX2, AVX-512 and NEON; at
// an x86 baseline without FMA a correctly rounded library call, slow but the same value).
//
//   exp_f32(x, y, n)   y[i] = exp(x[i]), within 2 ulp of libm's expf; +-inf, NaN, overflow to
//                      +inf above ln(FLT_MAX), subnormal results and underflow to +0 as expf.
//                      x and y may be the same array.
//   exp_minus_f32(x, s, y, n)
//                      y[i] = exp(x[i] - s), the difference rounded to float first: exp_f32 of
//                      it, bit for bit, without a pass that stores it (a softmax row's exps).
//                      x and y may be the same array.
//   erf_f32(x, y, n)   y[i] = erf(x[i]), within 2 ulp of libm's erff; +-0, +-1 at +-inf, NaN.
//   log_f32(x, y, n)   y[i] = log(x[i]), within 2 ulp of libm's logf; subnormals, -inf at +-0,
//                      NaN below 0, +inf, NaN.
//   softplus_f32(x, y, n), softplus_backward_f32(x, g, dx, n)
//                      log(1 + exp(x)) (x above 20, PyTorch's default threshold) and g sigmoid(x)
//                      (g above 20), within 4 ulp of the correctly rounded value.
//   sigmoid_f32(x, y, n), tanh_f32(x, y, n)
//                      1 / (1 + exp(-x)) and tanh(x), within 2 ulp of the correctly rounded
//                      value; 0 and 1 (-1 and 1) at -inf and +inf, +-0 kept by tanh, NaN.
//   silu_f32(x, y, n), silu_backward_f32(x, g, dx, n)
//                      x sigmoid(x) and g times its derivative, on sigmoid's lanes.
//   gelu_f32(x, y, n), gelu_backward_f32(x, g, dx, n)
//                      the exact (erf) GELU and g * its derivative, as kernels/math/activation.h's
//                      Gelu computes them, on erf_f32's and exp_f32's lanes.
//
// tests/test_cpu.cpp checks each function at each CPU level against libm on 10^7 random
// inputs and the edge cases.
#pragma once
#include <cstdint>

namespace hg::kernels::cpu {

void exp_f32(const float* x, float* y, int64_t n);
void exp_minus_f32(const float* x, float shift, float* y, int64_t n);
void erf_f32(const float* x, float* y, int64_t n);
void log_f32(const float* x, float* y, int64_t n);
void softplus_f32(const float* x, float* y, int64_t n);
void softplus_backward_f32(const float* x, const float* g, float* dx, int64_t n);
void sigmoid_f32(const float* x, float* y, int64_t n);
void tanh_f32(const float* x, float* y, int64_t n);
void silu_f32(const float* x, float* y, int64_t n);
void silu_backward_f32(const float* x, const float* g, float* dx, int64_t n);
void gelu_f32(const float* x, float* y, int64_t n);
void gelu_backward_f32(const float* x, const float* g, float* dx, int64_t n);

}  // namespace hg::kernels::cpu
