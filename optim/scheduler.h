// Learning-rate schedulers: each sets the optimizer's lr from a closed form of how many times
// step() has been called (t), starting from the lr the optimizer had at construction.
//   StepLR:            lr = base * gamma^floor(t / step_size)
//   CosineAnnealingLR: lr = eta_min + (base - eta_min) * (1 + cos(pi * t / t_max)) / 2
//   LinearWarmup:      lr = base * min(1, (t + 1) / warmup_steps)
// step(result) with a GradScaler StepResult advances only when the optimizer step was applied,
// so skipped AMP steps do not eat the schedule.
#pragma once
#include <cstdint>
#include <map>
#include <string>

#include "amp/scalable.h"
#include "optim/optimizer.h"

namespace hg::optim {

class LRScheduler {
 public:
  virtual ~LRScheduler() = default;
  void step();
  void step(const amp::StepResult& result);
  int64_t steps() const { return t_; }
  double base_lr() const { return base_lr_; }
  // For checkpoints: the step count and base lr (the optimizer's lr is in its own state dict).
  std::map<std::string, Tensor> state_dict() const;
  void load_state_dict(const std::map<std::string, Tensor>& state);

 protected:
  explicit LRScheduler(Optimizer& optimizer);
  virtual double lr_at(int64_t t) const = 0;
  void apply() { optimizer_.set_lr(lr_at(t_)); }

 private:
  Optimizer& optimizer_;
  double base_lr_;
  int64_t t_ = 0;
};

class StepLR : public LRScheduler {
 public:
  StepLR(Optimizer& optimizer, int64_t step_size, double gamma = 0.1);

 protected:
  double lr_at(int64_t t) const override;

 private:
  int64_t step_size_;
  double gamma_;
};

class CosineAnnealingLR : public LRScheduler {
 public:
  CosineAnnealingLR(Optimizer& optimizer, int64_t t_max, double eta_min = 0.0);

 protected:
  double lr_at(int64_t t) const override;

 private:
  int64_t t_max_;
  double eta_min_;
};

class LinearWarmup : public LRScheduler {
 public:
  LinearWarmup(Optimizer& optimizer, int64_t warmup_steps);

 protected:
  double lr_at(int64_t t) const override;

 private:
  int64_t warmup_;
};

}  // namespace hg::optim
