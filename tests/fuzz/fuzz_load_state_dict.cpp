// libFuzzer target: resuming from a checkpoint -- load_state_dict of a small model, its
// optimizer (SGD, Adam, AdamW or SGD with bf16 master weights: the first input byte) and a
// GradScaler, from a safetensors file (the rest). Every load must succeed or throw hg::Error;
// after a successful load, each part saves back exactly the keys it was given (nothing unused,
// nothing filled in with a default), the optimizer and scaler state is finite, and one training
// step runs without a sanitizer report (an accepted checkpoint must be a usable one).
#include "fuzz_support.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  hg::set_num_threads(1);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  static hg_fuzz::MemoryFile input;
  hg_fuzz::TrainingSetup setup(hg_fuzz::OptimizerKind(data[0] % hg_fuzz::kOptimizerKinds));
  std::map<std::string, hg::Tensor> model, optimizer, scaler;
  try {
    const auto state = hg::load(input.write(data + 1, size - 1));
    model = hg::state_dict::entries_under(state, "model.");
    optimizer = hg::state_dict::entries_under(state, "optimizer.");
    scaler = hg::state_dict::entries_under(state, "scaler.");
    setup.model.load_state_dict(model);
    setup.optimizer->load_state_dict(optimizer);
    setup.scaler.load_state_dict(scaler);
  } catch (const hg::Error&) {
    return 0;
  }
  hg_fuzz::require_same_keys(model, setup.model.state_dict());
  hg_fuzz::require_same_keys(optimizer, setup.optimizer->state_dict());
  hg_fuzz::require_same_keys(scaler, setup.scaler.state_dict());
  hg_fuzz::require_finite(setup.optimizer->state_dict());
  hg_fuzz::require_finite(setup.scaler.state_dict());
  try {
    setup.step();
  } catch (const hg::Error&) {
    // e.g. the stuck detector on a checkpoint whose skip count is at its limit: an error, fine.
  }
  return 0;
}
