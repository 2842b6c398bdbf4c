// Autocast (docs/testing.md scenarios 17-19): the op-dtype table under f16 and bf16, with every result
// bitwise equal to running the op on manually cast inputs; nesting and exception safety of the
// RAII regions; the weight-cast cache (once per outermost region, invalidated by in-place
// updates, no growth under no-grad); the policy table and custom ops (Function<T> policies,
// cast_inputs, backward under the forward's state); backward not re-cast by a surrounding
// region; and the PrecisionReport.
#include <algorithm>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <sstream>

#include "amp/op_table.h"
#include "test_support.h"

using hg::Tensor;
namespace amp = hg::amp;

namespace {

std::vector<uint8_t> bytes_of(const Tensor& t) {
  const Tensor c = t.contiguous();
  const auto* p = static_cast<const uint8_t*>(c.raw_data());
  return std::vector<uint8_t>(p, p + c.numel() * int64_t(hg::element_size(c.dtype())));
}

// Same dtype, same shape, same bytes.
void check_bitwise(const Tensor& actual, const Tensor& expected, const std::string& what) {
  INFO(what);
  REQUIRE(actual.defined());
  CHECK(hg::dtype_name(actual.dtype()) == hg::dtype_name(expected.dtype()));
  CHECK(actual.shape() == expected.shape());
  if (actual.dtype() == expected.dtype() && actual.shape() == expected.shape())
    CHECK_MESSAGE(bytes_of(actual) == bytes_of(expected), "bytes differ");
}

std::string dtype_of(const Tensor& t) { return std::string(hg::dtype_name(t.dtype())); }

// Inputs for the op table: activations f32, weights f32 leaves that require grad.
struct Inputs {
  Tensor x = hg::randn({4, 8});
  Tensor w = hg::randn({6, 8}, {.requires_grad = true});
  Tensor b = hg::randn({6}, {.requires_grad = true});
  Tensor img = hg::randn({2, 3, 5, 5});
  Tensor kernel = hg::randn({4, 3, 3, 3}, {.requires_grad = true});
  Tensor kernel_bias = hg::randn({4}, {.requires_grad = true});
  Tensor ln_w = hg::randn({8}), ln_b = hg::randn({8});
  Tensor targets = hg::from_vector(std::vector<int64_t>{0, 5, 2, 3}, {4});
};

}  // namespace

// ---- scenario 17: the op-dtype table ---------------------------------------------------------------

