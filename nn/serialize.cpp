// nn::save / nn::load.
#include "nn/serialize.h"

#include "core/safetensors.h"

namespace hg::nn {

void save(const Module& module, const std::string& path) { hg::save(path, module.state_dict(), {{"format", "pt"}}); }

void load(Module& module, const std::string& path) { module.load_state_dict(hg::load(path), true); }

}  // namespace hg::nn
