// GradScaler (docs/testing.md scenarios 20-23): the exact scale arithmetic and its bounds; inf/NaN in
// one gradient (contiguous, transposed, sliced; f16 and f32) skipping the step bitwise; misuse
// errors and the disabled pass-through; gradient accumulation, two optimizers on one scaler and
// clipping after unscale_ against an unscaled f32 control; plus StepResult, the LR-scheduler
// interplay, the stuck detector, f16 diagnostics, master weights and the state dict.
#include <cmath>
#include <limits>
#include <optional>
#include <type_traits>

#include "test_support.h"

using hg::Tensor;
namespace amp = hg::amp;
namespace nn = hg::nn;
namespace optim = hg::optim;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

std::vector<uint8_t> bytes_of(const Tensor& t) {
  const Tensor c = t.contiguous();
  const auto* p = static_cast<const uint8_t*>(c.raw_data());
  return std::vector<uint8_t>(p, p + c.numel() * int64_t(hg::element_size(c.dtype())));
}

// Everything a skipped step must leave alone: parameters, optimizer state (moments, per-parameter
// step counts, learning rates) and the optimizer's applied-step count.
std::map<std::string, std::vector<uint8_t>> snapshot(const optim::Optimizer& opt) {
  std::map<std::string, std::vector<uint8_t>> out;
  const std::vector<Tensor> params = opt.parameters();
  for (size_t i = 0; i < params.size(); ++i) out["param." + std::to_string(i)] = bytes_of(params[i]);
  for (const auto& [key, t] : opt.state_dict()) out[key] = bytes_of(t);
  out["steps_applied"] = bytes_of(hg::full({}, double(opt.steps_applied()), {.dtype = hg::i64}));
  return out;
}

// Stands in for scaler.scale(loss).backward() in the tests that write the (scaled) gradients by
// hand: a GradScaler refuses to unscale gradients while it has never scaled a loss.
void as_if_scaled(amp::GradScaler& scaler) { (void)scaler.scale(hg::zeros({})); }

// One iteration on a single parameter: gradient = `value` everywhere, then step + update.
amp::StepResult cycle(amp::GradScaler& scaler, optim::Optimizer& opt, const Tensor& p, double value = 1.0) {
  as_if_scaled(scaler);
  p.set_grad(hg::full(p.shape(), value, {.dtype = p.dtype()}));
  const amp::StepResult r = scaler.step(opt);
  scaler.update();
  return r;
}

// Writes `value` into element (i, j) of a 2-D gradient through a transposed view of it.
void inject(const Tensor& grad, int64_t i, int64_t j, double value) {
  hg::narrow(hg::narrow(grad.t(), 0, j, 1), 1, i, 1).fill_(value);
}

nn::Sequential make_mlp(uint64_t seed) {
  hg::manual_seed(seed);
  return nn::Sequential{nn::Linear(8, 16), nn::ReLU(), nn::Linear(16, 4)};
}

struct Data {
  std::vector<Tensor> x, y;
};
Data make_data(int n, int64_t batch, uint64_t seed) {
  hg::manual_seed(seed);
  Data d;
  for (int i = 0; i < n; ++i) {
    d.x.push_back(hg::randn({batch, 8}));
    d.y.push_back(hg::randint(0, 4, {batch}, {.dtype = hg::i64}));
  }
  return d;
}

Tensor loss_of(nn::Sequential& model, const Tensor& x, const Tensor& y, bool autocast) {
  amp::Autocast region(hg::f16, autocast);
  return hg::cross_entropy(model(x), y);
}

void check_params_close(nn::Sequential& actual, nn::Sequential& expected, double atol) {
  const auto a = actual.named_parameters(), e = expected.named_parameters();
  REQUIRE(a.size() == e.size());
  for (size_t i = 0; i < a.size(); ++i) {
    INFO(a[i].first);
    CHECK_CLOSE_TOL(a[i].second, e[i].second, 1e-5, atol);
  }
}

}  // namespace

// ---- scenario 20: the scale arithmetic -------------------------------------------------------------

TEST_CASE("amp.grad_scaler.update_arithmetic_is_exact") {
  const Tensor p = hg::zeros({3}, {.requires_grad = true});
  optim::SGD opt({p}, {.lr = 0.0});
  amp::GradScaler scaler({.init_scale = 4, .growth_factor = 2, .backoff_factor = 0.25, .growth_interval = 2});
  CHECK(scaler.get_scale() == 4.0);
  cycle(scaler, opt, p);
  CHECK(scaler.get_scale() == 4.0);
  CHECK(scaler.growth_tracker() == 1);
  cycle(scaler, opt, p);
  CHECK(scaler.get_scale() == 8.0);
  CHECK(scaler.growth_tracker() == 0);
  cycle(scaler, opt, p, kInf);
  CHECK(scaler.get_scale() == 2.0);
  CHECK(scaler.growth_tracker() == 0);
  // The tracker restarts after an overflow: one clean step after it is not enough to grow.
  cycle(scaler, opt, p);
  CHECK(scaler.growth_tracker() == 1);
  cycle(scaler, opt, p, kNaN);
  CHECK(scaler.get_scale() == 1.0);  // 2 * 0.25 = 0.5, floored at the default min_scale 1
  CHECK(scaler.growth_tracker() == 0);
  cycle(scaler, opt, p);
  cycle(scaler, opt, p);
  CHECK(scaler.get_scale() == 2.0);

  // scale(): the loss times the scale, in f32 even for a 16-bit loss.
  const Tensor scaled = scaler.scale(hg::full({}, 3.0, {.dtype = hg::f16}));
  CHECK(hg::dtype_name(scaled.dtype()) == std::string("f32"));
  CHECK(scaled.item<float>() == 6.0f);
  scaler.update(1024.0);
  CHECK(scaler.get_scale() == 1024.0);
}

