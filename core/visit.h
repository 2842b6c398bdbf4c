// visit_dtype: the one switch from a runtime dtype tag to a C++ type. Kernels are written once as
// a generic lambda and instantiated for each dtype:
//
//   visit_dtype(x.dtype(), [&]<typename T> { relu_kernel<T>(x, out); });
//
// Acc<T> is the type a kernel computes in: float for the 16-bit types (stored in 2 bytes, never
// used for arithmetic), T itself otherwise.
#pragma once
#include <cstdint>
#include <string_view>
#include <type_traits>

#include "core/dtype.h"
#include "core/error.h"
#include "core/half.h"

namespace hg {

template <class T> struct AccumulateType { using type = T; };
template <> struct AccumulateType<half> { using type = float; };
template <> struct AccumulateType<bfloat16> { using type = float; };
template <class T> using Acc = typename AccumulateType<T>::type;

template <class T>
inline constexpr bool is_floating_type_v =
    std::is_floating_point_v<T> || std::is_same_v<T, half> || std::is_same_v<T, bfloat16>;

// The dtype tag of a C++ element type.
template <class T> constexpr DType dtype_of() {
  if constexpr (std::is_same_v<T, float>) return DType::F32;
  else if constexpr (std::is_same_v<T, double>) return DType::F64;
  else if constexpr (std::is_same_v<T, half>) return DType::F16;
  else if constexpr (std::is_same_v<T, bfloat16>) return DType::BF16;
  else if constexpr (std::is_same_v<T, int32_t>) return DType::I32;
  else if constexpr (std::is_same_v<T, int64_t>) return DType::I64;
  else if constexpr (std::is_same_v<T, uint8_t>) return DType::U8;
  else static_assert(sizeof(T) == 0, "not a halfgrad element type");
}

template <class F>
decltype(auto) visit_dtype(DType dtype, F&& f) {
  switch (dtype) {
    case DType::F32: return f.template operator()<float>();
    case DType::F64: return f.template operator()<double>();
    case DType::F16: return f.template operator()<half>();
    case DType::BF16: return f.template operator()<bfloat16>();
    case DType::I32: return f.template operator()<int32_t>();
    case DType::I64: return f.template operator()<int64_t>();
    case DType::U8: return f.template operator()<uint8_t>();
  }
  HG_FAIL("visit_dtype: invalid dtype tag ", int(dtype));
}

// visit_dtype restricted to floating types; an integer dtype is an hg::Error naming `op`.
template <class F>
decltype(auto) visit_floating(DType dtype, std::string_view op, F&& f) {
  using R = decltype(f.template operator()<float>());
  return visit_dtype(dtype, [&]<class T>() -> R {
    if constexpr (is_floating_type_v<T>) return f.template operator()<T>();
    else HG_FAIL(op, ": expected a floating tensor (f32, f64, f16, bf16), got ", dtype);
  });
}

}  // namespace hg
