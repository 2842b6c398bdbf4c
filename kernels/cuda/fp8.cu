// The CUDA per-tensor FP8 quantiser (kernels/cuda/fp8.h): the device version of amp/fp8.cpp's
// fp8_quantise with one tile. Three launches that never wait for the host: the amax of |t|, the
// scale from it (kernels/math/fp8_scale.h, the CPU's formula), and the rounding of every element
// to an FP8 code, plus its dequantised f32 value when asked.
#include <cuda_fp8.h>

#include "core/cuda/device_math.cuh"
#include "core/float8.h"
#include "kernels/cuda/fp8.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/warp_reduce.cuh"
#include "kernels/math/fp8_scale.h"

namespace hg::kernels::cuda {

namespace {

using cuda_detail::to_acc;

// ---- kernels --------------------------------------------------------------------------------------

// The element as the CPU quantiser sees it: converted to f32 first (f64 rounds once, here too).
template <class T>
__device__ __forceinline__ float as_f32(T v) {
  return static_cast<float>(to_acc(v));
}

// NOTE: the amax is kept as the bits of a non-negative float: for those, unsigned order is float
// order, so atomicMax on the bits is a float max in any order (exact: a max never rounds). |NaN|
// has the sign bit clear and bits above inf's, so a NaN wins, as on the CPU (the scale is then 1).
template <class T>
__global__ void amax_kernel(const T* x, int64_t n, unsigned int* amax_bits) {
  unsigned int local = 0;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    local = max(local, __float_as_uint(fabsf(as_f32(x[i]))));
  for (int step = kWarp / 2; step > 0; step /= 2) local = max(local, __shfl_xor_sync(0xffffffffu, local, step));
  if (threadIdx.x % kWarp == 0 && local != 0) atomicMax(amax_bits, local);
}

// One thread: the scale (given, or from the amax), and its inverse for the GEMM. 1 / 2^k is exact.
__global__ void scale_kernel(const unsigned int* amax_bits, float largest, int margin, bool fixed, float fixed_scale,
                             float* scale, float* scale_inv) {
  const float amax = __uint_as_float(*amax_bits);
  const float s = fixed ? fixed_scale : math::fp8_scale_for(amax, largest, margin);
  *scale = s;
  *scale_inv = 1.0f / s;
}

// codes[i] = Q(x[i] * scale), values[i] = codes[i] / scale (when values is not null).
// NOTE: x * scale is exact (scale = 2^k) up to f32 overflow, which saturates like any value past
// the format's largest; __NV_SATFINITE also maps +-inf to +-largest and keeps NaN NaN, and rounds
// to nearest even, so every code equals the CPU quantiser's. Decoding through f16 is exact (FP8
// values are f16 values), and the division by 2^k is IEEE (no fast-math) as on the CPU.
template <class T>
__global__ void quantise_kernel(const T* x, int64_t n, const float* scale_ptr, __nv_fp8_interpretation_t format,
                                __nv_fp8_storage_t* codes, float* values) {
  const float scale = *scale_ptr;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const __nv_fp8_storage_t code = __nv_cvt_float_to_fp8(as_f32(x[i]) * scale, __NV_SATFINITE, format);
    codes[i] = code;
    if (values != nullptr) values[i] = __half2float(__half(__nv_cvt_fp8_to_halfraw(code, format))) / scale;
  }
}

}  // namespace

// ---- launchers ------------------------------------------------------------------------------------

void fp8_amax_into(const Tensor& t, const Tensor& amax) {
  detail::check_cuda_device(t.device(), "fp8_quantise");
  HG_CHECK(t.is_contiguous() && amax.dtype() == f32 && amax.numel() == 1 && amax.device() == t.device(),
           "fp8 amax (CUDA): expected a contiguous tensor and a one-element f32 amax on its device");
  HG_CUDA_CHECK(cudaMemsetAsync(amax.raw_data(), 0, sizeof(float), nullptr));  // (+0.0f: the amax of nothing)
  const int64_t n = t.numel();
  if (n == 0) return;
  visit_floating(t.dtype(), "fp8_quantise", [&]<class T> {
    amax_kernel<T><<<blocks_for(n), kThreads>>>(t.data_ptr<T>(), n, static_cast<unsigned int*>(amax.raw_data()));
  });
  HG_CHECK_LAUNCH("fp8 amax_kernel");
}

Fp8DeviceTensor fp8_quantise(const Tensor& t, DType format, int margin, const float* fixed_scale, bool want_values) {
  detail::check_cuda_device(t.device(), "fp8_quantise");
  HG_CHECK(is_float8(format), "fp8_quantise (CUDA): expected f8e4m3 or f8e5m2 as the format, got ", format);
  HG_CHECK(is_floating(t.dtype()) && !is_float8(t.dtype()),
           "fp8_quantise (CUDA): expected an f32, f64, f16 or bf16 tensor, got ", t.dtype());
  const Tensor source = detail::dense(t);
  const Device device = t.device();
  Fp8DeviceTensor q;
  q.codes = empty(t.shape(), {.dtype = format, .device = device});
  q.amax = empty({}, {.device = device});
  q.scale = empty({}, {.device = device});
  q.scale_inv = empty({}, {.device = device});
  if (want_values) q.values = empty(t.shape(), {.device = device});
  fp8_amax_into(source, q.amax);
  const float largest = format == f8e4m3 ? kFloat8E4M3Max : kFloat8E5M2Max;
  scale_kernel<<<1, 1>>>(static_cast<const unsigned int*>(q.amax.raw_data()), largest, margin, fixed_scale != nullptr,
                         fixed_scale != nullptr ? *fixed_scale : 1.0f, q.scale.data_ptr<float>(),
                         q.scale_inv.data_ptr<float>());
  HG_CHECK_LAUNCH("fp8 scale_kernel");
  const int64_t n = t.numel();
  if (n == 0) return q;
  const __nv_fp8_interpretation_t interpretation = format == f8e4m3 ? __NV_E4M3 : __NV_E5M2;
  visit_floating(t.dtype(), "fp8_quantise", [&]<class T> {
    quantise_kernel<T><<<blocks_for(n), kThreads>>>(source.data_ptr<T>(), n, q.scale.data_ptr<float>(), interpretation,
                                                     static_cast<__nv_fp8_storage_t*>(q.codes.raw_data()),
                                                     want_values ? q.values.data_ptr<float>() : nullptr);
  });
  HG_CHECK_LAUNCH("fp8 quantise_kernel");
  return q;
}

}  // namespace hg::kernels::cuda
