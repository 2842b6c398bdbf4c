// Saving and loading a module's state dict as safetensors, with PyTorch's parameter names: a
// file written here loads into the same architecture in torch (and the reverse).
//
//   hg::nn::save(model, "model.safetensors");
//   hg::nn::load(model, "model.safetensors");   // strict: names, shapes and dtypes must match
#pragma once
#include <string>

#include "nn/module.h"

namespace hg::nn {

void save(const Module& module, const std::string& path);
void load(Module& module, const std::string& path);

}  // namespace hg::nn
