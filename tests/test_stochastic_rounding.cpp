// Stochastic rounding (hg::stochastic_round, f32 -> bf16/f16) and pure 16-bit training with it
// (optim's Rounding::Stochastic / Rounding::Kahan): exact values unchanged on all 2^16 codes, NaN
// and inf kept, overflow as documented, unbiased within a few standard errors, the probability of
// rounding up equal to the fraction of an ulp, reproducible for a seed and the same for any
// thread count and CPU level; the test (1.0 + 1e-3, a thousand times, in bf16: 2.00 with
// stochastic rounding, 1.0 with nearest); the optimizers' pure-bf16 mode, its memory per
// parameter, its errors and its bitwise resume through hg::Checkpoint.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <vector>

#include "ops/stochastic_round.h"
#include "test_support.h"

using hg::Tensor;

namespace {

// The 16-bit codes of a bf16 or f16 tensor.
std::vector<uint16_t> codes(const Tensor& t) {
  const Tensor c = t.contiguous();
  std::vector<uint16_t> out(size_t(c.numel()));
  std::memcpy(out.data(), c.raw_data(), out.size() * 2);
  return out;
}

// n copies of x rounded stochastically with `seed`: the mean and the share that went up from lo
// (the 16-bit neighbour at or below |x|).
struct Draws {
  double mean = 0, up = 0;
};
Draws draw(float x, float lo, hg::DType dtype, int64_t n, uint64_t seed) {
  const Tensor r = hg::stochastic_round(hg::full({n}, double(x)), dtype, seed, 0).to(hg::f32);
  Draws d;
  int64_t up = 0;
  for (float v : r.to_vector<float>()) {
    d.mean += double(v);
    up += std::fabs(v) > lo;
  }
  d.mean /= double(n);
  d.up = double(up) / double(n);
  return d;
}

// The message of the hg::Error f throws ("no error" if none).
std::string message(const std::function<void()>& f) {
  try {
    f();
  } catch (const hg::Error& e) {
    return std::string(e.what());
  }
  return std::string("no error");
}

// The fraction of the way from the 16-bit value at or below |x| to the next one.
double fraction_of_ulp(float x, float lo, float hi) { return (double(std::fabs(x)) - lo) / (double(hi) - lo); }

}  // namespace

// ---- the op ----------------------------------------------------------------------------------

TEST_CASE("stochastic_round.exact_values_are_unchanged_on_every_code") {
  for (const hg::DType dtype : {hg::bf16, hg::f16}) {
    INFO(dtype);
    std::vector<float> values;
    std::vector<uint16_t> expected;
    for (uint32_t bits = 0; bits < 65536; ++bits) {
      const uint16_t b = uint16_t(bits);
      const float f = dtype == hg::bf16 ? float(hg::bfloat16::from_bits(b)) : float(hg::half::from_bits(b));
      if (std::isnan(f)) continue;
      values.push_back(f);
      expected.push_back(b);
    }
    const Tensor x = hg::from_vector(values, {int64_t(values.size())});
    for (uint64_t seed = 0; seed < 3; ++seed) {
      const std::vector<uint16_t> got = codes(hg::stochastic_round(x, dtype, seed, 17 * seed));
      int64_t changed = 0;
      for (size_t i = 0; i < got.size(); ++i) changed += got[i] != expected[i];
      CHECK(changed == 0);
    }
  }
}

TEST_CASE("stochastic_round.nan_inf_and_signed_zero_are_kept") {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> values;
  for (int k = 0; k < 64; ++k) {
    values.push_back(inf);
    values.push_back(-inf);
    values.push_back(nan);
    values.push_back(-nan);
    values.push_back(-0.0f);
    values.push_back(std::bit_cast<float>(0x7fffffffu));  // the NaN with every mantissa bit set
  }
  const Tensor x = hg::from_vector(values, {int64_t(values.size())});
  for (const hg::DType dtype : {hg::bf16, hg::f16}) {
    INFO(dtype);
    const std::vector<float> got = hg::stochastic_round(x, dtype, 7, 0).to(hg::f32).to_vector<float>();
    for (size_t i = 0; i < got.size(); i += 6) {
      CHECK(got[i] == inf);
      CHECK(got[i + 1] == -inf);
      CHECK(std::isnan(got[i + 2]));
      CHECK(std::isnan(got[i + 3]));
      CHECK((got[i + 4] == 0.0f && std::signbit(got[i + 4])));
      CHECK(std::isnan(got[i + 5]));
    }
  }
}

