// DataLoader: batches of an (Fashion-)MNIST dataset, shuffled per epoch from a seed.
//
//   hg::data::DataLoader loader(train, {.batch_size = 128, .shuffle = true, .seed = 0});
//   for (auto [x, y] : loader) { ... }   // x f32 (B, 1, 28, 28) in [0, 1], y i64 (B)
//
// Each pass over the loader is one epoch; epoch e's order is a Philox-driven permutation of
// (seed, e), the same on every machine. The position inside an epoch is part of state_dict(), so
// a training run resumed from a checkpoint sees exactly the batches it would have seen; leaving
// a loop early and iterating again likewise continues the same epoch. With num_replicas > 1 each
// rank gets a disjoint shard of that order (data/sampler.h).
#pragma once
#include <map>
#include <string>
#include <vector>

#include "data/mnist.h"
#include "data/sampler.h"

namespace hg::data {

struct DataLoaderOptions {
  int64_t batch_size = 128;
  bool shuffle = true;
  bool drop_last = false;
  uint64_t seed = 0;
  // x = (pixel / 255 - mean) / std; the defaults give [0, 1]. Training recipes normalise with
  // the training set's statistics (pixel_statistics below).
  double mean = 0.0;
  double std = 1.0;
  // Data-parallel training: this process is `rank` of `num_replicas` and sees only its shard of
  // every epoch (DistributedSampler's rules: same order on every rank, padded to equal shards).
  int64_t num_replicas = 1;
  int64_t rank = 0;
};

// The mean and standard deviation of a dataset's pixels scaled to [0, 1].
struct PixelStatistics {
  double mean, std;
};
PixelStatistics pixel_statistics(const MNIST& dataset);

struct Batch {
  Tensor x;  // f32 (B, 1, 28, 28), (values / 255 - mean) / std
  Tensor y;  // i64 (B)
};

class DataLoader {
 public:
  DataLoader(const MNIST& dataset, DataLoaderOptions options = {});

  class Iterator {
   public:
    Batch operator*() const;
    Iterator& operator++();
    bool operator!=(const Iterator& other) const { return batch_ != other.batch_; }

   private:
    friend class DataLoader;
    Iterator(DataLoader* loader, int64_t batch) : loader_(loader), batch_(batch) {}
    DataLoader* loader_;
    int64_t batch_;
  };

  Iterator begin();
  Iterator end();
  int64_t num_batches() const;
  int64_t epoch() const { return epoch_; }
  const DataLoaderOptions& options() const { return options_; }

  std::map<std::string, Tensor> state_dict() const;  // epoch and position within it
  void load_state_dict(const std::map<std::string, Tensor>& state);
  static constexpr int64_t kMaxEpoch = int64_t(1) << 31;

 private:
  DistributedSampler sampler() const;
  void prepare_epoch();
  Batch make_batch(int64_t batch) const;
  void finished_batch(int64_t batch);

  Tensor images_, labels_;
  DataLoaderOptions options_;
  int64_t samples_;             // per epoch on this rank
  std::vector<int64_t> order_;  // this epoch's sample order (this rank's shard)
  int64_t epoch_ = 0;           // the epoch in progress (or next to start)
  int64_t position_ = 0;        // batches of epoch_ already handed out
  int64_t order_epoch_ = -1;    // the epoch order_ was built for
};

}  // namespace hg::data