TEST_CASE("amp.autocast.op_dtype_table_is_bitwise_equal_to_manual_casts") {
  hg::manual_seed(17);
  const Inputs in;
  for (const hg::DType low : {hg::f16, hg::bf16}) {
    const std::string low_name(hg::dtype_name(low));
    CAPTURE(low_name);
    const Tensor xl = in.x.to(low), yl = hg::randn({4, 8}).to(low);
    const Tensor pos = (hg::abs(in.x) + 0.5).to(low);  // positive, for log / sqrt
    const auto L = [&](const Tensor& t) { return t.to(low); };
    const auto F = [&](const Tensor& t) { return t.to(hg::f32); };

    // References first, outside any region: the op on manually cast inputs.
    REQUIRE_FALSE(amp::is_enabled());
    std::vector<std::pair<std::string, Tensor>> expected = {
        {"matmul", hg::matmul(L(in.x), L(in.w.t()))},
        {"linear", hg::linear(L(in.x), L(in.w), L(in.b))},
        {"linear+relu", hg::linear(L(in.x), L(in.w), L(in.b), {.epilogue = hg::Epilogue::Relu})},
        {"conv2d", hg::conv2d(L(in.img), L(in.kernel), L(in.kernel_bias), {.padding = 1})},
        {"conv2d+relu",
         hg::conv2d(L(in.img), L(in.kernel), L(in.kernel_bias), {.stride = 2, .epilogue = hg::Epilogue::Relu})},
        {"exp", hg::exp(F(xl))},
        {"log", hg::log(F(pos))},
        {"pow", hg::pow(F(xl), 3.0)},
        {"sqrt", hg::sqrt(F(pos))},
        {"softmax", hg::softmax(F(xl), 1)},
        {"log_softmax", hg::log_softmax(F(xl), 1)},
        {"layer_norm", hg::layer_norm(F(xl), {8}, in.ln_w, in.ln_b, 1e-5)},
        {"sum", hg::sum(F(xl))},
        {"sum_dims", hg::sum(F(xl), {1})},
        {"mean", hg::mean(F(xl))},
        {"cross_entropy", hg::cross_entropy(F(xl), in.targets)},
        {"mse_loss", hg::mse_loss(F(xl), F(yl))},
        {"cat_mixed", hg::cat({F(xl), in.x}, 0)},
        {"cat_low", hg::cat({xl, yl}, 1)},
        {"add_mixed", hg::add(xl, in.x)},
        {"mul_low", hg::mul(xl, yl)},
        {"relu_low", hg::relu(xl)},
        {"matmul_f64", hg::matmul(in.x.to(hg::f64), in.w.t().to(hg::f64))},
        {"exp_f64", hg::exp(in.x.to(hg::f64))},
        {"cat_f64", hg::cat({in.x.to(hg::f64), in.x.to(hg::f64)}, 0)},
        {"embedding", hg::embedding(in.targets, in.w.detach())},
    };
    std::vector<std::pair<std::string, Tensor>> actual;
    {
      amp::Autocast autocast(low);
      REQUIRE(amp::is_enabled());
      actual = {
          {"matmul", hg::matmul(in.x, in.w.t())},
          {"linear", hg::linear(in.x, in.w, in.b)},
          {"linear+relu", hg::linear(in.x, in.w, in.b, {.epilogue = hg::Epilogue::Relu})},
          {"conv2d", hg::conv2d(in.img, in.kernel, in.kernel_bias, {.padding = 1})},
          {"conv2d+relu", hg::conv2d(in.img, in.kernel, in.kernel_bias, {.stride = 2, .epilogue = hg::Epilogue::Relu})},
          {"exp", hg::exp(xl)},
          {"log", hg::log(pos)},
          {"pow", hg::pow(xl, 3.0)},
          {"sqrt", hg::sqrt(pos)},
          {"softmax", hg::softmax(xl, 1)},
          {"log_softmax", hg::log_softmax(xl, 1)},
          {"layer_norm", hg::layer_norm(xl, {8}, in.ln_w, in.ln_b, 1e-5)},
          {"sum", hg::sum(xl)},
          {"sum_dims", hg::sum(xl, {1})},
          {"mean", hg::mean(xl)},
          {"cross_entropy", hg::cross_entropy(xl, in.targets)},
          {"mse_loss", hg::mse_loss(xl, yl)},
          {"cat_mixed", hg::cat({xl, in.x}, 0)},
          {"cat_low", hg::cat({xl, yl}, 1)},
          {"add_mixed", hg::add(xl, in.x)},
          {"mul_low", hg::mul(xl, yl)},
          {"relu_low", hg::relu(xl)},
          {"matmul_f64", hg::matmul(in.x.to(hg::f64), in.w.t().to(hg::f64))},
          {"exp_f64", hg::exp(in.x.to(hg::f64))},
          {"cat_f64", hg::cat({in.x.to(hg::f64), in.x.to(hg::f64)}, 0)},
          {"embedding", hg::embedding(in.targets, in.w.detach())},
      };
    }
    REQUIRE(actual.size() == expected.size());
    for (size_t i = 0; i < actual.size(); ++i) {
      REQUIRE(actual[i].first == expected[i].first);
      check_bitwise(actual[i].second, expected[i].second, low_name + " " + actual[i].first);
    }
    // The dtypes themselves, so that a reference computed in the wrong dtype cannot hide a bug.
    const std::map<std::string, std::string> want = {
        {"matmul", low_name},   {"linear", low_name},  {"linear+relu", low_name}, {"conv2d", low_name},
        {"conv2d+relu", low_name}, {"exp", "f32"},     {"log", "f32"},            {"pow", "f32"},
        {"sqrt", "f32"},        {"softmax", "f32"},    {"log_softmax", "f32"},    {"layer_norm", "f32"},
        {"sum", "f32"},         {"sum_dims", "f32"},   {"mean", "f32"},           {"cross_entropy", "f32"},
        {"mse_loss", "f32"},    {"cat_mixed", "f32"},  {"cat_low", low_name},     {"add_mixed", "f32"},
        {"mul_low", low_name},  {"relu_low", low_name}, {"matmul_f64", "f64"},    {"exp_f64", "f64"},
        {"cat_f64", "f64"},     {"embedding", "f32"}};
    // (no structured binding: clang 14 cannot capture one in CHECK_MESSAGE's lambda)
    for (const auto& entry : actual)
      CHECK_MESSAGE(dtype_of(entry.second) == want.at(entry.first), low_name, " ", entry.first);
    // Every label names an op-table row (a suffix says which variant), so the list cannot drift
    // from the table: a renamed or removed row fails here.
    for (const auto& entry : actual) {
      std::string op = entry.first.substr(0, entry.first.find('+'));
      for (const std::string variant : {"_mixed", "_low", "_f64", "_dims"})
        if (op.ends_with(variant)) op.resize(op.size() - variant.size());
      CHECK_MESSAGE(amp::find_policy(op).has_value(), entry.first, " names no op-table row");
    }
  }
}

