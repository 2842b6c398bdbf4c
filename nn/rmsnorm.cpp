// nn::RMSNorm.
#include "nn/rmsnorm.h"

#include "ops/norm.h"

namespace hg::nn {

RMSNorm::RMSNorm(Shape shape, RMSNormOptions opts) : normalized_shape(std::move(shape)), options(opts) {
  checked_numel(normalized_shape, "RMSNorm");
  if (opts.elementwise_affine) weight = register_parameter("weight", ones(normalized_shape));
}

Tensor RMSNorm::forward(const Tensor& x) { return rms_norm(x, normalized_shape, weight, options.eps); }

}  // namespace hg::nn
