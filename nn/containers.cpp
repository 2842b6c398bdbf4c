// ModuleList and ModuleDict (see containers.h).
#include "nn/containers.h"

namespace hg::nn {

Module& ModuleList::operator[](size_t i) const {
  HG_CHECK(i < modules_->size(), "ModuleList: index ", i, " out of range for a list of ", modules_->size(), " modules");
  return *(*modules_)[i];
}

Tensor ModuleList::forward(const Tensor&) {
  HG_FAIL("ModuleList: a list of modules is not called; iterate over it (for (hg::nn::Module& m : list) x = m(x))");
}

bool ModuleDict::contains(const std::string& name) const {
  for (const auto& [key, _] : *entries_)
    if (key == name) return true;
  return false;
}

Module& ModuleDict::operator[](const std::string& name) const {
  for (const auto& [key, module] : *entries_)
    if (key == name) return *module;
  HG_FAIL("ModuleDict: no module named \"", name, "\" (", entries_->size(), " modules)");
}

std::vector<std::string> ModuleDict::keys() const {
  std::vector<std::string> out;
  for (const auto& [key, _] : *entries_) out.push_back(key);
  return out;
}

Tensor ModuleDict::forward(const Tensor&) {
  HG_FAIL("ModuleDict: a dict of modules is not called; call its modules (dict[\"name\"](x))");
}

}  // namespace hg::nn
