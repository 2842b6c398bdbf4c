// hg::half and hg::bfloat16 conversions: every bit pattern round-trips; float -> 16-bit rounding
// agrees with an independent reference (nearest value found by searching a sorted table of all
// finite 16-bit values, ties to the even bit pattern) on 10^6 random floats and edge cases; the
// SIMD bulk converters agree with the portable code.
#include <algorithm>
#include <bit>
#include <cmath>
#include <random>
#include <vector>

#include "test_support.h"

namespace {

// ---- the independent reference -----------------------------------------------------------------

// All finite values of a 16-bit format with their bit patterns, sorted by value.
struct Table {
  std::vector<std::pair<double, uint16_t>> finite;  // non-negative values only
  double overflow_threshold;  // halfway between the largest finite value and the next power step
};

template <class Decode>
Table make_table(Decode decode, double max_finite, double next_step) {
  Table t;
  for (uint32_t bits = 0; bits < 0x8000; ++bits) {
    const double v = decode(uint16_t(bits));
    if (std::isfinite(v)) t.finite.emplace_back(v, uint16_t(bits));
  }
  std::sort(t.finite.begin(), t.finite.end());
  t.overflow_threshold = max_finite + next_step / 2;
  return t;
}

// Decoding by the definition of the formats (sign, exponent, mantissa), not by bit tricks.
double decode_binary16(uint16_t bits) {
  const int e = (bits >> 10) & 0x1f, m = bits & 0x3ff;
  const double sign = (bits & 0x8000) ? -1 : 1;
  if (e == 31) return m ? NAN : sign * INFINITY;
  if (e == 0) return sign * std::ldexp(m, -24);
  return sign * std::ldexp(1024 + m, e - 25);
}
double decode_bfloat16(uint16_t bits) {
  const int e = (bits >> 7) & 0xff, m = bits & 0x7f;
  const double sign = (bits & 0x8000) ? -1 : 1;
  if (e == 255) return m ? NAN : sign * INFINITY;
  if (e == 0) return sign * std::ldexp(m, -133);
  return sign * std::ldexp(128 + m, e - 134);
}

const Table& f16_table() {
  static const Table t = make_table(decode_binary16, 65504.0, 32.0);
  return t;
}
const Table& bf16_table() {
  static const Table t = make_table(decode_bfloat16, decode_bfloat16(0x7f7f), std::ldexp(1.0, 120));
  return t;
}

uint16_t reference_round(const Table& table, float f, uint16_t inf_bits) {
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  const double x = std::fabs(double(f));
  if (x >= table.overflow_threshold) return sign | inf_bits;
  auto hi = std::lower_bound(table.finite.begin(), table.finite.end(), std::make_pair(x, uint16_t(0)));
  if (hi == table.finite.end()) return sign | table.finite.back().second;  // above max, below the threshold
  if (hi->first == x) return sign | hi->second;
  auto lo = hi - 1;
  const double dlo = x - lo->first, dhi = hi->first - x;
  if (dlo < dhi) return sign | lo->second;
  if (dhi < dlo) return sign | hi->second;
  return sign | ((lo->second & 1) == 0 ? lo->second : hi->second);  // tie: the even pattern
}

std::vector<float> test_floats() {
  std::vector<float> values;
  std::mt19937 rng(1234);
  std::uniform_int_distribution<uint32_t> any_bits;
  for (int i = 0; i < 1'000'000; ++i) {
    const float f = std::bit_cast<float>(any_bits(rng));
    if (!std::isnan(f)) values.push_back(f);
  }
  // Values in the interesting ranges: around 1, the f16 range, and f16/bf16 subnormals.
  std::uniform_real_distribution<float> unit(-2.f, 2.f), wide(-70000.f, 70000.f), tiny(-1e-4f, 1e-4f);
  for (int i = 0; i < 200'000; ++i) values.insert(values.end(), {unit(rng), wide(rng), tiny(rng), tiny(rng) * 1e-3f});
  // Exact ties: halfway between adjacent f16 / bf16 values (representable in float).
  for (uint32_t bits = 0; bits < 0x7bff; bits += 7) {
    values.push_back(float((decode_binary16(uint16_t(bits)) + decode_binary16(uint16_t(bits + 1))) / 2));
  }
  for (uint32_t bits = 0; bits < 0x7f7f; bits += 7) values.push_back(std::bit_cast<float>((bits << 16) | 0x8000u));
  for (float f : {0.f, -0.f, 65504.f, 65519.f, 65520.f, 65536.f, 1e-8f, 2.98e-8f, 2.9802322e-8f, 5.96e-8f,
                  6.1035156e-05f, 3.4e38f, -3.4e38f, INFINITY, -INFINITY, 1.17549435e-38f, 1e-45f, 3.3895314e38f})
    values.push_back(f);
  return values;
}

}  // namespace

TEST_CASE("half.every_bit_pattern_round_trips_through_float") {
  int nan_patterns = 0;
  for (uint32_t bits = 0; bits <= 0xffff; ++bits) {
    const float f = hg::half::from_bits(uint16_t(bits));
    const hg::half back(f);
    if (std::isnan(f)) {
      ++nan_patterns;
      CHECK(std::isnan(float(back)));
    } else {
      REQUIRE(back.bits == bits);
      CHECK(double(f) == decode_binary16(uint16_t(bits)));  // widening is exact
    }
  }
  CHECK(nan_patterns == 2 * 1023);
}

TEST_CASE("bfloat16.every_bit_pattern_round_trips_through_float") {
  for (uint32_t bits = 0; bits <= 0xffff; ++bits) {
    const float f = hg::bfloat16::from_bits(uint16_t(bits));
    const hg::bfloat16 back(f);
    if (std::isnan(f)) {
      CHECK(std::isnan(float(back)));
    } else {
      REQUIRE(back.bits == bits);
      CHECK(double(f) == decode_bfloat16(uint16_t(bits)));
    }
  }
}

TEST_CASE("half.rounding_matches_independent_reference") {
  const std::vector<float> values = test_floats();
  REQUIRE(values.size() > 1'000'000);
  int64_t mismatches = 0;
  for (float f : values) {
    const uint16_t expected = reference_round(f16_table(), f, 0x7c00);
    if (hg::half(f).bits != expected || hg::detail::float_to_f16_bits_portable(f) != expected) ++mismatches;
  }
  CHECK(mismatches == 0);
  // Specific cases, spelled out.
  CHECK(hg::half(65504.f).bits == 0x7bff);
  CHECK(hg::half(65520.f).bits == 0x7c00);       // halfway to the next step: rounds to inf
  CHECK(hg::half(65519.f).bits == 0x7bff);
  CHECK(hg::half(2.9802322e-8f).bits == 0x0000);  // 2^-25: a tie between 0 and the smallest subnormal
  CHECK(hg::half(5.9604645e-8f).bits == 0x0001);  // 2^-24: the smallest subnormal
  CHECK(hg::half(-0.f).bits == 0x8000);
  CHECK(std::isnan(float(hg::half(NAN))));
}

TEST_CASE("bfloat16.rounding_matches_independent_reference") {
  const std::vector<float> values = test_floats();
  int64_t mismatches = 0;
  for (float f : values) {
    const uint16_t expected = reference_round(bf16_table(), f, 0x7f80);
    if (hg::bfloat16(f).bits != expected) ++mismatches;
  }
  CHECK(mismatches == 0);
  CHECK(hg::bfloat16(1.00390625f).bits == 0x3f80);  // tie (1 + 2^-8) rounds to even 1.0
  CHECK(hg::bfloat16(1.01171875f).bits == 0x3f82);  // tie rounds up to the even pattern
  CHECK(hg::bfloat16(3.4e38f).bits == 0x7f80);      // overflow to inf
}

TEST_CASE("half.bulk_converters_match_portable_code_at_every_cpu_level") {
  const std::vector<float> values = test_floats();
  const hg::cpu::Isa in_use = hg::cpu::isa();
  for (hg::cpu::Isa level : {hg::cpu::Isa::Generic, hg::cpu::Isa::Avx2, hg::cpu::Isa::Avx512, hg::cpu::Isa::Avx512Bf16,
                             hg::cpu::Isa::Amx, hg::cpu::Isa::Neon, hg::cpu::Isa::NeonBf16}) {
    if (!hg::cpu::level_includes(in_use, level)) continue;  // (levels above HG_CPU_ISA or the CPU's are not tried)
    CAPTURE(hg::cpu::isa_name(level));
    hg::cpu::set_isa(level);
    std::vector<hg::half> h(values.size());
    std::vector<hg::bfloat16> b(values.size());
    hg::convert_from_float(values.data(), h.data(), values.size());
    hg::convert_from_float(values.data(), b.data(), values.size());
    int64_t bad = 0;
    for (size_t i = 0; i < values.size(); ++i) {
      bad += h[i].bits != hg::detail::float_to_f16_bits_portable(values[i]);
      bad += b[i].bits != hg::detail::float_to_bf16_bits_portable(values[i]);
    }
    CHECK(bad == 0);
    std::vector<float> back_h(values.size()), back_b(values.size());
    hg::convert_to_float(h.data(), back_h.data(), h.size());
    hg::convert_to_float(b.data(), back_b.data(), b.size());
    for (size_t i = 0; i < values.size(); i += 97) {
      REQUIRE(std::bit_cast<uint32_t>(back_h[i]) == std::bit_cast<uint32_t>(hg::detail::f16_bits_to_float_portable(h[i].bits)));
      REQUIRE(std::bit_cast<uint32_t>(back_b[i]) == std::bit_cast<uint32_t>(hg::detail::bf16_bits_to_float(b[i].bits)));
    }
  }
  hg::cpu::set_isa(in_use);
  MESSAGE("CPU level " << hg::cpu::isa_summary() << "; F16C: " << hg::cpu::has_f16c()
                       << ", AVX512-BF16: " << hg::cpu::has_avx512_bf16());
}

TEST_CASE("half.subnormals_survive_the_avx512_bf16_path") {
  // vcvtneps2bf16 flushes float subnormals to zero; the fix-up must restore exact rounding.
  std::vector<float> subnormals;
  for (uint32_t m = 1; m < 0x800000; m += 4099) subnormals.push_back(std::bit_cast<float>(m));
  subnormals.resize(subnormals.size() / 16 * 16);
  std::vector<hg::bfloat16> out(subnormals.size());
  hg::convert_from_float(subnormals.data(), out.data(), subnormals.size());
  for (size_t i = 0; i < subnormals.size(); ++i)
    REQUIRE(out[i].bits == hg::detail::float_to_bf16_bits_portable(subnormals[i]));
}

TEST_CASE("half.round_through_equals_a_conversion_and_back") {
  // round_through<bfloat16> rounds the float's bits in place (no 16-bit buffer); both must give
  // float(T(v)) bit for bit, NaN payloads, ties, subnormals and overflow included.
  std::vector<float> values = test_floats();
  for (uint32_t nan : {0x7fc00000u, 0x7f800001u, 0xffc00001u, 0x7fbfffffu, 0xff800001u, 0x7fffffffu, 0x7f80ffffu})
    values.push_back(std::bit_cast<float>(nan));  // quiet, signalling, with payloads below the kept half
  std::vector<float> b = values, h = values;
  hg::round_through<hg::bfloat16>(b.data(), b.size());
  hg::round_through<hg::half>(h.data(), h.size());
  int64_t bad = 0;
  for (size_t i = 0; i < values.size(); ++i) {
    bad += std::bit_cast<uint32_t>(b[i]) !=
           std::bit_cast<uint32_t>(hg::detail::bf16_bits_to_float(hg::detail::float_to_bf16_bits_portable(values[i])));
    bad += std::bit_cast<uint32_t>(h[i]) !=
           std::bit_cast<uint32_t>(hg::detail::f16_bits_to_float_portable(hg::detail::float_to_f16_bits_portable(values[i])));
  }
  CHECK(bad == 0);
  CHECK(values.size() > 100000);
}
