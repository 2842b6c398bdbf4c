// The dropout kernel: out[i] = keep(i) ? in[i] / (1 - p) : 0 for contiguous `in`, with
// keep(i) = Philox uniform(seed, offset + i) >= p -- on the CPU and on a GPU the same mask, bit for
// bit. The forward (in = x) and the backward (in = g) call it with the same stream, so the mask
// is recomputed, never stored.
#pragma once
#include "core/rng.h"
#include "core/tensor.h"

namespace hg::kernels {

Tensor dropout_masked(const Tensor& in, double p, random::GeneratorState stream);

}  // namespace hg::kernels