// Every op-table row's output dtype, PrecisionReport row and ShadowCheck row under autocast are
// checked per op by tests/test_op_db.cpp (op_db.autocast_output_dtype,
// op_db.precision_report_row_is_the_op_table_row, op_db.shadow_check_sees_every_op_under_its_table_name).

TEST_CASE("amp.autocast.integer_inputs_and_batch_norm_keep_their_dtype") {
  hg::manual_seed(3);
  const Tensor ints = hg::randint(0, 10, {3, 4}, {.dtype = hg::i64});
  const Tensor x = hg::randn({4, 3, 5, 5}).to(hg::f16);
  const Tensor mean0 = hg::zeros({3}), var0 = hg::ones({3}), gamma = hg::randn({3}), beta = hg::randn({3});
  Tensor mean_ref = mean0.clone(), var_ref = var0.clone(), mean_ac = mean0.clone(), var_ac = var0.clone();
  const Tensor sum_ref = hg::sum(ints), add_ref = hg::add(ints, ints);
  const Tensor bn_ref = hg::batch_norm(x, mean_ref, var_ref, gamma, beta, true, 0.1, 1e-5);
  amp::Autocast autocast(hg::f16);
  check_bitwise(hg::sum(ints), sum_ref, "sum of i64 under autocast");
  check_bitwise(hg::add(ints, ints), add_ref, "add of i64 under autocast");
  // batch_norm: statistics in f32 inside the kernel, the activation stays 16-bit (amp/op_table.h).
  const Tensor bn = hg::batch_norm(x, mean_ac, var_ac, gamma, beta, true, 0.1, 1e-5);
  CHECK(dtype_of(bn) == "f16");
  check_bitwise(bn, bn_ref, "batch_norm f16 under autocast");
  check_bitwise(mean_ac, mean_ref, "running mean");
  check_bitwise(var_ac, var_ref, "running var");
}

// ---- scenario 18: nesting and exceptions ---------------------------------------------------------