TEST_CASE("amp.grad_scaler.huge_scale_stays_finite_and_bounds_hold") {
  const Tensor p = hg::zeros({2}, {.requires_grad = true});
  optim::SGD opt({p}, {.lr = 0.0});
  {
    amp::GradScaler scaler({.init_scale = 1e38, .growth_factor = 16, .growth_interval = 1, .max_scale = 1e300});
    const double initial = scaler.get_scale();  // 1e38, or its f32 rounding if the scale lives in f32
    CHECK(initial == doctest::Approx(1e38).epsilon(1e-7));
    for (int i = 0; i < 3; ++i) {
      cycle(scaler, opt, p, 1e-30);
      CHECK(std::isfinite(scaler.get_scale()));
      CHECK(std::isfinite(float(scaler.get_scale())));
      CHECK(scaler.get_scale() == initial);  // 1.6e39 is past f32's max: no growth
    }
    CHECK(std::isfinite(scaler.scale(hg::full({}, 1.0)).item<float>()));
  }
  {
    amp::GradScaler scaler({.init_scale = 4, .growth_interval = 1, .min_scale = 2, .max_scale = 16});
    cycle(scaler, opt, p, kInf);
    CHECK(scaler.get_scale() == 2.0);
    cycle(scaler, opt, p, kInf);
    CHECK(scaler.get_scale() == 2.0);  // never below min_scale
    for (int i = 0; i < 5; ++i) cycle(scaler, opt, p);
    CHECK(scaler.get_scale() == 16.0);  // never above max_scale
    CHECK(scaler.growth_tracker() == 0);
  }
  CHECK_THROWS_AS(amp::GradScaler({.growth_factor = 1.0}), hg::Error);
  CHECK_THROWS_AS(amp::GradScaler({.backoff_factor = 1.0}), hg::Error);
  CHECK_THROWS_AS(amp::GradScaler({.min_scale = 8, .max_scale = 4}), hg::Error);
}

// Issue 25, item 1: a scale that is a subnormal f32 (1e-40), rounds to 0 in f32 (1e-300) or lies
// must be in [min_scale, max_scale] is refused wherever a scale comes in, so 1/scale never overflows
// into NaN weights; and a gradient whose unscaled value overflows its dtype skips the step.
TEST_CASE("amp.grad_scaler.scales_outside_the_bounds_are_refused") {
  for (const double bad : {1e-40, 1e-300, 0.5, 3.4e38, 1e39}) {
    CAPTURE(bad);
    CHECK_THROWS_WITH_AS(amp::GradScaler({.init_scale = bad}), doctest::Contains("must be in [min_scale, max_scale]"),
                         hg::Error);
  }
  // A min_scale that is not a normal f32 would let backoff reach a scale whose inverse overflows.
  CHECK_THROWS_WITH_AS(amp::GradScaler({.init_scale = 1.0, .min_scale = 1e-40}),
                       doctest::Contains("smallest normal f32"), hg::Error);
  // Widened bounds accept what they say.
  CHECK(amp::GradScaler({.init_scale = 0.5, .min_scale = 0.25}).get_scale() == 0.5);

  amp::GradScaler scaler;
  CHECK_THROWS_AS(scaler.update(1e-40), hg::Error);
  CHECK_THROWS_AS(scaler.update(1e30), hg::Error);
  // A checkpoint's scale: the state is checked against this scaler's bounds, and nothing changes.
  std::map<std::string, Tensor> state = amp::GradScaler().state_dict();
  for (const double bad : {1e-40, 1e-300, 3.4e38}) {
    state["scale"] = hg::full({}, bad, {.dtype = hg::f64});
    CHECK_THROWS_WITH_AS(scaler.load_state_dict(state), doctest::Contains("must be in [min_scale, max_scale]"), hg::Error);
    CHECK(scaler.get_scale() == 65536.0);
  }
}

