// ProgressBar.
#include "train/progress.h"

#include <unistd.h>

#include <cstdio>

namespace hg_train {

bool ProgressBar::terminal() { return isatty(fileno(stdout)) != 0; }

ProgressBar::ProgressBar(std::string label, int64_t total) : label_(std::move(label)), total_(total), enabled_(terminal()) {}

void ProgressBar::update(int64_t done, double samples_per_s, double running_loss) {
  if (!enabled_) return;
  const auto now = std::chrono::steady_clock::now();
  if (done < total_ && now - last_draw_ < std::chrono::milliseconds(100)) return;
  last_draw_ = now;
  constexpr int kWidth = 30;
  const int filled = total_ > 0 ? int(kWidth * done / total_) : kWidth;
  std::string bar(size_t(filled), '=');
  if (filled < kWidth) bar += '>' + std::string(size_t(kWidth - filled - 1), ' ');
  std::printf("\r%s [%s] %lld/%lld  %8.0f samples/s  loss %.4f ", label_.c_str(), bar.c_str(), (long long)done,
              (long long)total_, samples_per_s, running_loss);
  std::fflush(stdout);
}

void ProgressBar::finish() {
  if (!enabled_) return;
  std::printf("\r%*s\r", 100, "");
  std::fflush(stdout);
}

}  // namespace hg_train
