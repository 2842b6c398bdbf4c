// The learning-rate schedulers (see scheduler.h).
#include "optim/scheduler.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "core/state_dict.h"


namespace hg::optim {

LRScheduler::LRScheduler(Optimizer& optimizer) : optimizer_(optimizer), base_lr_(optimizer.lr()) {}

void LRScheduler::step() {
  ++t_;
  apply();
}

void LRScheduler::step(const amp::StepResult& result) {
  if (result.applied) step();
}

std::map<std::string, Tensor> LRScheduler::state_dict() const {
  return {{"t", full({}, double(t_), {.dtype = i64})}, {"base_lr", full({}, base_lr_, {.dtype = f64})}};
}

void LRScheduler::load_state_dict(const std::map<std::string, Tensor>& state) {
  const std::string_view what = "LRScheduler.load_state_dict";
  state_dict::require_exact_keys(state, {"t", "base_lr"}, what);
  const int64_t t = state_dict::read_int(state, "t", what, 0, int64_t(1) << 53);
  const double base_lr = state_dict::read_double(state, "base_lr", what);
  HG_CHECK(std::isfinite(base_lr) && base_lr >= 0, what, ": base_lr must be finite and >= 0, got ", base_lr);
  t_ = t;
  base_lr_ = base_lr;
  apply();
}

StepLR::StepLR(Optimizer& optimizer, int64_t step_size, double gamma)
    : LRScheduler(optimizer), step_size_(step_size), gamma_(gamma) {
  HG_CHECK(step_size > 0, "StepLR: step_size must be positive, got ", step_size);
  apply();
}
double StepLR::lr_at(int64_t t) const { return base_lr() * std::pow(gamma_, double(t / step_size_)); }

CosineAnnealingLR::CosineAnnealingLR(Optimizer& optimizer, int64_t t_max, double eta_min)
    : LRScheduler(optimizer), t_max_(t_max), eta_min_(eta_min) {
  HG_CHECK(t_max > 0, "CosineAnnealingLR: t_max must be positive, got ", t_max);
  apply();
}
double CosineAnnealingLR::lr_at(int64_t t) const {
  return eta_min_ + (base_lr() - eta_min_) * (1 + std::cos(std::numbers::pi * double(t) / double(t_max_))) / 2;
}

LinearWarmup::LinearWarmup(Optimizer& optimizer, int64_t warmup_steps) : LRScheduler(optimizer), warmup_(warmup_steps) {
  HG_CHECK(warmup_steps > 0, "LinearWarmup: warmup_steps must be positive, got ", warmup_steps);
  apply();
}
double LinearWarmup::lr_at(int64_t t) const {
  return base_lr() * std::min(1.0, double(t + 1) / double(warmup_));
}

}  // namespace hg::optim
