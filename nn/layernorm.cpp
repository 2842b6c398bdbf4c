// nn::LayerNorm.
#include "nn/layernorm.h"

#include "ops/norm.h"

namespace hg::nn {

LayerNorm::LayerNorm(Shape shape, LayerNormOptions opts) : normalized_shape(std::move(shape)), options(opts) {
  checked_numel(normalized_shape, "LayerNorm");
  if (opts.elementwise_affine) {
    weight = register_parameter("weight", ones(normalized_shape));
    bias = register_parameter("bias", zeros(normalized_shape));
  }
}

Tensor LayerNorm::forward(const Tensor& x) { return layer_norm(x, normalized_shape, weight, bias, options.eps); }

}  // namespace hg::nn
