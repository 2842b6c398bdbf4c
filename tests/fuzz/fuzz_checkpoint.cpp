// libFuzzer target: resuming a whole run with hg::Checkpoint::load -- a small model, its
// optimizer (SGD, Adam, AdamW or SGD with bf16 master weights: the first input byte), a
// GradScaler, a StepLR schedule and a step counter, from a checkpoint file (the rest). The load
// must succeed or throw hg::Error, and a load that returned must have used the file completely:
// for a current-format file every key saves back (none unused, none filled in by a default),
// every floating value of the loaded state is finite, and a training step runs clean.
#include "fuzz_support.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  hg::set_num_threads(1);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  static hg_fuzz::MemoryFile input;
  hg_fuzz::CheckpointSetup setup(hg_fuzz::OptimizerKind(data[0] % hg_fuzz::kOptimizerKinds));
  const std::string& path = input.write(data + 1, size - 1);
  try {
    setup.checkpoint.load(path);
  } catch (const hg::Error&) {
    return 0;
  }
  // The load returned: the file parsed, so this cannot throw.
  const hg::SafetensorsContents file = hg::load_with_metadata(path);
  const std::map<std::string, hg::Tensor> state = setup.checkpoint.state_dict();  // what a save would write
  if (hg::Checkpoint::format_version(file, path) == hg::Checkpoint::kFormatVersion)
    hg_fuzz::require_same_keys(file.tensors, state);
  hg_fuzz::require_finite(state);
  try {
    setup.train_step();
  } catch (const hg::Error&) {
    // e.g. the stuck detector on a checkpoint whose skip count is at its limit: an error, fine.
  }
  return 0;
}
