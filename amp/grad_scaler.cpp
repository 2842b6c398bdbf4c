// The GradScaler state machine, the fused unscale-and-check pass, and the scale update rule.
#include "amp/grad_scaler.h"

#include <cmath>
#include <sstream>

#include "autograd/grad_mode.h"
#include "core/parallel.h"
#include "ops/cuda_ops.h"
#include "ops/elementwise.h"

namespace hg::amp {

namespace {

struct UnscaleResult {
  bool found_inf = false;
  int64_t tiny = 0;  // zero or subnormal (f16 only)
};

constexpr int64_t kUnscaleChunk = 1 << 16;

// One pass over a gradient: flag non-finite values, count f16 zeros/subnormals, and multiply by
// inv_scale (unless inv_scale is 1, when the gradient is only checked).
template <class T>
UnscaleResult unscale_cpu(T* g, int64_t n, float inv_scale) {
  const int64_t chunks = (n + kUnscaleChunk - 1) / kUnscaleChunk;
  std::vector<UnscaleResult> partial(static_cast<size_t>(chunks));
  parallel_chunks(n, kUnscaleChunk, [&](int64_t c, int64_t lo, int64_t hi) {
    UnscaleResult r;
    for (int64_t i = lo; i < hi; ++i) {
      const float v = float(Acc<T>(g[i]));
      if (!std::isfinite(v)) r.found_inf = true;
      if constexpr (std::is_same_v<T, half>) r.tiny += (g[i].bits & 0x7c00) == 0;  // exponent 0: zero or subnormal
      if (inv_scale != 1.0f) g[i] = T(Acc<T>(v * inv_scale));
    }
    partial[size_t(c)] = r;
  });
  UnscaleResult total;
  for (const UnscaleResult& r : partial) total.found_inf |= r.found_inf, total.tiny += r.tiny;
  return total;
}

}  // namespace

GradScaler::GradScaler(GradScalerOptions options) : options_(options), scale_(options.init_scale) {
  HG_CHECK(options.growth_factor > 1, "GradScaler: growth_factor must be > 1, got ", options.growth_factor);
  HG_CHECK(options.backoff_factor > 0 && options.backoff_factor < 1, "GradScaler: backoff_factor must be in (0, 1), got ",
           options.backoff_factor);
  HG_CHECK(options.growth_interval > 0, "GradScaler: growth_interval must be positive");
  HG_CHECK(options.init_scale > 0 && std::isfinite(options.init_scale), "GradScaler: init_scale must be positive and finite");
  HG_CHECK(options.min_scale > 0 && options.min_scale <= options.max_scale, "GradScaler: need 0 < min_scale <= max_scale");
  HG_CHECK(options.max_consecutive_skips > 0, "GradScaler: max_consecutive_skips must be positive");
}

double GradScaler::get_scale() const { return options_.enabled ? scale_ : 1.0; }

Tensor GradScaler::scale(const Tensor& loss) {
  if (!options_.enabled) return loss;
  // NOTE: the product is f32 even for an f16 loss: 65504 is easily exceeded by loss * 2^16.
  return loss.to(is_16bit_floating(loss.dtype()) ? f32 : loss.dtype()) * scale_;
}

void GradScaler::set_parameter_names(const std::vector<std::pair<std::string, Tensor>>& named) {
  for (const auto& [name, t] : named) names_[t.impl()] = name;
}

std::string GradScaler::name_of(const Tensor& param, size_t index) const {
  auto it = names_.find(param.impl());
  if (it != names_.end()) return it->second;
  std::ostringstream os;
  os << "#" << index << " " << param.shape();
  return os.str();
}

void GradScaler::unscale_(Scalable& optimizer) {
  if (!options_.enabled) return;
  OptimizerState& s = per_optimizer_[&optimizer];
  HG_CHECK(s.stage != Stage::Unscaled, "GradScaler: unscale_() has already been called on this optimizer since the "
           "last update()");
  HG_CHECK(s.stage != Stage::Stepped, "GradScaler: unscale_() is being called after step(); call it before step() "
           "(and after all gradients of the iteration are accumulated)");
  NoGradGuard no_grad;
  const double inv_scale = 1.0 / scale_;  // in f64: exact for powers of two, accurate otherwise
  s.deferred_inv_scale = optimizer.master_weights() ? inv_scale : 1.0;
  diagnostics_ = {};
  bool found = false;
  const std::vector<Tensor> params = optimizer.parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor g = params[i].grad();
    if (!g.defined()) continue;
    // 16-bit gradients of master-weight parameters are checked here and unscaled inside the
    // optimizer, in f32, as they are widened into the master's precision.
    const bool deferred = optimizer.master_weights() && is_16bit_floating(g.dtype());
    const float factor = deferred ? 1.0f : float(inv_scale);
    HG_CHECK(g.is_contiguous(), "GradScaler: gradient of ", name_of(params[i], i), " is not contiguous");
    UnscaleResult r;
    if (g.device().is_cuda()) {
      r.found_inf = cuda_ops::unscale_and_check(g, factor);
    } else {
      r = visit_floating(g.dtype(), "unscale_", [&]<class T> { return unscale_cpu<T>(g.data_ptr<T>(), g.numel(), factor); });
      if (g.dtype() == f16) diagnostics_.f16_elements += g.numel(), diagnostics_.f16_zero_or_subnormal += r.tiny;
    }
    g.impl()->storage->bump_version();
    if (r.found_inf) {
      found = true;
      diagnostics_.nonfinite_parameters.push_back(name_of(params[i], i));
    }
  }
  const Device device = params.empty() ? Device::cpu() : params.front().device();
  s.found_inf = full({}, found ? 1.0 : 0.0, {.dtype = f32, .device = device});
  s.stage = Stage::Unscaled;
}

