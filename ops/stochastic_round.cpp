// stochastic_round (see stochastic_round.h): the checks, then the CPU loop.
#include "ops/stochastic_round.h"

#include "core/rng.h"
#include "kernels/cpu/stochastic_round.h"

namespace hg {

Tensor stochastic_round(const Tensor& x, DType dtype, uint64_t seed, uint64_t offset) {
  HG_CHECK(x.defined(), "stochastic_round: undefined tensor");
  HG_CHECK(x.dtype() == f32, "stochastic_round: expected an f32 tensor, got ", x.dtype(), " (shape ", x.shape(),
           "); stochastic rounding narrows f32 to bf16 or f16");
  HG_CHECK(dtype == bf16 || dtype == f16, "stochastic_round: the target dtype must be bf16 or f16, got ", dtype);
  HG_CHECK(x.device().is_cpu(), "stochastic_round: ", x.device(), " tensors are not supported yet (CPU only; "
           "copy with .to(hg::Device::cpu()))");
  const Tensor in = x.detach().contiguous();
  Tensor out = empty(in.shape(), {.dtype = dtype});
  if (dtype == bf16) kernels::cpu::stochastic_round(in.data_ptr<float>(), out.data_ptr<bfloat16>(), in.numel(), seed, offset);
  else kernels::cpu::stochastic_round(in.data_ptr<float>(), out.data_ptr<half>(), in.numel(), seed, offset);
  return out;
}

Tensor stochastic_round(const Tensor& x, DType dtype) {
  HG_CHECK(x.defined(), "stochastic_round: undefined tensor");
  const random::GeneratorState stream = random::reserve(uint64_t(x.numel()));
  return stochastic_round(x, dtype, stream.seed, stream.offset);
}

}  // namespace hg
