// convert_value<To>(from): the one element conversion behind Tensor::to(DType), copy_ and
// from_vector. Rules (PyTorch's, with the undefined cases defined):
//   * floating -> floating: round to nearest even (16-bit targets go through float);
//   * floating -> integer: truncate toward zero; NaN gives 0 and out-of-range values saturate
//     to the target's min/max (C++ leaves both undefined);
//   * integer -> integer: two's-complement wrap, as static_cast does since C++20;
//   * to an 8-bit float: core/float8.h (overflow gives NaN or inf; copy_into can saturate).
//     The 8-bit floats convert on the host only (no device code instantiates them).
#pragma once
#include <cmath>
#include <limits>
#include <type_traits>

#include "core/visit.h"

namespace hg::detail {

#if defined(__CUDACC__)
#define HG_CONVERT_HD __host__ __device__ __forceinline__
#else
#define HG_CONVERT_HD inline
#endif

// The rules, written once for host and device. `Io` reads an element into its compute type
// (widen) and writes a float back into a 16-bit type (narrow): on the host hg::half's own
// conversions (HostIo below), on a GPU CUDA's intrinsics (core/cuda/device_math.cuh).
template <class To, class From, class Io>
HG_CONVERT_HD To convert_value_with(From from) {
  using std::trunc;  // (on the device the unqualified call finds CUDA's)
  if constexpr (std::is_same_v<To, From>) {
    return from;
  } else if constexpr (is_floating_type_v<From> && !is_floating_type_v<To>) {
    const double x = double(Io::widen(from));
    if (x != x) return To(0);  // NaN
    // NOTE: compare in double; max() of int64 rounds up to 2^63, so >= catches the overflow.
    if (x >= double(std::numeric_limits<To>::max())) return std::numeric_limits<To>::max();
    if (x <= double(std::numeric_limits<To>::lowest())) return std::numeric_limits<To>::lowest();
    return To(trunc(x));
  } else if constexpr (is_float8_type_v<To>) {
    // Straight from the source value (an f64 is not rounded to f32 first: one rounding only).
    return To(double(Io::widen(from)));
  } else if constexpr (std::is_same_v<To, half> || std::is_same_v<To, bfloat16>) {
    return Io::template narrow<To>(float(Io::widen(from)));
  } else {
    return static_cast<To>(Io::widen(from));
  }
}

struct HostIo {
  template <class T> static Acc<T> widen(T v) { return Acc<T>(v); }
  template <class T> static T narrow(float v) { return T(v); }
};

template <class To, class From>
inline To convert_value(From from) {
  return convert_value_with<To, From, HostIo>(from);
}

}  // namespace hg::detail
