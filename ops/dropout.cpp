// dropout with a Philox mask that is recomputed, not stored (kernels/dropout.h): the backward
// regenerates the forward's mask from the (seed, offset) the forward reserved, so no mask tensor
// lives between forward and backward.
#include "ops/dropout.h"

#include "amp/autocast.h"
#include "autograd/node.h"
#include "kernels/dropout.h"
#include "ops/elementwise.h"
#include "ops/record.h"

namespace hg {


Tensor dropout(const Tensor& input, double p, bool training) {
  auto [x0] = amp::prepare(amp::Op::Dropout, input);
  HG_CHECK(p >= 0 && p <= 1, "dropout: probability must be in [0, 1], got ", p);
  HG_CHECK(is_floating(x0.dtype()), "dropout: expected a floating tensor, got ", x0.dtype());
  if (!training || p == 0) return x0;
  if (p == 1) return x0 * 0.0;
  const Tensor x = x0.contiguous();
  const random::GeneratorState stream = random::reserve(uint64_t(x.numel()));
  Tensor out = kernels::dropout_masked(x, p, stream);
  record(amp::Op::Dropout, out, {x}, [p, stream](const Tensor& g) -> std::vector<Tensor> {
    return {kernels::dropout_masked(g.contiguous(), p, stream)};
  });
  return out;
}

}  // namespace hg
