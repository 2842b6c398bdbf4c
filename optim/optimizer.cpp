// The optimizer base: groups, the skip/unscale protocol with the GradScaler, master weights and
// state dicts.
#include "optim/optimizer.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <set>

#include "autograd/grad_mode.h"
#include "core/fill.h"
#include "core/state_dict.h"
#include "kernels/cpu/rounded_update.h"
#include "kernels/cuda/cuda_kernels.h"
#include "ops/elementwise.h"

namespace hg::optim {

namespace {
// The one rule for a learning rate, from a constructor, set_lr or a checkpoint.
void check_lr(double lr, std::string_view what) {
  HG_CHECK(std::isfinite(lr) && lr >= 0, what, ": learning rate must be finite and >= 0, got ", lr);
}
}  // namespace

const char* rounding_name(Rounding rounding) {
  switch (rounding) {
    case Rounding::Nearest: return "nearest";
    case Rounding::Stochastic: return "stochastic";
    case Rounding::Kahan: return "kahan";
  }
  return "?";
}

Optimizer::Optimizer(const std::vector<Tensor>& params, double lr, bool master_weights)
    : master_weights_(master_weights) {
  add_param_group(params, lr);
}

Optimizer::Optimizer(const std::vector<Tensor>& params, double lr, bool master_weights, Rounding rounding, uint64_t seed)
    : master_weights_(master_weights), rounding_(rounding), rounding_seed_(seed) {
  HG_CHECK(rounding == Rounding::Nearest || rounding == Rounding::Stochastic || rounding == Rounding::Kahan,
           "optimizer: unknown rounding mode ", int(rounding));
  HG_CHECK(rounding == Rounding::Nearest || !master_weights, "optimizer: rounding = ", rounding_name(rounding),
           " is pure 16-bit training, without f32 master weights: set master_weights or the rounding, not both");
  add_param_group(params, lr);
}

void Optimizer::add_param_group(const std::vector<Tensor>& params, double lr) {
  check_lr(lr, "optimizer");
  std::set<const TensorImpl*> earlier_groups;
  for (const Tensor& q : parameters()) earlier_groups.insert(q.impl());
  std::set<const TensorImpl*> this_group;
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor& p = params[i];
    HG_CHECK(p.defined() && p.is_leaf() && is_floating(p.dtype()), "optimizer: parameters must be floating leaf tensors");
    HG_CHECK(!earlier_groups.count(p.impl()), "optimizer: a parameter appears in more than one group");
    // NOTE: listed twice, a parameter would be updated twice per step (PyTorch refuses it too).
    HG_CHECK(this_group.insert(p.impl()).second, "optimizer: parameter ", i, " (shape ", p.shape(),
             ") is listed twice; pass each parameter once");
    HG_CHECK(rounding_ == Rounding::Nearest || p.dtype() == bf16 || p.dtype() == f16, "optimizer: rounding = ",
             rounding_name(rounding_), " keeps bf16 (or f16) parameters without f32 masters, but parameter ", i,
             " (shape ", p.shape(), ") is ", p.dtype(), "; convert the model first (model.to(hg::bf16))");
  }
  groups_.push_back({params, lr});
}

std::vector<Tensor> Optimizer::parameters() const {
  std::vector<Tensor> out;
  for (const ParamGroup& g : groups_) out.insert(out.end(), g.params.begin(), g.params.end());
  return out;
}

void Optimizer::zero_grad() {
  for (const Tensor& p : parameters()) p.set_grad(Tensor());
}

double Optimizer::lr() const { return groups_.front().lr; }

double Optimizer::initial_lr() {
  if (!initial_lr_) initial_lr_ = lr();
  return *initial_lr_;
}

void Optimizer::set_initial_lr(double lr) {
  check_lr(lr, "optimizer");
  initial_lr_ = lr;
}

void Optimizer::set_momentum(double) {
  HG_FAIL("optimizer: a ", kind(), " optimizer has no momentum to set");
}

void Optimizer::set_lr(double lr) {
  check_lr(lr, "optimizer");
  for (ParamGroup& g : groups_) g.lr = lr;
}

Tensor Optimizer::state_tensor(ParamState& state, const Tensor& weight, const char* name, double initial) {
  Tensor& t = state.tensors[name];
  if (!t.defined()) t = full(weight.shape(), initial, weight.options());
  return t;
}

std::vector<std::string_view> Optimizer::kept_state_names() const {
  std::vector<std::string_view> names = state_names();
  if (rounding_ == Rounding::Kahan) names.push_back("compensation");
  return names;
}