TEST_CASE("stochastic_round.rounds_up_with_the_fraction_of_an_ulp_and_is_unbiased") {
  // 2^16 draws each: the share that rounds up has a standard error of at most 0.002; the mean's is
  // ulp * sqrt(p (1 - p) / n). Bounds of 5 standard errors (a fixed seed: the test is deterministic).
  constexpr int64_t kDraws = 65536;
  struct Case {
    float x, lo, hi;
    hg::DType dtype;
  };
  const float bf16_ulp = std::ldexp(1.0f, -7);
  std::vector<Case> cases;
  cases.push_back({1.0f + 0.3f * bf16_ulp, 1.0f, 1.0f + bf16_ulp, hg::bf16});
  cases.push_back({-(1.0f + 0.7f * bf16_ulp), 1.0f, 1.0f + bf16_ulp, hg::bf16});
  cases.push_back({1.0f + 1e-3f, 1.0f, 1.0f + bf16_ulp, hg::bf16});  // the increment: p = 0.128
  cases.push_back({3.0e-39f, 2.9848e-39f, 2.9848e-39f + 9.1835e-41f, hg::bf16});  // f32/bf16 subnormals
  const float f16_ulp = std::ldexp(1.0f, -10);
  cases.push_back({1.0f + 0.25f * f16_ulp, 1.0f, 1.0f + f16_ulp, hg::f16});
  cases.push_back({1.5f * std::ldexp(1.0f, -24), std::ldexp(1.0f, -24), std::ldexp(1.0f, -23), hg::f16});  // subnormal
  cases.push_back({0.3f * std::ldexp(1.0f, -24), 0.0f, std::ldexp(1.0f, -24), hg::f16});  // below the smallest
  for (const Case& c : cases) {
    INFO("x = ", double(c.x), " to ", c.dtype);
    // lo/hi of the subnormal bf16 case: the exact neighbours, from the codes.
    float lo = c.lo, hi = c.hi;
    if (c.dtype == hg::bf16 && std::fabs(c.x) < 1e-38f) {
      const uint32_t bits = std::bit_cast<uint32_t>(c.x) & 0xffff0000u;
      lo = std::bit_cast<float>(bits), hi = std::bit_cast<float>(bits + 0x10000u);
    }
    const double p = fraction_of_ulp(c.x, lo, hi);
    const Draws d = draw(c.x, lo, c.dtype, kDraws, 1234);
    CHECK(std::fabs(d.up - p) < 5 * std::sqrt(p * (1 - p) / kDraws) + 1e-9);
    const double mean_error = 5 * (double(hi) - lo) * std::sqrt(p * (1 - p) / kDraws);
    CHECK(std::fabs(d.mean - double(c.x)) <= mean_error + 1e-12 * std::fabs(c.x));
  }
}

TEST_CASE("stochastic_round.overflow_goes_to_inf_with_the_fraction_of_the_way_to_the_next_power") {
  // bf16: 0x7f7f (3.3895e38) is the largest; the next value is taken to be 2^128 (inf's code).
  const float largest = std::bit_cast<float>(0x7f7f0000u);
  const float quarter = std::bit_cast<float>(0x7f7f4000u);  // a quarter of the way to 2^128
  const std::vector<float> r = hg::stochastic_round(hg::full({65536}, double(quarter)), hg::bf16, 3, 0).to(hg::f32).to_vector<float>();
  int64_t infs = 0;
  for (float v : r) {
    CHECK((v == largest || std::isinf(v)));
    infs += std::isinf(v);
  }
  CHECK(std::fabs(double(infs) / 65536 - 0.25) < 0.01);
  const float f32_max = std::numeric_limits<float>::max();
  const std::vector<float> m = hg::stochastic_round(hg::full({4096}, -double(f32_max)), hg::bf16, 3, 0).to(hg::f32).to_vector<float>();
  int64_t negative_infs = 0;
  for (float v : m) negative_infs += v == -std::numeric_limits<float>::infinity();
  CHECK(negative_infs > 4000);  // f32's max is 0.99998 of the way
  // f16: 65504 is the largest; 65512 goes to inf a quarter of the time, 70000 always.
  const std::vector<float> h = hg::stochastic_round(hg::full({65536}, 65512.0), hg::f16, 3, 0).to(hg::f32).to_vector<float>();
  int64_t f16_infs = 0;
  for (float v : h) f16_infs += std::isinf(v);
  CHECK(std::fabs(double(f16_infs) / 65536 - 0.25) < 0.01);
  for (float v : hg::stochastic_round(hg::full({256}, -70000.0), hg::f16, 3, 0).to(hg::f32).to_vector<float>())
    CHECK(v == -std::numeric_limits<float>::infinity());
}