TEST_CASE("amp.autocast.nested_regions_and_exceptions_restore_state") {
  const Tensor x = hg::randn({2, 4}), w = hg::randn({3, 4});
  CHECK_FALSE(amp::is_enabled());
  {
    amp::Autocast outer(hg::f16);
    CHECK(amp::is_enabled());
    CHECK(amp::autocast_dtype() == hg::f16);
    {
      amp::Autocast off(hg::f16, false);
      CHECK_FALSE(amp::is_enabled());
      CHECK(dtype_of(hg::linear(x, w)) == "f32");
      {
        amp::Autocast on_again(hg::bf16);
        CHECK(dtype_of(hg::linear(x, w)) == "bf16");
      }
      CHECK_FALSE(amp::is_enabled());
    }
    CHECK(amp::is_enabled());
    {
      amp::Autocast inner(hg::bf16);
      CHECK(amp::autocast_dtype() == hg::bf16);
      CHECK(dtype_of(hg::linear(x, w)) == "bf16");
    }
    CHECK(amp::autocast_dtype() == hg::f16);
    CHECK(dtype_of(hg::linear(x, w)) == "f16");

    // An exception leaving an inner region restores the outer state.
    try {
      amp::Autocast inner(hg::bf16);
      amp::Autocast off(hg::bf16, false);
      throw std::runtime_error("boom");
    } catch (const std::runtime_error&) {
    }
    CHECK(amp::is_enabled());
    CHECK(amp::autocast_dtype() == hg::f16);
    // An op that throws inside a region (mismatched shapes) leaves the state alone too.
    CHECK_THROWS_AS(hg::linear(x, hg::randn({3, 5})), hg::Error);
    CHECK(amp::is_enabled());
  }
  CHECK_FALSE(amp::is_enabled());
  CHECK(amp::detail::cache_size() == 0);

  // An exception escaping the outermost region: off afterwards, the cache cleared.
  const Tensor weight = hg::randn({3, 4}, {.requires_grad = true});
  try {
    amp::Autocast outer(hg::f16);
    hg::linear(x, weight);
    CHECK(amp::detail::cache_size() == 1);
    throw hg::Error("boom");
  } catch (const hg::Error&) {
  }
  CHECK_FALSE(amp::is_enabled());
  CHECK(amp::detail::cache_size() == 0);

  // A region that refuses its dtype changes nothing (and does not unbalance the nesting count:
  // the next outermost region still clears its cache on exit).
  CHECK_THROWS_HG(amp::Autocast bad(hg::f32), "f16 or bf16");
  CHECK_FALSE(amp::is_enabled());
  {
    amp::Autocast region(hg::f16);
    hg::linear(x, weight);
    CHECK(amp::detail::cache_size() == 1);
  }
  CHECK(amp::detail::cache_size() == 0);
  CHECK_FALSE(amp::is_enabled());
}

// ---- scenario 19: the weight-cast cache ----------------------------------------------------------

TEST_CASE("amp.autocast.weight_cast_cache") {
  hg::manual_seed(19);
  const Tensor x = hg::randn({8, 64});
  const Tensor w = hg::randn({64, 64}, {.requires_grad = true});
  const int64_t weight_cast_bytes = 64 * 64 * 2;
  REQUIRE(amp::detail::cache_size() == 0);

  SUBCASE("cast once per outermost region, cleared on exit") {
    const int64_t baseline = hg::memory::allocated();
    {
      amp::Autocast region(hg::f16);
      int64_t before = hg::memory::allocated();
      Tensor y1 = hg::linear(x, w);
      const int64_t first = hg::memory::allocated() - before;
      CHECK(amp::detail::cache_size() == 1);
      before = hg::memory::allocated();
      Tensor y2;
      {
        amp::Autocast nested(hg::f16);  // an inner region shares the outermost region's cache
        y2 = hg::linear(x, w);
      }
      const int64_t second = hg::memory::allocated() - before;
      CHECK(amp::detail::cache_size() == 1);
      CHECK(first - second == weight_cast_bytes);  // the second forward did not cast the weight
      check_bitwise(y2, y1, "cached weight gives the same result");
    }
    CHECK(amp::detail::cache_size() == 0);
    CHECK(hg::memory::allocated() == baseline);  // outputs, graphs and the cached cast all freed
    {
      amp::Autocast region(hg::f16);
      hg::linear(x, w);
      CHECK(amp::detail::cache_size() == 1);  // a new region casts again
    }
  }

  SUBCASE("repeated no-grad forwards do not grow memory") {
    amp::Autocast region(hg::f16);
    hg::NoGradGuard no_grad;
    std::vector<int64_t> live;
    std::vector<size_t> entries;
    for (int i = 0; i < 10; ++i) {
      { const Tensor y = hg::relu(hg::linear(x, w)); }
      live.push_back(hg::memory::allocated());
      entries.push_back(amp::detail::cache_size());
    }
    for (int i = 1; i < 10; ++i) {
      CHECK(live[size_t(i)] == live[0]);
      CHECK(entries[size_t(i)] == entries[0]);
    }
  }

  SUBCASE("an in-place update of the weight invalidates its cached cast") {
    amp::Autocast region(hg::f16);
    const Tensor before = hg::linear(x, w);
    {
      hg::NoGradGuard no_grad;
      Tensor(w).add_(hg::ones({64, 64}), 0.25);  // what an optimizer step does
    }
    const Tensor after = hg::linear(x, w);
    amp::Autocast off(hg::f16, false);
    check_bitwise(after, hg::linear(x.to(hg::f16), w.detach().to(hg::f16)), "after the update");
    CHECK(bytes_of(after) != bytes_of(before));
  }

  SUBCASE("the f32 weight gets an f32 gradient") {
    Tensor loss;
    {
      amp::Autocast region(hg::f16);
      loss = hg::sum(hg::linear(x, w));
    }
    loss.backward();
    REQUIRE(w.grad().defined());
    CHECK(dtype_of(w.grad()) == "f32");
    // The same graph written by hand: f16 weight, f16 GEMM, f32 sum.
    const Tensor w16 = w.detach().to(hg::f16).requires_grad_();
    hg::sum(hg::linear(x.to(hg::f16), w16).to(hg::f32)).backward();
    check_bitwise(w.grad(), w16.grad().to(hg::f32), "weight gradient");
  }
  CHECK(amp::detail::cache_size() == 0);
}

