// nn::Embedding: a lookup table of `num_embeddings` rows of size `embedding_dim`, initialised
// N(0, 1) like PyTorch; input is i64 (or i32) indices of any shape.
#pragma once
#include "nn/module.h"

namespace hg::nn {

class Embedding : public Module {
 public:
  Embedding(int64_t num_embeddings, int64_t embedding_dim);
  Tensor forward(const Tensor& indices) override;

  int64_t num_embeddings, embedding_dim;
  Tensor weight;  // (num_embeddings, embedding_dim)
};

}  // namespace hg::nn
