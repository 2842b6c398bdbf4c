#include "kernels/dropout.h"

#include <algorithm>
#include <type_traits>

#include "core/half.h"
#include "core/loops.h"
#include "core/parallel.h"
#include "core/philox.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/math/dropout.h"

namespace hg::kernels {

namespace {
// Element i uses word i % 4 of Philox block i / 4. The blocks are drawn philox::kBatch at a time
// (the rounds run as vectors) and the keep test is an integer compare, so the loop over the
// 4 * kBatch elements vectorises too.
template <class T>
void apply_mask(const T* in, T* out, int64_t n, double p, random::GeneratorState stream) {
  constexpr int64_t kGroup = 4 * philox::kBatch;  // elements per batch of blocks
  const math::Dropout rule{p};
  const Acc<T> scale = rule.scale<Acc<T>>();
  const uint32_t threshold = rule.keep_threshold();  // (2^24 for p = 1: above every draw)
  parallel_for(0, (n + kGroup - 1) / kGroup, detail::kElementwiseGrain / kGroup, [&](int64_t lo, int64_t hi) {
    uint32_t words[4][philox::kBatch], draws[kGroup];
    for (int64_t group = lo; group < hi; ++group) {
      philox::generate_batch(stream.seed, stream.offset + uint64_t(group * philox::kBatch), words);
      philox::draws_in_order(words, math::Dropout::kBits, draws);
      const int64_t first = group * kGroup, m = std::min(kGroup, n - first);
      const T* src = in + first;
      T* dst = out + first;
      if constexpr (std::is_same_v<T, half>) {
        // f16's scalar conversions (F16C's one-value instructions) keep the loop below scalar;
        // the bulk converters widen and narrow the group as vectors, to the same bits.
        float values[kGroup];
        convert_to_float(src, values, size_t(m));
        for (int64_t k = 0; k < m; ++k) {
          const float kept = values[k] * scale;  // for every element: the loop needs no branch
          values[k] = draws[k] >= threshold ? kept : 0.0f;
        }
        convert_from_float(values, dst, size_t(m));
      } else {
        // Scale every element, select, then one conversion: the loop vectorises for bf16 too.
        for (int64_t k = 0; k < m; ++k) {
          const Acc<T> kept = Acc<T>(src[k]) * scale;
          dst[k] = T(draws[k] >= threshold ? kept : Acc<T>(0));
        }
      }
    }
  });
}
}  // namespace

Tensor dropout_masked(const Tensor& in, double p, random::GeneratorState stream) {
  Tensor out = empty(in.shape(), in.options());
  if (out.numel() == 0) return out;
  if (in.device().is_cuda()) {
    kernels::cuda::dropout(in, out, p, stream.seed, stream.offset);
  } else {
    visit_floating(in.dtype(), "dropout",
                   [&]<class T> { apply_mask<T>(in.data_ptr<T>(), out.data_ptr<T>(), in.numel(), p, stream); });
  }
  return out;
}

}  // namespace hg::kernels