// ---- the policy table and custom ops -------------------------------------------------------------

TEST_CASE("amp.policy.table_lists_every_op_and_set_policy_changes_it") {
  const std::string table = amp::policy_table();
  std::map<std::string, amp::CastPolicy> entries;
  for (const amp::PolicyEntry& e : amp::policy_entries()) entries[e.op] = e.policy;
  for (const amp::OpInfo& row : amp::kOpTable) {
    const std::string op(row.name);
    CAPTURE(op);
    if (!row.autocasts) {  // views and copies: a row for their name, no policy
      CHECK(entries.count(op) == 0);
      CHECK_THROWS_HG(amp::set_policy(op, amp::CastPolicy::F32), "is a view or copy: it never goes through autocast");
      continue;
    }
    CHECK(entries.count(op) == 1);
    CHECK(entries[op] == row.policy);
    CHECK(table.find(op) != std::string::npos);
    CHECK(amp::policy(op) == row.policy);
    CHECK(amp::policy(row.op) == row.policy);
    CHECK(amp::find_op(op) == row.op);
  }
  // The fused ops are the ops the user called (linear, conv2d with an epilogue), not entries.
  for (const char* gone : {"linear_relu", "conv2d_relu"}) CHECK_FALSE(amp::find_policy(gone).has_value());
  CHECK(amp::policy("linear") == amp::CastPolicy::Lower);
  CHECK(amp::policy("softmax") == amp::CastPolicy::F32);
  CHECK(amp::policy("cat") == amp::CastPolicy::Promote);
  CHECK(amp::policy("relu") == amp::CastPolicy::Keep);
  CHECK_THROWS_HG(amp::policy("no_such_op_xyz"), "no_such_op_xyz");

  amp::set_policy("test_table_op", amp::CastPolicy::F32);
  CHECK(amp::policy("test_table_op") == amp::CastPolicy::F32);
  CHECK(amp::policy_table().find("test_table_op") != std::string::npos);
  amp::set_policy("test_table_op", amp::CastPolicy::Promote);
  CHECK(amp::policy("test_table_op") == amp::CastPolicy::Promote);

  // Changing a built-in entry changes what autocast does with it (restored afterwards).
  const Tensor x16 = hg::randn({3, 3}).to(hg::f16);
  amp::set_policy("relu", amp::CastPolicy::F32);
  std::string relu_dtype;
  {
    amp::Autocast region(hg::f16);
    relu_dtype = dtype_of(hg::relu(x16));
  }
  const amp::PolicyEntry overridden = [] {
    for (const amp::PolicyEntry& e : amp::policy_entries())
      if (e.op == "relu") return e;
    return amp::PolicyEntry{};
  }();
  amp::set_policy("relu", amp::CastPolicy::Keep);
  CHECK(relu_dtype == "f32");
  CHECK(overridden.policy == amp::CastPolicy::F32);
  CHECK(overridden.note == "set by set_policy");
  CHECK(amp::policy(amp::Op::Relu) == amp::CastPolicy::Keep);  // back to the table's row
  amp::Autocast region(hg::f16);
  CHECK(dtype_of(hg::relu(x16)) == "f16");
}

