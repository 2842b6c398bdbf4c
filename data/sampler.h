// DistributedSampler: which samples each rank trains on in an epoch (PyTorch's
// DistributedSampler, same rules). Every rank draws the same shuffled order (same seed, same
// epoch), pads it to a multiple of num_replicas by repeating its first samples (or, with
// drop_last, drops the tail), and takes every num_replicas-th sample starting at its rank. So the
// shards are disjoint (but for the few padded repeats), equally long, and together cover the epoch.
//
//   hg::data::DistributedSampler sampler(60000, {.num_replicas = pg->world_size(), .rank = pg->rank()});
//   sampler.set_epoch(epoch);                    // a new order each epoch, the same on every rank
//   for (int64_t i : sampler.indices()) ...      // this rank's samples
//
// DataLoader does this itself when given .num_replicas and .rank.
#pragma once
#include <cstdint>
#include <vector>

namespace hg::data {

struct DistributedSamplerOptions {
  int64_t num_replicas = 1;
  int64_t rank = 0;
  bool shuffle = true;
  uint64_t seed = 0;
  bool drop_last = false;  // drop the tail instead of padding when the size does not divide evenly
};

class DistributedSampler {
 public:
  DistributedSampler(int64_t dataset_size, DistributedSamplerOptions options = {});

  void set_epoch(int64_t epoch);
  int64_t epoch() const { return epoch_; }
  std::vector<int64_t> indices() const { return indices(0); }  // this rank's samples for the epoch, in order
  int64_t num_samples() const { return num_samples_; }  // per rank
  int64_t total_size() const { return num_samples_ * options_.num_replicas; }

  // The rest of the epoch from global position `from` of its order (the samples before it were
  // trained on): this rank's share of order[from..n), padded to equal shares with the order's
  // first samples. A pass that starts where another stopped, with another num_replicas or batch
  // size, covers exactly the samples the other had not reached (a DataLoader resumed from a
  // checkpoint). from = 0 is indices().
  std::vector<int64_t> indices(int64_t from) const;
  int64_t num_samples(int64_t from) const;  // per rank, from `from` on

 private:
  int64_t dataset_size_;
  DistributedSamplerOptions options_;
  int64_t num_samples_;
  int64_t epoch_ = 0;
};

// The sample order of an epoch: 0..n-1, shuffled (Fisher-Yates, the j-th draw from
// Philox(seed, counter = epoch * 2^32 + j)) when `shuffle`. The same on every machine.
std::vector<int64_t> epoch_order(int64_t n, uint64_t seed, int64_t epoch, bool shuffle);

}  // namespace hg::data
