// The learning-rate schedulers (see scheduler.h).
#include "optim/scheduler.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "core/state_dict.h"

namespace hg::optim {

namespace {
constexpr int64_t kMaxSteps = int64_t(1) << 53;
}  // namespace

LRScheduler::LRScheduler(Optimizer& optimizer) : optimizer_(optimizer), base_lr_(optimizer.initial_lr()) {}

void LRScheduler::step() {
  ++t_;
  apply();
}

void LRScheduler::step(const amp::StepResult& result) {
  if (result.applied) step();
}

void LRScheduler::restart() {
  t_ = 0;
  apply();
}

std::map<std::string, Tensor> LRScheduler::state_dict() const {
  return {{"t", full({}, double(t_), {.dtype = i64})}, {"base_lr", full({}, base_lr_, {.dtype = f64})}};
}

void LRScheduler::load_state_dict(const std::map<std::string, Tensor>& state) {
  const std::string_view what = "LRScheduler.load_state_dict";
  state_dict::require_exact_keys(state, {"t", "base_lr"}, what);
  const int64_t t = state_dict::read_int(state, "t", what, 0, kMaxSteps);
  const double base_lr = state_dict::read_double(state, "base_lr", what);
  HG_CHECK(std::isfinite(base_lr) && base_lr >= 0, what, ": base_lr must be finite and >= 0, got ", base_lr);
  t_ = t;
  base_lr_ = base_lr;
  apply();
}

// ---- the closed forms -----------------------------------------------------------------------------

StepLR::StepLR(Optimizer& optimizer, int64_t step_size, double gamma)
    : LRScheduler(optimizer), step_size_(step_size), gamma_(gamma) {
  HG_CHECK(step_size > 0, "StepLR: step_size must be positive, got ", step_size);
  apply();
}
double StepLR::lr_at(int64_t t) const { return base_lr() * std::pow(gamma_, double(t / step_size_)); }

MultiStepLR::MultiStepLR(Optimizer& optimizer, std::vector<int64_t> milestones, double gamma)
    : LRScheduler(optimizer), milestones_(std::move(milestones)), gamma_(gamma) {
  HG_CHECK(std::is_sorted(milestones_.begin(), milestones_.end()), "MultiStepLR: milestones must be increasing");
  apply();
}
double MultiStepLR::lr_at(int64_t t) const {
  const auto reached = std::upper_bound(milestones_.begin(), milestones_.end(), t) - milestones_.begin();
  return base_lr() * std::pow(gamma_, double(reached));
}

ExponentialLR::ExponentialLR(Optimizer& optimizer, double gamma) : LRScheduler(optimizer), gamma_(gamma) {
  HG_CHECK(std::isfinite(gamma) && gamma >= 0, "ExponentialLR: gamma must be finite and >= 0, got ", gamma);
  apply();
}
double ExponentialLR::lr_at(int64_t t) const { return base_lr() * std::pow(gamma_, double(t)); }

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
double LinearWarmup::lr_at(int64_t t) const { return base_lr() * std::min(1.0, double(t + 1) / double(warmup_)); }

LambdaLR::LambdaLR(Optimizer& optimizer, std::function<double(int64_t)> lr_lambda)
    : LRScheduler(optimizer), lambda_(std::move(lr_lambda)) {
  HG_CHECK(lambda_ != nullptr, "LambdaLR: needs a function");
  apply();
}
double LambdaLR::lr_at(int64_t t) const {
  const double factor = lambda_(t);
  HG_CHECK(std::isfinite(factor) && factor >= 0, "LambdaLR: the function gave ", factor, " at step ", t,
           " (a learning-rate factor must be finite and >= 0)");
  return base_lr() * factor;
}

// ---- OneCycleLR ----------------------------------------------------------------------------------

OneCycleLR::OneCycleLR(Optimizer& optimizer, double max_lr, int64_t total_steps, OneCycleLROptions o)
    : LRScheduler((optimizer.set_initial_lr(max_lr / o.div_factor), optimizer)),
      max_lr_(max_lr),
      total_steps_(total_steps),
      options_(std::move(o)) {
  HG_CHECK(total_steps > 0, "OneCycleLR: total_steps must be positive, got ", total_steps);
  HG_CHECK(std::isfinite(max_lr) && max_lr > 0, "OneCycleLR: max_lr must be positive, got ", max_lr);
  HG_CHECK(options_.pct_start >= 0 && options_.pct_start <= 1, "OneCycleLR: pct_start must be in [0, 1], got ",
           options_.pct_start);
  HG_CHECK(options_.anneal_strategy == "cos" || options_.anneal_strategy == "linear",
           "OneCycleLR: anneal_strategy must be \"cos\" or \"linear\", got ", quoted(options_.anneal_strategy));
  HG_CHECK(options_.div_factor > 0 && options_.final_div_factor > 0, "OneCycleLR: the div factors must be positive");
  HG_CHECK(!options_.cycle_momentum || optimizer.momentum().has_value(), "OneCycleLR: a ", optimizer.kind(),
           " optimizer has no momentum to cycle; pass .cycle_momentum = false");
  const double initial = max_lr / options_.div_factor, final_lr = initial / options_.final_div_factor;
  const double up_end = options_.pct_start * double(total_steps) - 1;
  const double lo = options_.base_momentum, hi = options_.max_momentum;
  if (options_.three_phase)
    phases_ = {{up_end, initial, max_lr, hi, lo}, {2 * options_.pct_start * double(total_steps) - 2, max_lr, initial, lo, hi},
               {double(total_steps) - 1, initial, final_lr, hi, hi}};
  else
    phases_ = {{up_end, initial, max_lr, hi, lo}, {double(total_steps) - 1, max_lr, final_lr, lo, hi}};
  apply();
}

double OneCycleLR::anneal(double start, double end, double pct) const {
  if (options_.anneal_strategy == "linear") return (end - start) * pct + start;
  return end + (start - end) / 2.0 * (std::cos(std::numbers::pi * pct) + 1);
}

double OneCycleLR::value_at(int64_t t, bool momentum) const {
  double start = 0;
  for (size_t i = 0; i < phases_.size(); ++i) {
    const Phase& p = phases_[i];
    if (double(t) <= p.end_step || i + 1 == phases_.size()) {
      const double pct = (double(t) - start) / (p.end_step - start);
      return momentum ? anneal(p.start_momentum, p.end_momentum, pct) : anneal(p.start_lr, p.end_lr, pct);
    }
    start = p.end_step;
  }
  return 0;
}

double OneCycleLR::lr_at(int64_t t) const { return value_at(t, false); }
double OneCycleLR::momentum_at(int64_t t) const { return value_at(t, true); }

void OneCycleLR::step() {
  HG_CHECK(steps() + 1 <= total_steps_, "OneCycleLR: stepped ", steps() + 1, " times; the cycle has total_steps ",
           total_steps_);
  LRScheduler::step();
}

void OneCycleLR::apply() {
  optimizer_.set_lr(lr_at(steps()));
  if (options_.cycle_momentum) optimizer_.set_momentum(momentum_at(steps()));
}

// ---- SequentialLR --------------------------------------------------------------------------------

SequentialLR::SequentialLR(Optimizer& optimizer, std::vector<std::reference_wrapper<LRScheduler>> schedulers,
                           std::vector<int64_t> milestones)
    : LRScheduler(optimizer), schedulers_(std::move(schedulers)), milestones_(std::move(milestones)) {
  HG_CHECK(!schedulers_.empty() && milestones_.size() + 1 == schedulers_.size(), "SequentialLR: ", schedulers_.size(),
           " schedulers need ", schedulers_.size() ? schedulers_.size() - 1 : 0, " milestones, got ", milestones_.size());
  HG_CHECK(std::is_sorted(milestones_.begin(), milestones_.end()), "SequentialLR: milestones must be increasing");
  for (LRScheduler& s : schedulers_)
    HG_CHECK(&s.optimizer_ == &optimizer, "SequentialLR: every scheduler must drive the same optimizer");
  // As PyTorch: the lr back to the initial one, the schedulers' own first steps undone, and the
  // first scheduler starting.
  optimizer.set_lr(optimizer.initial_lr());
  for (LRScheduler& s : schedulers_) s.t_ = 0;
  schedulers_.front().get().restart();
}

size_t SequentialLR::current(int64_t t) const {
  return size_t(std::upper_bound(milestones_.begin(), milestones_.end(), t) - milestones_.begin());
}

void SequentialLR::step() {
  LRScheduler::step();  // counts (apply() does nothing)
  const size_t i = current(steps());
  if (i > 0 && milestones_[i - 1] == steps()) schedulers_[i].get().restart();
  else schedulers_[i].get().step();
}

double SequentialLR::lr_at(int64_t) const { return schedulers_[current(steps())].get().lr(); }

std::map<std::string, Tensor> SequentialLR::state_dict() const {
  std::map<std::string, Tensor> out = LRScheduler::state_dict();
  for (size_t i = 0; i < schedulers_.size(); ++i)
    state_dict::add_prefixed(out, "schedulers." + std::to_string(i) + ".", schedulers_[i].get().state_dict());
  return out;
}

void SequentialLR::load_state_dict(const std::map<std::string, Tensor>& state) {
  const std::map<std::string, Tensor> own = {{"t", state_dict::entry(state, "t", "SequentialLR.load_state_dict")},
                                             {"base_lr", state_dict::entry(state, "base_lr", "SequentialLR.load_state_dict")}};
  size_t keys = own.size();
  for (size_t i = 0; i < schedulers_.size(); ++i) {
    const auto part = state_dict::entries_under(state, "schedulers." + std::to_string(i) + ".");
    schedulers_[i].get().load_state_dict(part);
    keys += part.size();
  }
  HG_CHECK(keys == state.size(), "SequentialLR.load_state_dict: ", state.size() - keys, " unexpected key(s)");
  LRScheduler::load_state_dict(own);
  schedulers_[current(steps())].get().apply();
}

// ---- ReduceLROnPlateau ---------------------------------------------------------------------------

ReduceLROnPlateau::ReduceLROnPlateau(Optimizer& optimizer, ReduceLROnPlateauOptions o)
    : optimizer_(optimizer), options_(std::move(o)) {
  HG_CHECK(options_.mode == "min" || options_.mode == "max", "ReduceLROnPlateau: mode must be \"min\" or \"max\", got ",
           quoted(options_.mode));
  HG_CHECK(options_.threshold_mode == "rel" || options_.threshold_mode == "abs",
           "ReduceLROnPlateau: threshold_mode must be \"rel\" or \"abs\", got ", quoted(options_.threshold_mode));
  HG_CHECK(options_.factor >= 0 && options_.factor < 1, "ReduceLROnPlateau: factor must be in [0, 1), got ",
           options_.factor);
  HG_CHECK(options_.patience >= 0 && options_.cooldown >= 0, "ReduceLROnPlateau: patience and cooldown must be >= 0");
  best_ = options_.mode == "min" ? INFINITY : -INFINITY;
}

bool ReduceLROnPlateau::better(double metric) const {
  const bool rel = options_.threshold_mode == "rel";
  if (options_.mode == "min") return metric < (rel ? best_ * (1 - options_.threshold) : best_ - options_.threshold);
  return metric > (rel ? best_ * (1 + options_.threshold) : best_ + options_.threshold);
}

void ReduceLROnPlateau::step(double metric) {
  HG_CHECK(!std::isnan(metric), "ReduceLROnPlateau::step: the metric is NaN (did the loss diverge?)");
  ++t_;
  if (better(metric)) {
    best_ = metric;
    bad_steps_ = 0;
  } else {
    ++bad_steps_;
  }
  if (cooldown_left_ > 0) {
    --cooldown_left_;
    bad_steps_ = 0;
  }
  if (bad_steps_ > options_.patience) {
    const double old_lr = optimizer_.lr(), new_lr = std::max(old_lr * options_.factor, options_.min_lr);
    if (old_lr - new_lr > options_.eps) optimizer_.set_lr(new_lr);
    cooldown_left_ = options_.cooldown;
    bad_steps_ = 0;
  }
}

std::map<std::string, Tensor> ReduceLROnPlateau::state_dict() const {
  const auto count = [](int64_t v) { return full({}, double(v), {.dtype = i64}); };
  return {{"best", full({}, best_, {.dtype = f64})}, {"bad_steps", count(bad_steps_)},
          {"cooldown_left", count(cooldown_left_)}, {"t", count(t_)}};
}

void ReduceLROnPlateau::load_state_dict(const std::map<std::string, Tensor>& state) {
  const std::string_view what = "ReduceLROnPlateau.load_state_dict";
  state_dict::require_exact_keys(state, {"best", "bad_steps", "cooldown_left", "t"}, what);
  const double best = state_dict::read_double(state, "best", what);
  HG_CHECK(!std::isnan(best), what, ": best is NaN");
  bad_steps_ = state_dict::read_int(state, "bad_steps", what, 0, kMaxSteps);
  cooldown_left_ = state_dict::read_int(state, "cooldown_left", what, 0, kMaxSteps);
  t_ = state_dict::read_int(state, "t", what, 0, kMaxSteps);
  best_ = best;
}

}  // namespace hg::optim
