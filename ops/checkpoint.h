// Activation checkpointing (PyTorch's torch.utils.checkpoint): trade compute for memory.
//
//   Tensor y = hg::autograd::checkpoint([&](const std::vector<Tensor>& in) { return block(in[0]); }, {x});
//
// The forward keeps only fn's inputs and output; the activations inside fn are freed as soon as
// it returns. The backward runs fn again (a second forward) with the random generator put back
// where the first run found it -- dropout draws the same mask -- and the autocast state the first
// run had, then backpropagates through that recomputation. The gradients are the same bits as
// without checkpointing (tests/test_checkpoint_activations.cpp).
//
// Tensors fn captures instead of taking as inputs (a module's parameters) get their gradients
// too: the recomputation's backward accumulates into them. A captured tensor that is itself the
// output of other ops (not a leaf) must be passed as an input instead: the recomputation's
// backward stops at fn's inputs. fn must compute the same thing both times (no state it changes,
// e.g. BatchNorm's running statistics would be updated twice).
#pragma once
#include <functional>
#include <vector>

#include "core/tensor.h"

namespace hg::autograd {

Tensor checkpoint(const std::function<Tensor(const std::vector<Tensor>&)>& fn, const std::vector<Tensor>& inputs);

}  // namespace hg::autograd