kernels::cpu::RoundedStore Optimizer::rounded_store(const Tensor& weight, ParamState& state) {
  kernels::cpu::RoundedStore store{.kahan = rounding_ == Rounding::Kahan, .compensation = {}, .seed = rounding_seed_,
                                   .offset = rounding_offset_};
  if (store.kahan) store.compensation = state_tensor(state, weight, "compensation");
  rounding_offset_ += kernels::cpu::rounding_counters(weight.numel());
  return store;
}

MemoryUse Optimizer::memory_use() const {
  MemoryUse use;
  const int64_t states = int64_t(kept_state_names().size());
  for (const Tensor& p : parameters()) {
    const int64_t n = p.numel(), size = int64_t(element_size(p.dtype()));
    const bool master = has_master(p);
    use.parameters += n;
    use.weight_bytes += n * size;
    use.gradient_bytes += n * size;
    use.master_bytes += master ? n * 4 : 0;
    use.state_bytes += states * n * (master ? 4 : size);
  }
  return use;
}

bool Optimizer::has_master(const Tensor& param) const { return master_weights_ && is_16bit_floating(param.dtype()); }

Tensor Optimizer::weight_for(const Tensor& param, ParamState& state) {
  if (!has_master(param)) return param;
  Tensor& master = state.tensors["master"];
  if (!master.defined()) master = param.detach().to(f32);
  return master;
}

void Optimizer::step(const amp::StepControl& control) {
  NoGradGuard no_grad;
  bool on_cuda = false;
  for (const Tensor& p : parameters()) on_cuda = on_cuda || p.device().is_cuda();
  if (on_cuda) return step_cuda(control);
  if (control.found_inf.defined() && control.found_inf.item<float>() != 0.0f) return;  // skipped: nothing changes
  // NOTE: 1/scale in f64 for the gradients the GradScaler left scaled (see amp::unscale_deferred).
  const double inv_scale = control.scale.defined() ? 1.0 / control.scale.item<double>() : 1.0;
  for (ParamGroup& group : groups_) {
    for (const Tensor& param : group.params) {
      if (!param.grad().defined()) continue;
      ParamState& state = state_[param.impl()];
      const Tensor weight = weight_for(param, state);
      Tensor grad = param.grad().to(weight.dtype()).contiguous();
      if (inv_scale != 1.0 && amp::unscale_deferred(param.grad(), master_weights_)) grad = grad * inv_scale;
      ++state.step;
      update(weight, grad, state, group.lr);
      if (!weight.is_same(param)) Tensor(param).copy_(weight);  // round the master into the parameter
    }
  }
  ++steps_applied_;
}

// On CUDA everything stays on the device: per-parameter step counts are device tensors (i64:
// an f32 count would stop at 2^24), the kernels themselves skip when found_inf is set, and one
// small kernel advances the counts afterwards, so no step ever waits for the GPU.
void Optimizer::step_cuda(const amp::StepControl& control) {
  HG_CHECK(rounding_ == Rounding::Nearest, kind(), ": rounding = ", rounding_name(rounding_),
           " (pure 16-bit training) runs on the CPU only for now; on CUDA use master_weights");
  std::vector<Tensor> steps, flags;
  for (ParamGroup& group : groups_) {
    DeviceGroup dg;
    dg.lr = group.lr;
    for (const Tensor& param : group.params) {
      if (!param.grad().defined()) continue;
      HG_CHECK(param.device().is_cuda() && param.is_contiguous(), "optimizer: every parameter must be a contiguous "
               "tensor on the same CUDA device (found one on ", param.device(), ")");
      ParamState& state = state_[param.impl()];
      dg.weights.push_back(weight_for(param, state));
      dg.params.push_back(param);
      dg.grads.push_back(param.grad().contiguous());
      Tensor& count = state.tensors["step"];
      if (!count.defined()) {  // the count's bits as a fill value: exact for any int64, and no copy
        count = empty({}, {.dtype = i64, .device = param.device()});
        detail::cuda_fill(count, uint64_t(state.step));
      }
      dg.steps.push_back(count);
      dg.states.push_back(&state);
    }
    if (dg.params.empty()) continue;
    update_cuda(dg, control);
    steps.insert(steps.end(), dg.steps.begin(), dg.steps.end());
    flags.insert(flags.end(), dg.flags.begin(), dg.flags.end());
  }
  // One more applied step (and per-parameter count) unless found_inf: counted on the device.
  const Device device = groups_.front().params.front().device();
  if (!steps_applied_cuda_.defined()) steps_applied_cuda_ = zeros({}, {.dtype = i64, .device = device});
  kernels::cuda::advance_step_counts(steps, flags, steps_applied_cuda_, control.found_inf);
}

