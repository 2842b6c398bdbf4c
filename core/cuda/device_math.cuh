// Device-side views of halfgrad's element types. hg::half / hg::bfloat16 are 2-byte structs whose
// host conversions use x86 instructions; on the GPU the same bits are read with CUDA's intrinsics.
// to_acc(v) gives the compute type (acc_t<T>: the dtype table's compute dtype, as on the host:
// float for 16-bit, else T); from_acc writes it back with round-to-nearest-even.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "core/convert.h"
#include "core/half.h"
#include "core/visit.h"

namespace hg::cuda_detail {

template <class T> using acc_t = Acc<T>;  // one compute-type rule for host and device (core/visit.h)

template <class T>
__device__ __forceinline__ acc_t<T> to_acc(T v) {
  if constexpr (std::is_same_v<T, half>) return __half2float(__ushort_as_half(v.bits));
  else if constexpr (std::is_same_v<T, bfloat16>) return __bfloat162float(__ushort_as_bfloat16(v.bits));
  else return v;
}

template <class T>
__device__ __forceinline__ T from_acc(acc_t<T> v) {
  if constexpr (std::is_same_v<T, half>) return half::from_bits(__half_as_ushort(__float2half_rn(v)));
  else if constexpr (std::is_same_v<T, bfloat16>) return bfloat16::from_bits(__bfloat16_as_ushort(__float2bfloat16_rn(v)));
  else return v;
}

// detail::convert_value's rules (core/convert.h) with CUDA's 16-bit conversions.
struct DeviceIo {
  template <class T> __device__ static acc_t<T> widen(T v) { return to_acc(v); }
  template <class T> __device__ static T narrow(float v) { return from_acc<T>(v); }
};

template <class To, class From>
__device__ __forceinline__ To convert_value(From from) {
  return detail::convert_value_with<To, From, DeviceIo>(from);
}

}  // namespace hg::cuda_detail
