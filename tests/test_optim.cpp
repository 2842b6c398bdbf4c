// Optimizers: SGD (momentum, dampening, Nesterov, weight decay), Adam, AdamW, RMSprop (centered,
// momentum), Adagrad (lr decay, initial accumulator) and Adadelta replay ten fixed gradients and
// match torch.optim's parameters after every step within T(f32) (fixtures in
// tests/golden/optim.safetensors, written by make_golden.py); f32 master weights for 16-bit
// parameters; state_dict resume; learning rates and parameter groups; the LR schedulers against
// torch.optim.lr_scheduler's lr (and OneCycleLR's momentum) over 100 steps
// (tests/golden/schedulers.safetensors).
#include <cmath>
#include <limits>
#include <memory>
#include <numbers>

#include "core/json.h"
#include "core/safetensors.h"
#include "ops/shape.h"
#include "test_support.h"

using hg::Tensor;

namespace {

using Args = hg::json::Value;

// ---- the torch.optim fixture --------------------------------------------------------------------

struct OptimFixture {
  std::map<std::string, Tensor> tensors;
  std::map<std::string, Args> cases;  // case name -> {"optimizer": ..., options}
  int steps = 0;

  static const OptimFixture& get() {
    static const OptimFixture fx = [] {
      const hg::SafetensorsContents file = hg::load_with_metadata(std::string(HG_TEST_DIR) + "/golden/optim.safetensors");
      OptimFixture f;
      f.tensors = file.tensors;
      for (const auto& [name, text] : file.metadata)
        if (!name.starts_with("_")) f.cases[name] = hg::json::parse(text, "optim fixture metadata");
      f.steps = std::stoi(file.metadata.at("_steps"));
      return f;
    }();
    return fx;
  }
  Tensor at(const std::string& name) const {
    const auto it = tensors.find(name);
    HG_CHECK(it != tensors.end(), "optim fixture has no tensor ", name);
    return it->second;
  }
  // Slice k of a stacked (steps, ...) tensor, as its own contiguous tensor.
  Tensor step_of(const std::string& name, int k) const {
    const Tensor stacked = at(name);
    hg::Shape shape(std::vector<int64_t>(stacked.shape().begin() + 1, stacked.shape().end()));
    return hg::narrow(stacked, 0, k, 1).reshape(shape).clone();
  }
  std::vector<Tensor> initial_params(hg::DType dtype = hg::f32) const {
    // clone(): to(f32) of an f32 tensor may return the fixture itself, which step() would modify.
    return {at("init.p0").to(dtype).clone().requires_grad_(), at("init.p1").to(dtype).clone().requires_grad_()};
  }
};

double number_or(const Args& meta, std::string_view key, double fallback) {
  const Args* v = meta.find(key);
  return v ? std::stod(v->text) : fallback;
}
bool flag_or(const Args& meta, std::string_view key, bool fallback) {
  const Args* v = meta.find(key);
  return v ? v->boolean : fallback;
}

std::unique_ptr<hg::optim::Optimizer> make_optimizer(const Args& meta, const std::vector<Tensor>& params,
                                                     bool master_weights = false) {
  const std::string kind = meta.find("optimizer")->text;
  const double lr = number_or(meta, "lr", 0);
  if (kind == "sgd")
    return std::make_unique<hg::optim::SGD>(
        params, hg::optim::SGDOptions{.lr = lr, .momentum = number_or(meta, "momentum", 0),
                                      .dampening = number_or(meta, "dampening", 0),
                                      .weight_decay = number_or(meta, "weight_decay", 0),
                                      .nesterov = flag_or(meta, "nesterov", false), .master_weights = master_weights});
  const double weight_decay = number_or(meta, "weight_decay", 0);
  if (kind == "rmsprop")
    return std::make_unique<hg::optim::RMSprop>(
        params, hg::optim::RMSpropOptions{.lr = lr, .alpha = number_or(meta, "alpha", 0.99), .eps = number_or(meta, "eps", 1e-8),
                                          .weight_decay = weight_decay, .momentum = number_or(meta, "momentum", 0),
                                          .centered = flag_or(meta, "centered", false), .master_weights = master_weights});
  if (kind == "adagrad")
    return std::make_unique<hg::optim::Adagrad>(
        params, hg::optim::AdagradOptions{.lr = lr, .lr_decay = number_or(meta, "lr_decay", 0), .weight_decay = weight_decay,
                                          .initial_accumulator_value = number_or(meta, "initial_accumulator_value", 0),
                                          .eps = number_or(meta, "eps", 1e-10), .master_weights = master_weights});
  if (kind == "adadelta")
    return std::make_unique<hg::optim::Adadelta>(
        params, hg::optim::AdadeltaOptions{.lr = lr, .rho = number_or(meta, "rho", 0.9), .eps = number_or(meta, "eps", 1e-6),
                                           .weight_decay = weight_decay, .master_weights = master_weights});
  const double b1 = number_or(meta, "beta1", 0.9), b2 = number_or(meta, "beta2", 0.999), eps = number_or(meta, "eps", 1e-8);
  if (kind == "adam")
    return std::make_unique<hg::optim::Adam>(
        params, hg::optim::AdamOptions{.lr = lr, .beta1 = b1, .beta2 = b2, .eps = eps,
                                       .weight_decay = number_or(meta, "weight_decay", 0), .master_weights = master_weights});
  HG_CHECK(kind == "adamw", "optim fixture: unknown optimizer ", kind);
  return std::make_unique<hg::optim::AdamW>(
      params, hg::optim::AdamWOptions{.lr = lr, .beta1 = b1, .beta2 = b2, .eps = eps,
                                      .weight_decay = number_or(meta, "weight_decay", 1e-2), .master_weights = master_weights});
}

// Gives every parameter the fixture's gradient of step k (converted to the parameter's dtype).
void set_fixture_grads(const std::vector<Tensor>& params, int k) {
  const OptimFixture& fx = OptimFixture::get();
  for (size_t i = 0; i < params.size(); ++i)
    params[i].set_grad(fx.step_of("grads.p" + std::to_string(i), k).to(params[i].dtype()));
}

// Replays every fixture case of optimizer `kind`; returns how many ran.
int replay_cases(const std::string& kind) {
  const OptimFixture& fx = OptimFixture::get();
  int ran = 0;
  for (const auto& entry : fx.cases) {  // (no structured binding: clang 14 cannot capture one in INFO)
    const auto& name = entry.first;
    const auto& meta = entry.second;
    if (meta.find("optimizer")->text != kind) continue;
    ++ran;
    const std::vector<Tensor> params = fx.initial_params();
    const auto opt = make_optimizer(meta, params);
    for (int k = 0; k < fx.steps; ++k) {
      set_fixture_grads(params, k);
      opt->step();
      for (size_t i = 0; i < params.size(); ++i) {
        INFO("case ", name, ", step ", k + 1, ", parameter ", i);
        CHECK_CLOSE(params[i].detach(), fx.step_of(name + ".p" + std::to_string(i), k));
      }
    }
  }
  return ran;
}

bool bitwise_equal(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() && a.to_vector<double>() == b.to_vector<double>();
}

}  // namespace

