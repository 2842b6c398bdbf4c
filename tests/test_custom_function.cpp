// Custom ops through hg::autograd::Function<T>, the parts beyond one tensor in and one out (the
// basics are in test_autograd.cpp, the runtime policy table in test_autocast.cpp): the AMP policy
// declared on the type, typed values saved for backward, and ops with several outputs.
//
// A Function without `name` does not compile; CTest checks that with a compile-fail test
// (autograd.function.missing_name_is_a_compile_error, tests/compile_fail/function_without_name.cpp).
#include <array>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "test_support.h"

using hg::Tensor;
using hg::autograd::Context;
using hg::autograd::Function;
namespace amp = hg::amp;

namespace {

Tensor vec(const std::vector<double>& values, hg::DType dtype = hg::f32, bool requires_grad = false) {
  return hg::from_vector(values, {int64_t(values.size())}, {.dtype = dtype, .requires_grad = requires_grad});
}

// ---- ops with a policy on their type ------------------------------------------------------------

// What the op saw: its input dtype and whether autocast was on inside forward and backward.
struct Seen {
  hg::DType forward_dtype = hg::f64;
  bool forward_autocast = false, backward_autocast = false;
};
Seen g_seen;

template <class Op>
struct Triple : Function<Op> {
  static Tensor forward(Context&, const Tensor& x) {
    g_seen.forward_dtype = x.dtype();
    g_seen.forward_autocast = amp::is_enabled();
    return x * 3.0;
  }
  static std::vector<Tensor> backward(Context&, std::vector<Tensor> grads) {
    g_seen.backward_autocast = amp::is_enabled();
    return {grads[0] * 3.0};
  }
};
struct LowerOnType : Triple<LowerOnType> {
  static constexpr const char* name = "test_lower_on_type";
  static constexpr amp::CastPolicy policy = amp::CastPolicy::Lower;
};
struct F32OnType : Triple<F32OnType> {
  static constexpr const char* name = "test_f32_on_type";
  static constexpr amp::CastPolicy policy = amp::CastPolicy::F32;
};
struct CastInputsOnType : Triple<CastInputsOnType> {
  static constexpr const char* name = "test_cast_inputs_on_type";
  static constexpr hg::DType cast_inputs = hg::f32;
};

// ---- ops with several outputs -------------------------------------------------------------------

int g_var_mean_backward_calls = 0;
std::vector<Tensor> g_var_mean_grads;  // the gradients its backward received, per output

// torch.var_mean over the rows of x (rows, n): (biased variance, mean), each (rows).
struct VarMean : Function<VarMean> {
  static constexpr const char* name = "test_var_mean";
  static std::tuple<Tensor, Tensor> forward(Context& ctx, const Tensor& x) {
    const Tensor centered = x - hg::mean(x, {1}, /*keepdim=*/true);  // (rows, n)
    ctx.save_for_backward({centered});
    return {hg::mean(centered * centered, {1}), hg::mean(x, {1})};
  }
  // d var / dx_j = 2 (x_j - mean) / n (the term through the mean sums to 0); d mean / dx_j = 1 / n.
  static std::vector<Tensor> backward(Context& ctx, std::vector<Tensor> grads) {
    ++g_var_mean_backward_calls;
    g_var_mean_grads = grads;
    const Tensor centered = ctx.saved()[0];
    const double n = double(centered.size(1));
    return {hg::unsqueeze(grads[0], 1) * centered * (2.0 / n) + hg::unsqueeze(grads[1], 1) / n};
  }
};

// x, 2x and 3x as a std::vector, and (x + y, x * y) as a std::array: the other output containers.
struct Multiples : Function<Multiples> {
  static constexpr const char* name = "test_multiples";
  static std::vector<Tensor> forward(Context&, const Tensor& x) { return {x * 1.0, x * 2.0, x * 3.0}; }
  static std::vector<Tensor> backward(Context&, std::vector<Tensor> grads) {
    return {grads[0] + grads[1] * 2.0 + grads[2] * 3.0};
  }
};
struct SumAndProduct : Function<SumAndProduct> {
  static constexpr const char* name = "test_sum_and_product";
  static std::array<Tensor, 2> forward(Context& ctx, const Tensor& x, const Tensor& y) {
    ctx.save_for_backward({x, y});
    return {x + y, x * y};
  }
  static std::vector<Tensor> backward(Context& ctx, std::vector<Tensor> grads) {
    const std::vector<Tensor> s = ctx.saved();
    return {grads[0] + grads[1] * s[1], grads[0] + grads[1] * s[0]};
  }
};

// (max, argmax) of each row: the i64 indices are an output without a gradient.
bool g_index_grad_defined = true;
struct RowMax : Function<RowMax> {
  static constexpr const char* name = "test_row_max";
  static std::tuple<Tensor, Tensor> forward(Context& ctx, const Tensor& x) {
    const Tensor values = hg::amax(x, 1);
    ctx.save_for_backward({x, values});
    return {values, hg::argmax(x, 1)};
  }
  static std::vector<Tensor> backward(Context& ctx, std::vector<Tensor> grads) {
    g_index_grad_defined = grads[1].defined();
    const std::vector<Tensor> s = ctx.saved();
    const Tensor is_max = hg::eq(s[0], hg::unsqueeze(s[1], 1));  // ties do not occur in the test
    return {hg::unsqueeze(grads[0], 1) * is_max};
  }
};

struct UndefinedOutput : Function<UndefinedOutput> {
  static constexpr const char* name = "test_undefined_output";
  static std::vector<Tensor> forward(Context&, const Tensor& x) { return {x * 2.0, Tensor()}; }
  static std::vector<Tensor> backward(Context&, std::vector<Tensor> grads) { return {grads[0] * 2.0}; }
};

// ---- typed saved values -------------------------------------------------------------------------

struct Settings {
  std::string mode;
  std::vector<int64_t> dims;
};

// Saves an int; its backward reads what g_read_as says (to provoke the errors).
enum class ReadAs { Int, Double, MissingKey };
ReadAs g_read_as = ReadAs::Int;
struct SavesInt : Function<SavesInt> {
  static constexpr const char* name = "test_saves_int";
  static Tensor forward(Context& ctx, const Tensor& x, int factor) {
    ctx.save("factor", factor);
    ctx.save("settings", Settings{"scale", {0}});
    return x * double(factor);
  }
  static std::vector<Tensor> backward(Context& ctx, std::vector<Tensor> grads) {
    double factor = 0;
    if (g_read_as == ReadAs::Int) factor = ctx.get<int>("factor");
    if (g_read_as == ReadAs::Double) factor = ctx.get<double>("factor");
    if (g_read_as == ReadAs::MissingKey) factor = ctx.get<int>("factr");
    CHECK(ctx.get<Settings>("settings").mode == "scale");
    return {grads[0] * factor};
  }
};

}  // namespace

