// Adagrad, PyTorch's rule (torch.optim.Adagrad, its defaults); t counts this parameter's steps:
//   g += weight_decay * w;  sum += g^2  (sum starts at initial_accumulator_value)
//   w -= lr / (1 + (t - 1) * lr_decay) * g / (sqrt(sum) + eps)
#pragma once
#include "optim/optimizer.h"

namespace hg::optim {

struct AdagradOptions {
  double lr = 1e-2;
  double lr_decay = 0;
  double weight_decay = 0;
  double initial_accumulator_value = 0;
  double eps = 1e-10;
  bool master_weights = false;
};

class Adagrad : public Optimizer {
 public:
  Adagrad(const std::vector<Tensor>& params, AdagradOptions options = {});
  AdagradOptions options;
  std::string_view kind() const override { return "Adagrad"; }

 protected:
  std::vector<std::string_view> state_names() const override { return {"sum"}; }
  void update(const Tensor& weight, const Tensor& grad, ParamState& state, double lr) override;
  void update_cuda(DeviceGroup& group, const amp::StepControl& control) override;
};

}  // namespace hg::optim
