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

}  // namespace hg