// ---- the AMP policy on the type -----------------------------------------------------------------

TEST_CASE("autograd.custom_function.policy_on_the_type_casts_like_a_built_in_op") {
  const Tensor x = hg::randn({4}, {.requires_grad = true});  // f32
  Tensor y;
  {
    amp::PrecisionReport report;
    amp::Autocast region(hg::f16);
    y = LowerOnType::apply(x);  // no amp::set_policy needed
    REQUIRE_FALSE(report.rows().empty());  // the op's row first, then the mul inside its forward
    CHECK(report.rows()[0].op == "test_lower_on_type");
    CHECK(report.rows()[0].policy == "Lower");
    CHECK(report.rows()[0].compute == hg::f16);
    CHECK(report.rows()[0].casts == 1);
  }
  CHECK(g_seen.forward_dtype == hg::f16);
  CHECK(g_seen.forward_autocast);  // like a table policy: the ops inside follow their own policies
  CHECK(y.dtype() == hg::f16);
  hg::sum(y.to(hg::f32)).backward();
  CHECK(g_seen.backward_autocast);  // backward runs under the forward's state
  CHECK(x.grad().dtype() == hg::f32);
  CHECK_CLOSE(x.grad(), hg::full({4}, 3.0));

  // F32 on the type: a 16-bit input is widened.
  {
    amp::Autocast region(hg::bf16);
    CHECK(F32OnType::apply(x.to(hg::bf16)).dtype() == hg::f32);
  }
  CHECK(g_seen.forward_dtype == hg::f32);
  // Outside autocast the policy does nothing.
  CHECK(LowerOnType::apply(x).dtype() == hg::f32);
  // The table lists the op with the policy its type declares.
  CHECK(amp::policy("test_lower_on_type") == amp::CastPolicy::Lower);
  CHECK(amp::policy("test_f32_on_type") == amp::CastPolicy::F32);
  CHECK(amp::policy_table().find("test_lower_on_type") != std::string::npos);
}

