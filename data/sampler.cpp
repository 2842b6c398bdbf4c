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
  const int64_t n = dataset_size, r = options.num_replicas;
  num_samples_ = options.drop_last ? n / r : (n + r - 1) / r;
}

void DistributedSampler::set_epoch(int64_t epoch) {
  HG_CHECK(epoch >= 0, "DistributedSampler::set_epoch: negative epoch ", epoch);
  epoch_ = epoch;
}

std::vector<int64_t> DistributedSampler::indices() const {
  std::vector<int64_t> order = epoch_order(dataset_size_, options_.seed, epoch_, options_.shuffle);
  const auto total = size_t(total_size());
  if (order.size() > total) order.resize(total);  // drop_last: the tail goes
  // Padding: repeat the order from its start (several times over if the dataset is tiny).
  for (size_t i = 0; order.size() < total; ++i) {
    const int64_t repeat = order[i];
    order.push_back(repeat);
  }
  std::vector<int64_t> mine;
  mine.reserve(size_t(num_samples_));
  for (size_t i = size_t(options_.rank); i < total; i += size_t(options_.num_replicas)) mine.push_back(order[i]);
  return mine;
}

}  // namespace hg::data
