// clip_grad_norm_.
#include "nn/utils.h"

#include <cmath>

#include "autograd/grad_mode.h"
#include "ops/elementwise.h"
#include "ops/reduce.h"

namespace hg::nn::utils {

double clip_grad_norm_(const std::vector<Tensor>& parameters, double max_norm) {
  HG_CHECK(max_norm > 0, "clip_grad_norm_: max_norm must be positive, got ", max_norm);
  NoGradGuard no_grad;
  double total = 0;
  for (const Tensor& p : parameters)
    if (p.grad().defined()) total += sum(pow(p.grad().to(f64), 2.0)).item<double>();
  const double norm = std::sqrt(total);
  const double coefficient = max_norm / (norm + 1e-6);  // PyTorch's epsilon
  if (coefficient < 1)
    for (const Tensor& p : parameters)
      if (p.grad().defined()) p.grad().mul_(coefficient);
  return norm;
}

}  // namespace hg::nn::utils
