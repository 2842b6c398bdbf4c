// dropout's rule, the one definition the CPU loop (kernels/dropout.cpp) and the CUDA kernel
// (kernels/cuda/dropout.cu) both run: element i is kept when its uniform draw -- word i % 4 of
// the Philox block offset + i / 4, 24 bits, core/philox.h -- is >= p, and a kept value is scaled by
// 1 / (1 - p). Philox is counter-based, so both devices draw the same mask with no state to share.
#pragma once
#include <cmath>
#include <cstdint>

#include "core/philox.h"
#include "kernels/math/common.h"

namespace hg::kernels::math {

struct Dropout {
  double p;

  static constexpr int kBits = 24;  // a multiple of 2^-24: exact in double, compared in double

  HG_HD bool keeps(uint32_t word) const { return philox::uniform_of_word(word, kBits) >= p; }
  // The same test in integers: the draw is (word >> 8) / 2^24, kept when (word >> 8) >= this.
  // (p * 2^24 is exact in double, so its ceiling is the exact threshold.)
  uint32_t keep_threshold() const { return uint32_t(std::ceil(p * 16777216.0)); }
  // NOTE: 1 / (1 - p) in double, then rounded to the compute type A: the same on both devices.
  template <class A> HG_HD A scale() const { return A(1.0 / (1.0 - p)); }
};

}  // namespace hg::kernels::math