TEST_CASE("stochastic_round.reproducible_for_a_seed_and_the_same_for_any_threads_and_cpu_level") {
  hg::manual_seed(11);
  const Tensor x = hg::randn({200001});  // several parallel chunks and a ragged end
  const std::vector<uint16_t> a = codes(hg::stochastic_round(x, hg::bf16, 42, 1000));
  CHECK(codes(hg::stochastic_round(x, hg::bf16, 42, 1000)) == a);
  CHECK(codes(hg::stochastic_round(x, hg::bf16, 43, 1000)) != a);  // another seed
  CHECK(codes(hg::stochastic_round(x, hg::bf16, 42, 1001)) != a);  // another offset
  const int threads = hg::get_num_threads();
  hg::set_num_threads(1);
  const std::vector<uint16_t> one_thread = codes(hg::stochastic_round(x, hg::bf16, 42, 1000));
  const std::vector<uint16_t> one_thread_f16 = codes(hg::stochastic_round(x, hg::f16, 42, 1000));
  hg::set_num_threads(std::max(threads, 3));
  CHECK(one_thread == a);
  CHECK(codes(hg::stochastic_round(x, hg::f16, 42, 1000)) == one_thread_f16);
  hg::set_num_threads(threads);
  const hg::cpu::Isa level = hg::cpu::set_isa(hg::cpu::Isa::Generic);
  const std::vector<uint16_t> generic = codes(hg::stochastic_round(x, hg::bf16, 42, 1000));
  hg::cpu::set_isa(level);
  CHECK(generic == a);
  // The default generator: reproducible under manual_seed, and the next call draws new bits.
  hg::manual_seed(5);
  const std::vector<uint16_t> first = codes(hg::stochastic_round(x, hg::bf16));
  const std::vector<uint16_t> second = codes(hg::stochastic_round(x, hg::bf16));
  hg::manual_seed(5);
  CHECK(codes(hg::stochastic_round(x, hg::bf16)) == first);
  CHECK(second != first);
}

TEST_CASE("stochastic_round.element_i_uses_counter_offset_plus_i_over_8") {
  // Rounding a tensor in two pieces, the second starting 512 / 8 counters later, gives the same
  // bits as rounding it whole: how a caller streams over several tensors.
  hg::manual_seed(3);
  const Tensor x = hg::randn({1000});
  const std::vector<uint16_t> whole = codes(hg::stochastic_round(x, hg::bf16, 9, 100));
  std::vector<uint16_t> pieces = codes(hg::stochastic_round(hg::narrow(x, 0, 0, 512), hg::bf16, 9, 100));
  const std::vector<uint16_t> rest = codes(hg::stochastic_round(hg::narrow(x, 0, 512, 488), hg::bf16, 9, 100 + 64));
  pieces.insert(pieces.end(), rest.begin(), rest.end());
  CHECK(pieces == whole);
  // A non-contiguous input rounds as its contiguous copy.
  const Tensor m = hg::randn({64, 33});
  CHECK(codes(hg::stochastic_round(m.transpose(0, 1), hg::bf16, 1, 0)) ==
        codes(hg::stochastic_round(m.transpose(0, 1).contiguous(), hg::bf16, 1, 0)));
  // Zero-size and 0-d tensors.
  CHECK(hg::stochastic_round(hg::zeros({0, 3}), hg::bf16, 1, 0).shape() == hg::Shape{0, 3});
  CHECK(hg::stochastic_round(hg::full({}, 2.0), hg::bf16, 1, 0).to(hg::f32).item<float>() == 2.0f);
}

