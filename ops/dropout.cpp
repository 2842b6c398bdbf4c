// dropout with a Philox mask that is recomputed, not stored: element i of the (contiguous) input
// is kept iff uniform(seed, offset + i) >= p. The backward regenerates the same mask from the
// (seed, offset) reserved by the forward, so no mask tensor lives between forward and backward.
#include "ops/dropout.h"

#include "amp/autocast.h"
#include "autograd/node.h"
#include "core/parallel.h"
#include "core/loops.h"
#include "core/philox.h"
#include "core/rng.h"
#include "ops/cuda_ops.h"
#include "ops/elementwise.h"

namespace hg {

using autograd::record;

namespace {

// out[i] = keep(i) ? in[i] / (1 - p) : 0, for the forward (in = x) and the backward (in = g).
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

Tensor masked(const Tensor& in, double p, random::GeneratorState stream) {
  Tensor out = empty(in.shape(), in.options());
  if (out.numel() == 0) return out;
  if (in.device().is_cuda()) {
    cuda_ops::dropout(in, out, p, stream.seed, stream.offset);
  } else {
    visit_floating(in.dtype(), "dropout", [&]<class T> { apply_mask<T>(in.data_ptr<T>(), out.data_ptr<T>(), in.numel(), p, stream); });
  }
  return out;
}

}  // namespace

Tensor dropout(const Tensor& input, double p, bool training) {
  auto [x0] = amp::prepare(amp::Op::Dropout, input);
  HG_CHECK(p >= 0 && p <= 1, "dropout: probability must be in [0, 1], got ", p);
  HG_CHECK(is_floating(x0.dtype()), "dropout: expected a floating tensor, got ", x0.dtype());
  if (!training || p == 0) return x0;
  if (p == 1) return x0 * 0.0;
  const Tensor x = x0.contiguous();
  const random::GeneratorState stream = random::reserve(uint64_t(x.numel()));
  Tensor out = masked(x, p, stream);
  record("dropout", out, {x}, [p, stream](const Tensor& g) -> std::vector<Tensor> {
    return {masked(g.contiguous(), p, stream)};
  });
  return out;
}

}  // namespace hg