// ---- parity with torch.optim --------------------------------------------------------------------

TEST_CASE("optim.fixture_changes_parameters_beyond_tolerance") {
  // Guards the parity cases below: every case moves the parameters by far more than T(f32).
  const OptimFixture& fx = OptimFixture::get();
  REQUIRE(fx.cases.size() == 17);
  REQUIRE(fx.steps == 10);
  for (const auto& entry : fx.cases) {  // (no structured binding: clang 14 cannot capture one in INFO)
    const auto& name = entry.first;
    INFO(name);
    CHECK(hg_test::compare(fx.step_of(name + ".p0", fx.steps - 1), fx.at("init.p0"), hg_test::tolerance_for(hg::f32)).has_value());
  }
}

TEST_CASE("optim.sgd.matches_torch_every_step") { CHECK(replay_cases("sgd") == 6); }
TEST_CASE("optim.adam.matches_torch_every_step") { CHECK(replay_cases("adam") == 3); }
TEST_CASE("optim.adamw.matches_torch_every_step") { CHECK(replay_cases("adamw") == 1); }
TEST_CASE("optim.rmsprop.matches_torch_every_step") { CHECK(replay_cases("rmsprop") == 3); }
TEST_CASE("optim.adagrad.matches_torch_every_step") { CHECK(replay_cases("adagrad") == 2); }
TEST_CASE("optim.adadelta.matches_torch_every_step") { CHECK(replay_cases("adadelta") == 2); }

TEST_CASE("optim.parameters_without_grad_are_left_alone") {
  const OptimFixture& fx = OptimFixture::get();
  const std::vector<Tensor> params = fx.initial_params();
  hg::optim::Adam opt(params, {.lr = 0.1});
  params[0].set_grad(hg::ones(params[0].shape()));
  opt.step();
  CHECK(bitwise_equal(params[1].detach(), fx.at("init.p1")));
  CHECK_FALSE(bitwise_equal(params[0].detach(), fx.at("init.p0")));
  CHECK(opt.state_dict().count("state.1.step") == 0);
  CHECK(opt.state_dict().at("state.0.step").item<int64_t>() == 1);
  opt.zero_grad();
  CHECK_FALSE(params[0].grad().defined());
}

// ---- master weights ------------------------------------------------------------------------------

TEST_CASE("optim.master_weights.16bit_params_follow_an_f32_run") {
  const OptimFixture& fx = OptimFixture::get();
  for (hg::DType dtype : {hg::f16, hg::bf16}) {
    for (const std::string name : {"sgd_momentum_weight_decay_nesterov", "adam", "adamw", "rmsprop_centered_momentum_weight_decay",
                                   "adagrad_decay_initial_weight_decay", "adadelta_rho_eps_weight_decay"}) {
      INFO(hg::dtype_name(dtype), " ", name);
      const std::vector<Tensor> low = fx.initial_params(dtype);
      // The f32 control starts from the same (16-bit) values and sees the same (16-bit) gradients.
      const std::vector<Tensor> full = {low[0].detach().to(hg::f32).requires_grad_(), low[1].detach().to(hg::f32).requires_grad_()};
      const auto opt_low = make_optimizer(fx.cases.at(name), low, /*master_weights=*/true);
      const auto opt_full = make_optimizer(fx.cases.at(name), full);
      CHECK(opt_low->master_weights());
      for (int k = 0; k < fx.steps; ++k) {
        set_fixture_grads(low, k);
        for (size_t i = 0; i < full.size(); ++i) full[i].set_grad(low[i].grad().to(hg::f32));
        opt_low->step();
        opt_full->step();
        const auto state = opt_low->state_dict();
        for (size_t i = 0; i < low.size(); ++i) {
          const std::string prefix = "state." + std::to_string(i) + ".";
          INFO("step ", k + 1, ", parameter ", i);
          REQUIRE(state.count(prefix + "master"));
          CHECK(state.at(prefix + "master").dtype() == hg::f32);
          CHECK(bitwise_equal(state.at(prefix + "master"), full[i].detach()));
          CHECK(low[i].dtype() == dtype);
          CHECK(bitwise_equal(low[i].detach(), full[i].detach().to(dtype)));
          for (const char* moment : {"exp_avg", "exp_avg_sq", "momentum_buffer", "square_avg", "grad_avg", "sum", "acc_delta"})
            if (state.count(prefix + moment)) CHECK(state.at(prefix + moment).dtype() == hg::f32);
        }
      }
    }
  }
}

