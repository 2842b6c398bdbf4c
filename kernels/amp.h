// The GradScaler's kernels, on the gradients' device: the fused unscale-and-check pass over all
// gradients and the scale update rule. The CPU loops are here, the CUDA ones in
// kernels/cuda/amp.cu; both run the element rules of kernels/math/unscale.h and
// kernels/math/scale_update.h. amp::GradScaler (amp_tools/grad_scaler.h) keeps the state machine.
#pragma once
#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace hg::kernels {

// For every gradient (contiguous): flags non-finite values -- in the gradient or its unscaled
// value as stored -- into found_inf (0-d f32) and nonfinite[i] (i32 per gradient), counts f16 zero
// or subnormal elements into tiny (0-d i64), and multiplies by 1/scale (the 0-d f32 scale, its
// inverse taken in f64) unless check_only[i]. On the CPU the chunks are fixed (the same result
// for any thread count).
void unscale_and_check(const std::vector<Tensor>& grads, const std::vector<bool>& check_only, const Tensor& scale,
                       const Tensor& found_inf, const Tensor& nonfinite, const Tensor& tiny);

struct ScaleUpdateOptions {
  double growth_factor, backoff_factor;
  int64_t growth_interval;
  double min_scale, max_scale;
};
// The scale update rule on the scale's device: back off on found_inf (0-d f32, nonzero = an
// overflow this step), grow after growth_interval clean steps, within [min_scale, max_scale] and
// finite f32. scale (f32), growth_tracker and skipped_in_a_row (i32) are 0-d and updated in place.
// On CUDA `skipped_mirror` (device address of mapped host memory, or null) receives the new
// skipped_in_a_row too, for the host to poll without waiting.
void scaler_update(const Tensor& scale, const Tensor& growth_tracker, const Tensor& skipped_in_a_row,
                   const Tensor& found_inf, const ScaleUpdateOptions& options, int32_t* skipped_mirror = nullptr);

}  // namespace hg::kernels
