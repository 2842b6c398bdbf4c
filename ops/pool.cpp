// max_pool2d and avg_pool2d (no padding): checks, autocast, the kernels of kernels/pool.h and
// one autograd node each. max_pool2d saves only the u8 window index of each maximum.
#include "ops/pool.h"

#include "amp/autocast.h"
#include "autograd/node.h"
#include "kernels/pool.h"
#include "ops/record.h"

namespace hg {


namespace {

void check_pool(const char* op, const Tensor& x, int kernel, int stride) {
  HG_CHECK(x.dim() == 4, op, ": input must be 4-D (N, C, H, W), got ", x.shape());
  HG_CHECK(is_floating(x.dtype()), op, ": expected a floating tensor, got ", x.dtype());
  HG_CHECK(kernel >= 1 && stride >= 1, op, ": kernel and stride must be >= 1, got ", kernel, " and ", stride);
  HG_CHECK(kernel <= 16, op, ": kernels larger than 16x16 are not supported (got ", kernel, ")");
  const int64_t H = x.shape()[2], W = x.shape()[3];
  HG_CHECK(H >= kernel && W >= kernel, op, ": input ", H, "x", W, " is smaller than the ", kernel, "x", kernel, " window");
}

}  // namespace

Tensor max_pool2d(const Tensor& input, int kernel, int stride) {
  auto [x0] = amp::prepare(amp::Op::MaxPool2d, input);
  check_pool("max_pool2d", x0, kernel, stride);
  const Tensor x = x0.contiguous();
  auto [out, where] = kernels::max_pool2d(x, kernel, stride);
  record(amp::Op::MaxPool2d, out, {x}, [sw = SavedTensor(where), shape = x.shape(), kernel, stride](const Tensor& grad)
         -> std::vector<Tensor> { return {kernels::max_pool2d_backward(grad.contiguous(), sw.get(), shape, kernel, stride)}; });
  return out;
}

Tensor avg_pool2d(const Tensor& input, int kernel, int stride) {
  auto [x0] = amp::prepare(amp::Op::AvgPool2d, input);
  check_pool("avg_pool2d", x0, kernel, stride);
  const Tensor x = x0.contiguous();
  Tensor out = kernels::avg_pool2d(x, kernel, stride);
  record(amp::Op::AvgPool2d, out, {x}, [shape = x.shape(), kernel, stride](const Tensor& grad) -> std::vector<Tensor> {
    return {kernels::avg_pool2d_backward(grad.contiguous(), shape, kernel, stride)};
  });
  return out;
}

}  // namespace hg
