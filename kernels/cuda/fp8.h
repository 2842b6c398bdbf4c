// The CUDA side of the FP8 recipes (amp/fp8.h): a per-tensor quantiser that writes real FP8
// tensors (one byte an element) with its scale on the device, and the cuBLASLt FP8 GEMM that
// multiplies them on sm_89+ tensor cores. Defined in kernels/cuda/fp8.cu and fp8_gemm.cpp; in a
// CPU-only build (kernels/no_cuda/no_cuda_fp8.cpp) each says halfgrad was built without CUDA.
//
//   auto x8 = fp8_quantise(x, f8e4m3, 0, nullptr, false);   // codes (M, K), scale_inv on the device
//   auto w8 = fp8_quantise(w, f8e4m3, 0, nullptr, false);   // codes (N, K)
//   fp8_gemm(x8.codes, x8.scale_inv, w8.codes, w8.scale_inv, y, {});   // y (M, N) = x^ w^^T
#pragma once
#include "core/tensor.h"

namespace hg::kernels::cuda {

// One tensor quantised with one scale: codes = Q(t * scale), Q rounding to the nearest FP8 value
// (ties to even) and saturating at +-largest (CUDA's __NV_SATFINITE), as the CPU quantiser does.
struct Fp8DeviceTensor {
  Tensor codes;      // f8e4m3 or f8e5m2, t's shape, contiguous, on t's device
  Tensor scale;      // 0-d f32 on the device: the scale used
  Tensor scale_inv;  // 0-d f32 on the device: 1 / scale, what the FP8 GEMM multiplies by
  Tensor amax;       // 0-d f32 on the device: max |t| (NaN when t holds a NaN)
  Tensor values;     // f32 codes / scale (each an FP8 value times 2^k) when asked, else undefined
};

// t: a floating CUDA tensor (f32, f64, f16, bf16; f64 is rounded to f32 first, as on the CPU).
// The scale is *fixed_scale when given (delayed scaling), else kernels::math::fp8_scale_for of
// t's amax on the device (current scaling). The launches never wait for the GPU.
Fp8DeviceTensor fp8_quantise(const Tensor& t, DType format, int margin, const float* fixed_scale, bool want_values);

// amax (0-d f32 on t's device) = max |t| of a contiguous floating CUDA tensor, NaN when t holds
// one, 0 for an empty t; one launch, no wait. (The quantiser's first pass; also the FP8 GEMM's
// amax where cuBLASLt has no AMAX_D kernel.)
void fp8_amax_into(const Tensor& t, const Tensor& amax);

// Whether `device` has FP8 tensor cores that cuBLASLt uses (compute capability 8.9 or above).
// False in a CPU-only build and for the CPU.
bool fp8_gemm_supported(Device device);

// out (M, N) = (a (M, K) b (N, K)^T) * a_scale_inv * b_scale_inv, accumulated in f32 (no
// fast accumulation), with a and b contiguous FP8 (E4M3 x E4M3, E4M3 x E5M2 or E5M2 x E4M3) and
// out a contiguous f32 or bf16 tensor; the scales are 0-d f32 device tensors. When amax_out (0-d
// f32) is defined it receives max |out|. Both operands keep K innermost: that is cuBLASLt's "TN"
// layout, the only one Hopper's FP8 kernels take. An hg::Error, before any launch, for what
// cuBLASLt cannot do: a device below sm_89, M, N or K not a multiple of 16, E5M2 x E5M2.
void fp8_gemm(const Tensor& a, const Tensor& a_scale_inv, const Tensor& b, const Tensor& b_scale_inv, const Tensor& out,
              const Tensor& amax_out);

}  // namespace hg::kernels::cuda
