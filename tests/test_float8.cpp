// The FP8 dtypes f8e4m3 and f8e5m2 (core/float8.h): every code decoded, every f16 and bf16 value
// and 2^20 random f32 values rounded, ties to even from f64, overflow in both modes -- all against
// ml_dtypes (tests/golden/make_float8.py writes tests/golden/float8.safetensors). Then what a user
// sees: the dtype table's entries, printing, safetensors, and the clear errors of a storage-only
// dtype.
#include <bit>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>

#include "fp8_test_values.h"
#include "test_support.h"

using hg::Tensor;

namespace {

const std::map<std::string, Tensor>& golden() {
  static const std::map<std::string, Tensor> file = hg::load(std::string(HG_TEST_DIR) + "/golden/float8.safetensors");
  return file;
}

const Tensor& golden_tensor(const std::string& name) {
  const auto it = golden().find(name);
  REQUIRE_MESSAGE(it != golden().end(), "float8.safetensors has no ", name, ": rerun tests/golden/make_float8.py");
  return it->second;
}

// The two formats, as the tests name them in the fixture.
struct Format {
  const char* name;
  hg::DType dtype;
  float largest;
};
const Format kFormats[] = {{"e4m3", hg::f8e4m3, 448.0f}, {"e5m2", hg::f8e5m2, 57344.0f}};

// Codes of `source` converted to `format`, as u8 (an FP8 tensor's bytes).
std::vector<uint8_t> codes_of(const Tensor& source, const Format& format,
                              hg::Float8Overflow overflow = hg::Float8Overflow::Default) {
  const Tensor converted = source.to(format.dtype, overflow);
  REQUIRE(converted.dtype() == format.dtype);
  std::vector<uint8_t> codes(size_t(converted.numel()));
  std::memcpy(codes.data(), converted.raw_data(), codes.size());
  return codes;
}

// The first index where the codes differ from the fixture's, with both codes and the source value.
void check_codes_equal(const std::vector<uint8_t>& got, const Tensor& expected, const Tensor& source) {
  const std::vector<uint8_t> want = expected.to_vector<uint8_t>();
  REQUIRE(got.size() == want.size());
  const std::vector<double> values = source.to_vector<double>();
  size_t mismatches = 0, first = 0;
  for (size_t i = 0; i < got.size(); ++i)
    if (got[i] != want[i] && mismatches++ == 0) first = i;
  INFO("first mismatch at ", first, ": source ", values[first], " gave code ", int(got[first]), ", ml_dtypes ",
       int(want[first]));
  CHECK(mismatches == 0);
}


// make_float8.py's random f32 values, from the same formula.
uint64_t splitmix64(uint64_t i) {
  uint64_t z = i * 0x9E3779B97F4A7C15ull + 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

Tensor random_f32_values() {
  const int64_t n = int64_t(1) << 20;
  Tensor t = hg::empty({n});
  auto* out = t.data_ptr<float>();
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t z = splitmix64(uint64_t(i));
    const auto raw = uint32_t(z >> 32);
    const uint32_t bits = z % 16 == 0 ? raw
                                      : (uint32_t(z >> 63) << 31) | ((103 + raw % 42) << 23) | uint32_t(z & 0x7fffff);
    out[i] = std::bit_cast<float>(bits);
  }
  return t;
}

Tensor from_codes(const std::vector<uint8_t>& codes, hg::DType dtype) {
  Tensor t = hg::empty({int64_t(codes.size())}, {.dtype = dtype});
  std::memcpy(t.raw_data(), codes.data(), codes.size());
  return t;
}

std::vector<uint8_t> all_codes() {
  std::vector<uint8_t> codes(256);
  for (int i = 0; i < 256; ++i) codes[size_t(i)] = uint8_t(i);
  return codes;
}

}  // namespace

TEST_CASE("float8.dtype_table_entries") {
  CHECK(hg::dtype_name(hg::f8e4m3) == "f8e4m3");
  CHECK(hg::dtype_name(hg::f8e5m2) == "f8e5m2");
  CHECK(hg::element_size(hg::f8e4m3) == 1);
  CHECK(hg::element_size(hg::f8e5m2) == 1);
  CHECK(hg::is_floating(hg::f8e4m3));
  CHECK(hg::is_float8(hg::f8e5m2));
  CHECK_FALSE(hg::is_float8(hg::u8));
  CHECK_FALSE(hg::is_16bit_floating(hg::f8e4m3));
  CHECK(hg::dtype_info(hg::f8e4m3).safetensors_name == "F8_E4M3");
  CHECK(hg::dtype_info(hg::f8e5m2).safetensors_name == "F8_E5M2");
  static_assert(hg::dtype_of<hg::float8_e4m3>() == hg::f8e4m3 && hg::dtype_of<hg::float8_e5m2>() == hg::f8e5m2);
}

