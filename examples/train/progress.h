// A one-line progress bar for a terminal: redrawn in place with '\r' at most 10 times a second,
// and silent when stdout is not a terminal (logs and CI stay clean). No dependency: Debian has
// no C++ progress-bar package.
#pragma once
#include <chrono>
#include <cstdint>
#include <string>

namespace hg_train {

class ProgressBar {
 public:
  ProgressBar(std::string label, int64_t total);
  void update(int64_t done, double samples_per_s, double running_loss);
  void finish();  // erases the bar
  static bool terminal();

 private:
  std::string label_;
  int64_t total_;
  bool enabled_;
  std::chrono::steady_clock::time_point last_draw_{};
};

}  // namespace hg_train
