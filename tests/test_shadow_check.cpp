// amp::ShadowCheck (amp_tools/shadow_check.h): every autocast op re-run in f32 on the inputs its
// autocast run saw, and compare_step's per-parameter gradient errors. The numbers are checked
// against what arithmetic says they must be: 0 for an op computed in f32, a derived bound for a
// bf16 linear, every element for an overflow or a flush to zero.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "test_support.h"

using hg::Tensor;
using hg::amp::PrecisionReport;

namespace {

const PrecisionReport::Row& row_of(const hg::amp::ShadowCheck& check, const std::string& op) {
  for (const PrecisionReport::Row& r : check.report().rows())
    if (r.op == op) return r;
  FAIL("no row for " << op);
  throw std::logic_error("unreachable");
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

TEST_CASE("amp.shadow.an_op_computed_in_f32_has_zero_error") {
  hg::manual_seed(0);
  const Tensor x = hg::randn({8, 16}), w = hg::randn({5, 16}, {.requires_grad = true});
  const Tensor y = hg::randint(0, 5, {8}, {.dtype = hg::i64});
  hg::amp::ShadowCheck check(hg::bf16);
  const Tensor loss = check.run([&] { return hg::cross_entropy(hg::softmax(hg::linear(x, w), 1) * 3.0, y); });
  // softmax and cross_entropy are F32 ops: fed the same (bf16, widened) values, the f32 re-run
  // computes exactly what the autocast run computed.
  for (const char* op : {"softmax", "cross_entropy"}) {
    const PrecisionReport::Row& r = row_of(check, op);
    CHECK(r.compute == hg::f32);
    REQUIRE(r.has_shadow);
    CHECK(r.shadow.elements > 0);
    CHECK(r.shadow.max_error == 0.0);
    CHECK(r.shadow.sum_error == 0.0);
  }
  CHECK(loss.dtype() == hg::f32);
  CHECK(loss.requires_grad());  // the autocast run's result, with its graph
  loss.backward();
  CHECK(w.grad().defined());
}

TEST_CASE("amp.shadow.bf16_linear_is_within_the_derived_bound") {
  // With x, w, b >= 0 there is no cancellation, and the relative error of each output is bounded:
  //   * autocast rounds x, w and b to bf16: each relative error <= u = eps/2 = 2^-8;
  //   * a product of two bf16 values is exact in f32 (8 + 8 significant bits <= 24), so each term
  //     x_k w_k is off by at most (1 + u)^2 - 1 = 2u + u^2, and b by u;
  //   * the f32 sum of K + 1 nonnegative terms adds <= gamma = (K + 1) 2^-24 / (1 - (K + 1) 2^-24);
  //   * rounding the sum to bf16 adds u; the f32 reference itself is off by <= gamma.
  // So |y_bf16 - y_f32| / y_f32 <= (2u + u^2 + gamma (1 + u)^2)(1 + u) + u + 2 gamma ~= 3u, i.e.
  // about 1.5 epsilons. The mean is far lower (the errors are rarely all at their worst).
  constexpr int64_t K = 64;
  hg::manual_seed(3);
  const Tensor x = hg::rand({32, K}), w = hg::rand({24, K}), b = hg::rand({24});
  hg::amp::ShadowCheck check(hg::bf16);
  check.run([&] { return hg::linear(x, w, b); });
  const double u = std::ldexp(1.0, -8), eps = std::ldexp(1.0, -7);
  const double gamma = double(K + 1) * std::ldexp(1.0, -24) / (1 - double(K + 1) * std::ldexp(1.0, -24));
  const double bound = ((2 * u + u * u + gamma * (1 + u) * (1 + u)) * (1 + u) + u + 2 * gamma) / eps;
  const PrecisionReport::Row& r = row_of(check, "linear");
  CHECK(r.compute == hg::bf16);
  REQUIRE(r.has_shadow);
  CHECK(r.shadow.elements == 32 * 24);
  CHECK(r.shadow.max_error <= bound);
  CHECK(r.shadow.max_error > 0.25);        // bf16 rounding is visible: not a comparison of equal runs
  CHECK(r.shadow.mean_error() < 0.75);
  CHECK(r.shadow.overflows == 0);
  CHECK(r.shadow.flushed_to_zero == 0);
  MESSAGE("bf16 linear: max " << r.shadow.max_error << " eps, mean " << r.shadow.mean_error() << " eps, bound " << bound);
}

TEST_CASE("amp.shadow.f16_overflow_and_flush_to_zero_are_counted") {
  const Tensor big = hg::full({4, 1}, 300.0), w_big = hg::full({3, 1}, 300.0);       // 90000 > 65504
  const Tensor small = hg::full({4, 1}, 1e-4), w_small = hg::full({3, 1}, 1e-4);     // 1e-8 < 2^-24
  hg::amp::ShadowCheck check(hg::f16);
  check.run([&] { return hg::linear(big, w_big); });
  CHECK(row_of(check, "linear").shadow.overflows == 12);
  check.run([&] { return hg::linear(small, w_small); });
  const PrecisionReport::Row& r = row_of(check, "linear");  // both calls merge into one row
  CHECK(r.calls == 2);
  CHECK(r.shadow.overflows == 12);
  CHECK(r.shadow.flushed_to_zero == 12);
  CHECK(r.shadow.elements == 24);
  CHECK(r.shadow.max_error == 1024.0);  // a value lost entirely: relative error 1 = 2^10 f16 epsilons
}

TEST_CASE("amp.shadow.dropout_masks_and_running_statistics_are_not_disturbed") {
  hg::manual_seed(11);
  hg::nn::Sequential model(hg::nn::Conv2d(1, 3, 3), hg::nn::BatchNorm2d(3), hg::nn::ReLU(), hg::nn::Dropout(0.5));
  const Tensor x = hg::randn({2, 1, 6, 6});
  const std::vector<Tensor> buffers = model.buffers();
  std::vector<std::vector<float>> start;
  for (const Tensor& b : buffers) start.push_back(b.to(hg::f32).to_vector<float>());

  // The plain autocast run, from a known generator state.
  hg::manual_seed(5);
  Tensor plain;
  { hg::amp::Autocast ac(hg::bf16); plain = model(x); }
  const hg::random::GeneratorState after_plain = hg::random::get_state();
  std::vector<std::vector<float>> after_plain_buffers;
  for (const Tensor& b : buffers) after_plain_buffers.push_back(b.to(hg::f32).to_vector<float>());

  // Back to the start, then the shadow-checked run.
  for (size_t i = 0; i < buffers.size(); ++i) hg::Tensor(buffers[i]).copy_(hg::from_vector(start[i], buffers[i].shape()));
  hg::manual_seed(5);
  hg::amp::ShadowCheck check(hg::bf16);
  const Tensor shadowed = check.run([&] { return model(x); }, buffers);
  CHECK(shadowed.to(hg::f32).to_vector<float>() == plain.to(hg::f32).to_vector<float>());
  CHECK(hg::random::get_state().offset == after_plain.offset);
  for (size_t i = 0; i < buffers.size(); ++i) CHECK(buffers[i].to(hg::f32).to_vector<float>() == after_plain_buffers[i]);
  // The same dropout mask in both runs: a different one would give errors of ~1/eps.
  CHECK(row_of(check, "dropout").shadow.max_error <= 0.5);
  CHECK(row_of(check, "batch_norm").has_shadow);
}

TEST_CASE("amp.shadow.print_csv_and_cost") {
  hg::manual_seed(0);
  const Tensor x = hg::randn({4, 8}), w = hg::randn({2, 8});
  hg::amp::ShadowCheck check(hg::f16);
  check.run([&] { return hg::relu(hg::linear(x, w)); });
  std::ostringstream os;
  check.print(os);
  CHECK(os.str().find("max err") != std::string::npos);
  CHECK(os.str().find("in epsilons of the autocast dtype (0.000977)") != std::string::npos);
  CHECK(os.str().find("its f32 shadow re-run") != std::string::npos);
  CHECK(check.f32_seconds() > 0);
  const std::string path = hg_test::temp_path("shadow.csv");
  check.write_csv(path);
  const std::string csv = read_file(path);
  CHECK(csv.starts_with("op,policy,inputs,compute,output,calls,casts,cast_bytes,cache_hits,shadow_elements,max_error_eps,"
                        "mean_error_eps,overflows,flushed_to_zero,unmeasured\n"));
  CHECK(csv.find("\nlinear,Lower,f32 f32,f16,f16,1,2,") != std::string::npos);
  // relu of f16 values is exact: its row reads 0.
  CHECK(row_of(check, "relu").shadow.max_error == 0.0);
}

// Issue 25, item 8: with all-NaN inputs the f32 re-run is NaN too; the rows used to read 0.000
// error. Nothing was measured, and the report says so.
TEST_CASE("amp.shadow.all_nan_inputs_are_not_reported_as_zero_error") {
  const Tensor x = hg::full({4, 8}, std::nan("")), w = hg::ones({2, 8});
  hg::amp::ShadowCheck check(hg::f16);
  check.run([&] { return hg::linear(x, w); });
  const PrecisionReport::Row& r = row_of(check, "linear");
  REQUIRE(r.has_shadow);
  CHECK_FALSE(r.shadow.measured());
  CHECK(r.shadow.unmeasured == 8);
  std::ostringstream os;
  check.print(os);
  const std::string printed_report = os.str();
  const std::string line = printed_report.substr(printed_report.find("\nlinear"), 160);
  CHECK(line.find("n/a") != std::string::npos);
  CHECK(line.find("0.000") == std::string::npos);
  const std::string path = hg_test::temp_path("shadow_nan.csv");
  check.write_csv(path);
  CHECK(read_file(path).find("\nlinear,Lower,f32 f32,f16,f16,1,2,96,0,0,,,0,0,8\n") != std::string::npos);

  // compare_step: a weight gradient that is NaN in f32 is "n/a", not an error of 0 (the bias's
  // gradient, a count of rows, is finite and measured).
  hg::nn::Linear model(8, 2);
  const auto loss = [&] { return hg::sum(model(x)); };
  const hg::amp::StepComparison step = hg::amp::compare_step(hg::bf16, model.named_parameters(), loss);
  REQUIRE(step.parameters.size() == 2);
  CHECK(step.parameters[0].name == "weight");
  CHECK_FALSE(step.parameters[0].measured());
  CHECK(std::isnan(step.parameters[0].norm_error));
  CHECK(step.parameters[1].measured());
  std::ostringstream printed;
  step.print(printed);
  CHECK(printed.str().find("n/a") != std::string::npos);
}

TEST_CASE("amp.shadow.misuse_is_an_error") {
  CHECK_THROWS_HG(hg::amp::ShadowCheck{hg::f64}, "the autocast dtype must be f16 or bf16 (or f32: autocast off, "
                                                 "for FP8 ops alone), got f64");
  const Tensor x = hg::randn({2, 2});
  int calls = 0;
  hg::amp::ShadowCheck check(hg::bf16);
  // A forward whose ops change from one call to the next cannot be compared op by op.
  CHECK_THROWS_HG(check.run([&] { return ++calls == 1 ? hg::relu(x) : hg::exp(x); }),
                  "the f32 re-run called op 'exp' where the autocast run called 'relu'");
  calls = 0;
  CHECK_THROWS_HG(check.run([&] { return ++calls == 1 ? hg::relu(hg::exp(x)) : hg::exp(x); }),
                  "the f32 re-run called 1 ops, the autocast run 2");
  CHECK_FALSE(hg::amp::is_enabled());  // the guards were restored on the way out
}

// ---- compare_step ------------------------------------------------------------------------------

namespace {
struct Mlp {
  hg::nn::Sequential model;
  Tensor x, y;
  Mlp() : model((hg::manual_seed(2), hg::nn::Sequential(hg::nn::Linear(20, 32), hg::nn::ReLU(), hg::nn::Linear(32, 5)))) {
    x = hg::randn({16, 20});
    y = hg::randint(0, 5, {16}, {.dtype = hg::i64});
  }
};
}  // namespace

TEST_CASE("amp.shadow.compare_step_bf16_gradients_are_a_few_epsilons_off") {
  Mlp m;
  const hg::amp::StepComparison c =
      hg::amp::compare_step(hg::bf16, m.model.named_parameters(), [&] { return hg::cross_entropy(m.model(m.x), m.y); });
  REQUIRE(c.parameters.size() == 4);
  CHECK(c.parameters[0].name == "0.weight");
  for (const hg::amp::GradientError& p : c.parameters) {
    CHECK(p.norm_error > 0.05);  // bf16 is visible in every gradient
    CHECK(p.nonfinite == 0);
    CHECK(p.flushed_to_zero == 0);  // bf16 has f32's range
  }
  // The last layer's gradients come straight from the logits and the hidden activations: a few
  // roundings, under 2 epsilons. The first layer's pass through the ReLU's backward: a hidden unit
  // whose pre-activation lies within rounding of 0 can switch sides in bf16, and then a whole
  // sample's contribution is let through or not -- errors of many epsilons (measured: ~12-15).
  CHECK(c.parameters[2].norm_error < 2);
  CHECK(c.parameters[3].norm_error < 2);
  CHECK(c.parameters[0].norm_error > c.parameters[2].norm_error);
  CHECK(c.parameters[0].norm_error < 64);
  CHECK(std::fabs(c.loss_autocast - c.loss_f32) < 0.05 * c.loss_f32);
  for (const Tensor& p : m.model.parameters()) CHECK_FALSE(p.grad().defined());  // left cleared
  std::ostringstream os;
  c.print(os);
  CHECK(os.str().find("0.weight") != std::string::npos);

}

TEST_CASE("amp.shadow.compare_step_shows_f16_underflow_and_what_loss_scaling_does") {
  Mlp m;
  // A loss 10^-7 times smaller: its gradients flowing through f16 sit below 2^-24.
  const auto tiny_loss = [&] { return hg::cross_entropy(m.model(m.x), m.y) * 1e-7; };
  const hg::amp::StepComparison unscaled = hg::amp::compare_step(hg::f16, m.model.named_parameters(), tiny_loss);
  const hg::amp::StepComparison scaled =
      hg::amp::compare_step(hg::f16, m.model.named_parameters(), tiny_loss, {.loss_scale = 65536});
  const hg::amp::GradientError& w_unscaled = unscaled.parameters[2];  // the last Linear's weight
  const hg::amp::GradientError& w_scaled = scaled.parameters[2];
  CHECK(w_unscaled.flushed_to_zero > w_unscaled.elements / 2);
  CHECK(w_unscaled.norm_error > 100);    // most of the gradient is gone
  CHECK(w_scaled.flushed_to_zero == 0);
  CHECK(w_scaled.norm_error < 8);
  const std::string path = hg_test::temp_path("step.csv");
  scaled.write_csv(path);
  const std::string csv = read_file(path);
  CHECK(csv.starts_with("parameter,elements,norm_error_eps,max_error_eps,flushed_to_zero,nonfinite\n0.weight,640,"));
  CHECK(csv.find("\n2.weight,160,") != std::string::npos);
}

TEST_CASE("amp.shadow.compare_step_errors") {
  Mlp m;
  const auto loss = [&] { return hg::cross_entropy(m.model(m.x), m.y); };
  CHECK_THROWS_HG(hg::amp::compare_step(hg::f32, m.model.named_parameters(), loss), "must be f16 or bf16");
  CHECK_THROWS_HG(hg::amp::compare_step(hg::f16, m.model.named_parameters(), loss, {.loss_scale = 0}),
                  "loss_scale must be positive and finite, got 0");
  const Tensor unused = hg::zeros({3}, {.requires_grad = true});
  CHECK_THROWS_HG(hg::amp::compare_step(hg::bf16, {{"unused", unused}}, loss),
                  "parameter \"unused\" got no gradient from the f32 step");
}
