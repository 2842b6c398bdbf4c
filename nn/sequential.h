// nn::Sequential: runs its modules in order; children are named "0", "1", ... like PyTorch.
//
//   hg::nn::Sequential mlp{hg::nn::Linear(784, 256), hg::nn::ReLU(), hg::nn::Linear(256, 10)};
//   mlp.push_back(hg::nn::Dropout(0.1));
//
// Write it with braces: the layers draw their initial weights from the global generator as they
// are constructed, and only a braced list fixes that order (left to right). With parentheses the
// order of function arguments is unspecified: GCC on x86-64 builds the last layer first, GCC on
// aarch64 and clang the first, so one seed would give different models on different machines.
//
// A Sequential runs each module as it is: a Linear followed by a ReLU is a linear op and a relu
// op. nn::fuse(model) (nn/fuse.h) gives a Sequential over the same layers that runs such pairs
// as one op.
#pragma once
#include <memory>
#include <type_traits>
#include <vector>

#include "nn/module.h"

namespace hg::nn {

class Sequential : public Module {
 public:
  Sequential() = default;
  // (A Sequential argument is excluded so that copying a Sequential stays a copy.)
  template <class... Modules>
    requires(sizeof...(Modules) > 0 && (std::is_base_of_v<Module, std::decay_t<Modules>> && ...) &&
             (!std::is_same_v<std::decay_t<Modules>, Sequential> && ...))
  explicit Sequential(Modules&&... modules) {
    (push_back(std::forward<Modules>(modules)), ...);
  }

  template <class M>
    requires std::is_base_of_v<Module, std::decay_t<M>>
  Sequential& push_back(M&& module) {
    auto stored = std::make_shared<std::decay_t<M>>(std::forward<M>(module));
    adopt(std::to_string(modules_->size()), stored);
    modules_->push_back(stored);
    return *this;
  }

  Tensor forward(const Tensor& x) override;
  size_t size() const { return modules_->size(); }
  Module& operator[](size_t i) { return *modules_->at(i); }
  // Whether the pairs nn/fuse.h names run as one op (only in what nn::fuse returned).
  bool fuses_activations() const { return fuse_activations_; }

 private:
  friend Sequential fuse(Sequential model);
  bool fuse_activations_ = false;  // per copy: nn::fuse's result fuses, the model it came from not

  // Shared like the rest of a module's state, so copies of a Sequential run the same layers.
  std::shared_ptr<std::vector<std::shared_ptr<Module>>> modules_ =
      std::make_shared<std::vector<std::shared_ptr<Module>>>();
};

}  // namespace hg::nn
