// DataLoader (see loader.h).
#include "data/loader.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/philox.h"
#include "core/state_dict.h"
#include "data/sampler.h"

namespace hg::data {

DataLoader::DataLoader(const MNIST& dataset, DataLoaderOptions options)
    : images_(dataset.images()), labels_(dataset.labels()), options_(options) {
  HG_CHECK(options.batch_size > 0, "DataLoader: batch_size must be positive, got ", options.batch_size);
  HG_CHECK(options.std > 0, "DataLoader: std must be positive, got ", options.std);
  samples_ = sampler().num_samples(pass_start_);  // also checks num_replicas and rank
}

DistributedSampler DataLoader::sampler() const {
  return DistributedSampler(images_.shape()[0], {.num_replicas = options_.num_replicas, .rank = options_.rank,
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

int64_t DataLoader::samples_in_epoch() const { return images_.shape()[0]; }

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

Batch DataLoader::make_batch(int64_t batch) const {
  const int64_t n = samples_, b = options_.batch_size;
  const int64_t first = batch * b, count = std::min(b, n - first);
  const int64_t rows = images_.shape()[1], cols = images_.shape()[2], pixels = rows * cols;
  Batch out{empty({count, 1, rows, cols}), empty({count}, {.dtype = i64})};
  const uint8_t* src = images_.data_ptr<uint8_t>();
  const int64_t* labels = labels_.data_ptr<int64_t>();
  float* x = out.x.data_ptr<float>();
  int64_t* y = out.y.data_ptr<int64_t>();
  const float scale = float(1.0 / (255.0 * options_.std)), shift = float(-options_.mean / options_.std);
  for (int64_t k = 0; k < count; ++k) {
    const int64_t sample = order_[size_t(first + k)];
    const uint8_t* image = src + sample * pixels;
    for (int64_t p = 0; p < pixels; ++p) x[k * pixels + p] = float(image[p]) * scale + shift;
    y[k] = labels[sample];
  }
  return out;
}

void DataLoader::finished_batch(int64_t batch) {
  position_ = batch + 1;
  if (position_ >= num_batches()) start_next_epoch();
}

Batch DataLoader::Iterator::operator*() const { return loader_->make_batch(batch_); }

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