TEST_CASE("stochastic_round.issue_31_one_plus_1e-3_a_thousand_times_in_bf16") {
  // w <- round(w + 1e-3), 1000 times from 1.0, the sum in f32 and the result stored in bf16 (as a
  // pure-bf16 optimizer does). bf16's ulp at 1.0 is 2^-7 = 0.0078: 1e-3 is below half of it, so
  // nearest rounding returns 1.0 every time. 1024 independent copies at once (an element is a random
  // walk: 0.08 standard deviation at the end; their mean's standard error is 0.0026).
  constexpr int64_t kCopies = 1024;
  Tensor nearest = hg::ones({kCopies}, {.dtype = hg::bf16});
  Tensor stochastic = nearest.clone();
  for (int step = 0; step < 1000; ++step) {
    nearest = (nearest.to(hg::f32) + 1e-3).to(hg::bf16);
    stochastic = hg::stochastic_round(stochastic.to(hg::f32) + 1e-3, hg::bf16, 31, uint64_t(step) * kCopies);
  }
  const double nearest_mean = hg::mean(nearest.to(hg::f32)).item<double>();
  const double stochastic_mean = hg::mean(stochastic.to(hg::f32)).item<double>();
  MESSAGE("1.0 + 1e-3 x 1000 in bf16: nearest ", nearest_mean, ", stochastic mean of ", kCopies, " copies ",
          stochastic_mean, " (element 0: ", stochastic.to(hg::f32).to_vector<float>()[0], ")");
  CHECK(nearest_mean == 1.0);
  CHECK(std::fabs(stochastic_mean - 2.0) < 0.05);
  CHECK(std::fabs(stochastic_mean - 2.0) < 5 * 0.0026);  // and within 5 of its standard errors
}

TEST_CASE("stochastic_round.errors") {
  CHECK(message([] { hg::stochastic_round(hg::ones({3}, {.dtype = hg::bf16}), hg::bf16, 0, 0); })
            .find("stochastic_round: expected an f32 tensor, got bf16") != std::string::npos);
  CHECK(message([] { hg::stochastic_round(hg::ones({3}, {.dtype = hg::f64}), hg::bf16, 0, 0); })
            .find("expected an f32 tensor, got f64") != std::string::npos);
  CHECK(message([] { hg::stochastic_round(hg::ones({3}), hg::f32, 0, 0); })
            .find("the target dtype must be bf16 or f16, got f32") != std::string::npos);
  CHECK(message([] { hg::stochastic_round(hg::ones({3}), hg::i32); }).find("must be bf16 or f16") != std::string::npos);
  CHECK(message([] { hg::stochastic_round(Tensor(), hg::bf16); }).find("undefined tensor") != std::string::npos);
  if (hg_test::cuda_available())
    CHECK(message([] { hg::stochastic_round(hg::ones({3}).to(hg::Device::cuda()), hg::bf16, 0, 0); })
              .find("CPU only") != std::string::npos);
}

// ---- pure 16-bit training: the optimizers -----------------------------------------------------

namespace {

using hg::optim::Rounding;

// A parameter of n ones in `dtype`, and a gradient of -1 (so SGD adds lr each step).
Tensor ones_param(int64_t n, hg::DType dtype) { return hg::ones({n}, {.dtype = dtype}).requires_grad_(); }
void set_constant_grad(const Tensor& p, double g) { p.set_grad(hg::full(p.shape(), g, {.dtype = p.dtype()})); }

double mean_of(const Tensor& p) { return hg::mean(p.detach().to(hg::f32)).item<double>(); }

// A small regression in bf16 (weights and data): the loss at the end of `steps` steps.
struct Regression {
  Tensor x, target;
  Regression() {
    hg::manual_seed(2);
    x = hg::randn({64, 16});
    target = hg::linear(x, hg::randn({4, 16}) * 0.5);  // (64, 4)
  }
};

std::unique_ptr<hg::optim::Optimizer> make(const std::string& kind, const std::vector<Tensor>& params, Rounding rounding,
                                           uint64_t seed, bool master = false) {
  if (kind == "sgd")
    return std::make_unique<hg::optim::SGD>(params, hg::optim::SGDOptions{.lr = 0.05, .momentum = 0.9,
                                                                          .master_weights = master,
                                                                          .rounding = rounding, .seed = seed});
  if (kind == "adam")
    return std::make_unique<hg::optim::Adam>(params, hg::optim::AdamOptions{.lr = 1e-2, .master_weights = master,
                                                                            .rounding = rounding, .seed = seed});
  return std::make_unique<hg::optim::AdamW>(params, hg::optim::AdamWOptions{.lr = 1e-2, .master_weights = master,
                                                                            .rounding = rounding, .seed = seed});
}

// One training step of `model` on the regression (loss in f32).
double regression_step(hg::nn::Linear& model, hg::optim::Optimizer& opt, const Regression& data) {
  opt.zero_grad();
  const Tensor loss = hg::mse_loss(model(data.x.to(model.weight.dtype())).to(hg::f32), data.target);
  loss.backward();
  opt.step();
  return loss.item<double>();
}

}  // namespace

