// TensorDataset (see tensor_dataset.h), and the Dataset defaults.
#include "data/tensor_dataset.h"

#include <algorithm>
#include <cstring>

#include "autograd/grad_mode.h"
#include "ops/shape.h"

namespace hg::data {

namespace {

// The rows of t (dim 0) at `indices`, stacked: one memcpy per row for a CPU tensor.
Tensor rows_at(const Tensor& t, const std::vector<int64_t>& indices) {
  Shape shape = t.shape();
  shape[0] = int64_t(indices.size());
  if (!t.device().is_cpu()) {
    NoGradGuard no_grad;
    std::vector<Tensor> rows;
    for (int64_t i : indices) rows.push_back(narrow(t, 0, i, 1));
    return cat(rows, 0);
  }
  const Tensor src = t.contiguous();
  Tensor out = empty(shape, {.dtype = t.dtype()});
  const size_t row_bytes = size_t(src.numel() / std::max<int64_t>(src.shape()[0], 1)) * element_size(t.dtype());
  const auto* from = static_cast<const uint8_t*>(src.raw_data());
  auto* to = static_cast<uint8_t*>(out.raw_data());
  for (size_t k = 0; k < indices.size(); ++k) std::memcpy(to + k * row_bytes, from + size_t(indices[k]) * row_bytes, row_bytes);
  return out;
}

}  // namespace

std::optional<Example> Dataset::get_batch(const std::vector<int64_t>&) const { return std::nullopt; }

Example stack_examples(const std::vector<Example>& examples) {
  HG_CHECK(!examples.empty(), "DataLoader: a batch of no examples");
  std::vector<Tensor> xs, ys;
  for (const Example& e : examples) {
    HG_CHECK(e.x.defined() && e.y.defined(), "DataLoader: an example without x or y (Dataset::get must set both)");
    HG_CHECK(e.x.shape() == examples[0].x.shape() && e.x.dtype() == examples[0].x.dtype(),
             "DataLoader: examples of different shapes or dtypes cannot be stacked (x ", examples[0].x.shape(), " ",
             examples[0].x.dtype(), " and ", e.x.shape(), " ", e.x.dtype(), "); pad them, or pass a collate of your own");
    HG_CHECK(e.y.shape() == examples[0].y.shape() && e.y.dtype() == examples[0].y.dtype(),
             "DataLoader: targets of different shapes or dtypes cannot be stacked (y ", examples[0].y.shape(), " ",
             examples[0].y.dtype(), " and ", e.y.shape(), " ", e.y.dtype(), "); pass a collate of your own");
    xs.push_back(e.x);
    ys.push_back(e.y);
  }
  NoGradGuard no_grad;  // data, not part of a graph
  return {stack(xs, 0), stack(ys, 0)};
}

TensorDataset::TensorDataset(Tensor x, Tensor y) : x_(std::move(x)), y_(std::move(y)) {
  HG_CHECK(x_.defined() && y_.defined(), "TensorDataset: needs two defined tensors");
  HG_CHECK(x_.dim() >= 1 && y_.dim() >= 1 && x_.shape()[0] == y_.shape()[0], "TensorDataset: x and y must share their "
           "first dimension (one example each), got x ", x_.shape(), " and y ", y_.shape());
  x_ = x_.detach();
  y_ = y_.detach();
}

Example TensorDataset::get(int64_t index) const {
  HG_CHECK(index >= 0 && index < size(), "TensorDataset::get: index ", index, " outside [0, ", size(), ")");
  return {squeeze(narrow(x_, 0, index, 1), 0), squeeze(narrow(y_, 0, index, 1), 0)};
}

std::optional<Example> TensorDataset::get_batch(const std::vector<int64_t>& indices) const {
  for (int64_t i : indices)
    HG_CHECK(i >= 0 && i < size(), "TensorDataset::get_batch: index ", i, " outside [0, ", size(), ")");
  return Example{rows_at(x_, indices), rows_at(y_, indices)};
}

}  // namespace hg::data
