// RMSprop, PyTorch's rule (torch.optim.RMSprop, its defaults):
//   g += weight_decay * w;  square_avg = alpha * square_avg + (1 - alpha) * g^2
//   centered: grad_avg = alpha * grad_avg + (1 - alpha) * g;  avg = sqrt(square_avg - grad_avg^2) + eps
//   else:     avg = sqrt(square_avg) + eps
//   momentum > 0: buf = momentum * buf + g / avg;  w -= lr * buf      else: w -= lr * g / avg
#pragma once
#include <array>

#include "optim/optimizer.h"

namespace hg::optim {

struct RMSpropOptions {
  double lr = 1e-2;
  double alpha = 0.99;
  double eps = 1e-8;
  double weight_decay = 0;
  double momentum = 0;
  bool centered = false;
  bool master_weights = false;
};

class RMSprop : public Optimizer {
 public:
  RMSprop(const std::vector<Tensor>& params, RMSpropOptions options = {});
  RMSpropOptions options;
  std::string_view kind() const override { return "RMSprop"; }
  std::optional<double> momentum() const override { return options.momentum; }
  void set_momentum(double momentum) override;

 protected:
  std::vector<std::string_view> state_names() const override;
  void update(const Tensor& weight, const Tensor& grad, ParamState& state, double lr) override;
  void update_cuda(DeviceGroup& group, const amp::StepControl& control) override;

 private:
  std::array<Tensor, 3> slots(ParamState& state, const Tensor& weight);
};

}  // namespace hg::optim