TEST_CASE("optim.pure_bf16.small_updates_survive_stochastic_and_kahan_rounding_not_nearest") {
  // SGD (no momentum) adding lr = 1e-3 to weights of 1.0 for 1000 steps: the test, through
  // the optimizer. f32 masters reach 2.0; nearest rounding stalls at 1.0; stochastic rounding
  // reaches 2.0 on average; Kahan reaches it in every element (to within one ulp, 2^-6 at 2.0).
  constexpr int64_t kN = 1024;
  struct Run {
    Rounding rounding;
    bool master;
  };
  std::vector<Run> runs = {{Rounding::Nearest, false}, {Rounding::Nearest, true}, {Rounding::Stochastic, false},
                           {Rounding::Kahan, false}};
  std::vector<Tensor> params;
  for (const Run& run : runs) {
    const Tensor p = ones_param(kN, hg::bf16);
    hg::optim::SGD opt({p}, {.lr = 1e-3, .master_weights = run.master, .rounding = run.rounding, .seed = 4});
    for (int step = 0; step < 1000; ++step) set_constant_grad(p, -1.0), opt.step();
    params.push_back(p);
  }
  CHECK(mean_of(params[0]) == 1.0);                       // nearest: every update lost
  CHECK(std::fabs(mean_of(params[1]) - 2.0) < 0.01);      // f32 masters
  CHECK(std::fabs(mean_of(params[2]) - 2.0) < 0.015);     // stochastic: 5 standard errors of the mean
  const std::vector<float> kahan = params[3].detach().to(hg::f32).to_vector<float>();
  for (float v : kahan) CHECK(std::fabs(v - 2.0f) <= 0.0157f);
  MESSAGE("SGD lr 1e-3, 1000 steps from 1.0 in bf16: nearest ", mean_of(params[0]), ", f32 masters ", mean_of(params[1]),
          ", stochastic ", mean_of(params[2]), ", Kahan ", mean_of(params[3]));
}

TEST_CASE("optim.pure_bf16.trains_a_regression_like_f32_masters") {
  const Regression data;
  for (const std::string kind : {"sgd", "adam", "adamw"}) {
    INFO(kind);
    double final_loss[3] = {0, 0, 0};  // f32 masters, stochastic, kahan
    for (int mode = 0; mode < 3; ++mode) {
      hg::manual_seed(8);
      hg::nn::Linear model(16, 4);
      model.to(hg::bf16);
      const Rounding rounding = mode == 0 ? Rounding::Nearest : mode == 1 ? Rounding::Stochastic : Rounding::Kahan;
      const auto opt = make(kind, model.parameters(), rounding, 5, mode == 0);
      for (int step = 0; step < 300; ++step) final_loss[mode] = regression_step(model, *opt, data);
    }
    MESSAGE(kind, ": final loss with f32 masters ", final_loss[0], ", stochastic ", final_loss[1], ", Kahan ", final_loss[2]);
    CHECK(final_loss[0] < 0.05);
    CHECK(final_loss[1] < 2 * final_loss[0] + 0.01);
    CHECK(final_loss[2] < 2 * final_loss[0] + 0.01);
  }
}

