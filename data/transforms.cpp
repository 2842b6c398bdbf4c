// The transforms (see transforms.h). Crop and flip move values, whatever the dtype; Normalize
// computes in f32 (f64 for f64).
#include "data/transforms.h"

#include <cmath>
#include <cstring>

#include "core/philox.h"
#include "core/rng.h"
#include "core/visit.h"

namespace hg::data {

namespace {

// [C, H, W] or [H, W]: the channel count, height and width (C = 1 for 2-D).
struct Planes {
  int64_t C, H, W;
};
Planes planes_of(const Tensor& x, const char* what) {
  HG_CHECK(x.defined() && (x.dim() == 2 || x.dim() == 3), what, ": expected an example of shape [C, H, W] or [H, W], got ",
           x.defined() ? x.shape() : Shape{});
  HG_CHECK(x.device().is_cpu(), what, ": expected a CPU example (the loader transforms before moving a batch)");
  return x.dim() == 3 ? Planes{x.shape()[0], x.shape()[1], x.shape()[2]} : Planes{1, x.shape()[0], x.shape()[1]};
}

}  // namespace

ExampleRandom ExampleRandom::from_global_generator() {
  // One draw of the global generator picks the stream: reproducible under hg::manual_seed.
  const random::GeneratorState s = random::get_state();
  random::set_state({s.seed, s.offset + 1});
  return ExampleRandom(s.seed ^ 0x7f4a7c15u, s.offset);
}

// 32 bits: all one Philox word holds (philox::uniform_of_word shifts by 32 - bits).
double ExampleRandom::uniform() { return philox::uniform(seed_, stream_ << 16, drawn_++, 32); }

int64_t ExampleRandom::integer(int64_t low, int64_t high) {
  HG_CHECK(low < high, "ExampleRandom::integer: empty range [", low, ", ", high, ")");
  return philox::integer(seed_, stream_ << 16, drawn_++, low, high);
}

Tensor Compose::operator()(const Tensor& x, ExampleRandom& random) const {
  Tensor y = x;
  for (const Transform& t : transforms_) y = t(y, random);
  return y;
}

Tensor Compose::operator()(const Tensor& x) const {
  ExampleRandom random = ExampleRandom::from_global_generator();
  return (*this)(x, random);
}

Normalize::Normalize(std::vector<double> mean, std::vector<double> std) : mean_(std::move(mean)), std_(std::move(std)) {
  HG_CHECK(!mean_.empty() && mean_.size() == std_.size(), "Normalize: needs as many means as standard deviations (",
           mean_.size(), " and ", std_.size(), "), at least one");
  for (double s : std_) HG_CHECK(s > 0 && std::isfinite(s), "Normalize: every std must be positive and finite, got ", s);
  for (double m : mean_) HG_CHECK(std::isfinite(m), "Normalize: every mean must be finite, got ", m);
}

Tensor Normalize::operator()(const Tensor& x) const {
  const Planes p = planes_of(x, "Normalize");
  HG_CHECK(mean_.size() == 1 || int64_t(mean_.size()) == p.C, "Normalize: ", mean_.size(), " means for an example of ",
           p.C, " channels (shape ", x.shape(), ")");
  const DType out_dtype = x.dtype() == f64 ? f64 : f32;
  const Tensor src = x.contiguous();
  Tensor out = empty(x.shape(), {.dtype = out_dtype});
  const int64_t plane = p.H * p.W;
  const auto normalize = [&]<class O>() {
    O* y = out.data_ptr<O>();
    visit_dtype(src.dtype(), [&]<class T> {
      const T* in = src.data_ptr<T>();
      for (int64_t c = 0; c < p.C; ++c) {
        const size_t k = mean_.size() == 1 ? 0 : size_t(c);
        const O scale = O(1.0 / std_[k]), shift = O(-mean_[k] / std_[k]);
        for (int64_t i = c * plane; i < (c + 1) * plane; ++i) y[i] = O(double(in[i])) * scale + shift;
      }
    });
  };
  if (out_dtype == f64) normalize.template operator()<double>();
  else normalize.template operator()<float>();
  return out;
}

RandomCrop::RandomCrop(int64_t size, RandomCropOptions options) : size_(size), options_(options) {
  HG_CHECK(size > 0, "RandomCrop: size must be positive, got ", size);
  HG_CHECK(options.padding >= 0, "RandomCrop: padding must be >= 0, got ", options.padding);
}

Tensor RandomCrop::operator()(const Tensor& x, ExampleRandom& random) const {
  const Planes p = planes_of(x, "RandomCrop");
  const int64_t pad = options_.padding, H = p.H + 2 * pad, W = p.W + 2 * pad;
  HG_CHECK(size_ <= H && size_ <= W, "RandomCrop: a ", size_, "x", size_, " crop does not fit an example of ", p.H, "x",
           p.W, " padded by ", pad);
  const int64_t top = random.integer(0, H - size_ + 1), left = random.integer(0, W - size_ + 1);
  Shape shape = x.shape();
  shape[shape.size() - 2] = size_;
  shape[shape.size() - 1] = size_;
  Tensor out = zeros(shape, {.dtype = x.dtype()});
  const Tensor src = x.contiguous();
  const size_t bytes = element_size(x.dtype());
  const auto* in = static_cast<const uint8_t*>(src.raw_data());
  auto* y = static_cast<uint8_t*>(out.raw_data());
  // Row r, column c of the crop is row top + r - pad, column left + c - pad of the example (zero
  // outside it): each row is one copy of the overlapping columns.
  const int64_t c0 = std::max<int64_t>(0, pad - left), c1 = std::min<int64_t>(size_, p.W + pad - left);
  for (int64_t ch = 0; ch < p.C; ++ch)
    for (int64_t r = 0; r < size_; ++r) {
      const int64_t row = top + r - pad;
      if (row < 0 || row >= p.H || c1 <= c0) continue;
      std::memcpy(y + size_t((ch * size_ + r) * size_ + c0) * bytes,
                  in + size_t((ch * p.H + row) * p.W + (left + c0 - pad)) * bytes, size_t(c1 - c0) * bytes);
    }
  return out;
}

Tensor RandomCrop::operator()(const Tensor& x) const {
  ExampleRandom random = ExampleRandom::from_global_generator();
  return (*this)(x, random);
}

RandomHorizontalFlip::RandomHorizontalFlip(double p) : p_(p) {
  HG_CHECK(p >= 0 && p <= 1, "RandomHorizontalFlip: p must be in [0, 1], got ", p);
}

Tensor RandomHorizontalFlip::operator()(const Tensor& x, ExampleRandom& random) const {
  const Planes p = planes_of(x, "RandomHorizontalFlip");
  if (!(random.uniform() < p_)) return x;
  const Tensor src = x.contiguous();
  Tensor out = empty(x.shape(), {.dtype = x.dtype()});
  const size_t bytes = element_size(x.dtype());
  const auto* in = static_cast<const uint8_t*>(src.raw_data());
  auto* y = static_cast<uint8_t*>(out.raw_data());
  for (int64_t row = 0; row < p.C * p.H; ++row)
    for (int64_t c = 0; c < p.W; ++c)
      std::memcpy(y + size_t(row * p.W + c) * bytes, in + size_t(row * p.W + (p.W - 1 - c)) * bytes, bytes);
  return out;
}

Tensor RandomHorizontalFlip::operator()(const Tensor& x) const {
  ExampleRandom random = ExampleRandom::from_global_generator();
  return (*this)(x, random);
}

}  // namespace hg::data
