// hg::data::Dataset: what a DataLoader reads -- any indexable collection of examples. Write your
// own by deriving from it:
//
//   struct Squares : hg::data::Dataset {
//     int64_t size() const override { return 100; }
//     hg::data::Example get(int64_t i) const override {
//       return {hg::full({1}, double(i)), hg::full({1}, double(i * i))};   // x, y
//     }
//   };
//   hg::data::DataLoader loader(Squares{}, {.batch_size = 10});  // batches x [10, 1], y [10, 1]
//
// get(i) may be called from several threads at once (the loader's prefetch): keep it free of
// writes to shared state. TensorDataset (data/tensor_dataset.h) wraps tensors already in memory;
// MNIST, FashionMNIST and CIFAR10 read their files.
#pragma once
#include <cstdint>
#include <optional>
#include <vector>

#include "core/tensor.h"

namespace hg::data {

// One example: an input and its target (a class index as a 0-d i64, a vector, ...).
struct Example {
  Tensor x;
  Tensor y;
};

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  virtual Example get(int64_t index) const = 0;

  // Optional: the examples at `indices` already stacked -- exactly what the default collate
  // makes of get(i) for each -- for datasets that can do it in one pass (MNIST converts its
  // bytes straight into the batch). The loader asks only when it uses neither a transform nor a
  // collate of yours; nullopt (the default) means "use get".
  virtual std::optional<Example> get_batch(const std::vector<int64_t>& indices) const;
};

// The default collate: x and y of every example stacked along a new first dimension (examples of
// one shape and dtype each; 0-d targets become a [B] tensor).
Example stack_examples(const std::vector<Example>& examples);

}  // namespace hg::data
