// Deterministic mode, PyTorch's use_deterministic_algorithms: when on, an op whose only kernel is
// nondeterministic (floating-point atomics: the summation order changes from run to run) throws
// instead of running. Every CPU kernel of halfgrad is deterministic (reductions use fixed chunk
// boundaries). On CUDA the embedding backward (atomicAdd) refuses, and conv2d's backward only
// picks deterministic cuDNN algorithms (refusing if there is none for the shape).
//
//   hg::use_deterministic_algorithms(true);
#pragma once
#include <string_view>

namespace hg {

void use_deterministic_algorithms(bool enabled);
bool are_deterministic_algorithms_enabled();

namespace detail {
// Throws hg::Error naming `op` when deterministic mode is on.
void alert_nondeterministic(std::string_view op);
}  // namespace detail

}  // namespace hg