TEST_CASE("optim.master_weights.keep_updates_that_16bit_rounding_loses") {
  // bf16 has 8 significant bits: 1 - 1e-3 rounds back to 1, so a bf16-only SGD never moves.
  const Tensor lost = hg::ones({4}, {.dtype = hg::bf16, .requires_grad = true});
  const Tensor kept = hg::ones({4}, {.dtype = hg::bf16, .requires_grad = true});
  hg::optim::SGD plain({lost}, {.lr = 1e-3});
  hg::optim::SGD master({kept}, {.lr = 1e-3, .master_weights = true});
  for (int k = 0; k < 50; ++k) {
    lost.set_grad(hg::ones({4}, {.dtype = hg::bf16}));
    kept.set_grad(hg::ones({4}, {.dtype = hg::bf16}));
    plain.step();
    master.step();
  }
  CHECK(lost.detach().to_vector<float>() == std::vector<float>(4, 1.0f));
  float expected = 1.0f;
  for (int k = 0; k < 50; ++k) expected -= 1e-3f;  // the f32 master's own arithmetic
  CHECK(master.state_dict().at("state.0.master").to_vector<float>() == std::vector<float>(4, expected));
  CHECK(bitwise_equal(kept.detach(), hg::full({4}, double(expected)).to(hg::bf16)));
  CHECK_CLOSE(kept.detach(), hg::full({4}, 0.95, {.dtype = hg::bf16}));
}

// ---- state dicts ---------------------------------------------------------------------------------

TEST_CASE("optim.state_dict.resume_gives_identical_next_steps") {
  const OptimFixture& fx = OptimFixture::get();
  for (const std::string name : {"sgd_momentum", "adam", "adamw", "rmsprop_centered_momentum_weight_decay",
                                 "adagrad_decay_initial_weight_decay", "adadelta_rho_eps_weight_decay"}) {
    INFO(name);
    const Args& meta = fx.cases.at(name);
    const std::vector<Tensor> params = fx.initial_params();
    const auto opt = make_optimizer(meta, params);
    for (int k = 0; k < 5; ++k) set_fixture_grads(params, k), opt->step();

    // Checkpoint through a safetensors file, then resume into a new optimizer built with another lr.
    const std::string path = hg_test::temp_path("optim_" + name + ".safetensors");
    hg::save(path, opt->state_dict());
    const std::vector<Tensor> resumed = {params[0].detach().clone().requires_grad_(), params[1].detach().clone().requires_grad_()};
    Args other = meta;
    for (auto& [key, value] : other.members)
      if (key == "lr") value.text = "0.5";
    const auto opt2 = make_optimizer(other, resumed);
    opt2->load_state_dict(hg::load(path));
    CHECK(opt2->lr() == opt->lr());
    CHECK(opt2->steps_applied() == 5);

    // Without the state a fresh optimizer takes a different step (the comparison can fail).
    const std::vector<Tensor> fresh = {params[0].detach().clone().requires_grad_(), params[1].detach().clone().requires_grad_()};
    const auto opt3 = make_optimizer(meta, fresh);
    for (int k = 5; k < fx.steps; ++k) {
      set_fixture_grads(params, k), opt->step();
      set_fixture_grads(resumed, k), opt2->step();
      for (size_t i = 0; i < params.size(); ++i) {
        INFO("step ", k + 1, ", parameter ", i);
        CHECK(bitwise_equal(resumed[i].detach(), params[i].detach()));
        CHECK_CLOSE(resumed[i].detach(), fx.step_of(name + ".p" + std::to_string(i), k));
      }
    }
    set_fixture_grads(fresh, 5), opt3->step();
    CHECK(hg_test::compare(fresh[0].detach(), fx.step_of(name + ".p0", 5), hg_test::tolerance_for(hg::f32)).has_value());
  }
}

TEST_CASE("optim.state_dict.contents_and_errors") {
  const Tensor a = hg::ones({3}, {.requires_grad = true}), b = hg::ones({2}, {.requires_grad = true});
  hg::optim::SGD opt({a}, {.lr = 0.1, .momentum = 0.9});
  opt.add_param_group({b}, 0.01);
  a.set_grad(hg::ones({3}));
  opt.step();
  const auto state = opt.state_dict();
  CHECK(state.at("param_groups.0.lr").item<double>() == 0.1);
  CHECK(state.at("param_groups.1.lr").item<double>() == 0.01);
  CHECK(state.at("state.0.step").item<int64_t>() == 1);
  CHECK(state.at("state.0.momentum_buffer").to_vector<float>() == std::vector<float>(3, 1.0f));
  CHECK(state.count("state.1.momentum_buffer") == 0);
  // The returned state is a copy: changing it does not change the optimizer.
  Tensor(state.at("state.0.momentum_buffer")).fill_(7.0);
  CHECK(opt.state_dict().at("state.0.momentum_buffer").to_vector<float>() == std::vector<float>(3, 1.0f));

  hg::optim::SGD one_group({a}, {.lr = 0.1});
  auto too_many = state;
  too_many["state.5.step"] = hg::full({}, 1.0, {.dtype = hg::i64});
  CHECK_THROWS_HG(opt.load_state_dict(too_many), "state for parameter 5");
  hg::optim::SGD two_groups({a}, {.lr = 0.1});
  two_groups.add_param_group({b}, 0.2);
  CHECK_THROWS_HG(two_groups.load_state_dict(hg::optim::SGD({a}, {.lr = 0.1}).state_dict()), "param_groups.1.lr");
}

// A checkpoint is a file a user (or an attacker) can edit: every value is checked like the
// constructor's argument, and every key and counter is range-checked (issue 11, items 2-4).
namespace {
std::map<std::string, Tensor> with(std::map<std::string, Tensor> state, const std::string& key, const Tensor& value) {
  state[key] = value;
  return state;
}
Tensor i64_scalar(int64_t v) { return hg::from_vector(std::vector<int64_t>{v}, {}); }
}  // namespace

