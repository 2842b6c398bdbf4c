// The contract between the GradScaler and an optimizer (hg::optim::Optimizer implements it).
// The scaler decides whether a step may apply; the optimizer's update obeys:
//
//   StepControl{.found_inf = flag, .scale = scale}
//     found_inf: a 0-d f32 tensor on the parameters' device, nonzero when some gradient held
//                inf/NaN: the update then changes nothing (parameters, moments, step count).
//     scale:     the loss scale (0-d f32), set when some gradients were left scaled for the
//                optimizer to unscale (see unscale_deferred).
// Both stay on the device: on CUDA the optimizer kernels read them, so a training step never
// waits for the GPU.
#pragma once
#include <vector>

#include "core/tensor.h"

namespace hg::amp {

struct StepControl {
  Tensor found_inf;
  Tensor scale;
};

// Gradients the optimizer unscales itself instead of GradScaler::unscale_: 16-bit gradients of
// an optimizer with f32 master weights, unscaled in f32 as they are widened (unscaling in 16 bits
// would flush small values -- PyTorch refuses with "Attempting to unscale FP16 gradients").
inline bool unscale_deferred(const Tensor& grad, bool master_weights) {
  return master_weights && is_16bit_floating(grad.dtype());
}

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
  virtual bool master_weights() const = 0;
};

}  // namespace hg::amp