TEST_CASE("float8.every_code_decodes_as_ml_dtypes") {
  for (const Format& format : kFormats) {
    CAPTURE(std::string(format.name));
    const std::vector<float> got = from_codes(all_codes(), format.dtype).to(hg::f32).to_vector<float>();
    const std::vector<float> want = golden_tensor(std::string(format.name) + ".values").to_vector<float>();
    int nans = 0;
    for (size_t code = 0; code < 256; ++code) {
      CAPTURE(code);
      if (std::isnan(want[code])) {
        CHECK(std::isnan(got[code]));
        ++nans;
      } else {
        CHECK(std::bit_cast<uint32_t>(got[code]) == std::bit_cast<uint32_t>(want[code]));  // -0 included
      }
    }
    CHECK(nans == (format.dtype == hg::f8e4m3 ? 2 : 6));  // e4m3fn: S.1111.111; e5m2: S.11111.{01,10,11}
    float largest = 0;
    for (const float v : want)
      if (std::isfinite(v)) largest = std::max(largest, v);
    CHECK(largest == format.largest);
  }
}

TEST_CASE("float8.every_code_round_trips_through_f32") {
  for (const Format& format : kFormats) {
    CAPTURE(std::string(format.name));
    const Tensor codes = from_codes(all_codes(), format.dtype);
    const std::vector<uint8_t> back = codes_of(codes.to(hg::f32), format);
    const std::vector<float> values = codes.to(hg::f32).to_vector<float>();
    for (size_t code = 0; code < 256; ++code) {
      CAPTURE(code);
      if (std::isnan(values[code])) CHECK(std::isnan(float(from_codes({back[code]}, format.dtype).to(hg::f32).item<float>())));
      else CHECK(back[code] == code);
    }
  }
}

TEST_CASE("float8.every_f16_and_bf16_value_rounds_as_ml_dtypes") {
  for (const Format& format : kFormats) {
    for (const hg::DType source_dtype : {hg::f16, hg::bf16}) {
      CAPTURE(std::string(format.name));
      CAPTURE(source_dtype);
      const Tensor source = hg_test::all_16bit_values(source_dtype);
      const std::string key = std::string(format.name) + ".from_" + std::string(hg::dtype_name(source_dtype));
      check_codes_equal(codes_of(source, format), golden_tensor(key), source);
      check_codes_equal(codes_of(source, format, hg::Float8Overflow::Saturate), golden_tensor(key + "_saturate"),
                        source);
    }
  }
}

TEST_CASE("float8.a_million_random_f32_values_round_as_ml_dtypes") {
  const Tensor source = random_f32_values();
  for (const Format& format : kFormats) {
    CAPTURE(std::string(format.name));
    check_codes_equal(codes_of(source, format), golden_tensor(std::string(format.name) + ".from_random_f32"), source);
  }
}

TEST_CASE("float8.ties_round_to_even_straight_from_f64") {
  // Each midpoint between adjacent codes is a tie; from f64 it is rounded once (not via f32).
  for (const Format& format : kFormats) {
    CAPTURE(std::string(format.name));
    const Tensor midpoints = golden_tensor(std::string(format.name) + ".midpoints");
    REQUIRE(midpoints.dtype() == hg::f64);
    const std::vector<uint8_t> got = codes_of(midpoints, format);
    check_codes_equal(got, golden_tensor(std::string(format.name) + ".from_midpoints"), midpoints);
    for (const uint8_t code : got) CHECK(code % 2 == 0);  // the even neighbour, every time
  }
}

TEST_CASE("float8.overflow_gives_nan_or_inf_unless_saturating") {
  const Tensor x = hg::from_vector(std::vector<float>{464.f, 465.f, -1000.f, INFINITY, -INFINITY, NAN, 57344.f, 61440.f}, {8});
  const std::vector<float> e4m3 = x.to(hg::f8e4m3).to(hg::f32).to_vector<float>();
  CHECK(e4m3[0] == 448.f);  // a tie between 448 and 480 (not a code): to even, 448
  CHECK(std::isnan(e4m3[1]));
  CHECK(std::isnan(e4m3[2]));
  CHECK(std::isnan(e4m3[3]));  // e4m3fn has no inf
  const std::vector<float> e4m3_sat = x.to(hg::f8e4m3, hg::Float8Overflow::Saturate).to(hg::f32).to_vector<float>();
  CHECK(e4m3_sat[1] == 448.f);
  CHECK(e4m3_sat[2] == -448.f);
  CHECK(e4m3_sat[3] == 448.f);
  CHECK(e4m3_sat[4] == -448.f);
  CHECK(std::isnan(e4m3_sat[5]));  // NaN stays NaN
  const std::vector<float> e5m2 = x.to(hg::f8e5m2).to(hg::f32).to_vector<float>();
  CHECK(e5m2[6] == 57344.f);
  CHECK(e5m2[7] == INFINITY);  // the tie between 57344 and (would-be) 65536 goes to inf
  CHECK(e5m2[4] == -INFINITY);
  const std::vector<float> e5m2_sat = x.to(hg::f8e5m2, hg::Float8Overflow::Saturate).to(hg::f32).to_vector<float>();
  CHECK(e5m2_sat[7] == 57344.f);
  CHECK(e5m2_sat[4] == -57344.f);
}