TEST_CASE("optim.state_dict.malformed_or_huge_state_keys_are_hg_errors") {
  const Tensor a = hg::ones({3}, {.requires_grad = true});
  hg::optim::SGD opt({a}, {.lr = 0.1, .momentum = 0.9});
  a.set_grad(hg::ones({3}));
  opt.step();
  const auto state = opt.state_dict();
  const Tensor buffer = state.at("state.0.momentum_buffer");
  // These used to escape as std::invalid_argument / std::out_of_range from std::stoul.
  for (const char* key : {"state.x.momentum_buffer", "state..momentum_buffer", "state.-1.momentum_buffer",
                          "state.+0.momentum_buffer", "state.0x1.momentum_buffer", "state.0"})
    CHECK_THROWS_HG(opt.load_state_dict(with(state, key, buffer)), "malformed key");
  CHECK_THROWS_HG(opt.load_state_dict(with(state, "state.99999999999999999999999.momentum_buffer", buffer)),
                  "malformed key");
  CHECK_THROWS_HG(opt.load_state_dict(with(state, "state.18446744073709551615.step", i64_scalar(1))),
                  "state for parameter 18446744073709551615");
  CHECK_THROWS_HG(opt.load_state_dict(with(state, "state.0.exp_avg", buffer)), "unexpected state \"state.0.exp_avg\"");
  CHECK_THROWS_HG(opt.load_state_dict(with(state, "state.0.master", buffer)), "unexpected state");
  // A state tensor must match its parameter (a wrong one used to reach the update loop).
  CHECK_THROWS_HG(opt.load_state_dict(with(state, "state.0.momentum_buffer", hg::ones({4}))), "expected [3] f32");
  CHECK_THROWS_HG(opt.load_state_dict(with(state, "state.0.momentum_buffer", hg::ones({3}, {.dtype = hg::f64}))),
                  "expected [3] f32");
  CHECK_THROWS_HG(opt.load_state_dict(with(state, "state.0.step", hg::full({}, 1.5))), "one integer value");
  // A refused checkpoint leaves the optimizer as it was.
  CHECK(opt.state_dict().at("state.0.momentum_buffer").to_vector<float>() == std::vector<float>(3, 1.0f));
  CHECK(opt.lr() == 0.1);
}

TEST_CASE("optim.state_dict.learning_rate_and_counters_are_validated") {
  const Tensor a = hg::ones({3}, {.requires_grad = true});
  hg::optim::Adam opt({a}, {.lr = 0.1});
  a.set_grad(hg::ones({3}));
  opt.step();
  const auto state = opt.state_dict();
  const double kNaN = std::numeric_limits<double>::quiet_NaN(), kInf = std::numeric_limits<double>::infinity();
  for (double lr : {-0.1, kNaN, kInf})
    CHECK_THROWS_HG(opt.load_state_dict(with(state, "param_groups.0.lr", hg::full({}, lr, {.dtype = hg::f64}))),
                    "learning rate must be finite and >= 0");
  CHECK_THROWS_HG(hg::optim::Adam({a}, {.lr = kNaN}), "learning rate must be finite and >= 0");  // the same rule
  // Counters that would overflow when incremented (signed overflow is undefined behaviour).
  for (int64_t step : {int64_t(-1), std::numeric_limits<int64_t>::max()}) {
    CHECK_THROWS_HG(opt.load_state_dict(with(state, "state.0.step", i64_scalar(step))), "\"state.0.step\" is");
    CHECK_THROWS_HG(opt.load_state_dict(with(state, "steps_applied", i64_scalar(step))), "\"steps_applied\" is");
  }
  CHECK(opt.lr() == 0.1);
  CHECK(opt.steps_applied() == 1);
  opt.load_state_dict(with(state, "state.0.step", i64_scalar(hg::optim::Optimizer::kMaxSteps)));  // the bound itself
}

TEST_CASE("optim.state_dict.resumes_only_into_the_same_kind_of_optimizer") {
  const Tensor a = hg::ones({3}, {.requires_grad = true});
  hg::optim::SGD sgd({a}, {.lr = 0.1, .momentum = 0.9});
  hg::optim::Adam adam({a}, {.lr = 0.1});
  hg::optim::AdamW adamw({a}, {.lr = 0.1});
  a.set_grad(hg::ones({3}));
  sgd.step(), adam.step(), adamw.step();
  CHECK(sgd.state_dict().at("kind").dtype() == hg::u8);
  CHECK_THROWS_HG(adam.load_state_dict(sgd.state_dict()), "saved by \"SGD\", not Adam");
  CHECK_THROWS_HG(sgd.load_state_dict(adam.state_dict()), "saved by \"Adam\", not SGD");
  CHECK_THROWS_HG(adamw.load_state_dict(adam.state_dict()), "saved by \"Adam\", not AdamW");
  auto no_kind = sgd.state_dict();
  no_kind.erase("kind");
  CHECK_THROWS_HG(sgd.load_state_dict(no_kind), "missing key \"kind\"");
  // Even a state dict without momentum buffers (plain SGD) does not pass as Adam's.
  hg::optim::SGD plain({a}, {.lr = 0.1});
  CHECK_THROWS_HG(adam.load_state_dict(plain.state_dict()), "not Adam");
  CHECK_NOTHROW(adam.load_state_dict(adam.state_dict()));
}

// ---- learning rates and parameter groups ---------------------------------------------------------

TEST_CASE("optim.lr_and_set_lr") {
  const Tensor w = hg::zeros({2}, {.requires_grad = true});
  hg::optim::SGD opt({w}, {.lr = 0.1});
  CHECK(opt.lr() == 0.1);
  opt.set_lr(0.5);
  CHECK(opt.lr() == 0.5);
  w.set_grad(hg::from_vector<float>({1, -2}, {2}));
  opt.step();
  CHECK(w.detach().to_vector<float>() == std::vector<float>{-0.5f, 1.0f});
  CHECK_THROWS_HG(opt.set_lr(-1), "learning rate");
  CHECK_THROWS_HG(hg::optim::SGD({w}, {.lr = -0.1}), "learning rate");
}

