// safetensors files (the Hugging Face format PyTorch users share weights in): an 8-byte
// little-endian header length N, N bytes of JSON naming each tensor's dtype, shape and byte range,
// then the raw little-endian data.
//
//   hg::save("model.safetensors", {{"fc.weight", w}, {"fc.bias", b}});
//   std::map<std::string, hg::Tensor> tensors = hg::load("model.safetensors");
//
// Loading treats the file as hostile: every rule of the format is checked, with checked
// arithmetic, before anything is allocated from a size the file claims. Saving is atomic (a
// temporary file in the same directory, fsync, rename): a crash mid-save leaves the old file.
#pragma once
#include <map>
#include <string>

#include "core/tensor.h"

namespace hg {

using Metadata = std::map<std::string, std::string>;

void save(const std::string& path, const std::map<std::string, Tensor>& tensors, const Metadata& metadata = {});
std::map<std::string, Tensor> load(const std::string& path);

struct SafetensorsContents {
  std::map<std::string, Tensor> tensors;
  Metadata metadata;
};
SafetensorsContents load_with_metadata(const std::string& path);

// save() writes "<path>.tmp.<pid>.<n>" and renames it over `path`; a process killed mid-save
// leaves that temporary behind. This removes the temporaries of `path` whose writing process is
// gone (never one that a running save still owns) and returns how many it removed.
int remove_stale_temporaries(const std::string& path);

// The safetensors header may not exceed this (the reference implementation's limit).
inline constexpr uint64_t kMaxSafetensorsHeader = 100'000'000;

}  // namespace hg
