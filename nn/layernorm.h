// nn::LayerNorm: normalises over the trailing `normalized_shape` dimensions, with learnable
// elementwise weight (ones) and bias (zeros).
#pragma once
#include "nn/module.h"

namespace hg::nn {

struct LayerNormOptions {
  double eps = 1e-5;
  bool elementwise_affine = true;
};

class LayerNorm : public Module {
 public:
  explicit LayerNorm(Shape normalized_shape, LayerNormOptions options = {});
  Tensor forward(const Tensor& x) override;

  Shape normalized_shape;
  LayerNormOptions options;
  Tensor weight, bias;
};

}  // namespace hg::nn