TEST_CASE("autograd.custom_function.cast_inputs_on_the_type_runs_with_autocast_off") {
  const Tensor x16 = hg::randn({3}).to(hg::f16).requires_grad_();
  Tensor y;
  {
    amp::PrecisionReport report;
    amp::Autocast region(hg::f16);
    y = CastInputsOnType::apply(x16);
    REQUIRE_FALSE(report.rows().empty());
    CHECK(report.rows()[0].policy == "cast_inputs");
  }
  CHECK(g_seen.forward_dtype == hg::f32);
  CHECK_FALSE(g_seen.forward_autocast);
  CHECK(y.dtype() == hg::f32);
  hg::sum(y).backward();
  CHECK_FALSE(g_seen.backward_autocast);
  CHECK(x16.grad().dtype() == hg::f16);
}

// ---- typed saved values -------------------------------------------------------------------------

TEST_CASE("autograd.custom_function.saved_values_keep_their_type") {
  Context ctx;
  ctx.save("alpha", 0.25);
  ctx.save("steps", 7);
  ctx.save("mode", std::string("mean"));
  ctx.save("settings", Settings{"sum", {1, 2}});
  CHECK(ctx.get<double>("alpha") == 0.25);
  CHECK(ctx.get<int>("steps") == 7);
  CHECK(ctx.get<std::string>("mode") == "mean");
  CHECK(ctx.get<Settings>("settings").dims == std::vector<int64_t>{1, 2});
  CHECK(ctx.contains("alpha"));
  CHECK_FALSE(ctx.contains("beta"));
  ctx.save("alpha", 0.5);  // saving again replaces the value
  CHECK(ctx.get<double>("alpha") == 0.5);
  ctx.save("alpha", std::string("now a string"));  // ... and its type
  CHECK(ctx.get<std::string>("alpha") == "now a string");
}

TEST_CASE("autograd.custom_function.saved_value_errors_name_the_op_the_key_and_the_types") {
  const Tensor x = vec({1.0, 2.0}, hg::f32, true);
  g_read_as = ReadAs::Int;
  hg::sum(SavesInt::apply(x, 3)).backward();
  CHECK_CLOSE(x.grad(), vec({3.0, 3.0}));

  g_read_as = ReadAs::Double;  // saved an int, asked for a double: no silent conversion
  Tensor loss = hg::sum(SavesInt::apply(x, 3));
  CHECK_THROWS_HG(loss.backward(), "test_saves_int: ctx.get(\"factor\"): the value saved under that key is of type int, not double");

  g_read_as = ReadAs::MissingKey;
  loss = hg::sum(SavesInt::apply(x, 3));
  CHECK_THROWS_HG(loss.backward(), "test_saves_int: ctx.get(\"factr\"): no value was saved under that key (saved: \"factor\", \"settings\")");
  g_read_as = ReadAs::Int;
}

// ---- several outputs ----------------------------------------------------------------------------

TEST_CASE("autograd.custom_function.two_outputs_hand_computed") {
  const Tensor x = hg::from_vector(std::vector<double>{1, 2, 3, 4}, {1, 4}, {.dtype = hg::f64, .requires_grad = true});
  auto [var, mean] = VarMean::apply(x);
  static_assert(std::is_same_v<decltype(VarMean::apply(x)), std::tuple<Tensor, Tensor>>);
  CHECK_CLOSE(var, vec({1.25}, hg::f64));
  CHECK_CLOSE(mean, vec({2.5}, hg::f64));
  REQUIRE(var.grad_fn() != nullptr);
  CHECK(var.grad_fn() == mean.grad_fn());  // one node, two slots
  CHECK(var.grad_fn()->num_outputs() == 2);

  // loss = var + 3 mean: dx_j = 2 (x_j - 2.5) / 4 + 3 / 4 = {0, 0.5, 1, 1.5}; backward runs once.
  g_var_mean_backward_calls = 0;
  (hg::sum(var) + hg::sum(mean) * 3.0).backward();
  CHECK(g_var_mean_backward_calls == 1);
  CHECK_CLOSE(x.grad(), hg::from_vector(std::vector<double>{0, 0.5, 1, 1.5}, {1, 4}, {.dtype = hg::f64}));

  // Only the mean used: var's slot gets zeros (materialized), dx_j = 1 / 4.
  x.set_grad({});
  auto [var2, mean2] = VarMean::apply(x);
  hg::sum(mean2).backward();
  REQUIRE(g_var_mean_grads.size() == 2);
  REQUIRE(g_var_mean_grads[0].defined());
  CHECK_CLOSE(g_var_mean_grads[0], vec({0.0}, hg::f64));
  CHECK_CLOSE(x.grad(), hg::full({1, 4}, 0.25, {.dtype = hg::f64}));

  // An output as the root of backward, from the second slot.
  x.set_grad({});
  auto [var3, mean3] = VarMean::apply(x);
  mean3.backward();
  CHECK_CLOSE(x.grad(), hg::full({1, 4}, 0.25, {.dtype = hg::f64}));
}

