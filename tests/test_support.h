// Test helpers shared by every tests/test_<area>.cpp:
//   * assert_close(actual, expected) with docs/testing.md's T(dtype) tolerances and PyTorch's
//     mismatch message ("Mismatched elements: k / n; greatest absolute difference ... at index ...");
//   * cuda_available() for `TEST_CASE("..." * doctest::skip(!hg_test::cuda_available()))`;
//   * temp_path() for files the tests write.
#pragma once
#include <doctest/doctest.h>

#include <map>
#include <optional>
#include <string>

#include "halfgrad.h"

namespace hg_test {

struct Tolerance {
  double rtol;
  double atol;
};

// PyTorch's assert_close defaults (docs/testing.md's T(dtype)).
Tolerance tolerance_for(hg::DType dtype);

// Empty when |actual - expected| <= atol + rtol*|expected| everywhere (NaN == NaN when
// equal_nan), else PyTorch's mismatch report. Compared in f64 on the CPU.
std::optional<std::string> compare(const hg::Tensor& actual, const hg::Tensor& expected, Tolerance tol,
                                   bool equal_nan = false);

bool cuda_available();
std::string temp_path(const std::string& name);

// Adam (lr 0.1) on a zero 3-element parameter on `device`: one step with gradient 1, then its state
// reloaded with the step count and steps_applied set to `start` and the moments zeroed, then one
// more step with gradient 2. Returns the state dict after that step, plus "param" (on the CPU) and
// "param_before" (the parameter before it). The optimizer step-count tests run it on each device.
std::map<std::string, hg::Tensor> adam_step_after_count(hg::Device device, int64_t start);

// An optimizer as a user writes one (docs/api.md, "Your own optimizer"): only kind(),
// state_names() and update(), the update in hg ops, so the base class's default update_cuda runs
// it on a GPU too. The rule: buf = beta buf + (1 - beta) g; w -= lr buf / (|buf| + 1e-3), a
// smoothed sign of the gradient's running mean.
class SmoothSign : public hg::optim::Optimizer {
 public:
  SmoothSign(const std::vector<hg::Tensor>& params, double lr, double beta = 0.9, bool master_weights = false)
      : Optimizer(params, lr, master_weights), beta(beta) {}
  double beta;
  std::string_view kind() const override { return "SmoothSign"; }

 protected:
  std::vector<std::string_view> state_names() const override { return {"buf"}; }
  void update(const hg::Tensor& weight, const hg::Tensor& grad, ParamState& state, double lr) override {
    hg::Tensor buf = state_tensor(state, weight, "buf");
    buf.copy_(buf * beta + grad * (1 - beta));
    hg::Tensor(weight).copy_(weight - buf / (hg::abs(buf) + 1e-3) * lr);
  }
};

}  // namespace hg_test

// CHECK that two tensors are close with T(dtype of expected), or an explicit tolerance.
#define CHECK_CLOSE(actual, expected)                                                                      \
  do {                                                                                                     \
    const auto hg_report_ = ::hg_test::compare((actual), (expected), ::hg_test::tolerance_for((expected).dtype())); \
    CHECK_MESSAGE(!hg_report_.has_value(), hg_report_.value_or(""));                                       \
  } while (0)

#define CHECK_CLOSE_TOL(actual, expected, rtol_, atol_)                                                    \
  do {                                                                                                     \
    const auto hg_report_ = ::hg_test::compare((actual), (expected), ::hg_test::Tolerance{rtol_, atol_});   \
    CHECK_MESSAGE(!hg_report_.has_value(), hg_report_.value_or(""));                                       \
  } while (0)

#define CHECK_CLOSE_NAN(actual, expected)                                                                  \
  do {                                                                                                     \
    const auto hg_report_ = ::hg_test::compare((actual), (expected), ::hg_test::tolerance_for((expected).dtype()), true); \
    CHECK_MESSAGE(!hg_report_.has_value(), hg_report_.value_or(""));                                       \
  } while (0)

// CHECK that `expr` throws hg::Error whose message contains `needle`.
#define CHECK_THROWS_HG(expr, needle) CHECK_THROWS_WITH_AS(expr, doctest::Contains(needle), hg::Error)
