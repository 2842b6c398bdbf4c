// visit_dtype: the one switch from a runtime dtype tag to a C++ type. Kernels are written once as
// a generic lambda and instantiated for each dtype:
//
//   visit_dtype(x.dtype(), [&]<typename T> { relu_kernel<T>(x, out); });
//
// Acc<T> is the type a kernel computes in: the table's compute dtype (float for the 16-bit
// types, stored in 2 bytes and never used for arithmetic; T itself otherwise).
//
// The 8-bit floats are storage only: visit_dtype refuses them with an hg::Error that says to
// convert first, so no kernel is instantiated for them. Copies and fills, which only convert,
// use visit_any_dtype, which includes them.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>

#include "core/dtype.h"
#include "core/error.h"
#include "core/float8.h"
#include "core/half.h"

namespace hg {

// The C++ element type of each dtype, in DType's order: element_type<DType::F16> is half.
using ElementTypes =
    std::tuple<float, double, half, bfloat16, int32_t, int64_t, uint8_t, float8_e4m3, float8_e5m2>;
static_assert(std::tuple_size_v<ElementTypes> == kNumDTypes, "ElementTypes: one C++ type per dtype");
template <DType D> using element_type = std::tuple_element_t<static_cast<size_t>(D), ElementTypes>;

// The dtype tag of a C++ element type (its position in ElementTypes).
template <class T, size_t I = 0>
constexpr DType dtype_of() {
  if constexpr (I == kNumDTypes) {
    static_assert(I < kNumDTypes, "dtype_of<T>: T is not a halfgrad element type");
    return DType::F32;
  } else if constexpr (std::is_same_v<T, std::tuple_element_t<I, ElementTypes>>) {
    return static_cast<DType>(I);
  } else {
    return dtype_of<T, I + 1>();
  }
}

template <class T> using Acc = element_type<compute_dtype(dtype_of<T>())>;

template <class T> inline constexpr bool is_floating_type_v = is_floating(dtype_of<T>());

namespace detail {
// What computing on an 8-bit float says, from visit_dtype and (after the op's name) visit_floating.
inline std::string storage_only_message(DType dtype) {
  return str("a ", dtype, " tensor is storage only: convert it with .to(hg::f32) (or f16, bf16) before computing on it");
}
}  // namespace detail

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
    case DType::F8E4M3:
    case DType::F8E5M2:
      HG_FAIL(detail::storage_only_message(dtype));
  }
  HG_FAIL("visit_dtype: invalid dtype tag ", int(dtype));
}

template <class T> inline constexpr bool is_float8_type_v = is_float8(dtype_of<T>());

// visit_dtype with the 8-bit floats too: for code that only converts elements (copy_into, fill).
template <class F>
decltype(auto) visit_any_dtype(DType dtype, F&& f) {
  switch (dtype) {
    case DType::F8E4M3: return f.template operator()<float8_e4m3>();
    case DType::F8E5M2: return f.template operator()<float8_e5m2>();
    default: return visit_dtype(dtype, f);
  }
}

// visit_dtype restricted to floating types; an integer dtype is an hg::Error naming `op`.
template <class F>
decltype(auto) visit_floating(DType dtype, std::string_view op, F&& f) {
  using R = decltype(f.template operator()<float>());
  HG_CHECK(!is_float8(dtype), op, ": ", detail::storage_only_message(dtype));
  return visit_dtype(dtype, [&]<class T>() -> R {
    if constexpr (is_floating_type_v<T>) return f.template operator()<T>();
    else HG_FAIL(op, ": expected a floating tensor (f32, f64, f16, bf16), got ", dtype);
  });
}

}  // namespace hg
