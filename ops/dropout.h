// dropout: in training, zeroes each element with probability p and scales the rest by 1/(1-p).
// The mask comes from the Philox stream (element i keeps iff uniform(seed, offset + i) >= p), so
// it is reproducible under manual_seed and is recomputed in backward instead of being stored.
#pragma once
#include "core/tensor.h"

namespace hg {

Tensor dropout(const Tensor& x, double p, bool training);

}  // namespace hg
