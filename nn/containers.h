// Containers of modules, as PyTorch's: ModuleList (children "0", "1", ... in order), ModuleDict
// (children by name, in insertion order) and Identity (returns its input). Registered in a model,
// their children's parameters take PyTorch's names -- a ModuleList registered as "blocks" gives
// "blocks.0.conv.weight" -- so state dicts and safetensors files match torch.nn.ModuleList's.
//
//   struct Net : hg::nn::Module {
//     hg::nn::ModuleList blocks;
//     Net() {
//       for (int i = 0; i < 3; ++i) blocks.push_back(Block(16));
//       register_module("blocks", blocks);
//     }
//     hg::Tensor forward(const hg::Tensor& x) override {
//       hg::Tensor y = x;
//       for (hg::nn::Module& block : blocks) y = block(y);
//       return y;
//     }
//   };
//
// Copies share their children (like every module), so registering a list and then adding to it
// adds to the registered one too.
#pragma once
#include <iterator>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "nn/module.h"

namespace hg::nn {

class ModuleList : public Module {
 public:
  ModuleList() = default;
  template <class... Modules>
    requires(sizeof...(Modules) > 0 && (std::is_base_of_v<Module, std::decay_t<Modules>> && ...) &&
             (!std::is_same_v<std::decay_t<Modules>, ModuleList> && ...))
  explicit ModuleList(Modules&&... modules) {
    (push_back(std::forward<Modules>(modules)), ...);
  }

  template <class M>
    requires std::is_base_of_v<Module, std::decay_t<M>>
  ModuleList& push_back(M&& module) {
    auto stored = std::make_shared<std::decay_t<M>>(std::forward<M>(module));
    adopt(std::to_string(modules_->size()), stored);
    modules_->push_back(stored);
    return *this;
  }

  size_t size() const { return modules_->size(); }
  bool empty() const { return modules_->empty(); }
  Module& operator[](size_t i) const;
  // The module at i as its own type (an hg::Error if it is another).
  template <class M>
  M& at(size_t i) const {
    M* typed = dynamic_cast<M*>(&(*this)[i]);
    HG_CHECK(typed != nullptr, "ModuleList::at: module ", i, " is not of the type asked for");
    return *typed;
  }
  // A list holds modules; calling it is an error (iterate over it instead).
  Tensor forward(const Tensor& x) override;

  // Range-for gives Module&.
  class Iterator {
   public:
    using iterator_category = std::forward_iterator_tag;
    using value_type = Module;
    using difference_type = std::ptrdiff_t;
    using pointer = Module*;
    using reference = Module&;
    explicit Iterator(std::vector<std::shared_ptr<Module>>::const_iterator it) : it_(it) {}
    Module& operator*() const { return **it_; }
    Module* operator->() const { return it_->get(); }
    Iterator& operator++() {
      ++it_;
      return *this;
    }
    Iterator operator++(int) {
      Iterator old = *this;
      ++it_;
      return old;
    }
    bool operator==(const Iterator& other) const { return it_ == other.it_; }

   private:
    std::vector<std::shared_ptr<Module>>::const_iterator it_;
  };
  Iterator begin() const { return Iterator(modules_->begin()); }
  Iterator end() const { return Iterator(modules_->end()); }

 private:
  std::shared_ptr<std::vector<std::shared_ptr<Module>>> modules_ =
      std::make_shared<std::vector<std::shared_ptr<Module>>>();
};

class ModuleDict : public Module {
 public:
  ModuleDict() = default;

  // Adds (or, for a name already there, is an error) a child; its parameters become "<name>.*".
  template <class M>
    requires std::is_base_of_v<Module, std::decay_t<M>>
  ModuleDict& insert(const std::string& name, M&& module) {
    HG_CHECK(!contains(name), "ModuleDict::insert: a module named \"", name, "\" is already in the dict");
    auto stored = std::make_shared<std::decay_t<M>>(std::forward<M>(module));
    adopt(name, stored);
    entries_->push_back({name, stored});
    return *this;
  }

  bool contains(const std::string& name) const;
  Module& operator[](const std::string& name) const;
  size_t size() const { return entries_->size(); }
  std::vector<std::string> keys() const;  // in insertion order
  const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& items() const { return *entries_; }
  Tensor forward(const Tensor& x) override;

 private:
  std::shared_ptr<std::vector<std::pair<std::string, std::shared_ptr<Module>>>> entries_ =
      std::make_shared<std::vector<std::pair<std::string, std::shared_ptr<Module>>>>();
};

// Returns its input: a placeholder where an architecture has an optional layer (a residual
// block's shortcut without a projection).
class Identity : public Module {
 public:
  Tensor forward(const Tensor& x) override { return x; }
};

}  // namespace hg::nn
