// nn::Embedding.
#include "nn/embedding.h"

#include "nn/init.h"
#include "ops/embedding.h"

namespace hg::nn {

Embedding::Embedding(int64_t num, int64_t dim) : num_embeddings(num), embedding_dim(dim) {
  HG_CHECK(num > 0 && dim > 0, "Embedding: sizes must be positive, got ", num, " and ", dim);
  weight = register_parameter("weight", empty({num, dim}));
  init::normal_(weight);
}

Tensor Embedding::forward(const Tensor& indices) { return embedding(indices, weight); }

}  // namespace hg::nn
