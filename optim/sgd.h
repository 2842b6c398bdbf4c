// SGD with momentum, dampening, Nesterov and weight decay, PyTorch's update rule:
//   d = g + weight_decay * w
//   buf = d on the first step, else momentum * buf + (1 - dampening) * d
//         ("first" = the step that finds no momentum buffer, PyTorch's rule, on CPU and GPU alike:
//         a skipped step creates none, a buffer loaded from a state dict counts, and turning
//         momentum on later starts from the gradient)
//   d = nesterov ? d + momentum * buf : buf          (when momentum != 0)
//   w -= lr * d
#pragma once
#include "optim/optimizer.h"

namespace hg::optim {

struct SGDOptions {
  double lr;
  double momentum = 0;
  double dampening = 0;
  double weight_decay = 0;
  bool nesterov = false;
  bool master_weights = false;
  // Pure 16-bit training (optimizer.h): Stochastic or Kahan with bf16/f16 parameters, no masters;
  // seed: the seed of the stochastic rounding's Philox stream.
  Rounding rounding = Rounding::Nearest;
  uint64_t seed = 0;
};

class SGD : public Optimizer {
 public:
  SGD(const std::vector<Tensor>& params, SGDOptions options);
  SGDOptions options;
  std::string_view kind() const override { return "SGD"; }
  std::optional<double> momentum() const override { return options.momentum; }
  void set_momentum(double momentum) override;

 protected:
  std::vector<std::string_view> state_names() const override {
    if (options.momentum == 0) return {};
    return {"momentum_buffer"};
  }
  void update(const Tensor& weight, const Tensor& grad, ParamState& state, double lr) override;
  void update_cuda(DeviceGroup& group, const amp::StepControl& control) override;
  bool holds_value(const ParamState& state, const std::string& name) const override;
};

}  // namespace hg::optim
