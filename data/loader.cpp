// DataLoader (see loader.h).
#include "data/loader.h"

#include <algorithm>
#include <cmath>
#include <future>
#include <numeric>

#include "autograd/grad_mode.h"
#include "ops/elementwise.h"

#include "core/philox.h"
#include "core/state_dict.h"
#include "data/sampler.h"

namespace hg::data {

struct DataLoader::Prefetch {
  std::future<Batch> batch;
  std::vector<int64_t> samples;  // the samples it holds (what the iterator will ask for next)
  int64_t epoch = -1;
};

DataLoader::DataLoader(const Dataset& dataset, DataLoaderOptions options)
    : dataset_(&dataset), options_(std::move(options)), prefetch_(std::make_shared<Prefetch>()) {
  HG_CHECK(options_.batch_size > 0, "DataLoader: batch_size must be positive, got ", options_.batch_size);
  HG_CHECK(options_.std > 0 && std::isfinite(options_.std) && std::isfinite(options_.mean),
           "DataLoader: std must be positive and mean finite, got mean ", options_.mean, " and std ", options_.std);
  HG_CHECK(dataset.size() >= 0, "DataLoader: the dataset reports a negative size ", dataset.size());
  samples_ = sampler().num_samples(pass_start_);  // also checks num_replicas and rank
}

DataLoader::DataLoader(std::shared_ptr<const Dataset> owned, DataLoaderOptions options)
    : DataLoader(*owned, std::move(options)) {
  owned_ = std::move(owned);
}

DataLoader::~DataLoader() {
  // A batch still being built reads the dataset: it must finish first.
  if (prefetch_ && prefetch_.use_count() == 1 && prefetch_->batch.valid()) prefetch_->batch.wait();
}

DistributedSampler DataLoader::sampler() const {
  return DistributedSampler(dataset_->size(), {.num_replicas = options_.num_replicas, .rank = options_.rank,
                                              .shuffle = options_.shuffle, .seed = options_.seed});
}

PixelStatistics pixel_statistics(const MNIST& dataset) {
  const Tensor images = dataset.images().contiguous();
  const uint8_t* p = images.data_ptr<uint8_t>();
  double sum = 0, squares = 0;
  const int64_t n = images.numel();
  for (int64_t i = 0; i < n; ++i) sum += p[i], squares += double(p[i]) * p[i];
  const double mean = sum / double(std::max<int64_t>(n, 1)) / 255.0;
  const double variance = squares / double(std::max<int64_t>(n, 1)) / (255.0 * 255.0) - mean * mean;
  return {mean, std::sqrt(std::max(variance, 0.0))};
}

int64_t DataLoader::num_batches() const {
  const int64_t n = samples_, b = options_.batch_size;
  // NOTE: not (n + b - 1) / b, which overflows for a batch size near INT64_MAX.
  return options_.drop_last ? n / b : n / b + (n % b != 0);
}

int64_t DataLoader::samples_in_epoch() const { return dataset_->size(); }

int64_t DataLoader::epoch_sample() const {
  // Batch k of this rank covers positions [k * b * r, (k + 1) * b * r) of the pass on all ranks.
  const int64_t left = samples_in_epoch() - pass_start_;
  const int64_t per_batch = options_.batch_size * options_.num_replicas;
  int64_t done = 0;
  if (__builtin_mul_overflow(position_, per_batch, &done) || done > left) done = left;
  return pass_start_ + done;
}

void DataLoader::start_next_epoch() {
  ++epoch_;
  pass_start_ = 0;
  position_ = 0;
  samples_ = sampler().num_samples(0);
}

void DataLoader::prepare_pass() {
  if (order_epoch_ == epoch_ && order_start_ == pass_start_) return;
  // One replica: the epoch's order (epoch_order) from pass_start_ on; several: this rank's shard.
  DistributedSampler shard = sampler();
  shard.set_epoch(epoch_);
  order_ = shard.indices(pass_start_);
  order_epoch_ = epoch_;
  order_start_ = pass_start_;
}

DataLoader::Iterator DataLoader::begin() {
  if (position_ >= num_batches()) start_next_epoch();  // the previous epoch was used up
  prepare_pass();
  return Iterator(this, position_, epoch_);
}

DataLoader::Iterator DataLoader::end() { return Iterator(nullptr, 0, 0); }

bool DataLoader::Iterator::done() const {
  return loader_ == nullptr || loader_->epoch_ != epoch_ || batch_ >= loader_->num_batches();
}

std::vector<int64_t> DataLoader::samples_of(int64_t batch) const {
  const int64_t first = batch * options_.batch_size, count = std::min(options_.batch_size, samples_ - first);
  return {order_.begin() + first, order_.begin() + first + count};
}

namespace {
// Transforms draw from a stream keyed apart from the shuffle's (seed ^ this, epoch, sample).
constexpr uint64_t kTransformKey = 0x9e3779b97f4a7c15ull;
}  // namespace

// Reads only its arguments: safe on a background thread (given a dataset safe to read there).
Batch DataLoader::make_batch(const Dataset& dataset, const DataLoaderOptions& options,
                             const std::vector<int64_t>& samples, int64_t epoch) {
  NoGradGuard no_grad;  // data, not part of a graph
  Batch batch;
  std::optional<Example> whole;
  if (!options.transform && !options.collate) whole = dataset.get_batch(samples);
  if (whole) {
    batch = std::move(*whole);
  } else {
    std::vector<Example> examples;
    examples.reserve(samples.size());
    for (int64_t sample : samples) {
      Example e = dataset.get(sample);
      if (options.transform) {
        ExampleRandom random(options.seed ^ kTransformKey, (uint64_t(epoch) << 32) | uint64_t(sample));
        e.x = options.transform(e.x, random);
      }
      examples.push_back(std::move(e));
    }
    batch = options.collate ? options.collate(examples) : stack_examples(examples);
  }
  if (options.mean != 0.0 || options.std != 1.0) {
    HG_CHECK(is_floating(batch.x.dtype()), "DataLoader: .mean/.std normalise floating inputs, the batch's x is ",
             batch.x.dtype());
    batch.x = batch.x * (1.0 / options.std) + (-options.mean / options.std);
  }
  return batch;
}

Batch DataLoader::batch_at(int64_t batch) {
  const std::vector<int64_t> samples = samples_of(batch);
  Prefetch& next = *prefetch_;
  Batch out;
  if (next.batch.valid() && next.epoch == epoch_ && next.samples == samples) {
    out = next.batch.get();
  } else {
    if (next.batch.valid()) next.batch.wait();  // another position: its batch is not this one
    next.batch = {};
    out = make_batch(*dataset_, options_, samples, epoch_);
  }
  if (options_.prefetch && batch + 1 < num_batches()) {
    next.samples = samples_of(batch + 1);
    next.epoch = epoch_;
    // Everything the task reads is its own copy (or kept alive by one): a loader copied or
    // destroyed meanwhile does not pull anything from under it.
    next.batch = std::async(std::launch::async, [owned = owned_, dataset = dataset_, options = options_,
                                                 samples = next.samples, epoch = epoch_] {
      return make_batch(*dataset, options, samples, epoch);
    });
  }
  return out;
}

void DataLoader::finished_batch(int64_t batch) {
  position_ = batch + 1;
  if (position_ >= num_batches()) start_next_epoch();
}

Batch DataLoader::Iterator::operator*() const { return loader_->batch_at(batch_); }

DataLoader::Iterator& DataLoader::Iterator::operator++() {
  loader_->finished_batch(batch_);
  ++batch_;
  return *this;
}

std::map<std::string, Tensor> DataLoader::state_dict() const {
  return {{"epoch", full({}, double(epoch_), {.dtype = i64})}, {"sample", full({}, double(epoch_sample()), {.dtype = i64})}};
}

void DataLoader::load_state_dict(const std::map<std::string, Tensor>& state) {
  const std::string_view what = "DataLoader.load_state_dict";
  const bool legacy = state.count("position") != 0;  // halfgrad before 2026-12-05: a batch count
  state_dict::require_exact_keys(state, {"epoch", legacy ? "position" : "sample"}, what);
  // The epoch picks the shuffle's Philox counters (epoch << 32) and is incremented: keep it far
  // from overflow.
  const int64_t epoch = state_dict::read_int(state, "epoch", what, 0, kMaxEpoch);
  const int64_t n = samples_in_epoch();
  int64_t sample = 0;
  if (legacy) {  // batches of this loader's size and replicas: the only reading the writer allowed
    const int64_t position = state_dict::read_int(state, "position", what, 0, INT64_MAX);
    const int64_t batches = (sampler().num_samples() / options_.batch_size) + 1;
    HG_CHECK(position <= batches, what, ": position ", position, " outside an epoch of ", batches - 1, " batches");
    int64_t per_batch = 0;
    if (__builtin_mul_overflow(options_.batch_size, options_.num_replicas, &per_batch) ||
        __builtin_mul_overflow(position, per_batch, &sample) || sample > n)
      sample = n;
  } else {
    sample = state_dict::read_int(state, "sample", what, 0, n);
  }
  epoch_ = epoch;
  pass_start_ = sample;
  position_ = 0;
  samples_ = sampler().num_samples(pass_start_);
  if (num_batches() == 0 && samples_in_epoch() > 0) start_next_epoch();  // nothing left of that epoch
}

}  // namespace hg::data
