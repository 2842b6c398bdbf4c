// GradScaler: dynamic loss scaling for f16 training, PyTorch's algorithm and defaults, plus what
// PyTorch lacks: step() says whether it applied, the scale has bounds, a run whose every step
// overflows stops with a diagnosis instead of silently training nothing.
//
//   hg::amp::GradScaler scaler;                       // init 2^16, x2 every 2000 clean steps, x0.5 on overflow
//   scaler.scale(loss).backward();                    // gradients of loss * scale: small values survive f16
//   scaler.unscale_(opt);                             // optional: e.g. to clip true gradients
//   hg::amp::StepResult r = scaler.step(opt);         // unscales if needed; skips the update on inf/NaN
//   scaler.update();                                  // grows or backs off the scale
//   if (!r) std::cout << "skipped at scale " << r.scale << "\n";
//
// Per optimizer, the calls must come in the order [unscale_] step, then update() once for all
// optimizers; anything else (unscale_ twice, unscale_ after step, step twice) is an hg::Error.
// enabled = false turns every method into a pass-through (bf16 needs no scaling).
//
// The scale, the growth tracker and the inf flags live in 0-d tensors on the gradients' device
// (like PyTorch's): on CUDA, unscale_, the optimizer's skip decision and update() all happen in
// kernels. Only reading a value on the host waits for the GPU: get_scale(), the StepResult of
// step() (one wait: use step_async() for a step that returns nothing and never waits),
// diagnostics(). hg::cuda::sync_count() counts these waits.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "amp/scalable.h"
#include "core/tensor.h"
#include "core/device.h"

namespace hg::detail {
struct MappedSlot;  // core/cuda/cuda_copy.h
}  // namespace hg::detail

namespace hg::amp {

// Every scale the scaler takes (init_scale, a checkpoint's, update(new_scale)) must lie in
// [min_scale, max_scale]; min_scale is at least 2^-126, the smallest normal f32 (below it 1/scale
// overflows). Widen the bounds to start outside the defaults: {.init_scale = 0.5, .min_scale = 0.25}.
struct GradScalerOptions {
  double init_scale = 65536.0;
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
  bool enabled = true;
  double min_scale = 1.0;          // backoff never goes below (PyTorch has no floor: pytorch#99640)
  double max_scale = 16777216.0;   // growth never goes above 2^24 (Apex's cap)
  int max_consecutive_skips = 50;  // this many skipped steps in a row is an hg::Error with a diagnosis
};

// What the last unscale_ saw, for diagnosing a scale that is too large or too small.
struct ScalerDiagnostics {
  std::vector<std::string> nonfinite_parameters;  // names (or "#i [shape]") of gradients with inf/NaN
  int64_t f16_elements = 0;                       // f16 gradient elements examined
  int64_t f16_zero_or_subnormal = 0;              // of those, exactly 0 or subnormal before unscaling
  double tiny_fraction() const { return f16_elements ? double(f16_zero_or_subnormal) / double(f16_elements) : 0.0; }
};

class GradScaler {
 public:
  explicit GradScaler(GradScalerOptions options = {});

  Tensor scale(const Tensor& loss);
  void unscale_(Scalable& optimizer);
  StepResult step(Scalable& optimizer);
  void step_async(Scalable& optimizer);  // step() without the StepResult: never waits for a GPU
  void update();                   // the scale rule above, once per iteration
  void update(double new_scale);   // sets the scale explicitly

  double get_scale() const;
  bool is_enabled() const { return options_.enabled; }
  int64_t growth_tracker() const;
  // What the last unscale_ saw (names of parameters with inf/NaN gradients, f16 tiny fraction).
  ScalerDiagnostics diagnostics() const;
  // Names for the diagnostics (e.g. model.named_parameters()); otherwise parameters are numbered.
  void set_parameter_names(const std::vector<std::pair<std::string, Tensor>>& named);

  // Loading applies the constructor's rules to every value (a scale of 0 or a NaN factor is an
  // hg::Error, not a run of NaN weights) and range-checks the counters.
  // Data-parallel training: unscale_ hands each optimizer's found_inf flag (0-d f32 on the
  // gradients' device, nonzero when this rank saw inf/NaN) to `sync` before anything reads it.
  // hg::distributed::sync_grad_scaler installs an all-reduce (max) here, so that every rank skips
  // the same steps and backs off the same scale; on CUDA it is a device-side NCCL all-reduce,
  // with no host sync. (The amp layer knows nothing of processes: hence a hook.)
  using FoundInfSync = std::function<void(const Tensor& found_inf)>;
  void set_found_inf_sync(FoundInfSync sync) { found_inf_sync_ = std::move(sync); }

  std::map<std::string, Tensor> state_dict() const;
  void load_state_dict(const std::map<std::string, Tensor>& state);

  // The growth tracker is an i32 counting up to growth_interval.
  static constexpr int64_t kMaxGrowthInterval = INT32_MAX;

 private:
  enum class Stage { Ready, Unscaled, Stepped };
  struct OptimizerState {
    Stage stage = Stage::Ready;
    Tensor found_inf;     // 0-d f32: 1 when a gradient was inf/NaN
    bool deferred = false;  // some gradients are left scaled for the optimizer (StepControl.scale)
  };
  void lazy_init(Device device);
  void check_stuck(int skipped);
  std::string name_of(const Tensor& param, size_t index) const;

  GradScalerOptions options_;
  Tensor scale_;             // 0-d f32 on the gradients' device, created by the first scale()
  Tensor growth_tracker_;    // 0-d i32: clean steps since the last growth or backoff
  Tensor skipped_in_a_row_;  // 0-d i32: consecutive skipped steps
  std::map<Scalable*, OptimizerState> per_optimizer_;
  std::map<const TensorImpl*, std::string> names_;
  // For diagnostics(): the last unscale_'s per-gradient inf flags (i32), their parameters' names,
  // and the f16 elements examined / found zero or subnormal.
  Tensor nonfinite_flags_, tiny_count_;
  std::vector<std::string> flagged_names_;
  int64_t f16_elements_ = 0;
  // CUDA: mapped host memory the update kernel copies skipped_in_a_row into, so that update()
  // can watch for a stuck run without waiting for the GPU (see core/cuda/cuda_copy.h).
  std::shared_ptr<::hg::detail::MappedSlot> skipped_mirror_;
  int64_t steps_since_stuck_check_ = 0;
  bool scaled_ = false;  // scale() has been called: gradients are scaled (checked by unscale_)
  FoundInfSync found_inf_sync_;
};

}  // namespace hg::amp
