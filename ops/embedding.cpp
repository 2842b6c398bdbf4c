// embedding: out[..., :] = weight[index, :]. An out-of-range index is an hg::Error, never a read
// outside the table: checked here for CPU tensors, by the kernel for CUDA ones (reported at the
// next synchronisation, so the call never waits for the GPU). The CPU backward adds each output
// row's gradient into the row it came from, in index order (deterministic).
#include "ops/embedding.h"

#include <cstring>

#include "amp/autocast.h"
#include "autograd/node.h"
#include "ops/cuda_ops.h"
#include "ops/elementwise.h"
#include "ops/shape.h"

namespace hg {

using autograd::record;
using autograd::SavedTensor;

Tensor embedding(const Tensor& indices, const Tensor& weight_in) {
  auto [weight] = amp::prepare(amp::Op::Embedding, weight_in);
  HG_CHECK(indices.dtype() == i64 || indices.dtype() == i32, "embedding: indices must be i64 (or i32), got ",
           indices.dtype());
  HG_CHECK(weight.dim() == 2, "embedding: weight must be 2-D (num_embeddings, dim), got ", weight.shape());
  detail::check_same_device("embedding", indices, weight);
  const int64_t num = weight.shape()[0], dim = weight.shape()[1];
  const bool on_gpu = weight.device().is_cuda();
  const std::vector<int64_t> index = on_gpu ? std::vector<int64_t>() : indices.to_vector<int64_t>();
  for (size_t i = 0; i < index.size(); ++i)
    HG_CHECK(index[i] >= 0 && index[i] < num, "embedding: index ", index[i], " at position ", i,
             " is out of range for a table of ", num, " rows");
  Shape shape = indices.shape();
  shape.push_back(dim);
  const Tensor table = weight.contiguous();
  Tensor out = empty(shape, weight.options());
  if (on_gpu) {
    cuda_ops::embedding_forward(indices.contiguous(), table, out);
    record("embedding", out, {weight}, [si = SavedTensor(indices.contiguous(), "embedding"), num, dim,
                                        options = weight.options()](const Tensor& g) -> std::vector<Tensor> {
      Tensor grad = zeros({num, dim}, options);
      cuda_ops::embedding_backward(si.get(), g.contiguous(), grad);
      return {grad};
    });
    return out;
  }
  const size_t row_bytes = size_t(dim) * element_size(weight.dtype());
  for (size_t i = 0; i < index.size(); ++i)
    std::memcpy(static_cast<char*>(out.raw_data()) + i * row_bytes,
                static_cast<const char*>(table.raw_data()) + size_t(index[i]) * row_bytes, row_bytes);
  record("embedding", out, {weight}, [index, num, dim, options = weight.options()](const Tensor& g) -> std::vector<Tensor> {
    Tensor grad = zeros({num, dim}, options);
    const Tensor rows = g.reshape({int64_t(index.size()), dim});
    for (size_t i = 0; i < index.size(); ++i) narrow(grad, 0, index[i], 1).add_(narrow(rows, 0, int64_t(i), 1));
    return {grad};
  });
  return out;
}

}  // namespace hg
