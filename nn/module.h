// nn::Module: the base of every layer and of your own models. A module owns named parameters,
// buffers and child modules; names nest with dots like PyTorch's ("fc1.weight"), so state dicts
// and safetensors files interoperate with torch code for the same architecture.
//
//   struct Net : hg::nn::Module {
//     hg::nn::Linear fc1{784, 256}, fc2{256, 10};
//     Net() { register_module("fc1", fc1); register_module("fc2", fc2); }
//     hg::Tensor forward(const hg::Tensor& x) override { return fc2(hg::relu(fc1(x))); }
//   };
//
// Modules are values that share their state: a copy of a module (or of a model holding it) refers
// to the same parameters, children and training flag -- like LibTorch's module holders, but
// with '.' instead of '->'. Module::to(dtype) converts parameters in place, so every copy and
// every Tensor member sees the new dtype.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace hg::nn {

class Module;

namespace detail {
// What copies of a module share.
struct ModuleState {
  std::vector<std::pair<std::string, Tensor>> parameters;
  std::vector<std::pair<std::string, Tensor>> buffers;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children;
  bool training = true;
};
}  // namespace detail

class Module {
 public:
  Module();
  virtual ~Module() = default;
  Module(const Module&) = default;
  Module& operator=(const Module&) = default;

  // The computation. A module without one (a container of parameters) throws if called.
  virtual Tensor forward(const Tensor& x);
  Tensor operator()(const Tensor& x) { return forward(x); }

  std::vector<Tensor> parameters(bool recurse = true) const;
  std::vector<std::pair<std::string, Tensor>> named_parameters(bool recurse = true) const;
  std::vector<Tensor> buffers(bool recurse = true) const;
  std::vector<std::pair<std::string, Tensor>> named_buffers(bool recurse = true) const;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children() const;

  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return state_->training; }
  Module& to(DType dtype);    // floating parameters and buffers
  Module& to(Device device);  // every parameter and buffer
  void zero_grad();           // sets every parameter's .grad() to undefined (PyTorch's default)

  // Parameters and buffers by dotted name (detached: they share data with the module).
  std::map<std::string, Tensor> state_dict() const;
  // Copies values in. strict: missing or unexpected keys are an error; shapes and dtypes must
  // match exactly. The error lists every offending key.
  void load_state_dict(const std::map<std::string, Tensor>& state, bool strict = true);

  // Registration (returns the registered tensor / module so members can be initialised inline).
  Tensor register_parameter(const std::string& name, Tensor tensor, bool requires_grad = true);
  Tensor register_buffer(const std::string& name, Tensor tensor);
  template <class M>
  M& register_module(const std::string& name, M& module) {
    adopt(name, std::make_shared<M>(module));  // a copy shares the module's state
    return module;
  }

 protected:
  void adopt(const std::string& name, std::shared_ptr<Module> child);

 private:
  std::shared_ptr<detail::ModuleState> state_;
};

}  // namespace hg::nn