namespace {

// What a custom op observed while running (the dtype of its input and the autocast state).
struct Seen {
  std::string forward_dtype;
  bool forward_autocast = false, backward_autocast = false;
  hg::DType backward_autocast_dtype = hg::f32;
};
Seen g_seen;

template <class Op>
struct DoubleIt : hg::autograd::Function<Op> {
  static Tensor forward(hg::autograd::Context&, const Tensor& x) {
    g_seen.forward_dtype = dtype_of(x);
    g_seen.forward_autocast = amp::is_enabled();
    return x * 2.0;
  }
  static std::vector<Tensor> backward(hg::autograd::Context&, std::vector<Tensor> grads) {
    g_seen.backward_autocast = amp::is_enabled();
    g_seen.backward_autocast_dtype = amp::autocast_dtype();
    return {grads[0] * 2.0};
  }
};
struct NoPolicyOp : DoubleIt<NoPolicyOp> {
  static constexpr const char* name = "test_no_policy_op";
};
struct LowerPolicyOp : DoubleIt<LowerPolicyOp> {
  static constexpr const char* name = "test_lower_policy_op";
};
struct CastInputsOp : DoubleIt<CastInputsOp> {
  static constexpr const char* name = "test_cast_inputs_op";
  static constexpr hg::DType cast_inputs = hg::f32;
};

}  // namespace

TEST_CASE("amp.custom_function.needs_a_policy_under_autocast") {
  const Tensor x = hg::randn({4}, {.requires_grad = true});
  CHECK_NOTHROW(NoPolicyOp::apply(x));  // outside autocast no policy is needed
  amp::Autocast region(hg::f16);
  try {
    NoPolicyOp::apply(x);
    FAIL("expected hg::Error");
  } catch (const hg::Error& e) {
    const std::string message = e.what();
    CAPTURE(message);
    CHECK(message.find("test_no_policy_op") != std::string::npos);
    for (const char* choice : {"Lower", "F32", "Promote", "Keep"}) CHECK(message.find(choice) != std::string::npos);
  }
  CHECK(amp::is_enabled());
  // Once the op has a policy it runs.
  amp::set_policy("test_no_policy_op", amp::CastPolicy::F32);
  g_seen = {};
  const Tensor y = NoPolicyOp::apply(x.to(hg::f16));
  CHECK(g_seen.forward_dtype == "f32");
  CHECK(dtype_of(y) == "f32");
}

TEST_CASE("amp.custom_function.set_policy_and_backward_under_the_forward_state") {
  amp::set_policy("test_lower_policy_op", amp::CastPolicy::Lower);
  const Tensor x = hg::randn({4}, {.requires_grad = true});
  Tensor y;
  g_seen = {};
  {
    amp::Autocast region(hg::bf16);
    y = LowerPolicyOp::apply(x);
  }
  CHECK(g_seen.forward_dtype == "bf16");
  CHECK(g_seen.forward_autocast);
  CHECK(dtype_of(y) == "bf16");
  hg::sum(y.to(hg::f32)).backward();  // outside any region: backward re-enters the forward's state
  CHECK(g_seen.backward_autocast);
  CHECK(g_seen.backward_autocast_dtype == hg::bf16);
  CHECK(dtype_of(x.grad()) == "f32");
  CHECK_FALSE(amp::is_enabled());

  // Forward outside autocast, backward inside a region: the backward still runs without autocast.
  const Tensor z = LowerPolicyOp::apply(x);
  CHECK_FALSE(g_seen.forward_autocast);
  amp::Autocast region(hg::f16);
  hg::sum(z).backward();
  CHECK_FALSE(g_seen.backward_autocast);
}