void Optimizer::update_cuda(DeviceGroup& group, const amp::StepControl& control) {
  if (control.found_inf.defined() && control.found_inf.item<float>() != 0.0f) return;  // skipped
  const double inv_scale = control.scale.defined() ? 1.0 / control.scale.item<double>() : 1.0;
  for (size_t i = 0; i < group.params.size(); ++i) {
    ParamState& state = *group.states[i];
    Tensor grad = group.grads[i].to(group.weights[i].dtype()).contiguous();
    if (inv_scale != 1.0 && amp::unscale_deferred(group.grads[i], master_weights_)) grad = grad * inv_scale;
    // update() sees this step's count, as on the CPU; advance_step_counts then adds the same 1
    // to the device's count.
    state.step = group.steps[i].item<int64_t>() + 1;
    update(group.weights[i], grad, state, group.lr);
    if (!group.weights[i].is_same(group.params[i])) Tensor(group.params[i]).copy_(group.weights[i]);
  }
}

int64_t Optimizer::steps_applied() const {
  return steps_applied_ + (steps_applied_cuda_.defined() ? steps_applied_cuda_.item<int64_t>() : 0);
}

bool Optimizer::holds_value(const ParamState&, const std::string&) const { return true; }

std::map<std::string, Tensor> Optimizer::state_dict() const {
  std::map<std::string, Tensor> out;
  out["kind"] = state_dict::from_text(kind());
  for (size_t g = 0; g < groups_.size(); ++g)
    out["param_groups." + std::to_string(g) + ".lr"] = full({}, groups_[g].lr, {.dtype = f64});
  const std::vector<Tensor> params = parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    auto it = state_.find(params[i].impl());
    if (it == state_.end()) continue;
    const std::string prefix = "state." + std::to_string(i) + ".";
    auto device_step = it->second.tensors.find("step");  // CUDA keeps the count on the device
    const int64_t step = device_step != it->second.tensors.end() ? device_step->second.item<int64_t>() : it->second.step;
    out[prefix + "step"] = from_vector(std::vector<int64_t>{step}, Shape{});  // exact, whatever its size
    for (const auto& [name, t] : it->second.tensors)
      if (name != "step" && holds_value(it->second, name)) out[prefix + name] = t.detach().clone();
  }
  out["steps_applied"] = from_vector(std::vector<int64_t>{steps_applied()}, Shape{});
  if (rounding_ != Rounding::Nearest) {  // u64 bit patterns, stored as i64 (as the rng part does)
    out["rounding.seed"] = from_vector(std::vector<int64_t>{int64_t(rounding_seed_)}, Shape{});
    out["rounding.offset"] = from_vector(std::vector<int64_t>{int64_t(rounding_offset_)}, Shape{});
  }
  return out;
}

void Optimizer::load_state_dict(const std::map<std::string, Tensor>& state) {
  const std::string what = std::string(kind()) + ".load_state_dict";
  // Everything is read and checked first: a bad checkpoint leaves the optimizer as it was.
  const std::string saved_kind = state_dict::read_text(state, "kind", what);
  HG_CHECK(saved_kind == kind(), what, ": the state was saved by ", quoted(saved_kind), ", not ", kind(),
           " (a checkpoint resumes only into the optimizer that wrote it)");
  std::vector<double> lrs;
  std::set<std::string> known = {"kind", "steps_applied"};
  for (size_t g = 0; g < groups_.size(); ++g) {
    const std::string key = "param_groups." + std::to_string(g) + ".lr";
    HG_CHECK(state.count(key), what, ": missing ", key, " (was the state saved from an optimizer with ",
             groups_.size(), " group(s)?)");
    lrs.push_back(state_dict::read_double(state, key, what));
    check_lr(lrs.back(), what);
    known.insert(key);
  }
  const int64_t steps_applied = state_dict::read_int(state, "steps_applied", what, 0, kMaxSteps);
  // The rounding stream: needed (and only there) with Stochastic or Kahan rounding.
  const bool has_stream = state.count("rounding.seed") || state.count("rounding.offset");
  HG_CHECK(has_stream || rounding_ == Rounding::Nearest, what,
           ": the state has no rounding.seed / rounding.offset, but this optimizer rounds ", rounding_name(rounding_),
           " (the state was saved by one with rounding nearest)");
  HG_CHECK(!has_stream || rounding_ != Rounding::Nearest, what, ": the state holds a rounding stream (rounding.seed, "
           "rounding.offset) of an optimizer with stochastic or Kahan rounding, but this one rounds to nearest");
  uint64_t seed = rounding_seed_, offset = rounding_offset_;
  if (rounding_ != Rounding::Nearest) {
    seed = uint64_t(state_dict::read_int(state, "rounding.seed", what, INT64_MIN, INT64_MAX));
    offset = uint64_t(state_dict::read_int(state, "rounding.offset", what, INT64_MIN, INT64_MAX));
    known.insert("rounding.seed");
    known.insert("rounding.offset");
  }
  // Every other key is a parameter's state: a key that is neither would be silently unused.
  for (const auto& [key, _] : state)
    HG_CHECK(known.count(key) || key.starts_with("state."), what, ": unexpected key ", quoted(key),
             " (an optimizer's state holds kind, steps_applied, param_groups.<g>.lr for its ", groups_.size(),
             " group(s) and state.<i>.<name>)");
  std::map<const TensorImpl*, ParamState> previous = std::move(state_);
  state_.clear();
  try {
    const std::vector<Tensor> params = parameters();
    std::map<size_t, std::set<std::string>> names_by_index;
    for (const auto& [key, _] : state)
      if (key.starts_with("state.")) {
        const auto [index, name] = load_param_state(state, key, params);
        names_by_index[index].insert(name);
      }
    for (const auto& [index, names] : names_by_index) check_param_state_complete(index, params[index], names, what);
  } catch (...) {
    state_ = std::move(previous);
    throw;
  }
  for (size_t g = 0; g < groups_.size(); ++g) groups_[g].lr = lrs[g];
  steps_applied_ = steps_applied;
  steps_applied_cuda_ = Tensor();
  rounding_seed_ = seed;
  rounding_offset_ = offset;
}

