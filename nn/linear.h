// nn::Linear: y = x W^T + b, with W (out, in) and b (out) initialised like PyTorch
// (kaiming_uniform with a = sqrt(5), i.e. U(-1/sqrt(in), 1/sqrt(in)), and the same bound for b).
#pragma once
#include "nn/module.h"

namespace hg::nn {

class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true);
  Tensor forward(const Tensor& x) override;

  int64_t in_features, out_features;
  Tensor weight;  // (out_features, in_features)
  Tensor bias;    // (out_features), undefined without bias
};

}  // namespace hg::nn
