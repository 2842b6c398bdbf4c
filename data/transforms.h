// Per-example transforms (torchvision's), applied by the DataLoader to each example's x before
// the examples are stacked:
//
//   hg::data::DataLoader loader(train, {.batch_size = 128, .seed = 1,
//       .transform = hg::data::Compose({hg::data::RandomCrop(28, {.padding = 4}),
//                                       hg::data::RandomHorizontalFlip(0.5),
//                                       hg::data::Normalize({0.286}, {0.353})})});
//
// Examples are [C, H, W] (or [H, W]) tensors. The random ones draw from the example's own Philox
// stream, keyed by (the loader's seed, the epoch, the example's index in the dataset): an example
// is augmented the same way whatever the batch size, the number of threads or ranks, and a run
// resumed from a checkpoint repeats it bitwise. Called outside a loader, a transform draws from
// a stream of the global generator (hg::manual_seed makes it reproducible).
//
// Your own transform is any callable `Tensor(const Tensor& x, hg::data::ExampleRandom& random)`.
#pragma once
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <vector>

#include "core/tensor.h"

namespace hg::data {

// The random numbers of one example's transforms.
class ExampleRandom {
 public:
  ExampleRandom(uint64_t seed, uint64_t stream) : seed_(seed), stream_(stream) {}
  // A stream of the global generator (advancing it), for a transform called on its own.
  static ExampleRandom from_global_generator();
  double uniform();                           // [0, 1)
  int64_t integer(int64_t low, int64_t high);  // [low, high)

 private:
  uint64_t seed_, stream_, drawn_ = 0;
};

using Transform = std::function<Tensor(const Tensor&, ExampleRandom&)>;

// The transforms in order.
class Compose {
 public:
  Compose(std::initializer_list<Transform> transforms) : transforms_(transforms) {}
  explicit Compose(std::vector<Transform> transforms) : transforms_(std::move(transforms)) {}
  Tensor operator()(const Tensor& x, ExampleRandom& random) const;
  Tensor operator()(const Tensor& x) const;

 private:
  std::vector<Transform> transforms_;
};

// (x - mean[c]) / std[c] per channel c (dim 0 of [C, H, W]); one value each applies to every
// channel. The result is f32 (f64 for an f64 example).
class Normalize {
 public:
  Normalize(std::vector<double> mean, std::vector<double> std);
  Tensor operator()(const Tensor& x) const;
  Tensor operator()(const Tensor& x, ExampleRandom&) const { return (*this)(x); }

 private:
  std::vector<double> mean_, std_;
};

struct RandomCropOptions {
  int64_t padding = 0;  // zeros added on every side before cropping
};

// A size x size window at a random place of the example padded by `padding`.
class RandomCrop {
 public:
  explicit RandomCrop(int64_t size, RandomCropOptions options = {});
  Tensor operator()(const Tensor& x, ExampleRandom& random) const;
  Tensor operator()(const Tensor& x) const;

 private:
  int64_t size_;
  RandomCropOptions options_;
};

// The example mirrored left-right (the last dimension reversed) with probability p.
class RandomHorizontalFlip {
 public:
  explicit RandomHorizontalFlip(double p = 0.5);
  Tensor operator()(const Tensor& x, ExampleRandom& random) const;
  Tensor operator()(const Tensor& x) const;

 private:
  double p_;
};

}  // namespace hg::data
