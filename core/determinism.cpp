// The deterministic-mode switch (see determinism.h).
#include "core/determinism.h"

#include <atomic>

#include "core/error.h"

namespace hg {

namespace {
std::atomic<bool> g_deterministic{false};
}

void use_deterministic_algorithms(bool enabled) { g_deterministic.store(enabled); }
bool are_deterministic_algorithms_enabled() { return g_deterministic.load(); }

namespace detail {
void alert_nondeterministic(std::string_view op) {
  HG_CHECK(!g_deterministic.load(), op, " has no deterministic implementation, but "
           "hg::use_deterministic_algorithms(true) is set; turn it off for this op or run it on the CPU");
}
}  // namespace detail

}  // namespace hg
