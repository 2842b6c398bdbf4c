// TensorDataset: tensors already in memory as a dataset -- example i is (x[i], y[i]), PyTorch's
// torch.utils.data.TensorDataset with two tensors.
//
//   const hg::Tensor x = hg::randn({1000, 20}), y = hg::randint(0, 3, {1000}, {.dtype = hg::i64});
//   hg::data::DataLoader loader(hg::data::TensorDataset(x, y), {.batch_size = 32});
//
// The examples are views of the tensors (no copy); the tensors must share their first dimension.
#pragma once
#include "data/dataset.h"

namespace hg::data {

class TensorDataset : public Dataset {
 public:
  TensorDataset(Tensor x, Tensor y);
  int64_t size() const override { return x_.shape()[0]; }
  Example get(int64_t index) const override;
  std::optional<Example> get_batch(const std::vector<int64_t>& indices) const override;

  const Tensor& x() const { return x_; }
  const Tensor& y() const { return y_; }

 private:
  Tensor x_, y_;
};

}  // namespace hg::data
