// DistributedSampler and the epoch order (see sampler.h).
#include "data/sampler.h"

#include <numeric>

#include "core/error.h"
#include "core/philox.h"

namespace hg::data {

std::vector<int64_t> epoch_order(int64_t n, uint64_t seed, int64_t epoch, bool shuffle) {
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), int64_t(0));
  if (!shuffle) return order;
  const uint64_t base = uint64_t(epoch) << 32;
  for (int64_t i = n - 1; i > 0; --i) {
    const int64_t j = philox::integer(seed, base, uint64_t(i), 0, i + 1);
    std::swap(order[size_t(i)], order[size_t(j)]);
  }
  return order;
}

DistributedSampler::DistributedSampler(int64_t dataset_size, DistributedSamplerOptions options)
    : dataset_size_(dataset_size), options_(options) {
  HG_CHECK(dataset_size >= 0, "DistributedSampler: negative dataset size ", dataset_size);
  HG_CHECK(options.num_replicas > 0, "DistributedSampler: num_replicas must be positive, got ", options.num_replicas);
  HG_CHECK(options.rank >= 0 && options.rank < options.num_replicas, "DistributedSampler: rank ", options.rank,
           " outside [0, ", options.num_replicas, ")");
  num_samples_ = num_samples(0);
}

void DistributedSampler::set_epoch(int64_t epoch) {
  HG_CHECK(epoch >= 0, "DistributedSampler::set_epoch: negative epoch ", epoch);
  epoch_ = epoch;
}

int64_t DistributedSampler::num_samples(int64_t from) const {
  HG_CHECK(from >= 0 && from <= dataset_size_, "DistributedSampler: position ", from, " outside an epoch of ",
           dataset_size_, " samples");
  const int64_t left = dataset_size_ - from, r = options_.num_replicas;
  return options_.drop_last ? left / r : left / r + (left % r != 0);
}

std::vector<int64_t> DistributedSampler::indices(int64_t from) const {
  const int64_t per_rank = num_samples(from), left = dataset_size_ - from;
  const std::vector<int64_t> order = epoch_order(dataset_size_, options_.seed, epoch_, options_.shuffle);
  std::vector<int64_t> mine;
  mine.reserve(size_t(per_rank));
  // Position i of the pass is order[from + i]; past the end (padding) it repeats the order from
  // its start, several times over if the dataset is tiny. NOTE: padding from the epoch's start,
  // not the pass's, keeps a resumed pass equal to the tail of the pass it continues.
  for (int64_t k = 0; k < per_rank; ++k) {
    const int64_t i = options_.rank + k * options_.num_replicas;
    mine.push_back(i < left ? order[size_t(from + i)] : order[size_t((i - left) % dataset_size_)]);
  }
  return mine;
}

}  // namespace hg::data
