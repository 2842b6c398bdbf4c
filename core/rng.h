// Random tensors and the default generator. The generator is (seed, offset): every random op
// reserves as many counters as it has elements, and element i is Philox(seed, offset + i) --
// the same numbers on CPU and CUDA, for any thread count. manual_seed resets both.
//
//   hg::manual_seed(0);
//   hg::Tensor w = hg::randn({256, 784});      // reproducible
#pragma once
#include <cstdint>

#include "core/tensor.h"

namespace hg {

void manual_seed(uint64_t seed);
Tensor rand(Shape shape, TensorOptions options = {});    // uniform in [0, 1)
Tensor randn(Shape shape, TensorOptions options = {});   // standard normal
Tensor randint(int64_t low, int64_t high, Shape shape, TensorOptions options = {});  // [low, high)

namespace random {
struct GeneratorState {
  uint64_t seed = 0;
  uint64_t offset = 0;
};
GeneratorState get_state();              // for checkpoints
void set_state(GeneratorState state);
// Reserves `count` counters from the default generator; returns where they start.
GeneratorState reserve(uint64_t count);
}  // namespace random

}  // namespace hg
