// Device-side views of halfgrad's element types. hg::half / hg::bfloat16 are 2-byte structs whose
// host conversions use x86 instructions; on the GPU the same bits are read with CUDA's intrinsics.
// to_acc(v) gives the compute type (acc_t<T>: the dtype table's compute dtype, as on the host:
// float for 16-bit, else T); from_acc writes it back with round-to-nearest-even.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

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

// The device twin of detail::convert_value (core/convert.h): same saturation and NaN rules.
template <class To, class From>
__device__ __forceinline__ To convert_value(From from) {
  constexpr bool from_float = std::is_floating_point_v<acc_t<From>>;
  constexpr bool to_float = std::is_floating_point_v<acc_t<To>>;
  if constexpr (std::is_same_v<To, From>) {
    return from;
  } else if constexpr (from_float && !to_float) {
    const double x = double(to_acc(from));
    if (x != x) return To(0);
    if (x >= double(std::numeric_limits<To>::max())) return std::numeric_limits<To>::max();
    if (x <= double(std::numeric_limits<To>::lowest())) return std::numeric_limits<To>::lowest();
    return To(trunc(x));
  } else if constexpr (std::is_same_v<To, half> || std::is_same_v<To, bfloat16>) {
    return from_acc<To>(float(to_acc(from)));
  } else {
    return static_cast<To>(to_acc(from));
  }
}

}  // namespace hg::cuda_detail
