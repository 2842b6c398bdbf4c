// libFuzzer target: loading a safetensors file (core/safetensors.h). Any input must load or
// throw hg::Error, never allocate what a header merely claims, and a file that loads must
// survive a save/load round trip bit for bit.
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "fuzz_support.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  hg::set_num_threads(1);  // deterministic and cheap per input
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static hg_fuzz::MemoryFile input;
  hg::SafetensorsContents first;
  try {
    first = hg::load_with_metadata(input.write(data, size));
  } catch (const hg::Error&) {
    return 0;
  }
  // save() writes a temporary next to its path, fsyncs and renames it: a real directory is
  // needed, and /dev/shm (memory) keeps that fast.
  static const std::string path =
      std::string(std::filesystem::is_directory("/dev/shm") ? "/dev/shm" : "/tmp") + "/hg_fuzz_safetensors." +
      std::to_string(::getpid());
  hg::save(path, first.tensors, first.metadata);
  const hg::SafetensorsContents second = hg::load_with_metadata(path);
  if (second.metadata != first.metadata || second.tensors.size() != first.tensors.size()) std::abort();
  for (const auto& [name, t] : first.tensors) {
    const hg::Tensor& u = second.tensors.at(name);
    const size_t bytes = size_t(t.numel()) * hg::element_size(t.dtype());
    if (u.dtype() != t.dtype() || u.shape() != t.shape() ||
        (bytes > 0 && std::memcmp(u.raw_data(), t.raw_data(), bytes) != 0))
      std::abort();
  }
  return 0;
}
