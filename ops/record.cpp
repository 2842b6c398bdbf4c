// record (see record.h): the op table's name for the autograd node.
#include "ops/record.h"

#include <string>

#include "amp/op_table.h"

namespace hg {

void record(amp::Op op, Tensor& output, const std::vector<Tensor>& inputs, autograd::Node::Backward backward) {
  autograd::record(std::string(amp::op_name(op)), output, inputs, std::move(backward));
}

void record(amp::Op op, std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
            autograd::Node::MultiBackward backward) {
  autograd::record(std::string(amp::op_name(op)), outputs, inputs, std::move(backward));
}

}  // namespace hg
