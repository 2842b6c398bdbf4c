// Philox4x32-10 and the random factories: a known-answer vector of the generator, reproducibility
// under manual_seed, independence from the thread count, and the statistics of 10^6 draws.
#include <cmath>
#include <set>

#include "core/philox.h"
#include "test_support.h"

TEST_CASE("rng.philox_known_answer") {
  // Random123's published known-answer test for philox4x32-10: counter 0, key 0.
  const hg::philox::Block b = hg::philox::generate(0, 0);
  CHECK(b.v[0] == 0x6627e8d5u);
  CHECK(b.v[1] == 0xe169c58du);
  CHECK(b.v[2] == 0xbc57ac4cu);
  CHECK(b.v[3] == 0x9b00dbd8u);
}

TEST_CASE("rng.philox_batches_are_the_blocks_one_at_a_time") {
  // generate_batch (the CPU loops' vectorised form, dropout's masks) against generate (CUDA's and
  // the factories'), also where the counter's low word wraps and with a 64-bit key.
  for (const uint64_t seed : {uint64_t(0), uint64_t(42), uint64_t(0x123456789abcdef0)})
    for (const uint64_t first : {uint64_t(0), uint64_t(0xFFFFFFF8), uint64_t(1) << 40}) {
      uint32_t words[4][hg::philox::kBatch];
      hg::philox::generate_batch(seed, first, words);
      for (int l = 0; l < hg::philox::kBatch; ++l) {
        const hg::philox::Block b = hg::philox::generate(seed, first + uint64_t(l));
        for (int w = 0; w < 4; ++w) CHECK(words[w][l] == b.v[w]);
      }
    }
}

TEST_CASE("rng.manual_seed_reproduces_every_factory") {
  hg::manual_seed(42);
  const auto a = hg::randn({100}).to_vector<float>();
  const auto b = hg::rand({100}).to_vector<float>();
  const auto c = hg::randint(0, 10, {100}, {.dtype = hg::i64}).to_vector<int64_t>();
  hg::manual_seed(42);
  CHECK(hg::randn({100}).to_vector<float>() == a);
  CHECK(hg::rand({100}).to_vector<float>() == b);
  CHECK(hg::randint(0, 10, {100}, {.dtype = hg::i64}).to_vector<int64_t>() == c);
  hg::manual_seed(43);
  CHECK(hg::randn({100}).to_vector<float>() != a);
}

TEST_CASE("rng.results_do_not_depend_on_thread_count") {
  const int threads = hg::get_num_threads();
  hg::set_num_threads(1);
  hg::manual_seed(7);
  const auto one = hg::randn({300000}).to_vector<float>();
  hg::set_num_threads(2);
  hg::manual_seed(7);
  const auto two = hg::randn({300000}).to_vector<float>();
  hg::set_num_threads(threads);
  CHECK(one == two);
}

TEST_CASE("rng.uniform_statistics") {
  hg::manual_seed(1);
  const auto u = hg::rand({1000000}, {.dtype = hg::f64}).to_vector<double>();
  double mean = 0, var = 0, lo = 1, hi = 0;
  for (double v : u) mean += v, lo = std::min(lo, v), hi = std::max(hi, v);
  mean /= double(u.size());
  for (double v : u) var += (v - mean) * (v - mean);
  var /= double(u.size());
  CHECK(mean == doctest::Approx(0.5).epsilon(0.003));
  CHECK(var == doctest::Approx(1.0 / 12).epsilon(0.01));
  CHECK(lo >= 0.0);
  CHECK(hi < 1.0);
  // 16-bit uniforms never round up to 1.0.
  for (hg::DType d : {hg::f16, hg::bf16}) CHECK(hg::amax(hg::rand({100000}, {.dtype = d}).to(hg::f32), 0).item<float>() < 1.f);
}

TEST_CASE("rng.normal_statistics") {
  hg::manual_seed(2);
  const auto z = hg::randn({1000000}).to_vector<float>();
  double mean = 0, var = 0;
  for (float v : z) mean += v;
  mean /= double(z.size());
  for (float v : z) var += (v - mean) * (v - mean);
  var /= double(z.size());
  CHECK(std::fabs(mean) < 0.005);
  CHECK(var == doctest::Approx(1.0).epsilon(0.01));
}

TEST_CASE("rng.randint_covers_the_range") {
  hg::manual_seed(3);
  const auto r = hg::randint(-3, 4, {10000}, {.dtype = hg::i32}).to_vector<int32_t>();
  const std::set<int32_t> seen(r.begin(), r.end());
  CHECK(seen == std::set<int32_t>{-3, -2, -1, 0, 1, 2, 3});
  CHECK_THROWS_HG(hg::randint(5, 5, {2}), "expected low < high");
  CHECK_THROWS_HG(hg::randn({2}, {.dtype = hg::i64}), "expected a floating dtype");
}