TEST_CASE("autograd.custom_function.two_outputs_pass_gradcheck_in_f64") {
  hg::manual_seed(3);
  const std::vector<Tensor> inputs{hg::randn({3, 5}, {.dtype = hg::f64, .requires_grad = true})};
  // Both outputs, every element: the Jacobian of (var, 2 mean) stacked.
  const auto both = [](const std::vector<Tensor>& in) {
    auto [var, mean] = VarMean::apply(in[0]);
    return hg::cat({var, mean * 2.0}, 0);
  };
  const auto report = hg::autograd::gradcheck_report(both, inputs);
  CHECK_MESSAGE(!report.has_value(), report.value_or(""));
  // One output alone: the other's gradient is materialized as zeros.
  CHECK(hg::autograd::gradcheck([](const std::vector<Tensor>& in) { return std::get<0>(VarMean::apply(in[0])); },
                                inputs));
  CHECK(hg::autograd::gradcheck([](const std::vector<Tensor>& in) { return std::get<1>(VarMean::apply(in[0])); },
                                inputs));
}

TEST_CASE("autograd.custom_function.outputs_as_a_vector_or_an_array") {
  const Tensor x = vec({1.0, -2.0}, hg::f64, true);
  const Tensor y = vec({3.0, 5.0}, hg::f64, true);
  std::vector<Tensor> m = Multiples::apply(x);
  REQUIRE(m.size() == 3);
  CHECK_CLOSE(m[2], vec({3.0, -6.0}, hg::f64));
  hg::sum(m[0] + m[2] * m[2]).backward();  // x + 9 x^2: 1 + 18 x
  CHECK_CLOSE(x.grad(), vec({19.0, -35.0}, hg::f64));

  x.set_grad({});
  std::array<Tensor, 2> sp = SumAndProduct::apply(x, y);
  static_assert(std::is_same_v<decltype(SumAndProduct::apply(x, y)), std::array<Tensor, 2>>);
  hg::sum(sp[0] * sp[1]).backward();  // (x + y) x y: d/dx = 2xy + y^2, d/dy = x^2 + 2xy
  CHECK_CLOSE(x.grad(), vec({2 * 1 * 3 + 9.0, 2 * -2 * 5 + 25.0}, hg::f64));
  CHECK_CLOSE(y.grad(), vec({1 + 2 * 1 * 3.0, 4 + 2 * -2 * 5.0}, hg::f64));
}

TEST_CASE("autograd.custom_function.integer_outputs_stay_off_the_graph") {
  const Tensor x = hg::from_vector(std::vector<double>{1, 5, 2, 7, 3, 4}, {2, 3}, {.requires_grad = true});
  auto [values, indices] = RowMax::apply(x);
  CHECK(indices.dtype() == hg::i64);
  CHECK_FALSE(indices.requires_grad());
  CHECK(indices.grad_fn() == nullptr);
  CHECK(indices.to_vector<int64_t>() == std::vector<int64_t>{1, 0});
  CHECK(values.requires_grad());
  g_index_grad_defined = true;
  hg::sum(values * 2.0).backward();
  CHECK_FALSE(g_index_grad_defined);  // no gradient for indices, not even zeros
  CHECK_CLOSE(x.grad(), hg::from_vector(std::vector<double>{0, 2, 0, 2, 0, 0}, {2, 3}));
}

TEST_CASE("autograd.custom_function.undefined_output_is_an_error") {
  const Tensor x = vec({1.0}, hg::f32, true);
  CHECK_THROWS_HG(UndefinedOutput::apply(x), "test_undefined_output: forward returned an undefined tensor as output 1");
}
