// Module registration, traversal, state dicts and conversions.
#include "nn/module.h"

#include <set>
#include <sstream>

#include "autograd/grad_mode.h"

namespace hg::nn {

Module::Module() : state_(std::make_shared<detail::ModuleState>()) {}

Tensor Module::forward(const Tensor&) {
  HG_FAIL("Module: this module has no forward(); override forward() or call its children directly");
}

namespace {
void check_name(const std::string& name, const detail::ModuleState& s) {
  HG_CHECK(!name.empty() && name.find('.') == std::string::npos, "Module: invalid name \"", name,
           "\" (names must be non-empty and contain no '.')");
  for (const auto& [n, _] : s.parameters) HG_CHECK(n != name, "Module: \"", name, "\" is already a parameter");
  for (const auto& [n, _] : s.buffers) HG_CHECK(n != name, "Module: \"", name, "\" is already a buffer");
  for (const auto& [n, _] : s.children) HG_CHECK(n != name, "Module: \"", name, "\" is already a child module");
}
}  // namespace

Tensor Module::register_parameter(const std::string& name, Tensor tensor, bool requires_grad) {
  check_name(name, *state_);
  HG_CHECK(tensor.defined(), "register_parameter: \"", name, "\" is undefined");
  if (requires_grad && !tensor.requires_grad()) tensor.requires_grad_(true);
  state_->parameters.emplace_back(name, tensor);
  return tensor;
}

Tensor Module::register_buffer(const std::string& name, Tensor tensor) {
  check_name(name, *state_);
  state_->buffers.emplace_back(name, tensor);
  return tensor;
}

void Module::adopt(const std::string& name, std::shared_ptr<Module> child) {
  check_name(name, *state_);
  HG_CHECK(child->state_ != state_, "register_module: a module cannot be its own child");
  state_->children.emplace_back(name, std::move(child));
}

// ---- traversal ---------------------------------------------------------------------------------

std::vector<std::pair<std::string, Tensor>> Module::named_parameters(bool recurse) const {
  std::vector<std::pair<std::string, Tensor>> out = state_->parameters;
  if (recurse)
    for (const auto& [name, child] : state_->children)
      for (auto& [sub, t] : child->named_parameters(true)) out.emplace_back(name + "." + sub, t);
  return out;
}

std::vector<std::pair<std::string, Tensor>> Module::named_buffers(bool recurse) const {
  std::vector<std::pair<std::string, Tensor>> out = state_->buffers;
  if (recurse)
    for (const auto& [name, child] : state_->children)
      for (auto& [sub, t] : child->named_buffers(true)) out.emplace_back(name + "." + sub, t);
  return out;
}

std::vector<Tensor> Module::parameters(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& [_, t] : named_parameters(recurse)) out.push_back(t);
  return out;
}

std::vector<Tensor> Module::buffers(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& [_, t] : named_buffers(recurse)) out.push_back(t);
  return out;
}

std::vector<std::pair<std::string, std::shared_ptr<Module>>> Module::children() const { return state_->children; }

// ---- modes and conversions ---------------------------------------------------------------------

void Module::train(bool on) {
  state_->training = on;
  for (auto& [_, child] : state_->children) child->train(on);
}

Module& Module::to(DType dtype) {
  HG_CHECK(is_floating(dtype), "Module::to: parameters can only be converted to a floating dtype, got ", dtype);
  NoGradGuard no_grad;
  for (auto& [_, t] : named_parameters()) if (is_floating(t.dtype()) && t.dtype() != dtype) t.set_data(t.detach().to(dtype));
  for (auto& [_, t] : named_buffers()) if (is_floating(t.dtype()) && t.dtype() != dtype) t.set_data(t.detach().to(dtype));
  return *this;
}

Module& Module::to(Device device) {
  NoGradGuard no_grad;
  for (auto& [_, t] : named_parameters()) if (t.device() != device) t.set_data(t.detach().to(device));
  for (auto& [_, t] : named_buffers()) if (t.device() != device) t.set_data(t.detach().to(device));
  return *this;
}

void Module::zero_grad() {
  for (const Tensor& p : parameters()) p.set_grad(Tensor());
}

// ---- state dicts -------------------------------------------------------------------------------

std::map<std::string, Tensor> Module::state_dict() const {
  std::map<std::string, Tensor> out;
  for (auto& [name, t] : named_parameters()) out[name] = t.detach();
  for (auto& [name, t] : named_buffers()) out[name] = t.detach();
  return out;
}

void Module::load_state_dict(const std::map<std::string, Tensor>& state, bool strict) {
  const std::map<std::string, Tensor> own = state_dict();
  std::vector<std::string> missing, unexpected, mismatched;
  for (const auto& [name, t] : own) {
    auto it = state.find(name);
    if (it == state.end()) {
      missing.push_back(name);
    } else if (it->second.shape() != t.shape() || it->second.dtype() != t.dtype()) {
      std::ostringstream os;
      os << name << " (checkpoint " << it->second.shape() << " " << it->second.dtype() << ", model " << t.shape() << " "
         << t.dtype() << ")";
      mismatched.push_back(os.str());
    }
  }
  for (const auto& [name, _] : state)
    if (!own.count(name)) unexpected.push_back(quoted(name));
  const auto join = [](const std::vector<std::string>& names) {
    std::string s;
    for (const std::string& n : names) {
      if (!s.empty()) s += ", ";
      s += n;
    }
    return s;
  };
  std::string problems;
  if (!mismatched.empty()) problems += " size/dtype mismatch for: " + join(mismatched) + ".";
  if (strict && !missing.empty()) problems += " Missing key(s): " + join(missing) + ".";
  if (strict && !unexpected.empty()) problems += " Unexpected key(s): " + join(unexpected) + ".";
  HG_CHECK(problems.empty(), "load_state_dict: Error(s) in loading state_dict:", problems);
  NoGradGuard no_grad;
  for (const auto& [name, t] : own) {
    auto it = state.find(name);
    if (it != state.end()) Tensor(t).copy_(it->second);
  }
}

}  // namespace hg::nn
