// Inputs the FP8 tests share (test_float8, test_fp8_recipes, test_fp8_cuda): every 16-bit
// pattern, and every f16 value followed by values around both FP8 formats' ranges.
#pragma once
#include <cstdint>

#include "halfgrad.h"

namespace hg_test {

// Every 16-bit pattern as an f16 / bf16 tensor (NaN and inf included).
inline hg::Tensor all_16bit_values(hg::DType dtype) {
  hg::Tensor t = hg::empty({65536}, {.dtype = dtype});
  auto* bits = static_cast<uint16_t*>(t.raw_data());
  for (uint32_t i = 0; i < 65536; ++i) bits[i] = uint16_t(i);
  return t;
}

// Every f16 value in f32, then 4096 values ~1e4 (beyond E4M3's 448) and 4096 ~1e-6 (below its
// subnormals).
inline hg::Tensor fp8_awkward_values() {
  hg::manual_seed(3);
  return hg::cat({all_16bit_values(hg::f16).to(hg::f32), hg::randn({4096}) * 1e4, hg::randn({4096}) * 1e-6}, 0);
}

}  // namespace hg_test
