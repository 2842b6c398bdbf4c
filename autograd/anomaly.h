// Anomaly mode (docs/testing.md scenario 29), with LibTorch's names: while it is on, every op that
// records itself remembers where it was created (the native call stack), and backward checks the
// gradients each op returns; the first NaN is an hg::Error naming the op, the input whose
// gradient went bad, and the stack of the forward call that created the op.
//
//   { hg::autograd::DetectAnomalyGuard detect;     // debugging only: it is slow
//     loss = model(x); loss.backward(); }          // throws at the op whose backward made NaN
//
// Off by default. Off, it costs one relaxed atomic load per recorded op and one per backward.
// Stack frames are named for code in shared libraries (libhalfgrad.so); functions of an
// executable are named only when it is linked with -rdynamic, otherwise shown as addresses
// (`addr2line -e <program> <address>` names them).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace hg::autograd {

struct AnomalyMode {
  static bool is_enabled();
  static void set_enabled(bool enabled);
};

// Turns anomaly mode on for its lifetime and restores the previous setting on exit.
class DetectAnomalyGuard {
 public:
  DetectAnomalyGuard() : previous_(AnomalyMode::is_enabled()) { AnomalyMode::set_enabled(true); }
  ~DetectAnomalyGuard() { AnomalyMode::set_enabled(previous_); }
  DetectAnomalyGuard(const DetectAnomalyGuard&) = delete;
  DetectAnomalyGuard& operator=(const DetectAnomalyGuard&) = delete;

 private:
  bool previous_;
};

namespace detail {

// Where an op was created: the return addresses on the stack when it recorded itself, and its
// number among the ops recorded while anomaly mode was on.
struct CreationTrace {
  std::vector<void*> frames;
  uint64_t sequence = 0;
  std::string describe() const;  // one line per frame, function names demangled where known
};

std::shared_ptr<const CreationTrace> capture_creation_trace();

// Throws the anomaly error if a gradient returned by the backward of `op` holds NaN.
void check_gradients(const std::string& op, const std::vector<Tensor>& gradients, const CreationTrace* trace);

}  // namespace detail
}  // namespace hg::autograd