TEST_CASE("optim.pure_bf16.memory_per_parameter") {
  // Weight + its gradient + master + state, in bytes per parameter element.
  const Tensor b = ones_param(1000, hg::bf16), f = ones_param(1000, hg::f32);
  const auto per = [](const hg::optim::Optimizer& opt) { return opt.memory_use().bytes_per_parameter(); };
  CHECK(per(hg::optim::Adam({b}, {.rounding = Rounding::Stochastic})) == 8.0);   // bf16 w, g, m, v
  CHECK(per(hg::optim::AdamW({b}, {.rounding = Rounding::Kahan})) == 10.0);     // + the compensation
  CHECK(per(hg::optim::Adam({b}, {.master_weights = true})) == 16.0);          // bf16 w, g + f32 master, m, v
  CHECK(per(hg::optim::Adam({f})) == 16.0);                                    // f32 w, g, m, v
  CHECK(per(hg::optim::SGD({b}, {.lr = 0.1, .momentum = 0.9, .rounding = Rounding::Stochastic})) == 6.0);
  CHECK(per(hg::optim::SGD({b}, {.lr = 0.1, .rounding = Rounding::Stochastic})) == 4.0);
  const hg::optim::MemoryUse use = hg::optim::Adam({b}, {.rounding = Rounding::Stochastic}).memory_use();
  CHECK(use.parameters == 1000);
  CHECK(use.weight_bytes == 2000);
  CHECK(use.gradient_bytes == 2000);
  CHECK(use.master_bytes == 0);
  CHECK(use.state_bytes == 4000);
}

TEST_CASE("optim.pure_bf16.reproducible_for_a_seed_and_any_thread_count") {
  const auto run = [](uint64_t seed, int threads) {
    const int before = hg::get_num_threads();
    hg::set_num_threads(threads);
    hg::manual_seed(1);
    const Tensor p = (hg::randn({40001}) * 0.1 + 1.0).to(hg::bf16).requires_grad_();
    hg::optim::Adam opt({p}, {.lr = 1e-3, .rounding = Rounding::Stochastic, .seed = seed});
    for (int step = 0; step < 3; ++step) {
      p.set_grad((hg::randn({40001}) * 1e-2).to(hg::bf16));
      opt.step();
    }
    hg::set_num_threads(before);
    return codes(p.detach());
  };
  const std::vector<uint16_t> a = run(7, 1);
  CHECK(run(7, 3) == a);
  CHECK(run(8, 1) != a);
}

TEST_CASE("optim.pure_bf16.resumes_bitwise_through_a_checkpoint") {
  // N steps straight == N/2 steps, save (hg::Checkpoint: model + optimizer), load into a fresh
  // model and optimizer, N/2 steps: the same bits in every weight and state tensor.
  const Regression data;
  for (const std::string kind : {"sgd", "adam", "adamw"}) {
    for (const Rounding rounding : {Rounding::Stochastic, Rounding::Kahan}) {
      INFO(kind, " ", hg::optim::rounding_name(rounding));
      constexpr int kSteps = 10;
      hg::manual_seed(8);
      hg::nn::Linear straight(16, 4);
      straight.to(hg::bf16);
      const auto opt = make(kind, straight.parameters(), rounding, 77);
      hg::nn::Linear resumed(16, 4);  // (other initial weights: the checkpoint replaces them)
      resumed.to(hg::bf16);
      const auto opt2 = make(kind, resumed.parameters(), rounding, 1);  // another seed: the file's wins
      const std::string path = hg_test::temp_path("pure_bf16_" + kind + "_" + hg::optim::rounding_name(rounding) + ".safetensors");
      for (int step = 0; step < kSteps; ++step) {
        regression_step(straight, *opt, data);
        if (step + 1 == kSteps / 2) {
          hg::Checkpoint writer;
          writer.add("model", straight).add("optimizer", *opt);
          writer.save(path);
          hg::Checkpoint reader;
          reader.add("model", resumed).add("optimizer", *opt2);
          reader.load(path);
        }
      }
      for (int step = kSteps / 2; step < kSteps; ++step) regression_step(resumed, *opt2, data);
      CHECK(codes(resumed.weight.detach()) == codes(straight.weight.detach()));
      CHECK(codes(resumed.bias.detach()) == codes(straight.bias.detach()));
      const auto a = opt->state_dict(), b = opt2->state_dict();
      REQUIRE(a.size() == b.size());
      for (const auto& entry : a) {  // (no structured binding: clang 14 cannot capture one in INFO)
        const std::string& key = entry.first;
        const Tensor& t = entry.second;
        INFO(key);
        REQUIRE(b.count(key));
        if (t.dtype() == hg::bf16) CHECK(codes(b.at(key)) == codes(t));
        else if (t.dtype() == hg::i64) CHECK(b.at(key).to_vector<int64_t>() == t.to_vector<int64_t>());
      }
      CHECK(a.count("rounding.seed"));
      CHECK(a.at("rounding.offset").item<int64_t>() > 0);
      CHECK(a.count("state.0.compensation") == (rounding == Rounding::Kahan ? 1u : 0u));
      // Without the stream a fresh optimizer rounds differently (the comparison can fail).
      hg::manual_seed(8);
      hg::nn::Linear other(16, 4);
      other.to(hg::bf16);
      const auto opt3 = make(kind, other.parameters(), rounding, 78);
      for (int step = 0; step < kSteps; ++step) regression_step(other, *opt3, data);
      if (rounding == Rounding::Stochastic) CHECK(codes(other.weight.detach()) != codes(straight.weight.detach()));
    }
  }
}

