// optim::Optimizer: the base of SGD, Adam, AdamW, RMSprop, Adagrad and Adadelta -- and of yours
// (docs/api.md, "Your own optimizer": kind(), state_names() and update() are enough). It owns parameter groups (each with its own
// learning rate) and per-parameter state, and applies updates with fused loops over each
// parameter's data (no temporary tensors per step).
//
//   hg::optim::SGD opt(model.parameters(), {.lr = 0.05, .momentum = 0.9});
//   opt.zero_grad(); loss.backward(); opt.step();
//
// master_weights: for f16/bf16 parameters, keep an f32 master copy and f32 optimizer state;
// the update is applied to the master and rounded into the 16-bit parameter, so small updates
// are not lost to 16-bit rounding.
//
// rounding (SGD, Adam, AdamW): pure 16-bit training, the other way to keep small updates -- bf16 (or
// f16) parameters, optimizer state in the same dtype, no f32 copy. Each update is computed in f32
// and written back with stochastic rounding (Rounding::Stochastic, unbiased on average; the
// rounding stream's seed and position are part of the state dict, so a resumed run continues
// bitwise) or with Kahan compensation of the weight (Rounding::Kahan: one more 16-bit tensor per
// parameter). Adam in bf16: 8 bytes per parameter for weight + gradient + m + v, against 16 with
// f32 masters (memory_use()).
//
//   model.to(hg::bf16);
//   hg::optim::AdamW opt(model.parameters(), {.lr = 1e-3, .rounding = hg::optim::Rounding::Stochastic, .seed = 1});
#pragma once
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "amp/scalable.h"
#include "core/tensor.h"

namespace hg::kernels::cpu {
struct RoundedStore;  // kernels/cpu/rounded_update.h: how the pure 16-bit loop writes back
}

namespace hg::optim {

// How update() writes a 16-bit parameter and its state back (optimizers without master weights):
//   Nearest:    round to nearest even (an update below half an ulp is lost: bf16 weights stall);
//   Stochastic: round up with probability equal to the fraction of the way to the next value
//               (hg::stochastic_round), the weight and every state tensor;
//   Kahan:      the weight to nearest plus a 16-bit compensation tensor ("compensation" in the
//               state: +2 bytes per bf16 parameter) that carries the lost part into the next
//               step; the state stochastically.
// Stochastic and Kahan need bf16 or f16 parameters and no master_weights (an hg::Error otherwise);
// they run on the CPU (an hg::Error on CUDA for now).
enum class Rounding { Nearest, Stochastic, Kahan };
const char* rounding_name(Rounding rounding);  // "nearest", "stochastic", "kahan"

// What an optimizer's parameters take in training, counted from dtypes and options (so before the
// first step too): the parameter, its gradient (one in the parameter's dtype, as backward leaves
// it), the f32 master of a 16-bit parameter with master_weights, and the optimizer's state tensors
// (momentum, moments, Kahan compensation) in the dtype update() keeps them.
struct MemoryUse {
  int64_t parameters = 0;  // elements
  int64_t weight_bytes = 0, gradient_bytes = 0, master_bytes = 0, state_bytes = 0;
  int64_t total_bytes() const { return weight_bytes + gradient_bytes + master_bytes + state_bytes; }
  double bytes_per_parameter() const { return parameters ? double(total_bytes()) / double(parameters) : 0.0; }
};

struct ParamGroup {
  std::vector<Tensor> params;
  double lr;
};

class Optimizer : public amp::Scalable {
 public:
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  void zero_grad();  // every .grad() becomes undefined (PyTorch's set_to_none default)
  void step() { step(amp::StepControl{}); }
  void step(const amp::StepControl& control) override;

  double lr() const;         // the first group's learning rate
  void set_lr(double lr);    // every group's learning rate
  // The lr schedules start from (PyTorch's group["initial_lr"]): the lr when the first scheduler
  // asked for it (or set_initial_lr said), then fixed, so schedulers made one after another
  // (a warmup, then a cosine) share one base.
  double initial_lr();
  void set_initial_lr(double lr);
  // The momentum a schedule may cycle (OneCycleLR): SGD's momentum, Adam's beta1, RMSprop's
  // momentum; none for the others (set_momentum is then an error).
  virtual std::optional<double> momentum() const { return std::nullopt; }
  virtual void set_momentum(double momentum);
  std::vector<ParamGroup>& param_groups() { return groups_; }
  void add_param_group(const std::vector<Tensor>& params, double lr);
  std::vector<Tensor> parameters() const override;
  bool master_weights() const override { return master_weights_; }
  int64_t steps_applied() const;  // steps that changed the parameters (reads the GPU's count on CUDA)
  Rounding rounding() const { return rounding_; }
  MemoryUse memory_use() const;

