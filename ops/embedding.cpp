// embedding: out[..., :] = weight[index, :] -- checks, autocast, the kernels of
// kernels/embedding.h (which check the indices) and one autograd node.
#include "ops/embedding.h"

#include "amp/autocast.h"
#include "autograd/node.h"
#include "kernels/embedding.h"
#include "ops/elementwise.h"
#include "ops/record.h"

namespace hg {


Tensor embedding(const Tensor& indices, const Tensor& weight_in) {
  auto [weight] = amp::prepare(amp::Op::Embedding, weight_in);
  HG_CHECK(indices.dtype() == i64 || indices.dtype() == i32, "embedding: indices must be i64 (or i32), got ",
           indices.dtype());
  HG_CHECK(weight.dim() == 2, "embedding: weight must be 2-D (num_embeddings, dim), got ", weight.shape());
  detail::check_same_device("embedding", indices, weight);
  const int64_t num = weight.shape()[0], dim = weight.shape()[1];
  Shape shape = indices.shape();
  shape.push_back(dim);
  const Tensor index = indices.contiguous();
  Tensor out = empty(shape, weight.options());
  kernels::embedding_forward(index, weight.contiguous(), out);
  record(amp::Op::Embedding, out, {weight}, [si = SavedTensor(index), num, dim,
                                      options = weight.options()](const Tensor& g) -> std::vector<Tensor> {
    Tensor grad = zeros({num, dim}, options);
    kernels::embedding_backward(si.get(), g.to(options.dtype).contiguous(), grad);
    return {grad};
  });
  return out;
}

}  // namespace hg