TEST_CASE("float8.converts_strided_broadcast_and_from_every_dtype") {
  const Tensor x = hg::arange(12).reshape({3, 4}).t();  // strided source
  CHECK(x.to(hg::f8e4m3).to(hg::f32).to_vector<float>() == x.contiguous().to_vector<float>());
  Tensor dst = hg::zeros({2, 3}, {.dtype = hg::f8e5m2});
  dst.copy_(hg::from_vector(std::vector<float>{1.f, 2.f, 3.f}, {3}));  // broadcast into FP8
  CHECK(dst.to(hg::f32).to_vector<float>() == std::vector<float>{1, 2, 3, 1, 2, 3});
  CHECK(hg::full({2}, 0.3, {.dtype = hg::f8e4m3}).to(hg::f32).to_vector<float>() ==
        std::vector<float>(2, float(hg::float8_e4m3(0.3))));
  CHECK(float(hg::float8_e4m3(0.3)) == 0.3125f);  // the nearest e4m3: 1.010b * 2^-2
  CHECK(hg::from_vector(std::vector<int64_t>{-3, 7}, {2}).to(hg::f8e5m2).to(hg::i32).to_vector<int32_t>() ==
        std::vector<int32_t>{-3, 7});
  CHECK(hg::from_vector(std::vector<float>{2.5f}, {1}).to(hg::f8e4m3).to(hg::f8e5m2).to(hg::f32).item<float>() == 2.5f);
}

TEST_CASE("float8.prints_its_values_and_dtype") {
  std::ostringstream os;
  os << hg::from_vector(std::vector<float>{0.3f, -448.f}, {2}).to(hg::f8e4m3);
  INFO(os.str());
  CHECK(os.str().find("3.1250e-01") != std::string::npos);
  CHECK(os.str().find("-4.4800e+02") != std::string::npos);
  CHECK(os.str().find("dtype=f8e4m3") != std::string::npos);
  std::ostringstream name;
  name << hg::f8e5m2;
  CHECK(name.str() == "f8e5m2");
}

TEST_CASE("float8.safetensors_round_trip_and_a_file_for_torch") {
  // The 256 codes of each format, in order: tests/golden/make_float8.py --check-torch FILE loads
  // this file with torch's safetensors loader (torch.float8_e4m3fn / float8_e5m2) and checks them.
  const std::string path = std::string(HG_TEST_BINARY_DIR) + "/float8_for_torch.safetensors";
  const Tensor e4m3 = from_codes(all_codes(), hg::f8e4m3), e5m2 = from_codes(all_codes(), hg::f8e5m2);
  hg::save(path, {{"e4m3", e4m3}, {"e5m2", e5m2}});
  const auto back = hg::load(path);
  CHECK(back.at("e4m3").dtype() == hg::f8e4m3);
  CHECK(back.at("e5m2").dtype() == hg::f8e5m2);
  CHECK(std::memcmp(back.at("e4m3").raw_data(), e4m3.raw_data(), 256) == 0);
  CHECK(std::memcmp(back.at("e5m2").raw_data(), e5m2.raw_data(), 256) == 0);
  std::ifstream file(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(file)), {});
  CHECK(bytes.find("\"dtype\":\"F8_E4M3\"") != std::string::npos);
  CHECK(bytes.find("\"dtype\":\"F8_E5M2\"") != std::string::npos);
}

TEST_CASE("float8.is_storage_only_with_clear_errors") {
  const Tensor x = hg::from_vector(std::vector<float>{1.f, -2.f}, {2}).to(hg::f8e4m3);
  CHECK_THROWS_HG(hg::relu(x), "storage only");
  CHECK_THROWS_HG(x + x, "storage only");
  CHECK_THROWS_HG(hg::matmul(x.reshape({1, 2}), x.reshape({2, 1})), "storage only");
  CHECK_THROWS_HG(x + hg::ones({2}), "do not promote");
  CHECK_THROWS_HG(hg::randn({2}, {.dtype = hg::f8e5m2}), "storage only");
  CHECK_THROWS_HG(hg::promote_types(hg::f8e4m3, hg::f8e5m2), "convert it with .to(hg::f32)");
  CHECK(hg::promote_types(hg::f8e4m3, hg::f8e4m3) == hg::f8e4m3);
  // A cast to FP8 records no gradient (its gradient would be FP8, which no op computes on).
  Tensor w = hg::ones({2}).requires_grad_();
  CHECK_FALSE(w.to(hg::f8e4m3).requires_grad());
  CHECK(x.to(hg::f32).to_vector<float>() == std::vector<float>{1.f, -2.f});
}