// A parameter's state is all there or not there at all: its step count, and once it has taken a
// step, every tensor update() keeps. A checkpoint that lost one (a flipped byte in its key) would
// otherwise restart that moment from zero.
void Optimizer::check_param_state_complete(size_t index, const Tensor& param, const std::set<std::string>& names,
                                           std::string_view what) const {
  HG_CHECK(names.count("step"), what, ": parameter ", index, " has state (", *names.begin(),
           ") but no state.", index, ".step");
  if (state_.at(param.impl()).step == 0) return;  // (a GPU step that was skipped left no values yet)
  std::vector<std::string_view> expected = kept_state_names();
  if (has_master(param)) expected.push_back("master");
  for (std::string_view name : expected)
    HG_CHECK(names.count(std::string(name)), what, ": parameter ", index, " has taken ", state_.at(param.impl()).step,
             " step(s) but its state lacks state.", index, ".", name,
             " (the checkpoint lost it, or an optimizer with other options wrote it)");
}

std::pair<size_t, std::string> Optimizer::load_param_state(const std::map<std::string, Tensor>& state,
                                                           const std::string& key, const std::vector<Tensor>& params) {
  const std::string what = std::string(kind()) + ".load_state_dict";
  // "state.<index>.<name>", the index in plain decimal digits.
  const size_t dot = key.find('.', 6);
  size_t index = 0;
  const char* first = key.data() + 6;
  const char* last = dot == std::string::npos ? first : key.data() + dot;
  const auto [end, error] = std::from_chars(first, last, index);
  HG_CHECK(dot != std::string::npos && first != last && error == std::errc() && end == last, what, ": malformed key ",
           quoted(key), " (expected state.<parameter index>.<name>)");
  HG_CHECK(index < params.size(), what, ": state for parameter ", std::string_view(first, size_t(last - first)),
           " but the optimizer has ", params.size(), " parameters");
  const Tensor& param = params[index];
  const std::string name = key.substr(dot + 1);
  ParamState& s = state_[param.impl()];
  if (name == "step") {
    s.step = state_dict::read_int(state, key, what, 0, kMaxSteps);  // a CUDA step() re-creates its device count
    return {index, name};
  }
  const std::vector<std::string_view> names = kept_state_names();
  const bool known = std::find(names.begin(), names.end(), name) != names.end() || (name == "master" && has_master(param));
  HG_CHECK(known, what, ": unexpected state ", quoted(key), " for this ", kind(), " optimizer (it keeps ",
           names.empty() ? std::string("no tensors") : std::string(names.front()) + (names.size() > 1 ? ", ..." : ""),
           " per parameter", has_master(param) ? ", and master" : "; \"master\" needs master_weights and a 16-bit parameter",
           ")");
  // State lives in the dtype of the weight update() works on: the f32 master, or the parameter.
  const DType dtype = has_master(param) ? f32 : param.dtype();
  const Tensor& t = state_dict::entry(state, key, what);
  HG_CHECK(t.shape() == param.shape() && t.dtype() == dtype, what, ": ", quoted(key), " has shape ", t.shape(), " ",
           t.dtype(), ", expected ", param.shape(), " ", dtype, " for parameter ", index);
  const int64_t nonfinite = state_dict::nonfinite_count(t);
  HG_CHECK(nonfinite == 0, what, ": ", quoted(key), " holds ", nonfinite, " inf/NaN value(s) of ", t.numel(),
           " (state of a diverged run would make every later step NaN)");
  s.tensors[name] = t.detach().to(param.device()).clone();
  return {index, name};
}

}  // namespace hg::optim