TEST_CASE("amp.grad_scaler.an_unscaled_value_that_overflows_skips_the_step") {
  // Scale 0.5: an f16 gradient of 60000 unscales to 120000, past f16's 65504. Storing it would
  // put inf into the weights; the scaler flags it like any inf and skips.
  const Tensor p = hg::zeros({3}, {.dtype = hg::f16, .requires_grad = true});
  optim::SGD opt({p}, {.lr = 1.0});
  amp::GradScaler scaler({.init_scale = 0.5, .growth_interval = 100, .min_scale = 0.25});
  as_if_scaled(scaler);
  p.set_grad(hg::from_vector(std::vector<float>{1.0f, 60000.0f, 2.0f}, {3}).to(hg::f16));
  const amp::StepResult r = scaler.step(opt);
  scaler.update();
  CHECK(r.found_inf);
  CHECK_FALSE(r.applied);
  const std::vector<float> weights = p.to(hg::f32).to_vector<float>();
  for (float w : weights) CHECK(w == 0.0f);
  CHECK(scaler.get_scale() == 0.25);
  CHECK(scaler.diagnostics().nonfinite_parameters.size() == 1);
}

// ---- scenario 21: an inf/NaN gradient skips the step ---------------------------------------------

namespace {

enum class Layout { Contiguous, Transposed, Sliced };

// A (4, 6) gradient holding `fill` (and `value` at (1, 3) when given), laid out as asked.
Tensor make_grad(Layout layout, hg::DType dtype, double fill, std::optional<double> value) {
  std::vector<float> v(48, float(fill));
  if (layout == Layout::Contiguous) {
    if (value) v[1 * 6 + 3] = float(*value);
    return hg::from_vector(std::vector<float>(v.begin(), v.begin() + 24), {4, 6}).to(dtype);
  }
  if (layout == Layout::Transposed) {  // the transpose of a contiguous (6, 4) buffer
    if (value) v[3 * 4 + 1] = float(*value);
    return hg::from_vector(std::vector<float>(v.begin(), v.begin() + 24), {6, 4}).to(dtype).t();
  }
  // Every other column of a (4, 12) buffer whose skipped columns hold inf (which must be ignored).
  for (size_t r = 0; r < 4; ++r) v[r * 12 + 1] = float(kInf);
  if (value) v[1 * 12 + 3 * 2] = float(*value);
  return hg::as_strided(hg::from_vector(v, {4, 12}).to(dtype), {4, 6}, {12, 2}, 0);
}

void check_skipped_step(hg::DType dtype, Layout layout, double bad) {
  hg::manual_seed(21);
  const Tensor p0 = hg::randn({4, 6}).to(dtype).requires_grad_(), p1 = hg::randn({6}).to(dtype).requires_grad_();
  optim::Adam opt({p0, p1}, {.lr = 0.01});
  amp::GradScaler scaler({.init_scale = 1024, .growth_interval = 1});
  as_if_scaled(scaler);

  // A clean step first (so Adam has moments), through the same layout: unscaled in place.
  p0.set_grad(make_grad(layout, dtype, 1024 * 0.5, std::nullopt));
  p1.set_grad(hg::full({6}, 1024 * 0.25, {.dtype = dtype}));
  scaler.unscale_(opt);
  CHECK(hg::amax(hg::abs(p0.grad().to(hg::f32) - 0.5).flatten(), 0).item<float>() == 0.0f);
  amp::StepResult r = scaler.step(opt);
  CHECK(r.applied);
  scaler.update();
  REQUIRE(scaler.get_scale() == 2048.0);

  p0.set_grad(make_grad(layout, dtype, 2048 * 0.5, bad));
  p1.set_grad(hg::full({6}, 2048 * 0.25, {.dtype = dtype}));
  const auto before = snapshot(opt);
  REQUIRE(before.count("state.0.exp_avg"));
  REQUIRE(before.count("state.0.exp_avg_sq"));
  REQUIRE(before.count("state.0.step"));
  r = scaler.step(opt);
  CHECK_FALSE(r.applied);
  CHECK(r.found_inf);
  CHECK(r.scale == 2048.0);
  CHECK(snapshot(opt) == before);
  CHECK(opt.steps_applied() == 1);
  scaler.update();
  CHECK(scaler.get_scale() == 1024.0);
}

}  // namespace

TEST_CASE("amp.grad_scaler.nonfinite_gradient_skips_the_step_bitwise") {
  for (const hg::DType dtype : {hg::f32, hg::f16})
    for (const Layout layout : {Layout::Contiguous, Layout::Transposed, Layout::Sliced})
      for (const double bad : {kInf, -kInf, kNaN}) {
        const char* layouts[] = {"contiguous", "transposed", "sliced"};
        const std::string name = std::string(hg::dtype_name(dtype)) + " " + layouts[int(layout)] + " " + std::to_string(bad);
        CAPTURE(name);
        try {
          check_skipped_step(dtype, layout, bad);
        } catch (const std::exception& e) {
          FAIL_CHECK(name << ": threw " << std::string(e.what()));
        }
      }
}

