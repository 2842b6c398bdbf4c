// GradientHistogram: where gradient values sit on the base-2 exponent line, before and after
// unscaling, beside what f16, bf16 and the FP8 formats can hold -- the picture that explains loss scaling. In f16
// nothing exists below 2^-24 (it rounds to 0) and nothing at or above 2^16 (inf); a GradScaler
// multiplies the loss, and so every gradient, by S = 2^k, sliding the whole histogram k bins
// to the right, out of the zero zone (and, with too large an S, into the inf zone).
//
//   hg::amp::GradientHistogram histogram;          // collects over as many steps as you add
//   scaler.scale(loss).backward();
//   histogram.add(opt, scaler);                    // the scaled gradients; unscaled = them / S
//   scaler.step(opt);
//   histogram.fraction_below(Stage::AfterUnscale, -24);   // the share f16 would flush to 0 unscaled
//   histogram.print(std::cout); histogram.write_csv("gradient_histogram.csv");
//
// Bin e counts the values with 2^e <= |g| < 2^(e+1) (std::ilogb); zeros and inf/NaN are counted
// apart. Reading the gradients copies them to the host (on CUDA: one wait per call).
#pragma once
#include <array>
#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include "amp_tools/grad_scaler.h"

namespace hg::amp {

class GradientHistogram {
 public:
  // Bins cover every exponent of f32 values (subnormals reach 2^-149) with room to spare; f64
  // values beyond are counted in the end bins.
  static constexpr int kMinExponent = -160, kMaxExponent = 140;
  enum class Stage { BeforeUnscale, AfterUnscale };

  // The .grad() of every parameter of `optimizer` that has one, as backward left them (scaled by
  // scaler.get_scale(); a disabled scaler: scale 1). Call after backward, before unscale_/step.
  void add(const Scalable& optimizer, const GradScaler& scaler);
  // The given gradients, holding values scaled by `scale` (> 0).
  void add(const std::vector<Tensor>& scaled_gradients, double scale);

  int64_t count(Stage stage, int exponent) const;  // values in bin `exponent`
  int64_t zeros(Stage stage) const { return of(stage).zeros; }
  int64_t nonfinite(Stage stage) const { return of(stage).nonfinite; }
  int64_t total(Stage stage) const;               // every value added, zeros and inf/NaN included
  // The share of all values (exact zeros included) with |g| < 2^exponent, or >= 2^exponent.
  double fraction_below(Stage stage, int exponent) const;
  double fraction_at_or_above(Stage stage, int exponent) const;
  // The share of the nonzero finite values with |g| < 2^exponent. (Exact zeros are often
  // structural -- the gradient of a weight that met a ReLU's zeros -- and zero in f32 too.)
  double nonzero_fraction_below(Stage stage, int exponent) const;
  // The share of the nonzero finite values an FP8 format (f8e4m3, f8e5m2) would flush to 0 even
  // with the FP8 recipes' per-tensor scale fitted to the largest value binned (amp/fp8.h): what
  // the format's range, 2^17 (E4M3) or 2^31 (E5M2) below its top, leaves out. Over several
  // steps' additions it is measured against the largest value of all of them.
  double fp8_flushed_fraction(Stage stage, DType format) const;
  int64_t additions() const { return additions_; }

  void print(std::ostream& os) const;  // bins with counts and bars, ranges marked, then a summary
  // exponent, before, after, f16 region, bf16 region per bin; zeros and inf/NaN in the first lines.
  void write_csv(const std::string& path) const;

 private:
  struct Counts {
    std::array<int64_t, kMaxExponent - kMinExponent + 1> bins{};
    int64_t zeros = 0, nonfinite = 0;
  };
  const Counts& of(Stage stage) const { return stage == Stage::BeforeUnscale ? before_ : after_; }
  Counts before_, after_;
  int64_t additions_ = 0;
};

// What a format does to a value of exponent e: "overflow", "normal", "subnormal" or "zero".
const char* f16_region(int exponent);
const char* bf16_region(int exponent);
const char* e4m3_region(int exponent);  // unscaled
const char* e5m2_region(int exponent);

}  // namespace hg::amp
