// convert_value<To>(from): the one element conversion behind Tensor::to(DType), copy_ and
// from_vector. Rules (PyTorch's, with the undefined cases defined):
//   * floating -> floating: round to nearest even (16-bit targets go through float);
//   * floating -> integer: truncate toward zero; NaN gives 0 and out-of-range values saturate
//     to the target's min/max (C++ leaves both undefined);
//   * integer -> integer: two's-complement wrap, as static_cast does since C++20.
#pragma once
#include <cmath>
#include <limits>
#include <type_traits>

#include "core/visit.h"

namespace hg::detail {

template <class To, class From>
inline To convert_value(From from) {
  if constexpr (std::is_same_v<To, From>) {
    return from;
  } else if constexpr (is_floating_type_v<From> && !is_floating_type_v<To>) {
    const double x = double(Acc<From>(from));
    if (std::isnan(x)) return To(0);
    // NOTE: compare in double; max() of int64 rounds up to 2^63, so >= catches the overflow.
    if (x >= double(std::numeric_limits<To>::max())) return std::numeric_limits<To>::max();
    if (x <= double(std::numeric_limits<To>::lowest())) return std::numeric_limits<To>::lowest();
    return To(std::trunc(x));
  } else if constexpr (std::is_same_v<To, half> || std::is_same_v<To, bfloat16>) {
    return To(float(Acc<From>(from)));
  } else {
    return static_cast<To>(Acc<From>(from));
  }
}

}  // namespace hg::detail