TEST_CASE("optim.pure_bf16.errors") {
  const Tensor f = ones_param(3, hg::f32), d = ones_param(3, hg::f64), b = ones_param(3, hg::bf16);
  CHECK(message([&] { hg::optim::Adam({f}, {.rounding = Rounding::Stochastic}); })
            .find("rounding = stochastic keeps bf16 (or f16) parameters without f32 masters, but parameter 0 (shape [3]) "
                  "is f32") != std::string::npos);
  CHECK(message([&] { hg::optim::SGD({b, d}, {.lr = 0.1, .rounding = Rounding::Kahan}); })
            .find("parameter 1 (shape [3]) is f64") != std::string::npos);
  CHECK(message([&] { hg::optim::AdamW({b}, {.master_weights = true, .rounding = Rounding::Stochastic}); })
            .find("set master_weights or the rounding, not both") != std::string::npos);
  CHECK(message([&] {
          hg::optim::SGD opt({b}, {.lr = 0.1, .rounding = Rounding::Stochastic});
          opt.add_param_group({f}, 0.1);
        }).find("is f32") != std::string::npos);
  // A state dict with a rounding stream loads only into an optimizer that rounds stochastically (or
  // Kahan), and one without it only into a nearest one.
  hg::optim::Adam stochastic({b}, {.rounding = Rounding::Stochastic});
  set_constant_grad(b, 1.0);
  stochastic.step();
  const Tensor b2 = ones_param(3, hg::bf16);
  hg::optim::Adam nearest({b2});
  CHECK(message([&] { nearest.load_state_dict(stochastic.state_dict()); })
            .find("holds a rounding stream (rounding.seed, rounding.offset) of an optimizer with stochastic or Kahan "
                  "rounding, but this one rounds to nearest") != std::string::npos);
  set_constant_grad(b2, 1.0);
  nearest.step();
  const Tensor b3 = ones_param(3, hg::bf16);
  hg::optim::Adam stochastic2({b3}, {.rounding = Rounding::Stochastic});
  CHECK(message([&] { stochastic2.load_state_dict(nearest.state_dict()); })
            .find("has no rounding.seed / rounding.offset, but this optimizer rounds stochastic") != std::string::npos);
  const Tensor b4 = ones_param(3, hg::bf16);
  hg::optim::Adam kahan({b4}, {.rounding = Rounding::Kahan});
  CHECK(message([&] { kahan.load_state_dict(stochastic.state_dict()); })
            .find("lacks state.0.compensation") != std::string::npos);
  if (hg_test::cuda_available()) {
    const Tensor g = ones_param(3, hg::bf16).to(hg::Device::cuda()).detach().requires_grad_();
    hg::optim::SGD opt({g}, {.lr = 0.1, .rounding = Rounding::Stochastic});
    set_constant_grad(g, 1.0);
    CHECK(message([&] { opt.step(); }).find("runs on the CPU only for now") != std::string::npos);
  }
}
