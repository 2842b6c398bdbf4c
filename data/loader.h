// DataLoader: batches of any dataset (data/dataset.h), shuffled per epoch from a seed.
//
//   hg::data::DataLoader loader(train, {.batch_size = 128, .shuffle = true, .seed = 0});
//   for (auto [x, y] : loader) { ... }   // MNIST: x f32 (B, 1, 28, 28) in [0, 1], y i64 (B)
//
// A batch is the examples stacked along a new first dimension (data::stack_examples), or what
// your `.collate` makes of them; `.transform` (data/transforms.h) runs on each example's x
// first, with the example's own random stream. `.mean`/`.std` then normalise the batch's x:
// (x - mean) / std. A dataset passed as an lvalue must outlive the loader (it is held by
// reference); a temporary (DataLoader(TensorDataset(x, y))) is moved into the loader.
//
// Each pass over the loader is one epoch; epoch e's order is a Philox-driven permutation of
// (seed, e), the same on every machine. The position inside an epoch is part of state_dict(), so
// a training run resumed from a checkpoint sees exactly the batches it would have seen; leaving
// a loop early and iterating again likewise continues the same epoch. With num_replicas > 1 each
// rank gets a disjoint shard of that order (data/sampler.h).
//
// The position is saved as a sample index into the epoch's order (every rank's batches
// together), not as a batch count: a loader with another batch size or number of replicas that
// loads it continues with exactly the samples the saved one had not reached.
#pragma once
#include <concepts>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "data/dataset.h"
#include "data/mnist.h"
#include "data/sampler.h"
#include "data/transforms.h"

namespace hg::data {

struct DataLoaderOptions {
  int64_t batch_size = 128;
  bool shuffle = true;
  bool drop_last = false;
  uint64_t seed = 0;
  // The batch's x becomes (x - mean) / std (the defaults leave it as it is: MNIST's and CIFAR10's
  // pixels / 255, in [0, 1]). Training recipes normalise with the training set's statistics
  // (pixel_statistics below), or per channel with the Normalize transform.
  double mean = 0.0;
  double std = 1.0;
  // Data-parallel training: this process is `rank` of `num_replicas` and sees only its shard of
  // every epoch (DistributedSampler's rules: same order on every rank, padded to equal shards).
  int64_t num_replicas = 1;
  int64_t rank = 0;
  // Applied to each example's x before stacking (Compose, RandomCrop, ...; data/transforms.h).
  Transform transform = {};
  // Makes a batch of the examples (default: data::stack_examples).
  std::function<Example(const std::vector<Example>&)> collate = {};
  // Builds the next batch on a background thread while the current one trains (the dataset's
  // get(), the transforms and the collate must then be safe to run beside the training loop).
  // It pays when batches are built example by example (transforms) and the step leaves a core
  // idle: 12% off a CIFAR-shaped epoch trained on 1 thread of 2 cores, nothing when the step
  // uses every core or the batch is one get_batch copy (docs/results.md, bench/loader_bench).
  bool prefetch = false;
};

// The mean and standard deviation of a dataset's pixels scaled to [0, 1].
struct PixelStatistics {
  double mean, std;
};
PixelStatistics pixel_statistics(const MNIST& dataset);

using Batch = Example;  // x and y of the batch's examples, stacked

class DataLoader {
 public:
  DataLoader(const Dataset& dataset, DataLoaderOptions options = {});
  // A temporary dataset is moved into the loader.
  template <class D>
    requires(std::derived_from<D, Dataset> && !std::is_reference_v<D>)
  DataLoader(D&& dataset, DataLoaderOptions options = {})
      : DataLoader(std::shared_ptr<const Dataset>(std::make_shared<D>(std::move(dataset))), std::move(options)) {}
  ~DataLoader();
  DataLoader(const DataLoader&) = default;
  DataLoader& operator=(const DataLoader&) = default;

  class Iterator {
   public:
    Batch operator*() const;
    Iterator& operator++();
    // Iterators compare equal when both are done: an iterator is done once its epoch's pass
    // has run out (the loader then moves on to the next epoch).
    bool operator!=(const Iterator& other) const { return !done() || !other.done(); }

   private:
    friend class DataLoader;
    Iterator(DataLoader* loader, int64_t batch, int64_t epoch) : loader_(loader), batch_(batch), epoch_(epoch) {}
    bool done() const;
    DataLoader* loader_;  // null for end()
    int64_t batch_, epoch_;
  };

  Iterator begin();
  Iterator end();
  // Batches of this pass over the epoch (a whole epoch, or what a resumed one has left).
  int64_t num_batches() const;
  // Batches of the pass already handed out, and what is left of it.
  int64_t position() const { return position_; }
  int64_t remaining_batches() const { return num_batches() - position_; }
  int64_t epoch() const { return epoch_; }
  // Samples of the epoch's order trained on so far, over every replica (what state_dict saves).
  int64_t epoch_sample() const;
  int64_t samples_in_epoch() const;  // the dataset's size
  const DataLoaderOptions& options() const { return options_; }

  // {epoch, sample}: the epoch in progress and epoch_sample(). Loading also accepts the older
  // {epoch, position}, a batch count of this loader's batch size and replicas.
  std::map<std::string, Tensor> state_dict() const;
  void load_state_dict(const std::map<std::string, Tensor>& state);
  static constexpr int64_t kMaxEpoch = int64_t(1) << 31;

 private:
  DataLoader(std::shared_ptr<const Dataset> owned, DataLoaderOptions options);
  DistributedSampler sampler() const;
  void prepare_pass();
  Batch batch_at(int64_t batch);
  static Batch make_batch(const Dataset& dataset, const DataLoaderOptions& options, const std::vector<int64_t>& samples,
                          int64_t epoch);
  std::vector<int64_t> samples_of(int64_t batch) const;
  void finished_batch(int64_t batch);
  void start_next_epoch();

  std::shared_ptr<const Dataset> owned_;  // set when the loader owns its dataset
  const Dataset* dataset_;
  DataLoaderOptions options_;
  struct Prefetch;                    // the next batch, being built on a background thread
  std::shared_ptr<Prefetch> prefetch_;
  int64_t samples_;              // this rank's samples in the current pass
  std::vector<int64_t> order_;   // this pass's samples (this rank's shard)
  int64_t epoch_ = 0;            // the epoch in progress (or next to start)
  int64_t pass_start_ = 0;       // the epoch sample this pass started at (0 unless resumed)
  int64_t position_ = 0;         // batches of this pass already handed out
  int64_t order_epoch_ = -1, order_start_ = -1;  // the pass order_ was built for
};

}  // namespace hg::data
