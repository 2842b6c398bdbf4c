#include "kernels/dropout.h"

#include "core/loops.h"
#include "core/parallel.h"
#include "core/philox.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/math/dropout.h"

namespace hg::kernels {

namespace {
// One Philox block per group of 4 elements (words 0..3), each block computed once.
template <class T>
void apply_mask(const T* in, T* out, int64_t n, double p, random::GeneratorState stream) {
  const math::Dropout rule{p};
  const Acc<T> scale = rule.scale<Acc<T>>();
  parallel_for(0, (n + 3) / 4, detail::kElementwiseGrain / 16, [&](int64_t lo, int64_t hi) {
    for (int64_t q = lo; q < hi; ++q) {
      const philox::Block bits = philox::generate(stream.seed, stream.offset + uint64_t(q));
      for (int64_t i = 4 * q, word = 0; word < 4 && i < n; ++i, ++word)
        out[i] = rule.keeps(bits.v[word]) ? T(Acc<T>(in[i]) * scale) : T(Acc<T>(0));
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
