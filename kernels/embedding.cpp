#include "kernels/embedding.h"

#include <cstring>

#include "kernels/cuda/cuda_kernels.h"

namespace hg::kernels {

namespace {
std::vector<int64_t> checked_indices(const Tensor& indices, int64_t num) {
  const std::vector<int64_t> index = indices.to_vector<int64_t>();
  for (size_t i = 0; i < index.size(); ++i)
    HG_CHECK(index[i] >= 0 && index[i] < num, "embedding: index ", index[i], " at position ", i,
             " is out of range for a table of ", num, " rows");
  return index;
}
}  // namespace

void embedding_forward(const Tensor& indices, const Tensor& table, const Tensor& out) {
  if (table.device().is_cuda()) return kernels::cuda::embedding_forward(indices, table, out);
  const std::vector<int64_t> index = checked_indices(indices, table.shape()[0]);
  const size_t row_bytes = size_t(table.shape()[1]) * element_size(table.dtype());
  if (row_bytes == 0) return;  // empty rows (index_select of a [n, 0] table): nothing to copy, no memcpy of null
  for (size_t i = 0; i < index.size(); ++i)
    std::memcpy(static_cast<char*>(out.raw_data()) + i * row_bytes,
                static_cast<const char*>(table.raw_data()) + size_t(index[i]) * row_bytes, row_bytes);
}

void embedding_backward(const Tensor& indices, const Tensor& g, const Tensor& grad) {
  if (grad.device().is_cuda()) return kernels::cuda::embedding_backward(indices, g, grad);
  const std::vector<int64_t> index = indices.to_vector<int64_t>();  // (checked by the forward)
  const int64_t dim = grad.shape()[1];
  visit_floating(grad.dtype(), "embedding", [&]<class T> {
    const T* rows = g.data_ptr<T>();
    T* out = grad.data_ptr<T>();
    for (size_t i = 0; i < index.size(); ++i)  // each sum rounded to T, as an in-place add would
      for (int64_t j = 0; j < dim; ++j)
        out[index[i] * dim + j] = T(Acc<T>(out[index[i] * dim + j]) + Acc<T>(rows[int64_t(i) * dim + j]));
  });
}

}  // namespace hg::kernels
