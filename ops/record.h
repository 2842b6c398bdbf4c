// How a built-in op records its node: under its op-table row (amp/op_table.h), so the name that
// anomaly mode, the in-place check and ShadowCheck print is the row's, never a string of the op's
// own (a typo there would be a silently wrong name; a typo in Op::Mul does not compile):
//
//   record(amp::Op::Mul, out, {a, b}, [sa = SavedTensor(a), sb = SavedTensor(b)](const Tensor& g)
//          -> std::vector<Tensor> { return {g * sb.get(), g * sa.get()}; });
//
// Custom ops (ops/function.h) record under their Function's name.
#pragma once
#include <vector>

#include "amp/op.h"
#include "autograd/node.h"

namespace hg {

using autograd::SavedTensor;

void record(amp::Op op, Tensor& output, const std::vector<Tensor>& inputs, autograd::Node::Backward backward);
// An op with several outputs (one node, output i in slot i).
void record(amp::Op op, std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
            autograd::Node::MultiBackward backward);

}  // namespace hg