TEST_CASE("amp.custom_function.cast_inputs_runs_in_that_dtype_with_autocast_off") {
  const Tensor x16 = hg::randn({5}).to(hg::f16).requires_grad_();
  Tensor y;
  g_seen = {};
  g_seen.backward_autocast = true;
  {
    amp::Autocast region(hg::f16);
    y = CastInputsOp::apply(x16);
    CHECK(amp::is_enabled());
  }
  CHECK(g_seen.forward_dtype == "f32");
  CHECK_FALSE(g_seen.forward_autocast);
  CHECK(dtype_of(y) == "f32");
  hg::sum(y).backward();
  CHECK_FALSE(g_seen.backward_autocast);
  CHECK(dtype_of(x16.grad()) == "f16");
  check_bitwise(x16.grad(), hg::full({5}, 2.0, {.dtype = hg::f16}), "gradient through the f32 cast");
  // Outside autocast, cast_inputs is a no-op (PyTorch PR #36171).
  CastInputsOp::apply(x16);
  CHECK(g_seen.forward_dtype == "f16");
}

// ---- backward is not re-cast by a surrounding region -----------------------------------------------

TEST_CASE("amp.autocast.backward_inside_a_region_is_not_recast") {
  hg::manual_seed(5);
  const Tensor x = hg::randn({6, 8}), targets = hg::from_vector(std::vector<int64_t>{0, 1, 2, 3, 0, 1}, {6});
  const Tensor w1 = hg::randn({16, 8}, {.requires_grad = true}), w2 = hg::randn({4, 16}, {.requires_grad = true});
  const auto forward = [&](bool autocast) {
    amp::Autocast region(hg::f16, autocast);
    return hg::cross_entropy(hg::linear(hg::relu(hg::linear(x, w1)), w2), targets);
  };
  for (const bool forward_autocast : {false, true}) {
    CAPTURE(forward_autocast);
    forward(forward_autocast).backward();
    const Tensor g1 = w1.grad(), g2 = w2.grad();
    w1.set_grad({}), w2.set_grad({});
    {
      amp::Autocast region(hg::f16);
      forward(forward_autocast).backward();
      CHECK(amp::is_enabled());
    }
    check_bitwise(w1.grad(), g1, "w1 gradient");
    check_bitwise(w2.grad(), g2, "w2 gradient");
    {
      amp::Autocast region(hg::bf16);
      const Tensor loss = forward(forward_autocast);
      w1.set_grad({}), w2.set_grad({});
      loss.backward();
    }
    check_bitwise(w1.grad(), g1, "w1 gradient, bf16 region around backward");
    w1.set_grad({}), w2.set_grad({});
  }
}

// ---- PrecisionReport --------------------------------------------------------------------------------

namespace {
std::vector<std::vector<std::string>> read_csv(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::vector<std::string>> rows;
  for (std::string line; std::getline(in, line);) {
    std::vector<std::string> fields;
    std::stringstream ss(line);
    for (std::string field; std::getline(ss, field, ',');) fields.push_back(field);
    rows.push_back(fields);
  }
  return rows;
}
}  // namespace