TEST_CASE("optim.param_groups_have_their_own_lr") {
  const Tensor a = hg::zeros({2}, {.requires_grad = true}), b = hg::zeros({3}, {.requires_grad = true});
  hg::optim::SGD opt({a}, {.lr = 0.1});
  opt.add_param_group({b}, 0.01);
  REQUIRE(opt.param_groups().size() == 2);
  CHECK(opt.parameters().size() == 2);
  a.set_grad(hg::ones({2}));
  b.set_grad(hg::ones({3}));
  opt.step();
  CHECK_CLOSE(a.detach(), hg::full({2}, -0.1));
  CHECK_CLOSE(b.detach(), hg::full({3}, -0.01));
  opt.param_groups()[1].lr = 1.0;  // groups are editable, like PyTorch's param_groups
  opt.step();
  CHECK_CLOSE(b.detach(), hg::full({3}, -1.01));
  opt.set_lr(0.5);  // every group
  CHECK(opt.param_groups()[0].lr == 0.5);
  CHECK(opt.param_groups()[1].lr == 0.5);
  CHECK_THROWS_HG(opt.add_param_group({a}, 0.1), "more than one group");
  // Listed twice in one group, a parameter used to be updated twice per step (issue 11, item 7).
  const Tensor c = hg::zeros({2}, {.requires_grad = true});
  CHECK_THROWS_HG(hg::optim::SGD({c, b, c}, {.lr = 0.1}), "parameter 2 (shape [2]) is listed twice");
  CHECK_THROWS_HG(opt.add_param_group({c, c}, 0.1), "listed twice");
  CHECK_THROWS_HG(opt.add_param_group({hg::zeros({2}, {.dtype = hg::i64})}, 0.1), "floating leaf");
}

// ---- schedulers ----------------------------------------------------------------------------------

TEST_CASE("optim.scheduler.step_lr_closed_form") {
  const Tensor w = hg::zeros({1}, {.requires_grad = true});
  hg::optim::SGD opt({w}, {.lr = 0.1});
  hg::optim::StepLR sched(opt, 3, 0.5);
  CHECK(opt.lr() == 0.1);
  for (int t = 1; t <= 20; ++t) {
    sched.step();
    CHECK(sched.steps() == t);
    CHECK(opt.lr() == doctest::Approx(0.1 * std::pow(0.5, t / 3)).epsilon(1e-14));
  }
  CHECK(opt.lr() == doctest::Approx(0.1 / 64).epsilon(1e-14));  // t = 20: six decays
  CHECK_THROWS_HG(hg::optim::StepLR(opt, 0), "step_size");
}

TEST_CASE("optim.scheduler.cosine_closed_form") {
  const Tensor w = hg::zeros({1}, {.requires_grad = true});
  hg::optim::Adam opt({w}, {.lr = 0.2});
  hg::optim::CosineAnnealingLR sched(opt, 10, 0.01);
  CHECK(opt.lr() == doctest::Approx(0.2).epsilon(1e-14));
  for (int t = 1; t <= 10; ++t) {
    sched.step();
    CHECK(opt.lr() == doctest::Approx(0.01 + 0.19 * (1 + std::cos(std::numbers::pi * t / 10)) / 2).epsilon(1e-12));
    if (t == 5) CHECK(opt.lr() == doctest::Approx(0.105).epsilon(1e-12));
  }
  CHECK(opt.lr() == doctest::Approx(0.01).epsilon(1e-12));
  CHECK(sched.base_lr() == 0.2);
}

TEST_CASE("optim.scheduler.linear_warmup_closed_form") {
  const Tensor w = hg::zeros({1}, {.requires_grad = true});
  hg::optim::SGD opt({w}, {.lr = 0.4});
  hg::optim::LinearWarmup sched(opt, 4);
  const double expected[] = {0.1, 0.2, 0.3, 0.4, 0.4, 0.4, 0.4};
  for (int t = 0; t < 7; ++t) {
    INFO("t = ", t);
    CHECK(opt.lr() == doctest::Approx(expected[t]).epsilon(1e-14));
    sched.step();
  }
}

TEST_CASE("optim.scheduler.skipped_amp_step_does_not_advance") {
  const Tensor w = hg::zeros({1}, {.requires_grad = true});
  hg::optim::SGD opt({w}, {.lr = 1.0});
  hg::optim::StepLR sched(opt, 1, 0.5);
  sched.step(hg::amp::StepResult{.applied = false, .found_inf = true, .scale = 65536.0, .skipped_in_a_row = 1});
  CHECK(sched.steps() == 0);
  CHECK(opt.lr() == 1.0);
  sched.step(hg::amp::StepResult{.applied = true, .found_inf = false, .scale = 32768.0, .skipped_in_a_row = 0});
  CHECK(sched.steps() == 1);
  CHECK(opt.lr() == 0.5);
  // The decayed lr is what the next update uses.
  w.set_grad(hg::ones({1}));
  opt.step();
  CHECK(w.detach().item<float>() == -0.5f);
}

// ---- the schedulers against torch.optim.lr_scheduler ----------------------------------------------

