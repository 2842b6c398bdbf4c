// nn::Sequential.
#include "nn/sequential.h"

#include <optional>

#include "nn/fuse.h"

namespace hg::nn {

Tensor Sequential::forward(const Tensor& x) {
  Tensor y = x;
  const std::vector<std::shared_ptr<Module>>& modules = *modules_;
  for (size_t i = 0; i < modules.size(); ++i) {
    if (fuse_activations_ && i + 1 < modules.size()) {
      if (std::optional<Tensor> fused = detail::forward_fused(*modules[i], *modules[i + 1], y)) {
        y = std::move(*fused);
        ++i;  // the activation ran as the layer's epilogue
        continue;
      }
    }
    y = (*modules[i])(y);
  }
  return y;
}

}  // namespace hg::nn