StepResult GradScaler::step(Scalable& optimizer) {
  if (!options_.enabled) {
    optimizer.step(StepControl{});
    return {.applied = true, .found_inf = false, .scale = 1.0, .skipped_in_a_row = 0};
  }
  OptimizerState& s = per_optimizer_[&optimizer];
  HG_CHECK(s.stage != Stage::Stepped, "GradScaler: step() has already been called since the last update()");
  if (s.stage == Stage::Ready) unscale_(optimizer);
  optimizer.step(StepControl{.found_inf = s.found_inf, .inv_scale = s.deferred_inv_scale});
  s.stage = Stage::Stepped;
  const bool found = s.found_inf.item<float>() != 0.0f;
  skipped_in_a_row_ = found ? skipped_in_a_row_ + 1 : 0;
  if (skipped_in_a_row_ >= options_.max_consecutive_skips) {
    std::ostringstream why;
    why << "GradScaler: " << skipped_in_a_row_ << " optimizer steps in a row were skipped (scale now " << scale_
        << ", min_scale " << options_.min_scale << "): every step's gradients held inf/NaN. Non-finite gradients in: ";
    for (size_t i = 0; i < diagnostics_.nonfinite_parameters.size() && i < 8; ++i)
      why << (i ? ", " : "") << diagnostics_.nonfinite_parameters[i];
    why << ". If the loss itself is inf/NaN, the model diverged (lower the learning rate, clip gradients, check the "
           "data); if the scale sits at min_scale, the gradients overflow even unscaled (use bf16 or keep the "
           "offending op in f32).";
    HG_FAIL(why.str());
  }
  return {.applied = !found, .found_inf = found, .scale = scale_, .skipped_in_a_row = skipped_in_a_row_};
}

void GradScaler::update() {
  if (!options_.enabled) return;
  HG_CHECK(!per_optimizer_.empty(), "GradScaler: update() called without any unscale_() or step() this iteration");
  bool found = false;
  for (const auto& [_, s] : per_optimizer_) {
    HG_CHECK(s.stage != Stage::Ready, "GradScaler: update() called for an optimizer that was neither unscaled nor stepped");
    found = found || s.found_inf.item<float>() != 0.0f;
  }
  if (found) {
    scale_ = std::max(scale_ * options_.backoff_factor, options_.min_scale);
    growth_tracker_ = 0;
  } else if (++growth_tracker_ == options_.growth_interval) {
    const double grown = scale_ * options_.growth_factor;
    // Never past max_scale (unless already above it), never to inf (pytorch#98828).
    if (std::isfinite(grown) && std::isfinite(float(grown)) && grown <= std::max(options_.max_scale, scale_)) scale_ = grown;
    growth_tracker_ = 0;
  }
  per_optimizer_.clear();
}

void GradScaler::update(double new_scale) {
  if (!options_.enabled) return;
  HG_CHECK(new_scale > 0 && std::isfinite(new_scale), "GradScaler: update(new_scale) needs a positive finite scale");
  scale_ = new_scale;
  per_optimizer_.clear();
}

std::map<std::string, Tensor> GradScaler::state_dict() const {
  if (!options_.enabled) return {};
  const auto scalar = [](double v, DType d) { return full({}, v, {.dtype = d}); };
  return {{"scale", scalar(scale_, f64)},
          {"growth_factor", scalar(options_.growth_factor, f64)},
          {"backoff_factor", scalar(options_.backoff_factor, f64)},
          {"growth_interval", scalar(double(options_.growth_interval), i64)},
          {"_growth_tracker", scalar(double(growth_tracker_), i64)},
          {"skipped_in_a_row", scalar(double(skipped_in_a_row_), i64)}};
}

void GradScaler::load_state_dict(const std::map<std::string, Tensor>& state) {
  HG_CHECK(!state.empty(), "GradScaler: the state dict is empty: it was saved from a disabled GradScaler");
  for (const char* key : {"scale", "growth_factor", "backoff_factor", "growth_interval", "_growth_tracker"})
    HG_CHECK(state.count(key), "GradScaler.load_state_dict: missing key \"", key, "\"");
  scale_ = state.at("scale").item<double>();
  options_.growth_factor = state.at("growth_factor").item<double>();
  options_.backoff_factor = state.at("backoff_factor").item<double>();
  options_.growth_interval = state.at("growth_interval").item<int64_t>();
  growth_tracker_ = state.at("_growth_tracker").item<int64_t>();
  if (state.count("skipped_in_a_row")) skipped_in_a_row_ = int(state.at("skipped_in_a_row").item<int64_t>());
  per_optimizer_.clear();
}

}  // namespace hg::amp
