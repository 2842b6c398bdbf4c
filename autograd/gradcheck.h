// gradcheck: compares the gradients backward computes with central finite differences, in f64.
// Usable on your own ops:
//
//   std::vector<hg::Tensor> inputs{hg::randn({3, 4}, {.dtype = hg::f64, .requires_grad = true})};
//   bool ok = hg::autograd::gradcheck([](const std::vector<hg::Tensor>& in) { return my_op(in[0]); }, inputs);
//
// For every output element k and input element j: |J_analytic[k][j] - J_numeric[k][j]|
// <= atol + rtol * |J_numeric[k][j]|, with J_numeric = (f(x + eps) - f(x - eps)) / (2 eps).
// Inputs that do not require grad are held fixed.
#pragma once
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace hg::autograd {

struct GradcheckOptions {
  double eps = 1e-6;
  double atol = 1e-5;
  double rtol = 1e-3;
};

using GradcheckFn = std::function<Tensor(const std::vector<Tensor>&)>;

bool gradcheck(const GradcheckFn& fn, const std::vector<Tensor>& inputs, GradcheckOptions options = {});
// The same, returning a description of the first mismatch instead of false.
std::optional<std::string> gradcheck_report(const GradcheckFn& fn, const std::vector<Tensor>& inputs,
                                            GradcheckOptions options = {});

}  // namespace hg::autograd
