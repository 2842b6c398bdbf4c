// Finite-difference gradient checking (see gradcheck.h).
#include "autograd/gradcheck.h"

#include <cmath>
#include <sstream>

#include "autograd/grad_mode.h"

namespace hg::autograd {

namespace {

// Address of element `index` (row-major order) of a strided f64 tensor.
double* element(const Tensor& t, int64_t index) {
  int64_t offset = 0;
  for (int d = t.dim() - 1; d >= 0; --d) {
    offset += (index % t.shape()[d]) * t.strides()[d];
    index /= t.shape()[d];
  }
  return static_cast<double*>(t.raw_data()) + offset;
}

std::vector<double> evaluate(const GradcheckFn& fn, const std::vector<Tensor>& inputs) {
  NoGradGuard no_grad;
  return fn(inputs).to_vector<double>();
}

}  // namespace

std::optional<std::string> gradcheck_report(const GradcheckFn& fn, const std::vector<Tensor>& inputs,
                                            GradcheckOptions options) {
  for (const Tensor& t : inputs)
    HG_CHECK(!t.defined() || t.dtype() == f64, "gradcheck: inputs must be f64 (finite differences in lower precision "
             "are meaningless), got ", t.dtype());
  const Tensor probe = [&] {
    NoGradGuard no_grad;
    return fn(inputs);
  }();
  const int64_t outputs = probe.numel();
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& x = inputs[i];
    if (!x.defined() || !x.requires_grad()) continue;
    // Analytic Jacobian, one row per output element: backward with a one-hot gradient.
    std::vector<std::vector<double>> analytic(static_cast<size_t>(outputs));
    for (int64_t k = 0; k < outputs; ++k) {
      x.set_grad(Tensor());
      std::vector<double> one_hot(static_cast<size_t>(outputs), 0.0);
      one_hot[size_t(k)] = 1.0;
      const Tensor out = fn(inputs);
      if (!out.requires_grad()) return "gradcheck: the output does not require grad (is the op recorded?)";
      out.backward(from_vector(one_hot, out.shape(), {.dtype = out.dtype()}));
      analytic[size_t(k)] = x.grad().defined() ? x.grad().to_vector<double>() : std::vector<double>(size_t(x.numel()), 0.0);
    }
    x.set_grad(Tensor());
    // Numeric Jacobian, one column per input element.
    for (int64_t j = 0; j < x.numel(); ++j) {
      double* value = element(x, j);
      const double saved = *value;
      *value = saved + options.eps;
      const std::vector<double> plus = evaluate(fn, inputs);
      *value = saved - options.eps;
      const std::vector<double> minus = evaluate(fn, inputs);
      *value = saved;
      for (int64_t k = 0; k < outputs; ++k) {
        const double numeric = (plus[size_t(k)] - minus[size_t(k)]) / (2 * options.eps);
        const double a = analytic[size_t(k)][size_t(j)];
        if (!(std::fabs(a - numeric) <= options.atol + options.rtol * std::fabs(numeric))) {
          std::ostringstream os;
          os << "gradcheck: Jacobian mismatch for input " << i << " (shape " << x.shape() << "), output element " << k
             << ", input element " << j << ": analytic " << a << ", numeric " << numeric;
          return os.str();
        }
      }
    }
  }
  return std::nullopt;
}

bool gradcheck(const GradcheckFn& fn, const std::vector<Tensor>& inputs, GradcheckOptions options) {
  return !gradcheck_report(fn, inputs, options).has_value();
}

}  // namespace hg::autograd