namespace {

struct SchedulerFixture {
  std::map<std::string, Tensor> tensors;
  std::map<std::string, Args> cases;  // case name -> {"scheduler": ..., options}
  int steps = 0;
  static const SchedulerFixture& get() {
    static const SchedulerFixture fx = [] {
      const hg::SafetensorsContents file = hg::load_with_metadata(std::string(HG_TEST_DIR) + "/golden/schedulers.safetensors");
      SchedulerFixture f;
      f.tensors = file.tensors;
      for (const auto& [name, text] : file.metadata)
        if (!name.starts_with("_")) f.cases[name] = hg::json::parse(text, "scheduler fixture metadata");
      f.steps = std::stoi(file.metadata.at("_steps"));
      return f;
    }();
    return fx;
  }
  std::vector<double> values(const std::string& name) const { return tensors.at(name).to_vector<double>(); }
};

std::string text_or(const Args& meta, std::string_view key, std::string fallback) {
  const Args* v = meta.find(key);
  return v ? v->text : fallback;
}

// Drives one fixture case: an SGD(lr=0.1, momentum=0.9) and the case's scheduler (or schedulers,
// for SequentialLR); after construction and after each step, the lr and momentum it set.
struct ScheduleRun {
  std::vector<double> lrs, momenta;
};

ScheduleRun run_schedule(const Args& o, const std::vector<double>& plateau_metrics, int steps) {
  const Tensor p = hg::zeros({2}, {.requires_grad = true});
  hg::optim::SGD opt({p}, {.lr = 0.1, .momentum = 0.9});
  const std::string kind = o.find("scheduler")->text;
  std::vector<std::unique_ptr<hg::optim::LRScheduler>> parts;
  std::unique_ptr<hg::optim::LRScheduler> schedule;
  std::unique_ptr<hg::optim::ReduceLROnPlateau> plateau;
  auto integer = [&](std::string_view key) { return int64_t(number_or(o, key, 0)); };
  if (kind == "step") {
    schedule = std::make_unique<hg::optim::StepLR>(opt, integer("step_size"), number_or(o, "gamma", 0.1));
  } else if (kind == "multistep") {
    std::vector<int64_t> milestones;
    for (const Args& m : o.find("milestones")->items) milestones.push_back(std::stoll(m.text));
    schedule = std::make_unique<hg::optim::MultiStepLR>(opt, milestones, number_or(o, "gamma", 0.1));
  } else if (kind == "exponential") {
    schedule = std::make_unique<hg::optim::ExponentialLR>(opt, number_or(o, "gamma", 0));
  } else if (kind == "cosine") {
    schedule = std::make_unique<hg::optim::CosineAnnealingLR>(opt, integer("t_max"), number_or(o, "eta_min", 0));
  } else if (kind == "lambda") {  // make_golden.py's lambda
    schedule = std::make_unique<hg::optim::LambdaLR>(opt, [](int64_t t) { return std::pow(0.95, double(t)) * double(1 + t % 3); });
  } else if (kind == "onecycle") {
    schedule = std::make_unique<hg::optim::OneCycleLR>(
        opt, number_or(o, "max_lr", 0), integer("total_steps"),
        hg::optim::OneCycleLROptions{.pct_start = number_or(o, "pct_start", 0.3),
                                     .anneal_strategy = text_or(o, "anneal_strategy", "cos"),
                                     .div_factor = number_or(o, "div_factor", 25),
                                     .final_div_factor = number_or(o, "final_div_factor", 1e4),
                                     .three_phase = flag_or(o, "three_phase", false)});
  } else if (kind == "sequential") {
    const int64_t warmup = integer("warmup");
    parts.push_back(std::make_unique<hg::optim::LambdaLR>(opt, [warmup](int64_t t) { return std::min(1.0, double(t + 1) / double(warmup)); }));
    parts.push_back(std::make_unique<hg::optim::CosineAnnealingLR>(opt, integer("t_max")));
    schedule = std::make_unique<hg::optim::SequentialLR>(
        opt, std::vector<std::reference_wrapper<hg::optim::LRScheduler>>{*parts[0], *parts[1]}, std::vector<int64_t>{warmup});
  } else {
    REQUIRE(kind == "plateau");
    plateau = std::make_unique<hg::optim::ReduceLROnPlateau>(
        opt, hg::optim::ReduceLROnPlateauOptions{.mode = text_or(o, "mode", "min"), .factor = number_or(o, "factor", 0.1),
                                                 .patience = integer("patience"), .threshold = number_or(o, "threshold", 1e-4),
                                                 .cooldown = integer("cooldown")});
  }
  ScheduleRun run;
  auto record = [&] {
    run.lrs.push_back(opt.lr());
    run.momenta.push_back(opt.momentum().value());
  };
  record();
  for (int k = 0; k < steps; ++k) {
    p.set_grad(hg::ones({2}));
    opt.step();
    if (plateau) plateau->step(plateau_metrics.at(k));
    else schedule->step();
    record();
  }
  return run;
}

}  // namespace

TEST_CASE("optim.scheduler.every_schedule_matches_torch_for_100_steps") {
  const SchedulerFixture& fx = SchedulerFixture::get();
  REQUIRE(fx.cases.size() == 9);
  REQUIRE(fx.steps == 100);
  const std::vector<double> metrics = fx.values("plateau_metrics");
  for (const auto& entry : fx.cases) {  // (no structured binding: clang 14 cannot capture one in INFO)
    const std::string& name = entry.first;
    const ScheduleRun run = run_schedule(entry.second, metrics, fx.steps);
    const std::vector<double> lrs = fx.values(name + ".lr"), momenta = fx.values(name + ".momentum");
    REQUIRE(run.lrs.size() == lrs.size());
    bool lr_changed = false;
    for (size_t t = 0; t < lrs.size(); ++t) {
      INFO("case ", name, ", after step ", t);
      // PyTorch updates some schedules recursively (lr *= ratio), ours from the closed form: the
      // two agree to a few ulps, not bitwise.
      CHECK(run.lrs[t] == doctest::Approx(lrs[t]).epsilon(1e-12).scale(1e-15));
      CHECK(run.momenta[t] == doctest::Approx(momenta[t]).epsilon(1e-12));
      lr_changed = lr_changed || lrs[t] != lrs[0];
    }
    CHECK(lr_changed);  // every case exercises its schedule
  }
}

