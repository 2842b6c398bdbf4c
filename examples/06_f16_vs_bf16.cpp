// Lesson 6: f16 and bf16 side by side -- range against precision, every number computed here.
//
// Both are 16 bits: 1 sign bit, then f16 spends 5 on the exponent and 10 on the mantissa, bf16
// 8 and 7. f16 is the more precise (about 3 decimal digits against 2) and bf16 has the range
// (f32's exponent, so up to 3.4e38 and down to 1e-38). We read the limits straight from bit
// patterns, push a few telling values through each format, measure the rounding error over
// 10^5 random values, and end with the reason halfgrad stores 16 bits but adds in f32.
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <iomanip>
#include <iostream>
#include <limits>
#include <string>
#include <vector>

#include "halfgrad.h"

namespace {

struct Limits {
  const char* name;
  int exponent_bits, mantissa_bits;
  float max_finite, smallest_normal, smallest_subnormal, epsilon;
};

// Every limit is one bit pattern: the largest exponent below inf with an all-ones mantissa; the
// smallest nonzero exponent; the lowest mantissa bit alone; and the gap from 1.0 to the next
// value up (the bits of 1.0 plus one), which is the machine epsilon.
Limits f16_limits() {
  const auto f = [](uint16_t bits) { return float(hg::half::from_bits(bits)); };
  return {"f16", 5, 10, f(0x7bff), f(0x0400), f(0x0001), f(0x3c01) - f(0x3c00)};
}
Limits bf16_limits() {
  const auto f = [](uint16_t bits) { return float(hg::bfloat16::from_bits(bits)); };
  return {"bf16", 8, 7, f(0x7f7f), f(0x0080), f(0x0001), f(0x3f81) - f(0x3f80)};
}
Limits f32_limits() {
  const auto f = [](uint32_t bits) { return std::bit_cast<float>(bits); };
  return {"f32", 8, 23, f(0x7f7fffff), f(0x00800000), f(0x00000001), f(0x3f800001) - f(0x3f800000)};
}

float round_to(hg::DType dtype, float x) {
  if (dtype == hg::f16) return float(hg::half(x));
  if (dtype == hg::bf16) return float(hg::bfloat16(x));
  return x;
}

// Sum `terms` one at a time with the running total rounded to `dtype` after every addition
// (each addition computed exactly in float, as hardware does, then stored in 16 bits).
float running_sum(const std::vector<float>& terms, hg::DType dtype) {
  float total = 0.0f;
  for (float t : terms) total = round_to(dtype, total + t);
  return total;
}

constexpr hg::DType kFormats[] = {hg::f16, hg::bf16, hg::f32};
using LimitsTable = std::array<Limits, 3>;  // in kFormats' order

// 1. The limits, from bit patterns, checked against the known values and <limits>.
bool show_limits(const LimitsTable& limits) {
  std::cout << "1. Limits, read from bit patterns\n"
            << "   format  exp  mantissa    max finite  smallest normal  smallest subnormal       epsilon  digits\n";
  for (const Limits& l : limits)
    std::cout << std::setprecision(5) << "   " << std::left << std::setw(6) << l.name << std::right << std::setw(5)
              << l.exponent_bits << std::setw(10) << l.mantissa_bits << std::setw(14) << l.max_finite
              << std::setprecision(4) << std::setw(17) << l.smallest_normal << std::setw(20) << l.smallest_subnormal
              << std::setw(14) << l.epsilon << std::setw(8) << std::setprecision(2) << std::fixed
              << -std::log10(l.epsilon) << std::defaultfloat << "\n";
  std::cout << "   (digits = -log10(epsilon): the decimal digits each format carries)\n\n";
  const Limits &f16 = limits[0], &bf16 = limits[1], &f32 = limits[2];
  return f16.max_finite == 65504.0f && f16.smallest_normal == std::ldexp(1.0f, -14) &&
         f16.smallest_subnormal == std::ldexp(1.0f, -24) && f16.epsilon == std::ldexp(1.0f, -10) &&
         bf16.smallest_normal == std::numeric_limits<float>::min() && bf16.epsilon == std::ldexp(1.0f, -7) &&
         bf16.smallest_subnormal == std::ldexp(1.0f, -133) && f32.max_finite == std::numeric_limits<float>::max() &&
         f32.smallest_subnormal == std::numeric_limits<float>::denorm_min() &&
         f32.epsilon == std::numeric_limits<float>::epsilon();
}

// 2. Four values through each format (round to nearest even, as the hardware does).
bool show_probes() {
  const double probes[] = {70000.0, 1e-6, 1.0 / 3.0, 1.0 + 1e-3};  // the exact values, near enough
  const char* probe_names[] = {"70000", "1e-6", "1/3", "1 + 1e-3"};
  std::cout << "2. Four values stored in each format (relative error in brackets)\n"
            << "   value                    f16                    bf16                     f32\n";
  for (int i = 0; i < 4; ++i) {
    std::cout << "   " << std::left << std::setw(9) << probe_names[i] << std::right;
    for (hg::DType d : kFormats) {
      const float stored = round_to(d, float(probes[i]));
      const double rel = std::fabs(double(stored) - probes[i]) / probes[i];
      std::cout << std::setw(14) << std::setprecision(8) << stored << " [" << std::scientific << std::setprecision(1)
                << rel << std::defaultfloat << "]";
    }
    std::cout << "\n";
  }
  const float micro16 = round_to(hg::f16, 1e-6f);
  const long steps_of_2_24 = std::lround(micro16 / std::ldexp(1.0f, -24));
  std::cout << "   70000 overflows f16 (max 65504). 1e-6 is below f16's smallest normal, so it is stored as\n"
            << "   the subnormal " << steps_of_2_24 << " x 2^-24, with only " << std::bit_width(unsigned(steps_of_2_24))
            << " significant bits.\n   bf16 cannot tell 1 + 1e-3 from 1 (its epsilon is 0.0078).\n\n";
  return steps_of_2_24 == 17 && std::isinf(round_to(hg::f16, 70000.0f)) && round_to(hg::bf16, 70000.0f) == 70144.0f &&
         round_to(hg::bf16, 1.0f + 1e-3f) == 1.0f && round_to(hg::f16, 1.0f + 1e-3f) == 1.0f + 0x1p-10f;
}

// 3. Rounding error over 10^5 values, log-uniform over [1e-3, 1e3] (inside both ranges). The
// bound is half an epsilon (the unit roundoff): round to nearest is never off by more.
bool show_rounding_error(const LimitsTable& limits) {
  hg::manual_seed(6);
  const hg::Tensor x64 = hg::exp((hg::rand({100000}, {.dtype = hg::f64}) * 2.0 - 1.0) * std::log(1000.0));
  const hg::Tensor x32 = x64.to(hg::f32);  // 16-bit values in a network are cast from f32
  std::cout << "3. Relative rounding error |round(x) - x| / x of 10^5 values in [1e-3, 1e3]\n"
            << "   format     mean error      max error   bound eps/2\n";
  bool ok = true;
  for (size_t k = 0; k < 3; ++k) {
    const bool is_f32 = kFormats[k] == hg::f32;
    const hg::Tensor source = is_f32 ? x64 : x32.to(hg::f64);
    const hg::Tensor rounded = (is_f32 ? x64.to(hg::f32) : x32.to(kFormats[k])).to(hg::f64);
    const hg::Tensor rel = hg::abs(rounded - source) / source;
    const double mean = hg::mean(rel).item<double>(), worst = hg::amax(rel, 0).item<double>();
    const double bound = double(limits[k].epsilon) / 2.0;
    std::cout << std::setprecision(3) << "   " << std::left << std::setw(6) << limits[k].name << std::right
              << std::setw(13) << mean << std::setw(15) << worst << std::setw(14) << bound << "\n";
    ok = ok && worst <= bound && mean > bound / 8.0 && mean < bound / 2.0;
  }
  std::cout << "   (theory for values spread evenly in log scale: mean = eps / (8 ln 2) = eps / 5.5)\n\n";
  return ok;
}

// 4. Why halfgrad accumulates in f32: 1000 terms in [0, 1), stored in each format, summed with
// the running total kept in that format, and again with an f32 total.
bool show_sums(const LimitsTable& limits) {
  hg::manual_seed(7);
  const std::vector<float> raw = hg::rand({1000}).to_vector<float>();
  std::cout << "4. Sum of 1000 values in [0, 1), stored in each format\n"
            << "   format   total in the format   total in f32    exact sum   error of the in-format total\n";
  bool ok = true;
  for (size_t k = 0; k < 3; ++k) {
    std::vector<float> terms;
    double exact = 0;
    for (float v : raw) terms.push_back(round_to(kFormats[k], v)), exact += double(terms.back());
    const float narrow_total = running_sum(terms, kFormats[k]);
    const float f32_total = running_sum(terms, hg::f32);
    std::cout << std::setprecision(7) << "   " << std::left << std::setw(6) << limits[k].name << std::right
              << std::setw(18) << narrow_total << std::setw(16) << f32_total << std::setw(13) << exact
              << std::setw(14) << std::setprecision(3) << (narrow_total - exact) / exact * 100.0 << " %\n";
    if (kFormats[k] == hg::bf16) ok = ok && narrow_total <= 256.0f && std::fabs(f32_total - exact) < 1e-3;
    if (kFormats[k] == hg::f16) ok = ok && std::fabs(narrow_total - exact) > std::fabs(f32_total - exact);
  }
  std::cout << "   bf16 stalls at 256: there its spacing is 2, so adding anything below 1 rounds back down.\n";

  // halfgrad's own reduction: hg::sum of a 16-bit tensor adds in f32 and rounds once at the end.
  const hg::Tensor values = hg::from_vector(raw, {1000});
  for (size_t k = 0; k < 2; ++k) {
    const hg::Tensor stored = values.to(kFormats[k]);
    const double exact = hg::sum(stored.to(hg::f64)).item<double>();
    const hg::Tensor total = hg::sum(stored);
    const double value = total.item<double>();
    std::cout << "   hg::sum of the " << limits[k].name << " tensor: " << std::setprecision(7) << value << " ("
              << total.dtype() << " result of an f64 accumulation), exact " << exact << ", error "
              << std::setprecision(3) << (value - exact) / exact * 100.0 << " %\n";
    ok = ok && std::fabs(value - exact) <= exact * double(limits[k].epsilon) / 2.0;  // one rounding, at the end
  }
  return ok;
}

}  // namespace

int main() {
  const LimitsTable limits{f16_limits(), bf16_limits(), f32_limits()};
  bool ok = show_limits(limits);
  ok = show_probes() && ok;
  ok = show_rounding_error(limits) && ok;
  ok = show_sums(limits) && ok;
  std::cout << (ok ? "f16_vs_bf16: all checks passed\n" : "f16_vs_bf16: CHECK FAILED\n");
  return ok ? 0 : 1;
}
