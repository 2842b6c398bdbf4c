// Learning-rate schedulers, PyTorch's (torch.optim.lr_scheduler). Each sets the optimizer's lr
// from a closed form of how many times step() has been called (t), starting from the optimizer's
// initial lr (PyTorch's group["initial_lr"]: the lr when the first scheduler was made, recorded
// in the optimizer, so a scheduler built after another one still starts from it):
//   StepLR:            lr = base * gamma^floor(t / step_size)
//   MultiStepLR:       lr = base * gamma^(milestones reached)
//   ExponentialLR:     lr = base * gamma^t
//   CosineAnnealingLR: lr = eta_min + (base - eta_min) * (1 + cos(pi * t / t_max)) / 2
//   LinearWarmup:      lr = base * min(1, (t + 1) / warmup_steps)             (halfgrad's own)
//   LambdaLR:          lr = base * f(t)
//   OneCycleLR:        up from max_lr / div_factor to max_lr, then down to that / final_div_factor
// SequentialLR runs one after another (warmup, then cosine); ReduceLROnPlateau divides the lr when
// a metric stops improving. step(result) with a GradScaler StepResult advances only when the
// optimizer step was applied, so skipped AMP steps do not eat the schedule.
//
//   hg::optim::LinearWarmup warmup(opt, 100);
//   hg::optim::CosineAnnealingLR cosine(opt, 900);
//   hg::optim::SequentialLR schedule(opt, {warmup, cosine}, {100});
//   for (...) { ...; opt.step(); schedule.step(); }
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "amp/scalable.h"
#include "optim/optimizer.h"

namespace hg::optim {

class LRScheduler {
 public:
  virtual ~LRScheduler() = default;
  virtual void step();
  void step(const amp::StepResult& result);
  int64_t steps() const { return t_; }
  double base_lr() const { return base_lr_; }
  double lr() const { return lr_at(t_); }
  // Back to t = 0 (SequentialLR starts a scheduler over at its milestone), the lr set.
  void restart();
  // For checkpoints: the step count and base lr (the optimizer's lr is in its own state dict).
  virtual std::map<std::string, Tensor> state_dict() const;
  virtual void load_state_dict(const std::map<std::string, Tensor>& state);

 protected:
  explicit LRScheduler(Optimizer& optimizer);
  virtual double lr_at(int64_t t) const = 0;
  virtual void apply() { optimizer_.set_lr(lr_at(t_)); }
  Optimizer& optimizer_;

 private:
  friend class SequentialLR;
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

class MultiStepLR : public LRScheduler {
 public:
  MultiStepLR(Optimizer& optimizer, std::vector<int64_t> milestones, double gamma = 0.1);

 protected:
  double lr_at(int64_t t) const override;

 private:
  std::vector<int64_t> milestones_;
  double gamma_;
};

class ExponentialLR : public LRScheduler {
 public:
  ExponentialLR(Optimizer& optimizer, double gamma);

 protected:
  double lr_at(int64_t t) const override;

 private:
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

class LambdaLR : public LRScheduler {
 public:
  LambdaLR(Optimizer& optimizer, std::function<double(int64_t)> lr_lambda);

 protected:
  double lr_at(int64_t t) const override;

 private:
  std::function<double(int64_t)> lambda_;
};

struct OneCycleLROptions {
  double pct_start = 0.3;           // the part of the cycle spent raising the lr
  std::string anneal_strategy = "cos";  // "cos" or "linear"
  bool cycle_momentum = true;       // the momentum (SGD) or beta1 (Adam) goes the other way
  double base_momentum = 0.85;
  double max_momentum = 0.95;
  double div_factor = 25;           // initial lr = max_lr / div_factor
  double final_div_factor = 1e4;    // final lr = initial lr / final_div_factor
  bool three_phase = false;         // a third phase down to the final lr (fast.ai's schedule)
};

class OneCycleLR : public LRScheduler {
 public:
  OneCycleLR(Optimizer& optimizer, double max_lr, int64_t total_steps, OneCycleLROptions options = {});
  void step() override;

 protected:
  double lr_at(int64_t t) const override;
  void apply() override;

 private:
  struct Phase {
    double end_step, start_lr, end_lr, start_momentum, end_momentum;
  };
  double anneal(double start, double end, double pct) const;
  double momentum_at(int64_t t) const;
  double value_at(int64_t t, bool momentum) const;
  double max_lr_;
  int64_t total_steps_;
  OneCycleLROptions options_;
  std::vector<Phase> phases_;
};

// Runs its schedulers one after another: scheduler i from milestones[i - 1] on, each starting
// over at t = 0 from the optimizer's initial lr there. The schedulers are held by reference.
class SequentialLR : public LRScheduler {
 public:
  SequentialLR(Optimizer& optimizer, std::vector<std::reference_wrapper<LRScheduler>> schedulers,
               std::vector<int64_t> milestones);
  void step() override;
  std::map<std::string, Tensor> state_dict() const override;
  void load_state_dict(const std::map<std::string, Tensor>& state) override;

 protected:
  double lr_at(int64_t t) const override;
  void apply() override {}  // the current scheduler sets the lr

 private:
  size_t current(int64_t t) const;  // the scheduler in charge at step t
  std::vector<std::reference_wrapper<LRScheduler>> schedulers_;
  std::vector<int64_t> milestones_;
};

struct ReduceLROnPlateauOptions {
  std::string mode = "min";            // "min": lower is better (a loss); "max": higher (an accuracy)
  double factor = 0.1;                 // new lr = lr * factor
  int64_t patience = 10;               // steps without improvement before reducing
  double threshold = 1e-4;             // what counts as an improvement
  std::string threshold_mode = "rel";  // "rel": relative to the best; "abs": absolute
  int64_t cooldown = 0;                // steps to wait after a reduction before counting again
  double min_lr = 0;
  double eps = 1e-8;                   // reductions smaller than this are skipped
};

// Multiplies the lr by `factor` once more than `patience` steps in a row brought no improvement of the
// metric passed to step(metric) -- PyTorch's ReduceLROnPlateau.
class ReduceLROnPlateau {
 public:
  ReduceLROnPlateau(Optimizer& optimizer, ReduceLROnPlateauOptions options = {});
  void step(double metric);
  double best() const { return best_; }
  int64_t bad_steps() const { return bad_steps_; }
  std::map<std::string, Tensor> state_dict() const;
  void load_state_dict(const std::map<std::string, Tensor>& state);

 private:
  bool better(double metric) const;
  Optimizer& optimizer_;
  ReduceLROnPlateauOptions options_;
  double best_;
  int64_t bad_steps_ = 0, cooldown_left_ = 0, t_ = 0;
};

}  // namespace hg::optim
