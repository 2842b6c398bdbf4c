// What the fuzz targets (tests/fuzz/fuzz_*.cpp), their seed generator (make_seeds.cpp) and the
// corpus replay share: an in-memory file that the path-based loaders can open, and the model,
// optimizers and scaler whose load_state_dict is fuzzed. Header-only: each program is one file.
#pragma once
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>

#include "halfgrad.h"

namespace hg_fuzz {

// A memfd holding the input: hg::load and read_idx take paths, and /proc/self/fd/N names a
// regular file that never touches the disk (much faster than a temporary file per input).
class MemoryFile {
 public:
  MemoryFile() : fd_(::memfd_create("hg_fuzz_input", MFD_CLOEXEC)) {
    if (fd_ < 0) std::abort();
  }
  ~MemoryFile() { ::close(fd_); }
  MemoryFile(const MemoryFile&) = delete;
  MemoryFile& operator=(const MemoryFile&) = delete;

  // Replaces the contents; returns the path to open.
  const std::string& write(const uint8_t* data, size_t size) {
    if (::ftruncate(fd_, 0) != 0) std::abort();
    for (size_t done = 0; done < size;) {
      const ssize_t put = ::pwrite(fd_, data + done, size - done, off_t(done));
      if (put <= 0) std::abort();
      done += size_t(put);
    }
    return path_;
  }

 private:
  int fd_;
  std::string path_ = "/proc/self/fd/" + std::to_string(fd_);
};

// The checkpoint target's training setup. The first input byte picks the optimizer (so one
// checkpoint format per kind), the rest is a safetensors file with model., optimizer. and
// scaler. keys, as hg-train writes them.
enum class OptimizerKind : uint8_t { SGD = 0, Adam = 1, AdamW = 2, SGDMaster16 = 3 };
inline constexpr int kOptimizerKinds = 4;

struct TrainingSetup {
  hg::nn::Sequential model;
  std::unique_ptr<hg::optim::Optimizer> optimizer;
  hg::amp::GradScaler scaler{{.init_scale = 1024.0, .growth_interval = 2}};

  explicit TrainingSetup(OptimizerKind kind)
      : model((hg::manual_seed(7), hg::nn::Sequential{hg::nn::Linear(4, 3), hg::nn::ReLU(), hg::nn::Linear(3, 2)})) {
    if (kind == OptimizerKind::SGDMaster16) model.to(hg::bf16);
    const std::vector<hg::Tensor> params = model.parameters();
    switch (kind) {
      case OptimizerKind::SGD: optimizer = std::make_unique<hg::optim::SGD>(params, hg::optim::SGDOptions{.lr = 0.1, .momentum = 0.9}); break;
      case OptimizerKind::Adam: optimizer = std::make_unique<hg::optim::Adam>(params, hg::optim::AdamOptions{.lr = 0.01}); break;
      case OptimizerKind::AdamW: optimizer = std::make_unique<hg::optim::AdamW>(params, hg::optim::AdamWOptions{.lr = 0.01}); break;
      case OptimizerKind::SGDMaster16:
        optimizer = std::make_unique<hg::optim::SGD>(params, hg::optim::SGDOptions{.lr = 0.1, .momentum = 0.9, .master_weights = true});
        break;
    }
  }

  // One f16-autocast training step through the scaler (what a resumed run does first).
  void step() {
    const hg::Tensor x = hg::full({2, 4}, 0.5).to(model.parameters().front().dtype());
    const hg::Tensor y = hg::from_vector(std::vector<int64_t>{0, 1}, {2});
    optimizer->zero_grad();
    hg::Tensor loss;
    {
      hg::amp::Autocast autocast(hg::f16);
      loss = hg::cross_entropy(model(x), y);
    }
    scaler.scale(loss).backward();
    scaler.step(*optimizer);
    scaler.update();
  }

  std::map<std::string, hg::Tensor> state_dict() const {
    std::map<std::string, hg::Tensor> state;
    hg::state_dict::add_prefixed(state, "model.", model.state_dict());
    hg::state_dict::add_prefixed(state, "optimizer.", optimizer->state_dict());
    hg::state_dict::add_prefixed(state, "scaler.", scaler.state_dict());
    return state;
  }
};

// The Checkpoint target's setup: the same training parts registered in an hg::Checkpoint, as
// hg-train does, plus a learning-rate schedule and a step counter.
struct CheckpointSetup {
  TrainingSetup training;
  hg::optim::StepLR schedule;
  int64_t step = 0;
  hg::Checkpoint checkpoint;

  explicit CheckpointSetup(OptimizerKind kind) : training(kind), schedule(*training.optimizer, 3, 0.5) {
    checkpoint.add("model", training.model).add("optimizer", *training.optimizer).add("scaler", training.scaler)
        .add("schedule", schedule).add("step", step);
  }
  void train_step() {
    training.step();
    schedule.step();
    ++step;
  }
};

// The oracles a successful load must satisfy; a violation aborts (a finding).
// Every floating value the loaded state holds is finite: inf/NaN state trains NaN in silence.
inline void require_finite(const std::map<std::string, hg::Tensor>& state) {
  for (const auto& [key, t] : state)
    if (hg::state_dict::nonfinite_count(t) != 0) std::abort();
}
// The object saves back exactly the keys it was given: none unused, none defaulted.
inline void require_same_keys(const std::map<std::string, hg::Tensor>& given,
                              const std::map<std::string, hg::Tensor>& saved) {
  if (given.size() != saved.size()) std::abort();
  for (auto a = given.begin(), b = saved.begin(); a != given.end(); ++a, ++b)
    if (a->first != b->first) std::abort();
}

}  // namespace hg_fuzz
