// The optimizer base: groups, the skip/unscale protocol with the GradScaler, master weights and
// state dicts.
#include "optim/optimizer.h"

#include "autograd/grad_mode.h"
#include "ops/cuda_ops.h"
#include "ops/elementwise.h"

namespace hg::optim {

Optimizer::Optimizer(const std::vector<Tensor>& params, double lr, bool master_weights)
    : master_weights_(master_weights) {
  add_param_group(params, lr);
}

void Optimizer::add_param_group(const std::vector<Tensor>& params, double lr) {
  HG_CHECK(lr >= 0, "optimizer: learning rate must be >= 0, got ", lr);
  for (const Tensor& p : params) {
    HG_CHECK(p.defined() && p.is_leaf() && is_floating(p.dtype()), "optimizer: parameters must be floating leaf tensors");
    for (const Tensor& q : parameters())
      HG_CHECK(!q.is_same(p), "optimizer: a parameter appears in more than one group");
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

void Optimizer::set_lr(double lr) {
  HG_CHECK(lr >= 0, "optimizer: learning rate must be >= 0, got ", lr);
  for (ParamGroup& g : groups_) g.lr = lr;
}

Tensor Optimizer::weight_for(const Tensor& param, ParamState& state) {
  if (!master_weights_ || !is_16bit_floating(param.dtype())) return param;
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
        cuda_ops::fill(count, uint64_t(state.step));
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
  cuda_ops::advance_step_counts(steps, flags, steps_applied_cuda_, control.found_inf);
}

int64_t Optimizer::steps_applied() const {
  return steps_applied_ + (steps_applied_cuda_.defined() ? steps_applied_cuda_.item<int64_t>() : 0);
}

bool Optimizer::holds_value(const ParamState&, const std::string&) const { return true; }

std::map<std::string, Tensor> Optimizer::state_dict() const {
  std::map<std::string, Tensor> out;
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
  return out;
}

void Optimizer::load_state_dict(const std::map<std::string, Tensor>& state) {
  for (size_t g = 0; g < groups_.size(); ++g) {
    auto it = state.find("param_groups." + std::to_string(g) + ".lr");
    HG_CHECK(it != state.end(), "optimizer.load_state_dict: missing param_groups.", g, ".lr (was the state saved from "
             "an optimizer with ", groups_.size(), " group(s)?)");
    groups_[g].lr = it->second.item<double>();
  }
  const std::vector<Tensor> params = parameters();
  state_.clear();
  for (const auto& [key, t] : state) {
    if (key.rfind("state.", 0) != 0) continue;
    const size_t dot = key.find('.', 6);
    HG_CHECK(dot != std::string::npos, "optimizer.load_state_dict: malformed key \"", key, "\"");
    const size_t index = std::stoul(key.substr(6, dot - 6));
    HG_CHECK(index < params.size(), "optimizer.load_state_dict: state for parameter ", index, " but the optimizer has ",
             params.size(), " parameters");
    const std::string name = key.substr(dot + 1);
    ParamState& s = state_[params[index].impl()];
    if (name == "step") s.step = t.item<int64_t>();  // a CUDA step() re-creates its device count from it
    else s.tensors[name] = t.detach().to(params[index].device()).clone();
  }
  if (auto it = state.find("steps_applied"); it != state.end()) steps_applied_ = it->second.item<int64_t>();
  steps_applied_cuda_ = Tensor();
}

}  // namespace hg::optim
