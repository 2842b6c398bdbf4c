// Adadelta, PyTorch's rule (torch.optim.Adadelta, its defaults: lr 1):
//   g += weight_decay * w;  square_avg = rho * square_avg + (1 - rho) * g^2
//   delta = sqrt(acc_delta + eps) / sqrt(square_avg + eps) * g
//   acc_delta = rho * acc_delta + (1 - rho) * delta^2;  w -= lr * delta
#pragma once
#include "optim/optimizer.h"

namespace hg::optim {

struct AdadeltaOptions {
  double lr = 1.0;
  double rho = 0.9;
  double eps = 1e-6;
  double weight_decay = 0;
  bool master_weights = false;
};

class Adadelta : public Optimizer {
 public:
  Adadelta(const std::vector<Tensor>& params, AdadeltaOptions options = {});
  AdadeltaOptions options;
  std::string_view kind() const override { return "Adadelta"; }

 protected:
  std::vector<std::string_view> state_names() const override { return {"square_avg", "acc_delta"}; }
  void update(const Tensor& weight, const Tensor& grad, ParamState& state, double lr) override;
  void update_cuda(DeviceGroup& group, const amp::StepControl& control) override;
};

}  // namespace hg::optim
