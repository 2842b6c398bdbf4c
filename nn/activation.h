// The activation modules: each holds its parameters (if any) and calls its op of
// ops/activation.h, with torch.nn's name and defaults.
#pragma once
#include <string>

#include "nn/module.h"

namespace hg::nn {

// max(x, 0).
class ReLU : public Module {
 public:
  Tensor forward(const Tensor& x) override;
};

// x where x > 0, else negative_slope * x (torch.nn.LeakyReLU).
class LeakyReLU : public Module {
 public:
  explicit LeakyReLU(double negative_slope = 0.01);
  Tensor forward(const Tensor& x) override;
  double negative_slope;
};

// log(1 + exp(beta x)) / beta, linear above threshold (torch.nn.Softplus).
class Softplus : public Module {
 public:
  explicit Softplus(double beta = 1.0, double threshold = 20.0);
  Tensor forward(const Tensor& x) override;
  double beta, threshold;
};

// x * Phi(x); approximate "tanh" for the tanh formula (torch.nn.GELU).
class GELU : public Module {
 public:
  explicit GELU(std::string approximate = "none");
  Tensor forward(const Tensor& x) override;
  std::string approximate;
};

// x * sigmoid(x).
class SiLU : public Module {
 public:
  Tensor forward(const Tensor& x) override;
};

// 1 / (1 + exp(-x)).
class Sigmoid : public Module {
 public:
  Tensor forward(const Tensor& x) override;
};

// tanh(x).
class Tanh : public Module {
 public:
  Tensor forward(const Tensor& x) override;
};

// min(max(x, 0), 6) (MobileNetV2).
class ReLU6 : public Module {
 public:
  Tensor forward(const Tensor& x) override;
};

// min(max(x, min_val), max_val).
class Hardtanh : public Module {
 public:
  explicit Hardtanh(double min_val = -1.0, double max_val = 1.0);
  Tensor forward(const Tensor& x) override;
  double min_val, max_val;
};

// relu6(x + 3) / 6.
class Hardsigmoid : public Module {
 public:
  Tensor forward(const Tensor& x) override;
};

// x * relu6(x + 3) / 6 (MobileNetV3).
class Hardswish : public Module {
 public:
  Tensor forward(const Tensor& x) override;
};

// x > 0 ? x : alpha * (exp(x) - 1).
class ELU : public Module {
 public:
  explicit ELU(double alpha = 1.0);
  Tensor forward(const Tensor& x) override;
  double alpha;
};

// 1.0507 * elu(x, 1.6733): self-normalising.
class SELU : public Module {
 public:
  Tensor forward(const Tensor& x) override;
};

// x > 0 ? x : alpha * (exp(x / alpha) - 1).
class CELU : public Module {
 public:
  explicit CELU(double alpha = 1.0);
  Tensor forward(const Tensor& x) override;
  double alpha;
};

// x * tanh(softplus(x)).
class Mish : public Module {
 public:
  Tensor forward(const Tensor& x) override;
};

// x / (1 + |x|).
class Softsign : public Module {
 public:
  Tensor forward(const Tensor& x) override;
};

// log(sigmoid(x)).
class LogSigmoid : public Module {
 public:
  Tensor forward(const Tensor& x) override;
};

// x where x > 0, else a * x with a learned slope a: one for all channels (num_parameters = 1) or
// one per channel (num_parameters = C), each starting at `init` (torch.nn.PReLU).
class PReLU : public Module {
 public:
  explicit PReLU(int64_t num_parameters = 1, double init = 0.25);
  Tensor forward(const Tensor& x) override;
  Tensor weight;  // (num_parameters)
};

}  // namespace hg::nn
