// softmax and log_softmax: checks, autocast, the kernels of kernels/softmax.h and the autograd
// node of each.
#include "ops/softmax.h"

#include "amp/autocast.h"
#include "autograd/node.h"
#include "kernels/softmax.h"
#include "ops/record.h"

namespace hg {


namespace {

Tensor softmax_op(amp::Op op_id, const Tensor& input, int dim, bool log) {
  const std::string name(amp::op_name(op_id));
  auto [x] = amp::prepare(op_id, input);
  HG_CHECK(is_floating(x.dtype()), name, ": expected a floating tensor, got ", x.dtype());
  const int d = normalize_dim(dim, x.dim(), name);
  Tensor out = kernels::softmax(x.contiguous(), d, log);
  record(op_id, out, {x}, [sy = SavedTensor(out), d, log](const Tensor& g) -> std::vector<Tensor> {
    return {kernels::softmax_backward(sy.get(), g.contiguous(), d, log)};
  });
  return out;
}

}  // namespace

Tensor softmax(const Tensor& x, int dim) { return softmax_op(amp::Op::Softmax, x, dim, false); }
Tensor log_softmax(const Tensor& x, int dim) { return softmax_op(amp::Op::LogSoftmax, x, dim, true); }

}  // namespace hg
