// nn::Sequential.
#include "nn/sequential.h"

#include "nn/conv.h"
#include "nn/layers.h"
#include "nn/linear.h"
#include "ops/conv.h"
#include "ops/linalg.h"

namespace hg::nn {

// NOTE: a Linear or Conv2d directly followed by a ReLU runs as one fused op (linear_relu,
// conv2d_relu): one pass less over the activations on the CPU, a GEMM epilogue on CUDA. The
// result is the same as running the two modules one after the other.
Tensor Sequential::forward(const Tensor& x) {
  Tensor y = x;
  const std::vector<std::shared_ptr<Module>>& modules = *modules_;
  for (size_t i = 0; i < modules.size(); ++i) {
    const bool relu_next = i + 1 < modules.size() && dynamic_cast<ReLU*>(modules[i + 1].get()) != nullptr;
    if (relu_next) {
      if (auto* fc = dynamic_cast<Linear*>(modules[i].get())) {
        y = linear_relu(y, fc->weight, fc->bias);
        ++i;
        continue;
      }
      if (auto* conv = dynamic_cast<Conv2d*>(modules[i].get())) {
        y = conv2d_relu(y, conv->weight, conv->bias, {.stride = conv->options.stride, .padding = conv->options.padding});
        ++i;
        continue;
      }
    }
    y = (*modules[i])(y);
  }
  return y;
}

}  // namespace hg::nn
