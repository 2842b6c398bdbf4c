// GradientHistogram: binning by exponent, the fractions, the table and the CSV.
#include "amp_tools/gradient_histogram.h"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <ostream>
#include <sstream>

#include "core/file.h"

namespace hg::amp {

namespace {
int bin_of(double magnitude) {
  return std::clamp(std::ilogb(magnitude), GradientHistogram::kMinExponent, GradientHistogram::kMaxExponent);
}
}  // namespace

// f16: 5 exponent bits, 10 mantissa bits: normals 2^-14 .. 65504, subnormals down to 2^-24.
// NOTE: values in [2^-25, 2^-24) round to 2^-24 or 0 and values just under 2^16 round to inf;
// the regions are by bin, which is exact enough for a picture.
const char* f16_region(int e) { return e >= 16 ? "overflow" : e >= -14 ? "normal" : e >= -24 ? "subnormal" : "zero"; }
// bf16: f32's 8 exponent bits, 7 mantissa bits: normals 2^-126 .. ~2^128, subnormals to 2^-133.
const char* bf16_region(int e) { return e >= 128 ? "overflow" : e >= -126 ? "normal" : e >= -133 ? "subnormal" : "zero"; }

// FP8, unscaled (the recipes scale per tensor: see fp8_flushed_fraction). e4m3fn: normals
// 2^-6 .. 448, subnormals to 2^-9, no inf (overflow is NaN or saturation). e5m2: normals 2^-14 ..
// 57344, subnormals to 2^-16.
const char* e4m3_region(int e) { return e >= 9 ? "overflow" : e >= -6 ? "normal" : e >= -9 ? "subnormal" : "zero"; }
const char* e5m2_region(int e) { return e >= 16 ? "overflow" : e >= -14 ? "normal" : e >= -16 ? "subnormal" : "zero"; }

double GradientHistogram::fp8_flushed_fraction(Stage stage, DType format) const {
  HG_CHECK(is_float8(format), "GradientHistogram::fp8_flushed_fraction: expected f8e4m3 or f8e5m2, got ", format);
  int top = kMinExponent - 1;
  for (int e = kMaxExponent; e >= kMinExponent && top < kMinExponent; --e)
    if (count(stage, e) > 0) top = e;
  if (top < kMinExponent) return 0.0;
  // amax < 2^(top+1): the recipe's scale 2^floor(log2(largest / amax)) is at least
  // 2^(floor(log2 largest) - top - 1), and a scaled value below half the smallest subnormal
  // (2^-10 in e4m3, 2^-17 in e5m2) rounds to 0.
  const int floor_log2_largest = format == f8e4m3 ? 8 : 15, below_half_subnormal = format == f8e4m3 ? -10 : -17;
  return nonzero_fraction_below(stage, below_half_subnormal - (floor_log2_largest - top - 1));
}

void GradientHistogram::add(const Scalable& optimizer, const GradScaler& scaler) {
  std::vector<Tensor> gradients;
  for (const Tensor& p : optimizer.parameters())
    if (p.grad().defined()) gradients.push_back(p.grad());
  add(gradients, scaler.is_enabled() ? scaler.get_scale() : 1.0);
}

void GradientHistogram::add(const std::vector<Tensor>& scaled_gradients, double scale) {
  HG_CHECK(scale > 0 && std::isfinite(scale), "GradientHistogram::add: the scale must be positive and finite, got ",
           scale);
  // Every gradient is checked before any is counted: a bad one leaves the histogram as it was.
  for (size_t i = 0; i < scaled_gradients.size(); ++i) {
    const Tensor& g = scaled_gradients[i];
    HG_CHECK(g.defined() && is_floating(g.dtype()), "GradientHistogram::add: gradients must be floating-point tensors",
             g.defined() ? std::string(", got ") + std::string(dtype_name(g.dtype())) : std::string(", got an undefined one"),
             " (gradient ", i, "); nothing was added");
  }
  for (const Tensor& g : scaled_gradients) {
    // In f64: every f16/bf16/f32 value is exact there, and so is dividing by a power of two.
    for (double v : g.to(Device::cpu()).to(f64).contiguous().to_vector<double>()) {
      const double unscaled = v / scale;
      for (auto [value, counts] : {std::pair{v, &before_}, std::pair{unscaled, &after_}}) {
        if (!std::isfinite(value)) ++counts->nonfinite;
        else if (value == 0) ++counts->zeros;
        else ++counts->bins[size_t(bin_of(std::fabs(value)) - kMinExponent)];
      }
    }
  }
  ++additions_;
}

int64_t GradientHistogram::count(Stage stage, int exponent) const {
  HG_CHECK(exponent >= kMinExponent && exponent <= kMaxExponent, "GradientHistogram::count: exponent ", exponent,
           " is outside [", kMinExponent, ", ", kMaxExponent, "]");
  return of(stage).bins[size_t(exponent - kMinExponent)];
}

int64_t GradientHistogram::total(Stage stage) const {
  const Counts& c = of(stage);
  int64_t n = c.zeros + c.nonfinite;
  for (int64_t b : c.bins) n += b;
  return n;
}

double GradientHistogram::fraction_below(Stage stage, int exponent) const {
  const int64_t n = total(stage);
  if (n == 0) return 0.0;
  int64_t below = of(stage).zeros;
  for (int e = kMinExponent; e < std::min(exponent, kMaxExponent + 1); ++e) below += count(stage, e);
  return double(below) / double(n);
}

double GradientHistogram::fraction_at_or_above(Stage stage, int exponent) const {
  const int64_t n = total(stage);
  if (n == 0) return 0.0;
  int64_t above = 0;
  for (int e = std::max(exponent, kMinExponent); e <= kMaxExponent; ++e) above += count(stage, e);
  return double(above) / double(n);
}

double GradientHistogram::nonzero_fraction_below(Stage stage, int exponent) const {
  int64_t nonzero = 0, below = 0;
  for (int e = kMinExponent; e <= kMaxExponent; ++e) {
    nonzero += count(stage, e);
    if (e < exponent) below += count(stage, e);
  }
  return nonzero ? double(below) / double(nonzero) : 0.0;
}

void GradientHistogram::print(std::ostream& os) const {
  std::ostringstream t;
  int lo = kMaxExponent, hi = kMinExponent;
  int64_t most = 1;
  for (int e = kMinExponent; e <= kMaxExponent; ++e) {
    const int64_t b = count(Stage::BeforeUnscale, e), a = count(Stage::AfterUnscale, e);
    if (b + a == 0) continue;
    lo = std::min(lo, e), hi = std::max(hi, e), most = std::max({most, a, b});
  }
  t << "gradient exponents over " << additions_ << " step(s): bin e holds 2^e <= |g| < 2^(e+1); "
    << "B = before unscaling (x scale), A = after\n";
  t << std::setw(6) << "e" << std::setw(11) << "before" << std::setw(11) << "after" << "  f16        " << std::left
    << std::setw(32) << "before" << "after" << std::right << '\n';
  const auto bar = [most](int64_t n, char c) { return std::string(size_t((n * 30 + most - 1) / most), c); };
  for (int e = hi; e >= lo; --e) {
    const int64_t b = count(Stage::BeforeUnscale, e), a = count(Stage::AfterUnscale, e);
    t << std::setw(6) << e << std::setw(11) << b << std::setw(11) << a << "  " << std::left << std::setw(11)
      << f16_region(e) << std::setw(32) << bar(b, 'B') << bar(a, 'A') << std::right << '\n';
  }
  t << std::setprecision(4) << "zeros: " << zeros(Stage::BeforeUnscale) << " before, " << zeros(Stage::AfterUnscale)
    << " after; inf/NaN: " << nonfinite(Stage::BeforeUnscale) << " before, " << nonfinite(Stage::AfterUnscale) << " after\n"
    << "of the nonzero values, below 2^-24 (f16 flushes them to 0): " << 100 * nonzero_fraction_below(Stage::BeforeUnscale, -24)
    << "% before unscaling, " << 100 * nonzero_fraction_below(Stage::AfterUnscale, -24) << "% after; in f16's subnormal "
    << "range [2^-24, 2^-14): " << 100 * (nonzero_fraction_below(Stage::BeforeUnscale, -14) -
                                         nonzero_fraction_below(Stage::BeforeUnscale, -24))
    << "% before, " << 100 * (nonzero_fraction_below(Stage::AfterUnscale, -14) - nonzero_fraction_below(Stage::AfterUnscale, -24))
    << "% after; >= 2^16 (f16 inf): " << 100 * fraction_at_or_above(Stage::BeforeUnscale, 16) << "% of all before; "
    << "below 2^-133 (bf16 flushes them to 0): " << 100 * nonzero_fraction_below(Stage::AfterUnscale, -133) << "% after\n"
    << "FP8 with one power-of-two scale per tensor fitted to the largest value: "
    << 100 * fp8_flushed_fraction(Stage::AfterUnscale, f8e5m2) << "% of the nonzero values flush to 0 in E5M2, "
    << 100 * fp8_flushed_fraction(Stage::AfterUnscale, f8e4m3) << "% in E4M3 (range: 2^31 and 2^17 below the top)\n";
  os << t.str();
}

void GradientHistogram::write_csv(const std::string& path) const {
  std::ostringstream out;
  out << "# zeros before/after: " << zeros(Stage::BeforeUnscale) << ' ' << zeros(Stage::AfterUnscale)
      << "; inf/NaN before/after: " << nonfinite(Stage::BeforeUnscale) << ' ' << nonfinite(Stage::AfterUnscale) << '\n';
  out << "exponent,before,after,f16_region,bf16_region,e4m3_region,e5m2_region\n";
  for (int e = kMinExponent; e <= kMaxExponent; ++e)
    out << e << ',' << count(Stage::BeforeUnscale, e) << ',' << count(Stage::AfterUnscale, e) << ',' << f16_region(e)
        << ',' << bf16_region(e) << ',' << e4m3_region(e) << ',' << e5m2_region(e) << '\n';
  write_text_file(path, out.str(), "GradientHistogram::write_csv(\"" + path + "\")");
}

}  // namespace hg::amp
