// The contract between the GradScaler and an optimizer (hg::optim::Optimizer implements it).
// The scaler decides whether a step may apply; the optimizer's update loop obeys:
//
//   StepControl{.found_inf = flag, .inv_scale = 1/scale}
//     found_inf: a 1-element f32 tensor on the parameters' device, nonzero when some gradient held
//                inf/NaN: the update then changes nothing (parameters, moments, step count).
//     inv_scale: the factor the gradients still need (1 when unscale_ already ran).
#pragma once
#include <vector>

#include "core/tensor.h"

namespace hg::amp {

struct StepControl {
  Tensor found_inf;
  double inv_scale = 1.0;
};

// What GradScaler::step returns: whether the optimizer step was applied or skipped, and why.
struct StepResult {
  bool applied = true;        // false: a gradient held inf/NaN and the update was skipped
  bool found_inf = false;
  double scale = 1.0;         // the loss scale this step used
  int skipped_in_a_row = 0;   // consecutive skipped steps, this one included
  explicit operator bool() const { return applied; }
};

class Scalable {
 public:
  virtual ~Scalable() = default;
  // Every parameter the optimizer updates (their .grad() is what the scaler unscales).
  virtual std::vector<Tensor> parameters() const = 0;
  virtual void step(const StepControl& control) = 0;
  // With master weights, 16-bit gradients are unscaled into f32 (see optim/optimizer.h).
  virtual bool master_weights() const = 0;
};

}  // namespace hg::amp