TEST_CASE("optim.scheduler.one_cycle_cycles_adam_beta1_and_refuses_adagrad_without_momentum") {
  const Tensor w = hg::zeros({2}, {.requires_grad = true});
  hg::optim::Adam adam({w}, {.lr = 0.01});
  hg::optim::OneCycleLR cycle(adam, 0.1, 10);
  CHECK(adam.momentum().value() == doctest::Approx(0.95));  // max_momentum at the start
  for (int k = 0; k < 2; ++k) cycle.step();  // the peak: step pct_start * total_steps - 1 = 2 (PyTorch's)
  CHECK(adam.options.beta1 == doctest::Approx(0.85));
  CHECK(adam.lr() == doctest::Approx(0.1));
  hg::optim::Adagrad adagrad({w}, {.lr = 0.01});
  CHECK_FALSE(adagrad.momentum().has_value());
  CHECK_THROWS_HG(hg::optim::OneCycleLR(adagrad, 0.1, 10), "momentum");
  CHECK_NOTHROW(hg::optim::OneCycleLR(adagrad, 0.1, 10, {.cycle_momentum = false}));
}

TEST_CASE("optim.scheduler.sequential_state_dict_resumes_mid_schedule") {
  auto make = [](hg::optim::SGD& opt, std::vector<std::unique_ptr<hg::optim::LRScheduler>>& parts) {
    parts.push_back(std::make_unique<hg::optim::LinearWarmup>(opt, 5));
    parts.push_back(std::make_unique<hg::optim::CosineAnnealingLR>(opt, 20));
    return std::make_unique<hg::optim::SequentialLR>(
        opt, std::vector<std::reference_wrapper<hg::optim::LRScheduler>>{*parts[0], *parts[1]}, std::vector<int64_t>{5});
  };
  const Tensor a = hg::zeros({1}, {.requires_grad = true}), b = hg::zeros({1}, {.requires_grad = true});
  hg::optim::SGD opt_a({a}, {.lr = 0.3}), opt_b({b}, {.lr = 0.3});
  std::vector<std::unique_ptr<hg::optim::LRScheduler>> parts_a, parts_b;
  const auto first = make(opt_a, parts_a);
  for (int k = 0; k < 9; ++k) first->step();
  const auto second = make(opt_b, parts_b);
  second->load_state_dict(first->state_dict());
  opt_b.set_lr(opt_a.lr());  // (the optimizer's own state dict carries its lr)
  for (int k = 0; k < 10; ++k) {
    first->step(), second->step();
    CHECK(opt_b.lr() == opt_a.lr());
  }
  std::map<std::string, Tensor> wrong = first->state_dict();
  wrong.erase(wrong.begin());
  CHECK_THROWS_AS(second->load_state_dict(wrong), hg::Error);
}

TEST_CASE("optim.scheduler.bad_settings_are_errors") {
  const Tensor w = hg::zeros({1}, {.requires_grad = true});
  hg::optim::SGD opt({w}, {.lr = 0.1, .momentum = 0.9});
  CHECK_THROWS_HG(hg::optim::MultiStepLR(opt, {10, 5}), "milestones");
  CHECK_THROWS_HG(hg::optim::OneCycleLR(opt, 0.1, 0), "total_steps");
  CHECK_THROWS_HG(hg::optim::OneCycleLR(opt, 0.1, 10, {.anneal_strategy = "cosine"}), "anneal_strategy");
  CHECK_THROWS_HG(hg::optim::ReduceLROnPlateau(opt, {.mode = "lowest"}), "mode");
  CHECK_THROWS_HG(hg::optim::ReduceLROnPlateau(opt, {.factor = 1.0}), "factor");
  hg::optim::OneCycleLR cycle(opt, 0.1, 3);
  for (int k = 0; k < 3; ++k) cycle.step();
  CHECK_THROWS_HG(cycle.step(), "total_steps");  // PyTorch: "Tried to step 4 times"
  hg::optim::ReduceLROnPlateau plateau(opt);
  CHECK_THROWS_HG(plateau.step(std::nan("")), "metric");
}

// ---- an optimizer of your own ---------------------------------------------------------------------

TEST_CASE("optim.your_own.update_in_ops_gets_state_dicts_master_weights_and_the_scaler") {
  const std::vector<float> g1 = {1, -2, 0.5f}, g2 = {-1, -1, 4};
  const Tensor w = hg::zeros({3}, {.requires_grad = true});
  hg_test::SmoothSign opt({w}, 0.1);
  // Two steps by hand: buf1 = 0.1 g1, w1 = -0.1 buf1 / (|buf1| + 1e-3); buf2 = 0.9 buf1 + 0.1 g2.
  std::vector<double> buf(3), expected(3);
  for (const auto& g : {g1, g2}) {
    w.set_grad(hg::from_vector(g, {3}));
    opt.step();
    for (size_t i = 0; i < 3; ++i) {
      buf[i] = 0.9 * buf[i] + 0.1 * g[i];
      expected[i] -= 0.1 * buf[i] / (std::fabs(buf[i]) + 1e-3);
    }
  }
  CHECK_CLOSE(w.detach(), hg::from_vector(std::vector<float>(expected.begin(), expected.end()), {3}));
  const auto state = opt.state_dict();
  CHECK(hg::state_dict::read_text(state, "kind", "test") == "SmoothSign");
  CHECK(state.at("state.0.step").item<int64_t>() == 2);
  CHECK_CLOSE(state.at("state.0.buf"), hg::from_vector(std::vector<float>(buf.begin(), buf.end()), {3}));

  // Resumed from its state dict, the next step is the same; into another kind, an error.
  const Tensor w2 = w.detach().clone().requires_grad_();
  hg_test::SmoothSign resumed({w2}, 0.5);
  resumed.load_state_dict(state);
  w.set_grad(hg::ones({3})), w2.set_grad(hg::ones({3}));
  opt.step(), resumed.step();
  CHECK(w2.detach().to_vector<float>() == w.detach().to_vector<float>());
  hg::optim::SGD sgd({w2}, {.lr = 0.1});
  CHECK_THROWS_HG(sgd.load_state_dict(state), "SmoothSign");

  // bf16 parameters with master weights: the update runs on the f32 master.
  const Tensor low = hg::zeros({3}, {.dtype = hg::bf16, .requires_grad = true});
  hg_test::SmoothSign master({low}, 1e-3, 0.9, /*master_weights=*/true);
  for (int k = 0; k < 20; ++k) low.set_grad(hg::ones({3}, {.dtype = hg::bf16})), master.step();
  const Tensor kept = master.state_dict().at("state.0.master");
  CHECK(kept.dtype() == hg::f32);
  CHECK(kept.to_vector<float>()[0] < -0.015f);  // ~20 steps of ~1e-3 each, kept in f32
  CHECK(master.state_dict().at("state.0.buf").dtype() == hg::f32);

  // The GradScaler skips a step with an inf gradient and unscales the others.
  const Tensor s = hg::zeros({2}, {.requires_grad = true});
  hg_test::SmoothSign scaled({s}, 0.1);
  hg::amp::GradScaler scaler({.init_scale = 8});
  hg::sum(scaler.scale(s * hg::from_vector<float>({1, INFINITY}, {2}))).backward();
  CHECK_FALSE(scaler.step(scaled).applied);
  CHECK(s.detach().to_vector<float>() == std::vector<float>{0, 0});
  scaler.update();
  scaled.zero_grad();
  hg::sum(scaler.scale(s * 2.0)).backward();
  CHECK(scaler.step(scaled).applied);
  CHECK(scaled.state_dict().at("state.0.buf").to_vector<float>() == std::vector<float>{0.2f, 0.2f});  // 0.1 * 2, unscaled
}

