// GradScaler's update of the loss scale after each step (PyTorch's _amp_update_scale_), the one
// definition the host (amp_tools/grad_scaler.cpp) and the CUDA kernel (kernels/cuda/amp.cu) both run.
#pragma once
#include <cstdint>

#include "kernels/math/common.h"

namespace hg::kernels::math {

struct ScaleUpdate {
  double growth_factor, backoff_factor;
  int64_t growth_interval;
  double min_scale, max_scale;

  // scale: the loss scale; tracker: finite steps since the last change; skipped: steps skipped
  // in a row. found_inf: this step's gradients overflowed (the optimizer skipped it).
  HG_HD void apply(float& scale, int32_t& tracker, int32_t& skipped, bool found_inf) const {
    if (found_inf) {
      const float backed_off = float(scale * backoff_factor);
      scale = backed_off > float(min_scale) ? backed_off : float(min_scale);
      tracker = 0;
      skipped += 1;
      return;
    }
    skipped = 0;
    if (++tracker == growth_interval) {
      const float grown = float(double(scale) * growth_factor);
      // Never past max_scale (unless already above it), never to inf (pytorch#98828). NOTE: the
      // scale is positive, so "at most the largest float" means finite (and is false for NaN);
      // written so, it is the same plain comparison on the host and the device.
      const double ceiling = max_scale > double(scale) ? max_scale : double(scale);
      if (grown <= 3.40282347e38f && double(grown) <= ceiling) scale = grown;
      tracker = 0;
    }
  }
};

}  // namespace hg::kernels::math
