#include "kernels/dropout.h"

#include "core/loops.h"
#include "core/parallel.h"
#include "core/philox.h"
#include "kernels/cuda/cuda_kernels.h"

namespace hg::kernels {

namespace {
template <class T>
void apply_mask(const T* in, T* out, int64_t n, double p, random::GeneratorState stream) {
  const Acc<T> scale = Acc<T>(1.0 / (1.0 - p));
  parallel_for(0, n, detail::kElementwiseGrain / 4, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      const bool keep = philox::uniform(stream.seed, stream.offset, uint64_t(i), 24) >= p;
      out[i] = keep ? T(Acc<T>(in[i]) * scale) : T(Acc<T>(0));
    }
  });
}
}  // namespace

Tensor dropout_masked(const Tensor& in, double p, random::GeneratorState stream) {
  Tensor out = empty(in.shape(), in.options());
  if (out.numel() == 0) return out;
  if (in.device().is_cuda()) {
    cuda_kernels::dropout(in, out, p, stream.seed, stream.offset);
  } else {
    visit_floating(in.dtype(), "dropout", [&]<class T> { apply_mask<T>(in.data_ptr<T>(), out.data_ptr<T>(), in.numel(), p, stream); });
  }
  return out;
}

}  // namespace hg::kernels