// ---- step counters and SGD's first step (issue 12: the CPU sides of CPU == GPU) -----------------

// The per-parameter and applied-step counts are integers everywhere: a count stored as f32 stops
// growing at 2^24 (2^24 + 1 rounds back to 2^24), one passed through a double turns 2^53 + 3 into
// 2^53 + 4. The counts survive a state dict exactly, and Adam's bias correction uses t = count + 1.
TEST_CASE("optim.step_counts_stay_exact_past_2_24_and_2_53") {
  for (const int64_t start : {int64_t(1) << 24, (int64_t(1) << 53) + 2}) {
    INFO("count before the step: ", start);
    const auto after = hg_test::adam_step_after_count(hg::Device::cpu(), start);
    CHECK(after.at("state.0.step").item<int64_t>() == start + 1);
    CHECK(after.at("steps_applied").item<int64_t>() == start + 1);
    // Fresh moments, t huge: both bias corrections are 1 (to f64), so the step is lr * g / (|g| + eps).
    const double t = double(start + 1);
    const double m = 0.1 * 2.0, v = 0.001 * 4.0;
    const double expected_step = 0.1 / (1 - std::pow(0.9, t)) * m / (std::sqrt(v) / std::sqrt(1 - std::pow(0.999, t)) + 1e-8);
    CHECK_CLOSE(after.at("param"), after.at("param_before") - expected_step);
  }
}

// One rule on every device (PyTorch's): the step that finds no momentum buffer sets it to the
// gradient; a buffer that exists -- however it came to be -- is decayed and added to.
TEST_CASE("optim.sgd.first_step_is_the_one_without_a_momentum_buffer") {
  const hg::optim::SGDOptions options{.lr = 0.1, .momentum = 0.9, .dampening = 0.5};
  SUBCASE("a buffer loaded from a state dict with step 0 is used, not replaced") {
    const Tensor w = hg::zeros({2}, {.requires_grad = true});
    hg::optim::SGD opt({w}, options);
    std::map<std::string, Tensor> state = opt.state_dict();  // (for its "kind")
    state["state.0.step"] = hg::full({}, 0.0, {.dtype = hg::i64});
    state["state.0.momentum_buffer"] = hg::from_vector<float>({4, -2}, {2});
    opt.load_state_dict(state);
    w.set_grad(hg::from_vector<float>({2, 2}, {2}));
    opt.step();
    // buf = 0.9 * [4, -2] + 0.5 * [2, 2] = [4.6, -0.8]
    CHECK_CLOSE(opt.state_dict().at("state.0.momentum_buffer"), hg::from_vector<float>({4.6f, -0.8f}, {2}));
    CHECK_CLOSE(w.detach(), hg::from_vector<float>({-0.46f, 0.08f}, {2}));
  }
  SUBCASE("momentum switched on after some steps starts from the gradient") {
    const Tensor w = hg::zeros({2}, {.requires_grad = true});
    hg::optim::SGD opt({w}, {.lr = 0.1});
    w.set_grad(hg::ones({2}));
    opt.step();
    opt.step();
    CHECK(opt.state_dict().at("state.0.step").item<int64_t>() == 2);
    opt.options.momentum = 0.9;
    opt.options.dampening = 0.5;
    w.set_grad(hg::from_vector<float>({2, -4}, {2}));
    opt.step();
    CHECK_CLOSE(opt.state_dict().at("state.0.momentum_buffer"), hg::from_vector<float>({2, -4}, {2}));  // not 0.5 * g
  }
  SUBCASE("a skipped first step creates no buffer; the next applied step starts from its gradient") {
    const Tensor w = hg::zeros({2}, {.requires_grad = true});
    hg::optim::SGD opt({w}, options);
    hg::amp::GradScaler scaler({.init_scale = 4});
    (void)scaler.scale(hg::zeros({}));  // the gradients below are written pre-scaled by hand
    w.set_grad(hg::from_vector<float>({INFINITY, 4}, {2}));
    CHECK_FALSE(scaler.step(opt).applied);
    scaler.update();
    CHECK(opt.state_dict().count("state.0.momentum_buffer") == 0);
    w.set_grad(hg::from_vector<float>({4, 8}, {2}));  // scale now 2: true gradient [2, 4]
    CHECK(scaler.step(opt).applied);
    CHECK_CLOSE(opt.state_dict().at("state.0.momentum_buffer"), hg::from_vector<float>({2, 4}, {2}));
  }
}
