// nn::Sequential.
#include "nn/sequential.h"

namespace hg::nn {

Tensor Sequential::forward(const Tensor& x) {
  Tensor y = x;
  for (const auto& module : *modules_) y = (*module)(y);
  return y;
}

}  // namespace hg::nn
