// Grad mode: a thread-local switch that decides whether ops record themselves for backward.
//
//   { hg::NoGradGuard no_grad;  auto y = model(x); }   // inference: no graph, no saved tensors
#pragma once

namespace hg {

struct GradMode {
  static bool is_enabled();
  static void set_enabled(bool enabled);
};

// Turns recording off for its lifetime and restores the previous mode on exit (also on throw).
class NoGradGuard {
 public:
  NoGradGuard() : previous_(GradMode::is_enabled()) { GradMode::set_enabled(false); }
  ~NoGradGuard() { GradMode::set_enabled(previous_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

namespace autograd {
// How many backward passes this thread is running (0 outside backward). An autocast region
// applies only at the depth it was opened at, so the ops inside a backward are never re-cast by
// the region that surrounded the forward (PyTorch: backward runs in the forward's dtypes).
int backward_depth();

class BackwardScope {
 public:
  BackwardScope();
  ~BackwardScope();
  BackwardScope(const BackwardScope&) = delete;
  BackwardScope& operator=(const BackwardScope&) = delete;
};
}  // namespace autograd

}  // namespace hg
