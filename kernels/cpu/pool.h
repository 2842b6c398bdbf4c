// The SIMD row kernel of the 2x2, stride-2 max pool (every CNN's pool), one implementation per
// CPU level, picked by cpu::isa(). ops/pool.cpp drives it plane by plane.
#pragma once
#include <cstdint>

namespace hg::kernels::cpu {

// One output row: y[ow] = max of the window r0[2ow], r0[2ow+1], r1[2ow], r1[2ow+1] (NaN wins,
// as max must not drop it), where[ow] = the window index of the maximum (0..3, row-major).
void max_pool_2x2_row(const float* r0, const float* r1, float* y, uint8_t* where, int64_t OW);

}  // namespace hg::kernels::cpu