TEST_CASE("amp.precision_report.records_a_small_mlp") {
  hg::manual_seed(7);
  // Modules called one by one.
  hg::nn::Linear layer1(8, 16), layer2(16, 4);
  const auto mlp = [&](const Tensor& input) { return layer2(hg::relu(layer1(input))); };
  const Tensor x = hg::randn({5, 8}), y = hg::from_vector(std::vector<int64_t>{0, 1, 2, 3, 0}, {5});
  amp::PrecisionReport report;
  {
    amp::Autocast region(hg::f16);
    hg::cross_entropy(mlp(x), y);
  }
  using Row = amp::PrecisionReport::Row;
  // (A copy of the row: rows() may reallocate as more ops are recorded.)
  const auto find = [&](const std::string& op, std::vector<hg::DType> inputs) -> std::optional<Row> {
    for (const Row& r : report.rows())
      if (r.op == op && r.inputs == inputs) return r;
    return std::nullopt;
  };
  std::optional<Row> fc1 = find("linear", {hg::f32, hg::f32, hg::f32});
  std::optional<Row> fc2 = find("linear", {hg::f16, hg::f32, hg::f32});
  const std::optional<Row> relu = find("relu", {hg::f16});
  const std::optional<Row> loss = find("cross_entropy", {hg::f16});
  REQUIRE(fc1);
  REQUIRE(fc2);
  REQUIRE(relu);
  REQUIRE(loss);
  CHECK(report.rows().size() == 4);
  CHECK(fc1->policy == "Lower");
  CHECK(fc1->compute == hg::f16);
  CHECK(fc1->output == hg::f16);
  CHECK(fc1->calls == 1);
  CHECK(fc1->casts == 3);  // x, weight, bias
  CHECK(fc1->cast_bytes == (5 * 8 + 16 * 8 + 16) * 2);
  CHECK(fc1->cache_hits == 0);
  CHECK(fc2->casts == 2);  // weight and bias; the activation is already f16
  CHECK(fc2->cast_bytes == (4 * 16 + 4) * 2);
  CHECK(relu->policy == "Keep");
  CHECK(relu->casts == 0);
  CHECK(relu->output == hg::f16);
  CHECK(loss->policy == "F32");
  CHECK(loss->compute == hg::f32);
  CHECK(loss->output == hg::f32);
  CHECK(loss->casts == 1);
  CHECK(loss->cast_bytes == 5 * 4 * 4);

  // A second forward in the same region: the weights come from the cache.
  {
    amp::Autocast region(hg::f16);
    hg::cross_entropy(mlp(x), y);
    hg::cross_entropy(mlp(x), y);
  }
  CHECK(report.rows().size() == 4);
  fc1 = find("linear", {hg::f32, hg::f32, hg::f32});
  fc2 = find("linear", {hg::f16, hg::f32, hg::f32});
  REQUIRE(fc1);
  REQUIRE(fc2);
  CHECK(fc1->calls == 3);
  CHECK(fc1->casts == 3 + 3 + 1);  // the second region casts again; its second forward only casts x
  CHECK(fc1->cache_hits == 2);
  CHECK(fc2->cache_hits == 2);

  std::ostringstream printed;
  report.print(printed);
  const std::string text = printed.str();
  for (const char* word : {"linear", "Lower", "cross_entropy", "F32", "relu", "Keep", "cache hits"})
    CHECK_MESSAGE(text.find(word) != std::string::npos, word);

  const std::string path = hg_test::temp_path("precision_report.csv");
  report.write_csv(path);
  const auto csv = read_csv(path);
  REQUIRE(csv.size() == report.rows().size() + 1);
  CHECK(csv[0] == std::vector<std::string>{"op", "policy", "inputs", "compute", "output", "calls", "casts",
                                           "cast_bytes", "cache_hits"});
  for (size_t i = 0; i < report.rows().size(); ++i) {
    const Row& r = report.rows()[i];
    const std::vector<std::string>& f = csv[i + 1];
    REQUIRE(f.size() == 9);
    CHECK(f[0] == r.op);
    CHECK(f[1] == r.policy);
    CHECK(f[3] == hg::dtype_name(r.compute));
    CHECK(f[4] == hg::dtype_name(r.output));
    CHECK(std::stoll(f[5]) == r.calls);
    CHECK(std::stoll(f[6]) == r.casts);
    CHECK(std::stoll(f[7]) == r.cast_bytes);
    CHECK(std::stoll(f[8]) == r.cache_hits);
  }
  CHECK(csv[1][2] == "f32 f32 f32");
  CHECK_THROWS_AS(report.write_csv("/nonexistent_dir_hg/x.csv"), hg::Error);
}
