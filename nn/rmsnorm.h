// nn::RMSNorm: x / sqrt(mean(x^2) + eps) over the trailing `normalized_shape` dimensions, times a
// learnable elementwise weight (ones) -- LayerNorm without the centring and the bias (ops/norm.h's
// rms_norm). As PyTorch's nn.RMSNorm: eps unset means the input dtype's epsilon.
#pragma once
#include <optional>

#include "nn/module.h"

namespace hg::nn {

struct RMSNormOptions {
  std::optional<double> eps = std::nullopt;
  bool elementwise_affine = true;
};

class RMSNorm : public Module {
 public:
  explicit RMSNorm(Shape normalized_shape, RMSNormOptions options = {});
  Tensor forward(const Tensor& x) override;

  Shape normalized_shape;
  RMSNormOptions options;
  Tensor weight;
};

}  // namespace hg::nn
