// libFuzzer target: resuming from a checkpoint -- load_state_dict of a small model, its
// optimizer (SGD, Adam, AdamW or SGD with bf16 master weights: the first input byte) and a
// GradScaler, from a safetensors file (the rest). Every load must succeed or throw hg::Error;
// after a successful load, one training step must run without a sanitizer report (an accepted
// checkpoint must be a usable one).
#include "fuzz_support.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  hg::set_num_threads(1);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  static hg_fuzz::MemoryFile input;
  hg_fuzz::TrainingSetup setup(hg_fuzz::OptimizerKind(data[0] % hg_fuzz::kOptimizerKinds));
  try {
    const auto state = hg::load(input.write(data + 1, size - 1));
    setup.model.load_state_dict(hg::state_dict::entries_under(state, "model."));
    setup.optimizer->load_state_dict(hg::state_dict::entries_under(state, "optimizer."));
    setup.scaler.load_state_dict(hg::state_dict::entries_under(state, "scaler."));
  } catch (const hg::Error&) {
    return 0;
  }
  try {
    setup.step();
  } catch (const hg::Error&) {
    // e.g. the stuck detector on a checkpoint whose skip count is at its limit: an error, fine.
  }
  return 0;
}
