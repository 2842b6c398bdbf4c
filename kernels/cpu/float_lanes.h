// 16 float lanes as one vector of the compiler's (GCC/Clang vector extensions): an AVX-512
// register, two AVX2 or four SSE/NEON ones. Each lane's arithmetic is the scalar lane's, so a
// result does not depend on how the compiler splits the vector. For the loops GCC leaves scalar
// when written as 16-lane arrays: a maximum with a NaN rule (an if-converted compare GCC will not
// vectorise under -ftrapping-math), and sums whose lanes must be combined in a tree rather than
// one after another (a 15-step chain per row).
//
// Vectors pass by reference: by value, a build without AVX-512 warns that the ABI changes.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstring>

namespace hg::kernels::cpu {

inline constexpr int64_t kFloatLanes = 16;
using FloatLanes = float __attribute__((vector_size(kFloatLanes * sizeof(float))));

// The lanes of v, and the row's values from i to n (fewer than 16) on top, combined in a tree.
template <class Combine>
float combine_float_lanes(const FloatLanes& v, const float* row, int64_t i, int64_t n, const Combine& combine) {
  float lanes[kFloatLanes];
  std::memcpy(lanes, &v, sizeof lanes);
  for (int64_t k = 0; i + k < n; ++k) lanes[k] = combine(lanes[k], row[i + k]);
  for (int64_t step = kFloatLanes / 2; step > 0; step /= 2)
    for (int64_t k = 0; k < step; ++k) lanes[k] = combine(lanes[k], lanes[k + step]);
  return lanes[0];
}

// The largest of init and row[0..n): with nan_wins, a NaN anywhere gives NaN (math::nan_max's
// rule); without, std::max's (a NaN value loses).
inline float float_row_max(const float* row, int64_t n, float init, bool nan_wins) {
  FloatLanes lanes = FloatLanes{} + init, v;
  int64_t i = 0;
  if (nan_wins) {
    for (; i + kFloatLanes <= n; i += kFloatLanes) {
      std::memcpy(&v, row + i, sizeof v);
      lanes = ((v > lanes) | (v != v)) ? v : lanes;
    }
    return combine_float_lanes(lanes, row, i, n, [](float a, float b) { return (b > a || b != b) ? b : a; });
  }
  for (; i + kFloatLanes <= n; i += kFloatLanes) {
    std::memcpy(&v, row + i, sizeof v);
    lanes = lanes < v ? v : lanes;  // std::max(lanes, v)
  }
  return combine_float_lanes(lanes, row, i, n, [](float a, float b) { return std::max(a, b); });
}

// The sum of row[0..n) in 16 float lanes combined in a tree.
inline float float_row_sum(const float* row, int64_t n) {
  FloatLanes lanes = {}, v;
  int64_t i = 0;
  for (; i + kFloatLanes <= n; i += kFloatLanes) {
    std::memcpy(&v, row + i, sizeof v);
    lanes += v;
  }
  return combine_float_lanes(lanes, row, i, n, [](float a, float b) { return a + b; });
}

}  // namespace hg::kernels::cpu
