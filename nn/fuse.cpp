// nn::fuse and the pairs it fuses.
#include "nn/fuse.h"

#include <typeinfo>

#include "nn/activation.h"
#include "nn/batchnorm.h"
#include "nn/conv.h"
#include "nn/layers.h"
#include "nn/linear.h"
#include "ops/conv.h"
#include "ops/linalg.h"

namespace hg::nn {

Sequential fuse(Sequential model) {
  model.fuse_activations_ = true;
  return model;
}

namespace detail {

std::optional<Tensor> forward_fused(Module& layer, Module& next, const Tensor& x) {
  // (GELU's tanh approximation is not the epilogue's formula: that pair stays apart)
  const bool exact_gelu = typeid(next) == typeid(GELU) && static_cast<const GELU&>(next).approximate == "none";
  if (typeid(layer) == typeid(Linear) && exact_gelu) {
    const Linear& fc = static_cast<const Linear&>(layer);
    return linear(x, fc.weight, fc.bias, {.epilogue = Epilogue::Gelu});
  }
  const bool batch_norm = typeid(layer) == typeid(BatchNorm2d) || typeid(layer) == typeid(BatchNorm1d);
  if (batch_norm && typeid(next) == typeid(ReLU6)) return static_cast<BatchNorm&>(layer).forward(x, Epilogue::Relu6);
  if (typeid(next) != typeid(ReLU)) return std::nullopt;
  if (typeid(layer) == typeid(Linear)) {
    const Linear& fc = static_cast<const Linear&>(layer);
    return linear(x, fc.weight, fc.bias, {.epilogue = Epilogue::Relu});
  }
  if (batch_norm) return static_cast<BatchNorm&>(layer).forward(x, Epilogue::Relu);
  if (typeid(layer) == typeid(Conv2d)) {
    const Conv2d& conv = static_cast<const Conv2d&>(layer);
    return conv2d(x, conv.weight, conv.bias,
                  {.stride = conv.options.stride, .padding = conv.options.padding, .epilogue = Epilogue::Relu});
  }
  return std::nullopt;
}

}  // namespace detail

}  // namespace hg::nn
