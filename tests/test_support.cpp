// assert_close and the other shared test helpers.
#include "test_support.h"

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <sstream>

namespace hg_test {

Tolerance tolerance_for(hg::DType dtype) {
  switch (dtype) {
    case hg::DType::F32: return {1.3e-6, 1e-5};
    case hg::DType::F64: return {1e-7, 1e-7};
    case hg::DType::F16: return {1e-3, 1e-5};
    case hg::DType::BF16: return {1.6e-2, 1e-5};
    default: return {0, 0};
  }
}

std::optional<std::string> compare(const hg::Tensor& actual, const hg::Tensor& expected, Tolerance tol,
                                   bool equal_nan) {
  if (actual.shape() != expected.shape()) {
    std::ostringstream os;
    os << "The values for attribute 'shape' do not match: " << actual.shape() << " != " << expected.shape() << ".";
    return os.str();
  }
  const std::vector<double> a = actual.to_vector<double>(), e = expected.to_vector<double>();
  int64_t mismatched = 0, worst_abs_at = -1, worst_rel_at = -1;
  double worst_abs = 0, worst_rel = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const bool both_nan = std::isnan(a[i]) && std::isnan(e[i]);
    if (both_nan && equal_nan) continue;
    const double diff = std::fabs(a[i] - e[i]);
    const bool same_inf = std::isinf(a[i]) && a[i] == e[i];
    const bool ok = same_inf || (!std::isnan(diff) && diff <= tol.atol + tol.rtol * std::fabs(e[i]));
    if (ok) continue;
    ++mismatched;
    const double rel = e[i] == 0 ? INFINITY : diff / std::fabs(e[i]);
    if (worst_abs_at < 0 || diff > worst_abs || std::isnan(diff)) worst_abs = diff, worst_abs_at = int64_t(i);
    if (worst_rel_at < 0 || rel > worst_rel) worst_rel = rel, worst_rel_at = int64_t(i);
  }
  if (mismatched == 0) return std::nullopt;
  std::ostringstream os;
  os << "Tensor-likes are not close!\n\nMismatched elements: " << mismatched << " / " << a.size() << " ("
     << 100.0 * double(mismatched) / double(a.size()) << "%)\nGreatest absolute difference: " << worst_abs
     << " at index " << worst_abs_at << " (up to " << tol.atol << " allowed; actual " << a[size_t(worst_abs_at)]
     << ", expected " << e[size_t(worst_abs_at)] << ")\nGreatest relative difference: " << worst_rel << " at index "
     << worst_rel_at << " (up to " << tol.rtol << " allowed)";
  return os.str();
}

bool cuda_available() { return hg::cuda::is_available(); }

std::string temp_path(const std::string& name) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / ("halfgrad_tests_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return (dir / name).string();
}

std::map<std::string, hg::Tensor> adam_step_after_count(hg::Device device, int64_t start) {
  const hg::Tensor w = hg::zeros({3}).to(device).requires_grad_();
  hg::optim::Adam opt({w}, {.lr = 0.1});
  w.set_grad(hg::ones({3}, {.device = device}));
  opt.step();
  std::map<std::string, hg::Tensor> state = opt.state_dict();
  state["state.0.step"] = hg::from_vector(std::vector<int64_t>{start}, hg::Shape{});
  state["steps_applied"] = hg::from_vector(std::vector<int64_t>{start}, hg::Shape{});
  hg::Tensor(state["state.0.exp_avg"]).zero_();
  hg::Tensor(state["state.0.exp_avg_sq"]).zero_();
  opt.load_state_dict(state);
  const hg::Tensor before = w.detach().to(hg::Device::cpu()).clone();
  w.set_grad(hg::full({3}, 2.0, {.device = device}));
  opt.step();
  std::map<std::string, hg::Tensor> out = opt.state_dict();
  out["param"] = w.detach().to(hg::Device::cpu());
  out["param_before"] = before;
  return out;
}

}  // namespace hg_test
