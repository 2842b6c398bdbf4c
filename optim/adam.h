// Adam and AdamW, PyTorch's update rules (amsgrad off):
//   Adam:  g += weight_decay * w            AdamW: w *= 1 - lr * weight_decay
//   m = beta1 * m + (1 - beta1) * g;  v = beta2 * v + (1 - beta2) * g^2
//   w -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
#pragma once
#include "optim/optimizer.h"

namespace hg::optim {

struct AdamOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0;
  bool master_weights = false;
  // Pure 16-bit training (optimizer.h): Stochastic or Kahan with bf16/f16 parameters, no masters;
  // seed: the seed of the stochastic rounding's Philox stream.
  Rounding rounding = Rounding::Nearest;
  uint64_t seed = 0;
};

struct AdamWOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 1e-2;
  bool master_weights = false;
  // Pure 16-bit training (optimizer.h): Stochastic or Kahan with bf16/f16 parameters, no masters;
  // seed: the seed of the stochastic rounding's Philox stream.
  Rounding rounding = Rounding::Nearest;
  uint64_t seed = 0;
};

class Adam : public Optimizer {
 public:
  Adam(const std::vector<Tensor>& params, AdamOptions options = {});
  AdamOptions options;
  std::string_view kind() const override { return decoupled_ ? "AdamW" : "Adam"; }
  std::optional<double> momentum() const override { return options.beta1; }
  void set_momentum(double momentum) override;

 protected:
  std::vector<std::string_view> state_names() const override { return {"exp_avg", "exp_avg_sq"}; }
  Adam(const std::vector<Tensor>& params, AdamOptions options, bool decoupled_weight_decay);
  void update(const Tensor& weight, const Tensor& grad, ParamState& state, double lr) override;
  void update_cuda(DeviceGroup& group, const amp::StepControl& control) override;

 private:
  bool decoupled_;  // AdamW
};

class AdamW : public Adam {
 public:
  AdamW(const std::vector<Tensor>& params, AdamWOptions options = {});
};

}  // namespace hg::optim
