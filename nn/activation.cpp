// The activation modules: each forward is its op.
#include "nn/activation.h"

#include <utility>

#include "ops/activation.h"

namespace hg::nn {

Tensor ReLU::forward(const Tensor& x) { return relu(x); }
LeakyReLU::LeakyReLU(double negative_slope_) : negative_slope(negative_slope_) {}
Tensor LeakyReLU::forward(const Tensor& x) { return leaky_relu(x, negative_slope); }
Softplus::Softplus(double beta_, double threshold_) : beta(beta_), threshold(threshold_) {}
Tensor Softplus::forward(const Tensor& x) { return softplus(x, beta, threshold); }
GELU::GELU(std::string approximate_) : approximate(std::move(approximate_)) {}
Tensor GELU::forward(const Tensor& x) { return gelu(x, {.approximate = approximate}); }
Tensor SiLU::forward(const Tensor& x) { return silu(x); }
Tensor Sigmoid::forward(const Tensor& x) { return sigmoid(x); }
Tensor Tanh::forward(const Tensor& x) { return tanh(x); }
Tensor ReLU6::forward(const Tensor& x) { return relu6(x); }
Hardtanh::Hardtanh(double min_val_, double max_val_) : min_val(min_val_), max_val(max_val_) {}
Tensor Hardtanh::forward(const Tensor& x) { return hardtanh(x, min_val, max_val); }
Tensor Hardsigmoid::forward(const Tensor& x) { return hardsigmoid(x); }
Tensor Hardswish::forward(const Tensor& x) { return hardswish(x); }
ELU::ELU(double alpha_) : alpha(alpha_) {}
Tensor ELU::forward(const Tensor& x) { return elu(x, alpha); }
Tensor SELU::forward(const Tensor& x) { return selu(x); }
CELU::CELU(double alpha_) : alpha(alpha_) {}
Tensor CELU::forward(const Tensor& x) { return celu(x, alpha); }
Tensor Mish::forward(const Tensor& x) { return mish(x); }
Tensor Softsign::forward(const Tensor& x) { return softsign(x); }
Tensor LogSigmoid::forward(const Tensor& x) { return logsigmoid(x); }

PReLU::PReLU(int64_t num_parameters, double init) {
  HG_CHECK(num_parameters >= 1, "PReLU: num_parameters must be positive, got ", num_parameters);
  weight = register_parameter("weight", full({num_parameters}, init));
}
Tensor PReLU::forward(const Tensor& x) { return prelu(x, weight); }

}  // namespace hg::nn
