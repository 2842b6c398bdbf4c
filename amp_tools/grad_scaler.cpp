// The GradScaler: its per-optimizer state machine and its checks. The fused unscale-and-check
// pass and the scale update rule (PyTorch's _amp_update_scale_) are kernels (kernels/amp.h).
#include "amp_tools/grad_scaler.h"

#include <cmath>
#include <cstdio>
#include <sstream>

#include "autograd/grad_mode.h"
#include "core/cuda/cuda_copy.h"
#include "core/state_dict.h"
#include "kernels/amp.h"
#include "ops/elementwise.h"
#include "ops/shape.h"

namespace hg::amp {

namespace {

constexpr double kSmallestScale = 0x1p-126;  // the smallest normal f32

// A loss scale (the initial one, one from a checkpoint, or update(new_scale)) must be a normal,
// finite f32 within the scaler's own bounds: a scale outside them is a mistake (1e-40 would give
// NaN weights, 1e39 an f32 inf) that the update rule would never produce.
void check_scale(double scale, const GradScalerOptions& o, std::string_view what, std::string_view which) {
  const auto number = [](double v) {
    char text[32];
    std::snprintf(text, sizeof text, "%.10g", v);  // 16777216, not 1.67772e+07
    return std::string(text);
  };
  HG_CHECK(scale >= o.min_scale && scale <= o.max_scale && std::isfinite(float(scale)), what, ": ", which,
           " must be in [min_scale, max_scale] = [", number(o.min_scale), ", ", number(o.max_scale),
           "] and finite in f32, got ", number(scale), " (the options min_scale and max_scale widen the range)");
}

// The rules for the options, from the constructor or from a checkpoint (`what` says which).
void check_options(const GradScalerOptions& o, std::string_view what) {
  HG_CHECK(o.growth_factor > 1 && std::isfinite(o.growth_factor), what, ": growth_factor must be > 1 and finite, got ",
           o.growth_factor);
  HG_CHECK(o.backoff_factor > 0 && o.backoff_factor < 1, what, ": backoff_factor must be in (0, 1), got ", o.backoff_factor);
  // NOTE: the growth tracker is an i32 counting up to growth_interval; a larger interval would
  // overflow it.
  HG_CHECK(o.growth_interval > 0 && o.growth_interval <= GradScaler::kMaxGrowthInterval, what,
           ": growth_interval must be in [1, ", GradScaler::kMaxGrowthInterval, "], got ", o.growth_interval);
  // NOTE: the scale lives in an f32 and gradients are multiplied by 1/scale: below the smallest
  // normal f32 (2^-126) the scale is a subnormal or 0 and 1/scale overflows to inf, which would
  // turn every gradient into inf or NaN.
  HG_CHECK(o.min_scale >= kSmallestScale && o.min_scale <= o.max_scale, what, ": need ", kSmallestScale,
           " (the smallest normal f32) <= min_scale <= max_scale, got min_scale ", o.min_scale, " and max_scale ",
           o.max_scale);
  check_scale(o.init_scale, o, what, "the scale");
  HG_CHECK(o.max_consecutive_skips > 0, what, ": max_consecutive_skips must be positive");
}


}  // namespace

GradScaler::GradScaler(GradScalerOptions options) : options_(options) { check_options(options, "GradScaler"); }

void GradScaler::lazy_init(Device device) {
  if (scale_.defined()) {
    HG_CHECK(scale_.device() == device, "GradScaler: gradients on ", device, " but the scaler lives on ",
             scale_.device(), " (one GradScaler per device)");
    return;
  }
  scale_ = full({}, options_.init_scale, {.dtype = f32, .device = device});
  growth_tracker_ = zeros({}, {.dtype = i32, .device = device});
  skipped_in_a_row_ = zeros({}, {.dtype = i32, .device = device});
  if (device.is_cuda()) {
    using ::hg::detail::MappedSlot;
    const auto release = [](MappedSlot* slot) {
      ::hg::detail::release_mapped_slot(*slot);
      delete slot;
    };
    skipped_mirror_ = std::shared_ptr<MappedSlot>(new MappedSlot(::hg::detail::acquire_mapped_slot()), release);
  }
}

double GradScaler::get_scale() const {
  if (!options_.enabled) return 1.0;
  return scale_.defined() ? scale_.item<double>() : double(float(options_.init_scale));
}

int64_t GradScaler::growth_tracker() const { return growth_tracker_.defined() ? growth_tracker_.item<int64_t>() : 0; }

Tensor GradScaler::scale(const Tensor& loss) {
  if (!options_.enabled) return loss;
  lazy_init(loss.device());
  scaled_ = true;
  // NOTE: the product is f32 even for an f16 loss: 65504 is easily exceeded by loss * 2^16.
  return loss.to(compute_dtype(loss.dtype())) * scale_;
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
  // NOTE: gradients that were never scaled would be divided by the scale all the same: a 65536x
  // smaller update with no error anywhere. PyTorch refuses this too.
  HG_CHECK(scaled_, "GradScaler: unscale_() or step() without scale(): this scaler has never scaled a loss, so the "
           "gradients are not scaled; call scaler.scale(loss).backward() before scaler.step(optimizer)");
  OptimizerState& s = per_optimizer_[&optimizer];
  HG_CHECK(s.stage != Stage::Unscaled, "GradScaler: unscale_() has already been called on this optimizer since the "
           "last update()");
  HG_CHECK(s.stage != Stage::Stepped, "GradScaler: unscale_() is being called after step(); call it before step() "
           "(and after all gradients of the iteration are accumulated)");
  NoGradGuard no_grad;
  std::vector<Tensor> grads;
  std::vector<bool> check_only;
  flagged_names_.clear();
  f16_elements_ = 0;
  const std::vector<Tensor> params = optimizer.parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    Tensor g = params[i].grad();
    if (!g.defined()) continue;
    if (!g.is_contiguous()) {  // e.g. a gradient set to a transposed or sliced view
      g = g.contiguous();
      params[i].set_grad(g);
    }
    grads.push_back(g);
    check_only.push_back(unscale_deferred(g, optimizer.master_weights()));
    flagged_names_.push_back(name_of(params[i], i));
    if (g.dtype() == f16) f16_elements_ += g.numel();
  }
  const Device device = grads.empty() ? (scale_.defined() ? scale_.device() : Device::cpu()) : grads.front().device();
  lazy_init(device);
  s.deferred = false;
  for (bool deferred : check_only) s.deferred = s.deferred || deferred;
  s.found_inf = zeros({}, {.dtype = f32, .device = device});
  nonfinite_flags_ = zeros({int64_t(grads.size())}, {.dtype = i32, .device = device});
  tiny_count_ = zeros({}, {.dtype = i64, .device = device});
  kernels::unscale_and_check(grads, check_only, scale_, s.found_inf, nonfinite_flags_, tiny_count_);
  for (const Tensor& g : grads) g.impl()->storage->bump_version();
  if (found_inf_sync_) found_inf_sync_(s.found_inf);  // every rank decides alike (set_found_inf_sync)
  s.stage = Stage::Unscaled;
}

