// The CPU loop of stochastic rounding (see stochastic_round.h): Philox blocks drawn philox::kBatch
// at a time (the rounds run as vectors), then one integer add per bf16 element.
#include "kernels/cpu/stochastic_round.h"

#include <algorithm>

#include "core/loops.h"
#include "core/parallel.h"
#include "core/philox.h"
#include "kernels/math/stochastic_round.h"

namespace hg::kernels::cpu {

namespace {
template <class T>
void round_all(const float* in, T* out, int64_t n, uint64_t seed, uint64_t offset) {
  constexpr int64_t kGroup = kStochasticRoundsPerCounter * philox::kBatch;  // elements per batch of blocks
  parallel_for(0, (n + kGroup - 1) / kGroup, ::hg::detail::kElementwiseGrain / kGroup, [&](int64_t lo, int64_t hi) {
    uint32_t words[4][philox::kBatch], draws[kGroup];
    for (int64_t group = lo; group < hi; ++group) {
      philox::generate_batch(seed, offset + uint64_t(group * philox::kBatch), words);
      for (int l = 0; l < philox::kBatch; ++l)  // element 8 l + h: half h of block l
        for (int h = 0; h < 8; ++h) draws[8 * l + h] = (words[h / 2][l] >> (16 * (h % 2))) & 0xffffu;
      const int64_t first = group * kGroup, m = std::min(kGroup, n - first);
      const float* src = in + first;
      T* dst = out + first;
      for (int64_t k = 0; k < m; ++k) dst[k] = math::stochastic_round_to<T>(src[k], draws[k]);
    }
  });
}
}  // namespace

void stochastic_round(const float* in, bfloat16* out, int64_t n, uint64_t seed, uint64_t offset) {
  round_all(in, out, n, seed, offset);
}
void stochastic_round(const float* in, half* out, int64_t n, uint64_t seed, uint64_t offset) {
  round_all(in, out, n, seed, offset);
}

}  // namespace hg::kernels::cpu