namespace {
// Four iterations with an inf injected at iteration 2, against an f32 control that skips the
// same iteration; the scale sequence is init * growth^3 * backoff.
void four_iterations_match_the_control(bool autocast) {
  const Data data = make_data(4, 16, 40);
  nn::Sequential model = make_mlp(4), control = make_mlp(4);
  const auto make_opt = [&](nn::Sequential& m) -> std::unique_ptr<optim::Optimizer> {
    // NOTE: SGD for the f16 run: Adam's first steps are ~lr * sign(g), so an f16 rounding that
    // flips a tiny gradient's sign would move a parameter by 2 * lr.
    if (autocast) return std::make_unique<optim::SGD>(m.parameters(), optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
    return std::make_unique<optim::Adam>(m.parameters(), optim::AdamOptions{.lr = 0.01});
  };
  const auto opt = make_opt(model), opt_control = make_opt(control);
  const double init = 256, growth = 2, backoff = 0.5;
  amp::GradScaler scaler({.init_scale = init, .growth_factor = growth, .backoff_factor = backoff, .growth_interval = 1});
  for (int it = 0; it < 4; ++it) {
    opt->zero_grad();
    scaler.scale(loss_of(model, data.x[size_t(it)], data.y[size_t(it)], autocast)).backward();
    if (it == 2) inject(model.parameters()[2].grad(), 3, 5, kInf);
    const amp::StepResult r = scaler.step(*opt);
    scaler.update();
    CHECK(r.applied == (it != 2));

    opt_control->zero_grad();
    loss_of(control, data.x[size_t(it)], data.y[size_t(it)], false).backward();
    if (it != 2) opt_control->step();
  }
  CHECK(scaler.get_scale() == init * growth * growth * growth * backoff);
  check_params_close(model, control, autocast ? 1e-3 : 1e-7);
}
}  // namespace

TEST_CASE("amp.grad_scaler.four_iterations_with_one_overflow_match_the_unscaled_control") {
  SUBCASE("f32 model") { four_iterations_match_the_control(false); }
  SUBCASE("f16 autocast") { four_iterations_match_the_control(true); }
}

// ---- scenario 22: misuse and the disabled scaler -------------------------------------------------

TEST_CASE("amp.grad_scaler.misuse_raises_pytorchs_errors") {
  const Tensor p = hg::ones({3}, {.requires_grad = true});
  optim::SGD opt({p}, {.lr = 0.1});
  amp::GradScaler scaler;
  CHECK_THROWS_HG(scaler.update(), "update()");  // nothing recorded this iteration
  as_if_scaled(scaler);
  p.set_grad(hg::ones({3}));
  scaler.unscale_(opt);
  CHECK_THROWS_HG(scaler.unscale_(opt), "unscale_() has already been called on this optimizer since the last update()");
  scaler.step(opt);
  CHECK_THROWS_HG(scaler.unscale_(opt), "unscale_() is being called after step()");
  CHECK_THROWS_HG(scaler.step(opt), "step() has already been called since the last update()");
  scaler.update();
  // After update() the cycle starts over.
  p.set_grad(hg::ones({3}));
  CHECK_NOTHROW(scaler.unscale_(opt));
  CHECK_NOTHROW(scaler.step(opt));
  CHECK_NOTHROW(scaler.update());
}

TEST_CASE("amp.grad_scaler.step_without_scale_is_an_error") {
  // Gradients that were never scaled would be divided by the scale anyway: a 65536x smaller
  // update and no error anywhere. PyTorch refuses this too (issue 11, item 7).
  const Tensor w = hg::ones({3}, {.requires_grad = true});
  optim::SGD opt({w}, {.lr = 0.5});
  amp::GradScaler scaler;
  hg::sum(w * 2.0).backward();  // forgot scaler.scale(...)
  CHECK_THROWS_HG(scaler.step(opt), "without scale()");
  CHECK_THROWS_HG(scaler.unscale_(opt), "without scale()");
  CHECK(w.to_vector<float>() == std::vector<float>(3, 1.0f));
  opt.zero_grad();
  scaler.scale(hg::sum(w * 2.0)).backward();
  CHECK(scaler.step(opt).applied);
  scaler.update();
  CHECK(w.to_vector<float>() == std::vector<float>(3, 0.0f));  // 1 - 0.5 * 2: the full update
}

TEST_CASE("amp.grad_scaler.disabled_is_a_bitwise_pass_through") {
  const Data data = make_data(5, 16, 22);
  nn::Sequential model = make_mlp(2), control = make_mlp(2);
  optim::SGD opt(model.parameters(), {.lr = 0.1, .momentum = 0.9});
  optim::SGD opt_control(control.parameters(), {.lr = 0.1, .momentum = 0.9});
  amp::GradScaler scaler({.enabled = false});
  CHECK_FALSE(scaler.is_enabled());
  CHECK(scaler.state_dict().empty());
  for (size_t it = 0; it < 5; ++it) {
    opt.zero_grad();
    const Tensor loss = loss_of(model, data.x[it], data.y[it], false);
    const Tensor scaled = scaler.scale(loss);
    CHECK(bytes_of(scaled) == bytes_of(loss));
    scaled.backward();
    scaler.unscale_(opt);
    const amp::StepResult r = scaler.step(opt);
    scaler.update();
    CHECK(r.applied);
    CHECK(r.scale == 1.0);
    CHECK(scaler.get_scale() == 1.0);

    opt_control.zero_grad();
    loss_of(control, data.x[it], data.y[it], false).backward();
    opt_control.step();
  }
  const auto a = model.parameters(), b = control.parameters();
  for (size_t i = 0; i < a.size(); ++i) CHECK(bytes_of(a[i]) == bytes_of(b[i]));
}

TEST_CASE("amp.grad_scaler.bf16_autocast_trains_with_the_scaler_disabled") {
  const Data data = make_data(1, 64, 23);
  nn::Sequential model = make_mlp(3);
  optim::SGD opt(model.parameters(), {.lr = 0.1, .momentum = 0.9});
  amp::GradScaler scaler({.enabled = false});
  std::vector<double> losses;
  for (int it = 0; it < 60; ++it) {
    opt.zero_grad();
    Tensor loss;
    {
      amp::Autocast region(hg::bf16);
      loss = hg::cross_entropy(model(data.x[0]), data.y[0]);
    }
    scaler.scale(loss).backward();
    CHECK(scaler.step(opt).applied);
    scaler.update();
    losses.push_back(loss.item<double>());
  }
  for (double l : losses) REQUIRE(std::isfinite(l));
  CHECK(losses.back() < 0.7 * losses.front());
}

// ---- scenario 23: accumulation, two optimizers, clipping -----------------------------------------

TEST_CASE("amp.grad_scaler.gradient_accumulation_matches_the_control") {
  for (const bool autocast : {false, true}) {
    CAPTURE(autocast);
    const int micro = 4;
    // (Seed 230 put a hidden unit's pre-activation within f16 rounding of 0: its ReLU flips under
    // autocast and two weights move 1.8e-3 from the f32 control, an f16 fact, not an accumulation one.)
    const Data data = make_data(3 * micro, 8, 233);
    nn::Sequential model = make_mlp(5), control = make_mlp(5);
    optim::SGD opt(model.parameters(), {.lr = 0.1, .momentum = 0.9});
    optim::SGD opt_control(control.parameters(), {.lr = 0.1, .momentum = 0.9});
    amp::GradScaler scaler({.init_scale = 1024, .growth_interval = 2});
    for (int it = 0; it < 3; ++it) {
      opt.zero_grad();
      opt_control.zero_grad();
      for (int m = 0; m < micro; ++m) {
        const size_t k = size_t(it * micro + m);
        scaler.scale(loss_of(model, data.x[k], data.y[k], autocast) / double(micro)).backward();
        (loss_of(control, data.x[k], data.y[k], false) / double(micro)).backward();
      }
      CHECK(scaler.step(opt).applied);
      scaler.update();
      opt_control.step();
    }
    CHECK(scaler.get_scale() == 2048.0);
    check_params_close(model, control, autocast ? 1e-3 : 1e-7);
  }
}

TEST_CASE("amp.grad_scaler.two_optimizers_share_one_scaler") {
  for (const bool autocast : {false, true}) {
    CAPTURE(autocast);
    const Data data = make_data(4, 16, 231);
    nn::Sequential model = make_mlp(6), control = make_mlp(6);
    const auto head = [](nn::Sequential& m) { return m[0].parameters(); };
    const auto tail = [](nn::Sequential& m) { return m[2].parameters(); };
    optim::SGD first(head(model), {.lr = 0.1, .momentum = 0.9});
    optim::Adam second(tail(model), {.lr = 0.01});
    optim::SGD first_control(head(control), {.lr = 0.1, .momentum = 0.9});
    optim::Adam second_control(tail(control), {.lr = 0.01});
    amp::GradScaler scaler({.init_scale = 512, .growth_interval = 1});
    for (int it = 0; it < 4; ++it) {
      const size_t k = size_t(it);
      first.zero_grad(), second.zero_grad();
      scaler.scale(loss_of(model, data.x[k], data.y[k], autocast)).backward();
      if (it == 1) inject(tail(model)[0].grad(), 2, 7, kNaN);  // only the second optimizer's gradients
      scaler.unscale_(first);  // e.g. to clip the first group
      const amp::StepResult r1 = scaler.step(first), r2 = scaler.step(second);
      scaler.update();
      CHECK(r1.applied);
      CHECK(r2.applied == (it != 1));  // found_inf is per optimizer, as in PyTorch

      first_control.zero_grad(), second_control.zero_grad();
      loss_of(control, data.x[k], data.y[k], false).backward();
      first_control.step();
      if (it != 1) second_control.step();
    }
    CHECK(scaler.get_scale() == 512.0 * 2 * 0.5 * 2 * 2);
    check_params_close(model, control, autocast ? 1e-3 : 1e-7);
  }
}

TEST_CASE("amp.grad_scaler.clipping_after_unscale_matches_the_control") {
  for (const bool autocast : {false, true}) {
    CAPTURE(autocast);
    const Data data = make_data(3, 16, 232);
    nn::Sequential model = make_mlp(7), control = make_mlp(7);
    optim::SGD opt(model.parameters(), {.lr = 0.1, .momentum = 0.9});
    optim::SGD opt_control(control.parameters(), {.lr = 0.1, .momentum = 0.9});
    amp::GradScaler scaler({.init_scale = 4096});
    for (size_t it = 0; it < 3; ++it) {
      opt.zero_grad();
      scaler.scale(loss_of(model, data.x[it], data.y[it], autocast)).backward();
      scaler.unscale_(opt);
      const double norm = nn::utils::clip_grad_norm_(model.parameters(), 0.1);
      CHECK(scaler.step(opt).applied);
      scaler.update();

      opt_control.zero_grad();
      loss_of(control, data.x[it], data.y[it], false).backward();
      const double norm_control = nn::utils::clip_grad_norm_(control.parameters(), 0.1);
      CHECK(norm_control > 0.1);  // clipping was active
      CHECK(norm == doctest::Approx(norm_control).epsilon(autocast ? 1e-2 : 1e-5));
      opt_control.step();
    }
    check_params_close(model, control, autocast ? 1e-3 : 1e-7);
  }
}

// ---- StepResult, schedulers, the stuck detector, diagnostics ------------------------------------

static_assert(!std::is_convertible_v<amp::StepResult, bool>, "StepResult's bool conversion must be explicit");
static_assert(std::is_constructible_v<bool, amp::StepResult>);

TEST_CASE("amp.grad_scaler.step_result_reports_what_happened") {
  const Tensor p = hg::zeros({2}, {.requires_grad = true});
  optim::SGD opt({p}, {.lr = 0.1});
  amp::GradScaler scaler({.init_scale = 8, .growth_interval = 100});
  amp::StepResult r = cycle(scaler, opt, p);
  CHECK(bool(r));
  CHECK(r.applied);
  CHECK_FALSE(r.found_inf);
  CHECK(r.scale == 8.0);
  CHECK(r.skipped_in_a_row == 0);
  r = cycle(scaler, opt, p, kInf);
  CHECK_FALSE(bool(r));
  CHECK(r.found_inf);
  CHECK(r.scale == 8.0);  // the scale this step used, before update() backed off
  CHECK(r.skipped_in_a_row == 1);
  r = cycle(scaler, opt, p, kNaN);
  CHECK(r.scale == 4.0);
  CHECK(r.skipped_in_a_row == 2);
  r = cycle(scaler, opt, p);
  CHECK(r.applied);
  CHECK(r.skipped_in_a_row == 0);
  CHECK(opt.steps_applied() == 2);
}

TEST_CASE("amp.grad_scaler.step_async_skips_like_step") {
  const Tensor p = hg::zeros({3}, {.requires_grad = true});
  optim::SGD opt({p}, {.lr = 1.0});
  amp::GradScaler scaler({.init_scale = 8});
  as_if_scaled(scaler);
  p.set_grad(hg::full({3}, 8.0));
  scaler.step_async(opt);
  CHECK_THROWS_HG(scaler.step_async(opt), "step() has already been called since the last update()");
  scaler.update();
  CHECK(p.to_vector<float>() == std::vector<float>{-1.f, -1.f, -1.f});  // unscaled: 8 / 8
  p.set_grad(hg::full({3}, kInf));
  scaler.step_async(opt);
  scaler.update();
  CHECK(p.to_vector<float>() == std::vector<float>{-1.f, -1.f, -1.f});  // skipped
  CHECK(scaler.get_scale() == 4.0);
  CHECK(opt.steps_applied() == 1);
}

TEST_CASE("amp.grad_scaler.lr_scheduler_does_not_advance_on_a_skipped_step") {
  const Tensor p = hg::zeros({2}, {.requires_grad = true});
  optim::SGD opt({p}, {.lr = 0.1});
  optim::StepLR scheduler(opt, 1, 0.5);
  amp::GradScaler scaler;
  scheduler.step(cycle(scaler, opt, p, kInf));
  CHECK(scheduler.steps() == 0);
  CHECK(opt.lr() == 0.1);
  scheduler.step(cycle(scaler, opt, p));
  CHECK(scheduler.steps() == 1);
  CHECK(opt.lr() == doctest::Approx(0.05));
}

TEST_CASE("amp.grad_scaler.stuck_detector_names_the_parameter") {
  const Tensor good = hg::zeros({2}, {.requires_grad = true}), bad = hg::zeros({3, 2}, {.requires_grad = true});
  optim::SGD opt({good, bad}, {.lr = 0.1});
  amp::GradScaler scaler({.max_consecutive_skips = 3});
  as_if_scaled(scaler);
  scaler.set_parameter_names({{"head.bias", good}, {"encoder.weight", bad}});
  const auto skipped_step = [&] {
    good.set_grad(hg::ones({2}));
    bad.set_grad(hg::full({3, 2}, kInf));
    return scaler.step(opt);
  };
  for (int i = 0; i < 2; ++i) {
    CHECK_FALSE(skipped_step().applied);
    CHECK(scaler.diagnostics().nonfinite_parameters == std::vector<std::string>{"encoder.weight"});
    scaler.update();
  }
  try {
    skipped_step();
    FAIL("expected the third skipped step in a row to throw");
  } catch (const hg::Error& e) {
    const std::string message = e.what();
    CAPTURE(message);
    CHECK(message.find("encoder.weight") != std::string::npos);
    CHECK(message.find("3 optimizer steps in a row") != std::string::npos);
    CHECK(message.find("head.bias") == std::string::npos);
  }
}

TEST_CASE("amp.grad_scaler.diagnostics_count_f16_zero_and_subnormal_gradients") {
  const Tensor p16 = hg::zeros({10}, {.dtype = hg::f16}).requires_grad_(), p32 = hg::zeros({4}, {.requires_grad = true});
  optim::SGD opt({p16, p32}, {.lr = 0.1});
  amp::GradScaler scaler({.init_scale = 2});
  as_if_scaled(scaler);
  // 0, -0, two subnormals (below 2^-14 = 6.1e-5) and six normal values.
  p16.set_grad(hg::from_vector(std::vector<float>{0.f, -0.f, 1e-6f, 3e-5f, 1.f, 2.f, 0.5f, 100.f, 1000.f, 7e-5f}, {10},
                               {.dtype = hg::f16}));
  p32.set_grad(hg::zeros({4}));
  scaler.unscale_(opt);
  CHECK(scaler.diagnostics().f16_elements == 10);
  CHECK(scaler.diagnostics().f16_zero_or_subnormal == 4);
  CHECK(scaler.diagnostics().tiny_fraction() == doctest::Approx(0.4));
  CHECK(scaler.diagnostics().nonfinite_parameters.empty());
}

// ---- master weights, state dicts --------------------------------------------------------------------

TEST_CASE("amp.grad_scaler.f16_model_with_master_weights") {
  const Data data = make_data(3, 16, 24);
  nn::Sequential model16 = make_mlp(8), model32 = make_mlp(8);
  model16.to(hg::f16);
  {
    hg::NoGradGuard no_grad;  // the f32 run starts from the same (f16-rounded) weights
    const auto p16 = model16.parameters(), p32 = model32.parameters();
    for (size_t i = 0; i < p16.size(); ++i) Tensor(p32[i]).copy_(p16[i]);
  }
  optim::SGD opt16(model16.parameters(), {.lr = 0.01, .momentum = 0.9, .master_weights = true});
  optim::SGD opt32(model32.parameters(), {.lr = 0.01, .momentum = 0.9});
  amp::GradScaler scaler;  // 2^16: the f16 gradients are stored scaled
  for (size_t it = 0; it < 3; ++it) {
    const Tensor x = data.x[it].to(hg::f16).to(hg::f32);  // inputs both runs see exactly
    opt16.zero_grad();
    scaler.scale(loss_of(model16, x, data.y[it], true)).backward();
    for (const Tensor& p : model16.parameters()) REQUIRE(hg::dtype_name(p.grad().dtype()) == std::string("f16"));
    amp::StepResult r;
    REQUIRE_NOTHROW(r = scaler.step(opt16));  // no "Attempting to unscale FP16 gradients"
    CHECK(r.applied);
    scaler.update();
    opt32.zero_grad();
    loss_of(model32, x, data.y[it], false).backward();
    opt32.step();
  }
  const auto p16 = model16.parameters(), p32 = model32.parameters();
  const auto state = opt16.state_dict();
  for (size_t i = 0; i < p16.size(); ++i) {
    CAPTURE(i);
    CHECK(hg::dtype_name(p16[i].dtype()) == std::string("f16"));
    CHECK_CLOSE_TOL(p16[i].to(hg::f32), p32[i], 1e-3, 1e-5);  // T(f16)
    const Tensor master = state.at("state." + std::to_string(i) + ".master");
    CHECK(hg::dtype_name(master.dtype()) == std::string("f32"));
    CHECK_CLOSE_TOL(master, p32[i], 1e-3, 1e-5);
    CHECK(bytes_of(master.to(hg::f16)) == bytes_of(p16[i]));  // the parameter is the rounded master
  }
}

TEST_CASE("amp.grad_scaler.state_dict_round_trip") {
  const Tensor p = hg::zeros({2}, {.requires_grad = true});
  optim::SGD opt({p}, {.lr = 0.0});
  amp::GradScaler a({.init_scale = 512, .growth_factor = 4, .backoff_factor = 0.25, .growth_interval = 3});
  cycle(a, opt, p);
  const auto state = a.state_dict();
  for (const char* key : {"scale", "growth_factor", "backoff_factor", "growth_interval", "_growth_tracker"})
    CHECK_MESSAGE(state.count(key) == 1, key);
  const std::string path = hg_test::temp_path("grad_scaler_state.safetensors");
  hg::save(path, state);
  amp::GradScaler b;  // default options: everything comes from the file
  b.load_state_dict(hg::load(path));
  CHECK(b.get_scale() == 512.0);
  CHECK(b.growth_tracker() == 1);
  for (amp::GradScaler* s : {&a, &b}) {
    cycle(*s, opt, p);
    cycle(*s, opt, p);
    CHECK(s->get_scale() == 2048.0);  // growth 4 after 3 clean steps
    cycle(*s, opt, p, kInf);
    CHECK(s->get_scale() == 512.0);   // backoff 0.25
  }
  amp::GradScaler c;
  CHECK_THROWS_HG(c.load_state_dict({}), "disabled");
  CHECK(amp::GradScaler({.enabled = false}).state_dict().empty());
  auto partial = state;
  partial.erase("scale");
  CHECK_THROWS_HG(c.load_state_dict(partial), "scale");
}

// ---- f64 gradients (issue 12) --------------------------------------------------------------------

// f64 gradients are checked and unscaled in f64: 1e300 is finite (through f32 it would be inf and
// skip the step), and 0.1 * 65536 / 65536 keeps every bit of the f64 0.1 (through f32 it would
// become 0.100000001490116...). A real f64 overflow is still caught.
TEST_CASE("amp.grad_scaler.f64_gradients_are_unscaled_in_f64") {
  const Tensor p = hg::zeros({3}, {.dtype = hg::f64, .requires_grad = true});
  optim::SGD opt({p}, {.lr = 1.0});
  amp::GradScaler scaler({.init_scale = 65536.0});
  as_if_scaled(scaler);  // the gradients below are written pre-scaled by hand
  p.set_grad(hg::from_vector<double>({1e300, 0.1 * 65536.0, -3.0 * 65536.0}, {3}));
  scaler.unscale_(opt);
  CHECK(p.grad().to_vector<double>() == std::vector<double>{1e300 / 65536.0, 0.1, -3.0});
  const amp::StepResult r = scaler.step(opt);
  CHECK(r.applied);
  CHECK_FALSE(r.found_inf);
  CHECK(p.detach().to_vector<double>() == std::vector<double>{-1e300 / 65536.0, -0.1, 3.0});
  scaler.update();
  p.set_grad(hg::from_vector<double>({1e308, kInf, 1.0}, {3}));
  CHECK_FALSE(scaler.step(opt).applied);
  scaler.update();
  CHECK(scaler.diagnostics().nonfinite_parameters.size() == 1);
}

TEST_CASE("amp.grad_scaler.load_state_dict_applies_the_constructor_rules") {
  // A checkpoint is a file a user can edit; a scale of 0 used to load and turn every weight
  // into NaN after one step (issue 11, items 3 and 4).
  const Tensor p = hg::zeros({2}, {.requires_grad = true});
  optim::SGD opt({p}, {.lr = 0.0});
  amp::GradScaler source({.init_scale = 512, .growth_interval = 3});
  cycle(source, opt, p);
  const auto good = source.state_dict();
  const auto with = [&good](const std::string& key, const Tensor& value) {
    auto state = good;
    state[key] = value;
    return state;
  };
  const auto f64 = [](double v) { return hg::full({}, v, {.dtype = hg::f64}); };
  const auto i64 = [](int64_t v) { return hg::from_vector(std::vector<int64_t>{v}, {}); };
  amp::GradScaler target({.init_scale = 64});
  for (double scale : {0.0, -2.0, kNaN, kInf, 1e39})  // 1e39 is inf in f32
    CHECK_THROWS_HG(target.load_state_dict(with("scale", f64(scale))), "scale must be in [min_scale, max_scale] = [1, 16777216] and finite in f32");
  for (double growth : {1.0, 0.5, kNaN, kInf})
    CHECK_THROWS_HG(target.load_state_dict(with("growth_factor", f64(growth))), "growth_factor must be > 1");
  for (double backoff : {0.0, 1.0, -0.5, kNaN})
    CHECK_THROWS_HG(target.load_state_dict(with("backoff_factor", f64(backoff))), "backoff_factor must be in (0, 1)");
  for (int64_t interval : {int64_t(0), int64_t(-5), int64_t(1) << 40})
    CHECK_THROWS_HG(target.load_state_dict(with("growth_interval", i64(interval))), "\"growth_interval\" is");
  for (int64_t tracker : {int64_t(-1), int64_t(3), std::numeric_limits<int64_t>::max()})
    CHECK_THROWS_HG(target.load_state_dict(with("_growth_tracker", i64(tracker))), "\"_growth_tracker\" is");
  CHECK_THROWS_HG(target.load_state_dict(with("skipped_in_a_row", i64(std::numeric_limits<int64_t>::max()))),
                  "\"skipped_in_a_row\" is");
  CHECK_THROWS_HG(target.load_state_dict(with("scale", i64(512))), "one floating-point value");
  CHECK_THROWS_HG(target.load_state_dict(with("growth_interval", f64(3))), "one integer value");
  CHECK_THROWS_HG(target.load_state_dict(with("scale", hg::ones({2}, {.dtype = hg::f64}))), "one floating-point value");
  // Nothing was changed by the refused loads; the good state still loads.
  CHECK(target.get_scale() == 64.0);
  target.load_state_dict(good);
  CHECK(target.get_scale() == 512.0);
  CHECK(target.growth_tracker() == 1);
}