void GradScaler::step_async(Scalable& optimizer) {
  if (!options_.enabled) {
    optimizer.step(StepControl{});
    return;
  }
  OptimizerState& s = per_optimizer_[&optimizer];
  HG_CHECK(s.stage != Stage::Stepped, "GradScaler: step() has already been called since the last update()");
  if (s.stage == Stage::Ready) unscale_(optimizer);
  // The optimizer reads found_inf (and the scale, for deferred gradients) itself.
  optimizer.step(StepControl{.found_inf = s.found_inf, .scale = s.deferred ? scale_ : Tensor()});
  s.stage = Stage::Stepped;
}

StepResult GradScaler::step(Scalable& optimizer) {
  if (!options_.enabled) {
    optimizer.step(StepControl{});
    return {.applied = true, .found_inf = false, .scale = 1.0, .skipped_in_a_row = 0};
  }
  step_async(optimizer);
  // The three values the result needs, gathered on their device and read in one copy: on a GPU
  // this is the step's only wait. (step_async left the scale alone: it is the one this step used.)
  NoGradGuard no_grad;
  const auto as_f64 = [](const Tensor& t) { return t.to(f64).reshape({1}); };
  const std::vector<double> read =
      cat({as_f64(scale_), as_f64(per_optimizer_[&optimizer].found_inf), as_f64(skipped_in_a_row_)}, 0).to_vector<double>();
  const bool found = read[1] != 0.0;
  // skipped_in_a_row_ counts iterations (update() maintains it); this step is included here.
  const int skipped = found ? int(read[2]) + 1 : 0;
  check_stuck(skipped);
  return {.applied = !found, .found_inf = found, .scale = read[0], .skipped_in_a_row = skipped};
}

void GradScaler::check_stuck(int skipped) {
  if (skipped < options_.max_consecutive_skips) return;
  const ScalerDiagnostics d = diagnostics();
  std::ostringstream why;
  why << "GradScaler: " << skipped << " optimizer steps in a row were skipped (scale now " << get_scale()
      << ", min_scale " << options_.min_scale << "): every step's gradients held inf/NaN. Non-finite gradients in: ";
  for (size_t i = 0; i < d.nonfinite_parameters.size() && i < 8; ++i) why << (i ? ", " : "") << d.nonfinite_parameters[i];
  why << ". If the loss itself is inf/NaN, the model diverged (lower the learning rate, clip gradients, check the "
         "data); if the scale sits at min_scale, the gradients overflow even unscaled (use bf16 or keep the "
         "offending op in f32).";
  HG_FAIL(why.str());
}

