// Anomaly mode (see anomaly.h). Stacks come from glibc's backtrace(); names from
// backtrace_symbols(), demangled with the C++ ABI's demangler.
#include "autograd/anomaly.h"

#include <cxxabi.h>
#include <execinfo.h>

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <sstream>

#include "kernels/reduce.h"

namespace hg::autograd {

namespace {
std::atomic<bool> g_enabled{false};
std::atomic<uint64_t> g_sequence{0};
constexpr int kMaxFrames = 32;
constexpr int kSkippedFrames = 2;  // capture_creation_trace and record themselves

// "lib.so(_ZN2hg4reluERKNS_6TensorE+0x2c) [0x7f..]" -> "lib.so: hg::relu(hg::Tensor const&)+0x2c [0x7f..]"
std::string demangle_frame(const std::string& line) {
  const size_t open = line.find('('), plus = line.find('+', open), close = line.find(')', open);
  if (open == std::string::npos || plus == std::string::npos || close == std::string::npos || plus == open + 1)
    return line;
  const std::string mangled = line.substr(open + 1, plus - open - 1);
  int status = 0;
  char* name = abi::__cxa_demangle(mangled.c_str(), nullptr, nullptr, &status);
  const std::string function = status == 0 && name != nullptr ? name : mangled;
  std::free(name);
  return line.substr(0, open) + ": " + function + line.substr(plus, close - plus) + line.substr(close + 1);
}

}  // namespace

bool AnomalyMode::is_enabled() { return g_enabled.load(std::memory_order_relaxed); }
void AnomalyMode::set_enabled(bool enabled) { g_enabled.store(enabled, std::memory_order_relaxed); }

namespace detail {

std::shared_ptr<const CreationTrace> capture_creation_trace() {
  auto trace = std::make_shared<CreationTrace>();
  void* frames[kMaxFrames + kSkippedFrames];
  const int n = ::backtrace(frames, kMaxFrames + kSkippedFrames);
  for (int i = kSkippedFrames; i < n; ++i) trace->frames.push_back(frames[i]);
  trace->sequence = g_sequence.fetch_add(1, std::memory_order_relaxed) + 1;
  return trace;
}

std::string CreationTrace::describe() const {
  std::ostringstream out;
  char** names = ::backtrace_symbols(frames.data(), int(frames.size()));
  for (size_t i = 0; i < frames.size(); ++i)
    out << "  #" << i << ' ' << (names != nullptr ? demangle_frame(names[i]) : "?") << '\n';
  std::free(names);
  return out.str();
}

void check_gradients(const std::string& op, const std::vector<Tensor>& gradients, const CreationTrace* trace) {
  for (size_t i = 0; i < gradients.size(); ++i) {
    if (!kernels::has_nan(gradients[i])) continue;
    std::ostringstream where;
    if (trace != nullptr)
      where << "The forward op '" << op << "' (op #" << trace->sequence
            << " recorded in anomaly mode) was created at:\n" << trace->describe();
    else
      where << "The forward op '" << op << "' was recorded while anomaly mode was off, so where it was created "
            << "is unknown: enable anomaly mode before the forward pass to see it.";
    HG_FAIL("anomaly mode: the backward of '", op, "' returned NaN in the gradient for its input ", i, " (shape ",
            gradients[i].shape(), ", ", gradients[i].dtype(), "). ", where.str());
  }
}

}  // namespace detail
}  // namespace hg::autograd