  // "SGD", "Adam", "AdamW", "RMSprop", ... (yours: any name): stored in the state dict, so a
  // checkpoint resumes only into the kind of optimizer that wrote it.
  virtual std::string_view kind() const = 0;

  // The kind, learning rates and per-parameter state ("state.<i>.<name>", i = position in
  // parameters()); with Stochastic or Kahan rounding also "rounding.seed" and "rounding.offset",
  // where the rounding stream stands. Loading checks every value with the constructor's rules, and every state
  // tensor against its parameter's shape and dtype.
  std::map<std::string, Tensor> state_dict() const;
  void load_state_dict(const std::map<std::string, Tensor>& state);

  // Step counts beyond this are refused on load: counts are exact 64-bit integers (never a float,
  // which would stop counting at 2^24 or 2^53), and 2^62 leaves room to increment them for longer
  // than any run without overflow.
  static constexpr int64_t kMaxSteps = int64_t(1) << 62;

 protected:
  Optimizer(const std::vector<Tensor>& params, double lr, bool master_weights);
  // SGD, Adam, AdamW: with a rounding mode and the seed of its random stream.
  Optimizer(const std::vector<Tensor>& params, double lr, bool master_weights, Rounding rounding, uint64_t seed);

  // Per-parameter state: named tensors (momentum_buffer, exp_avg, ...) and a step count (on
  // CUDA the count lives on the device, as the 0-d i64 tensors["step"]).
  struct ParamState {
    std::map<std::string, Tensor> tensors;
    int64_t step = 0;
    // CUDA, SGD with momentum: a 0-d i32 the kernels set to 1 once the momentum buffer holds a
    // value. A skipped step leaves it 0, so the host never needs to know whether a step applied.
    Tensor momentum_ready;
  };

  // The names of the per-parameter state tensors update() keeps with these options (besides
  // "master"): once a parameter has taken a step, it has each of them (load_state_dict checks).
  virtual std::vector<std::string_view> state_names() const = 0;

  // Updates `weight` (the parameter, or its f32 master) from `grad` (already in weight's dtype and
  // unscaled). `state` lives in weight's dtype.
  virtual void update(const Tensor& weight, const Tensor& grad, ParamState& state, double lr) = 0;

  // One group's parameters on a CUDA device, for the multi-tensor kernels. `flags`: 0-d i32
  // tensors update_cuda wants set to 1 when this step applies (SGD's momentum_ready).
  struct DeviceGroup {
    std::vector<Tensor> weights, params, grads, steps, flags;
    std::vector<ParamState*> states;
    double lr;
  };
  // Launches the optimizer's multi-tensor kernel; it reads found_inf/scale on the device. The
  // default, for an optimizer of yours without a kernel, runs update() on the device tensors --
  // which works when update() is written with hg ops -- after reading found_inf and the step
  // counts on the host (a synchronisation per step that the built-in optimizers avoid).
  virtual void update_cuda(DeviceGroup& group, const amp::StepControl& control);

  void step_cuda(const amp::StepControl& control);

  // Whether state tensor `name` holds a value worth saving (SGD: not a momentum buffer that no
  // applied step has filled yet; saving it would make a resumed run skip the first-step rule).
  virtual bool holds_value(const ParamState& state, const std::string& name) const;

  // A state tensor of one parameter, created like `weight` and filled with `initial` on first use.
  static Tensor state_tensor(ParamState& state, const Tensor& weight, const char* name, double initial = 0.0);

  // The f32 master of a 16-bit parameter (created on first use), or the parameter itself.
  Tensor weight_for(const Tensor& param, ParamState& state);
  bool has_master(const Tensor& param) const;

  // One "state.<i>.<name>" entry of a checkpoint, checked and stored; returns (i, name).
  std::pair<size_t, std::string> load_param_state(const std::map<std::string, Tensor>& state, const std::string& key,
                                                  const std::vector<Tensor>& params);
  void check_param_state_complete(size_t index, const Tensor& param, const std::set<std::string>& names,
                                  std::string_view what) const;

  // state_names() and, with Rounding::Kahan, "compensation".
  std::vector<std::string_view> kept_state_names() const;
  // Stochastic/Kahan: how update() writes `weight` back -- the next ceil(numel / 2) counters of the
  // rounding stream (the stream advances), and with Kahan the compensation tensor.
  kernels::cpu::RoundedStore rounded_store(const Tensor& weight, ParamState& state);

  std::vector<ParamGroup> groups_;
  std::optional<double> initial_lr_;
  std::map<const TensorImpl*, ParamState> state_;
  bool master_weights_;
  Rounding rounding_ = Rounding::Nearest;
  uint64_t rounding_seed_ = 0, rounding_offset_ = 0;  // the rounding stream: Philox(seed, offset + ...)
  int64_t steps_applied_ = 0;   // CPU
  Tensor steps_applied_cuda_;   // CUDA: 0-d i64 counted by the kernels
};

}  // namespace hg::optim