ScalerDiagnostics GradScaler::diagnostics() const {
  ScalerDiagnostics d;
  if (!nonfinite_flags_.defined()) return d;
  const std::vector<int32_t> flags = nonfinite_flags_.to_vector<int32_t>();  // waits for a GPU
  for (size_t i = 0; i < flags.size(); ++i)
    if (flags[i]) d.nonfinite_parameters.push_back(flagged_names_[i]);
  d.f16_elements = f16_elements_;
  d.f16_zero_or_subnormal = tiny_count_.item<int64_t>();
  return d;
}

void GradScaler::update() {
  if (!options_.enabled) return;
  HG_CHECK(!per_optimizer_.empty(), "GradScaler: update() called without any unscale_() or step() this iteration");
  Tensor found;
  for (const auto& [_, s] : per_optimizer_) {
    HG_CHECK(s.stage != Stage::Ready, "GradScaler: update() called for an optimizer that was neither unscaled nor stepped");
    found = found.defined() ? found + s.found_inf : s.found_inf;
  }
  const bool on_gpu = scale_.device().is_cuda();
  kernels::scaler_update(scale_, growth_tracker_, skipped_in_a_row_, found,
                         {options_.growth_factor, options_.backoff_factor, options_.growth_interval, options_.min_scale,
                          options_.max_scale},
                         on_gpu ? static_cast<int32_t*>(skipped_mirror_->device) : nullptr);
  per_optimizer_.clear();
  // The stuck detector: free on the CPU, every iteration. On a GPU it reads the kernel's copy of
  // the counter in mapped host memory (no wait); that may lag the GPU by the updates still queued,
  // so a stuck run stops a few steps later.
  check_stuck(on_gpu ? *static_cast<volatile int32_t*>(skipped_mirror_->host) : *skipped_in_a_row_.data_ptr<int32_t>());
}

void GradScaler::update(double new_scale) {
  if (!options_.enabled) return;
  check_scale(new_scale, options_, "GradScaler::update(new_scale)", "the new scale");
  lazy_init(scale_.defined() ? scale_.device() : Device::cpu());
  NoGradGuard no_grad;
  scale_.fill_(new_scale);
  per_optimizer_.clear();
}

std::map<std::string, Tensor> GradScaler::state_dict() const {
  if (!options_.enabled) return {};
  const auto scalar = [](double v, DType d) { return full({}, v, {.dtype = d}); };
  return {{"scale", scalar(get_scale(), f64)},
          {"growth_factor", scalar(options_.growth_factor, f64)},
          {"backoff_factor", scalar(options_.backoff_factor, f64)},
          {"growth_interval", scalar(double(options_.growth_interval), i64)},
          {"_growth_tracker", scalar(double(growth_tracker()), i64)},
          {"skipped_in_a_row", scalar(skipped_in_a_row_.defined() ? double(skipped_in_a_row_.item<int32_t>()) : 0.0, i64)}};
}

void GradScaler::load_state_dict(const std::map<std::string, Tensor>& state) {
  const std::string_view what = "GradScaler.load_state_dict";
  HG_CHECK(!state.empty(), what, ": the state dict is empty: it was saved from a disabled GradScaler");
  state_dict::require_exact_keys(
      state, {"scale", "growth_factor", "backoff_factor", "growth_interval", "_growth_tracker", "skipped_in_a_row"}, what);
  // Read and check everything first: a bad checkpoint leaves the scaler as it was.
  GradScalerOptions loaded = options_;
  loaded.growth_factor = state_dict::read_double(state, "growth_factor", what);
  loaded.backoff_factor = state_dict::read_double(state, "backoff_factor", what);
  loaded.growth_interval = state_dict::read_int(state, "growth_interval", what, 1, kMaxGrowthInterval);
  loaded.init_scale = state_dict::read_double(state, "scale", what);
  check_options(loaded, what);
  const int64_t tracker = state_dict::read_int(state, "_growth_tracker", what, 0, loaded.growth_interval - 1);
  const int64_t skipped = state_dict::read_int(state, "skipped_in_a_row", what, 0, INT32_MAX - 1);  // update() adds 1
  options_.growth_factor = loaded.growth_factor;
  options_.backoff_factor = loaded.backoff_factor;
  options_.growth_interval = loaded.growth_interval;
  lazy_init(scale_.defined() ? scale_.device() : Device::cpu());
  NoGradGuard no_grad;
  scale_.fill_(loaded.init_scale);
  growth_tracker_.fill_(double(tracker));
  skipped_in_a_row_.fill_(double(skipped));
  per_optimizer_.clear();
}

}  // namespace hg::amp
