// The autograd engine and its contract: every reachable node runs once in a deterministic order
// and leaves accumulate; the graph (and every tensor it saved) is freed by backward; grad mode,
// detach and requires_grad_; the saved-tensor version counter; gradients arrive in their leaf's
// dtype; custom ops through hg::autograd::Function<T>; and docs/testing.md scenario 30 (misuse errors).
#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <set>
#include <vector>

#include "test_support.h"

using hg::Tensor;
using hg::autograd::Context;
using hg::autograd::Function;

namespace {

Tensor vec(const std::vector<double>& values, hg::DType dtype = hg::f32, bool requires_grad = false) {
  return hg::from_vector(values, {int64_t(values.size())}, {.dtype = dtype, .requires_grad = requires_grad});
}

int64_t storage_bytes(const Tensor& t) { return t.defined() ? t.impl()->storage->nbytes() : 0; }

// ---- custom ops used by the tests ---------------------------------------------------------------

// Identity that writes its id into a log when its backward runs: makes the engine's order visible.
std::vector<int>& backward_log() {
  static std::vector<int> log;
  return log;
}

struct Tag : Function<Tag> {
  static constexpr const char* name = "tag";
  static Tensor forward(Context& ctx, const Tensor& x, int id) {
    ctx.save("id", id);
    return x.clone();
  }
  static std::vector<Tensor> backward(Context& ctx, std::vector<Tensor> grad_outputs) {
    backward_log().push_back(ctx.get<int>("id"));
    return {grad_outputs[0]};
  }
};

// alpha * a * b, with everything Context offers; records what backward saw.
struct ScaledMulSeen {
  bool forward_grad_mode = true;
  bool needs_a = false, needs_b = false;
  double alpha = 0.0;
  int backward_calls = 0;
};
ScaledMulSeen& scaled_mul_seen() {
  static ScaledMulSeen seen;
  return seen;
}

struct ScaledMul : Function<ScaledMul> {
  static constexpr const char* name = "scaled_mul";
  static Tensor forward(Context& ctx, const Tensor& a, const Tensor& b, double alpha) {
    scaled_mul_seen().forward_grad_mode = hg::GradMode::is_enabled();
    ctx.save_for_backward({a, b});
    ctx.save("alpha", alpha);
    return a * b * alpha;
  }
  static std::vector<Tensor> backward(Context& ctx, std::vector<Tensor> grad_outputs) {
    ScaledMulSeen& seen = scaled_mul_seen();
    ++seen.backward_calls;
    seen.needs_a = ctx.needs_input_grad(0);
    seen.needs_b = ctx.needs_input_grad(1);
    seen.alpha = ctx.get<double>("alpha");
    const std::vector<Tensor> saved = ctx.saved();
    const Tensor& g = grad_outputs[0];
    return {ctx.needs_input_grad(0) ? g * saved[1] * seen.alpha : Tensor(),
            ctx.needs_input_grad(1) ? g * saved[0] * seen.alpha : Tensor()};
  }
};

// x^2 with a correct backward, and the same op with the factor 2 forgotten.
struct Square : Function<Square> {
  static constexpr const char* name = "square";
  static Tensor forward(Context& ctx, const Tensor& x) {
    ctx.save_for_backward({x});
    return x * x;
  }
  static std::vector<Tensor> backward(Context& ctx, std::vector<Tensor> grad_outputs) {
    return {grad_outputs[0] * ctx.saved()[0] * 2.0};
  }
};
struct WrongSquare : Function<WrongSquare> {
  static constexpr const char* name = "wrong_square";
  static Tensor forward(Context& ctx, const Tensor& x) {
    ctx.save_for_backward({x});
    return x * x;
  }
  static std::vector<Tensor> backward(Context& ctx, std::vector<Tensor> grad_outputs) {
    return {grad_outputs[0] * ctx.saved()[0]};  // deliberately wrong: d(x^2)/dx is 2x
  }
};

// Two tensor inputs, but backward returns one gradient.
struct TooFewGrads : Function<TooFewGrads> {
  static constexpr const char* name = "too_few_grads";
  static Tensor forward(Context&, const Tensor& a, const Tensor& b) { return a + b; }
  static std::vector<Tensor> backward(Context&, std::vector<Tensor> grad_outputs) { return {grad_outputs[0]}; }
};

// One tensor input of shape (3), but backward returns a 0-d gradient.
struct WrongShapeGrad : Function<WrongShapeGrad> {
  static constexpr const char* name = "wrong_shape_grad";
  static Tensor forward(Context&, const Tensor& x) { return x * 2.0; }
  static std::vector<Tensor> backward(Context&, std::vector<Tensor> grad_outputs) {
    return {hg::sum(grad_outputs[0])};
  }
};

// Forward hands back its own input (PyTorch allows this and keeps the input a leaf).
struct ReturnsInput : Function<ReturnsInput> {
  static constexpr const char* name = "returns_input";
  static Tensor forward(Context&, const Tensor& x) { return x; }
  static std::vector<Tensor> backward(Context&, std::vector<Tensor> grad_outputs) { return {grad_outputs[0]}; }
};

// a + b whose backward gives "no gradient" for b.
struct OnlyFirst : Function<OnlyFirst> {
  static constexpr const char* name = "only_first";
  static Tensor forward(Context&, const Tensor& p, const Tensor& q) { return p + q; }
  static std::vector<Tensor> backward(Context&, std::vector<Tensor> grad_outputs) {
    return {grad_outputs[0], Tensor()};
  }
};

// (p - q) * scale + offset: tensor and non-tensor arguments interleaved.
struct Minus : Function<Minus> {
  static constexpr const char* name = "minus";
  static Tensor forward(Context&, const Tensor& p, double scale, const Tensor& q, int offset) {
    return (p - q) * scale + double(offset);
  }
  static std::vector<Tensor> backward(Context&, std::vector<Tensor> grad_outputs) {
    return {grad_outputs[0], -grad_outputs[0]};
  }
};

}  // namespace

// ---- the engine ---------------------------------------------------------------------------------

TEST_CASE("autograd.engine.diamond_runs_each_node_once_in_a_deterministic_order") {
  // x -> a=tag1 -> {b=tag2, c=tag3} -> d = b + c -> tag4 -> sum. tag1 is reachable along two paths.
  auto run = [] {
    backward_log().clear();
    Tensor x = vec({1.0, -2.0, 3.0}, hg::f32, true);
    Tensor a = Tag::apply(x, 1);
    Tensor b = Tag::apply(a, 2);
    Tensor c = Tag::apply(a * 3.0, 3);
    Tensor loss = hg::sum(Tag::apply(b + c, 4));
    loss.backward();
    CHECK_CLOSE(x.grad(), vec({4.0, 4.0, 4.0}));  // 1 + 3 along the two paths
    return backward_log();
  };
  const std::vector<int> first = run();
  CAPTURE(first.size());
  REQUIRE(first.size() == 4);  // each of the 4 nodes once, tag1 not once per path
  CHECK(first.front() == 4);
  CHECK(first.back() == 1);    // only after both of its consumers have sent their gradient
  CHECK(std::set<int>(first.begin(), first.end()) == std::set<int>{1, 2, 3, 4});
  for (int repeat = 0; repeat < 10; ++repeat) CHECK(run() == first);
}

TEST_CASE("autograd.engine.stacked_diamonds_run_each_node_once") {
  // a = a + a twenty times: 2^20 paths from the root to x, but 20 tags must run 20 times.
  backward_log().clear();
  Tensor x = vec({1.5}, hg::f64, true);
  Tensor a = x;
  constexpr int kLevels = 20;
  for (int i = 0; i < kLevels; ++i) {
    a = Tag::apply(a, i);
    a = a + a;
  }
  hg::sum(a).backward();
  CHECK(backward_log().size() == size_t(kLevels));
  std::vector<int> expected(kLevels);
  for (int i = 0; i < kLevels; ++i) expected[size_t(i)] = kLevels - 1 - i;  // a chain: last tag first
  CHECK(backward_log() == expected);
  CHECK(x.grad().item<double>() == std::ldexp(1.0, kLevels));
}

TEST_CASE("autograd.engine.variable_used_twice_sums_both_uses") {
  Tensor x = vec({1.0, -2.0, 0.5}, hg::f64, true);
  hg::sum(x * x).backward();  // d/dx sum(x*x) = 2x: both operands of mul are x
  CHECK_CLOSE(x.grad(), vec({2.0, -4.0, 1.0}, hg::f64));
}

TEST_CASE("autograd.engine.leaf_in_two_branches_accumulates") {
  Tensor x = vec({0.3, -1.2, 2.0}, hg::f64, true);
  Tensor w = vec({2.0, 3.0, -1.0}, hg::f64, true);
  // loss = sum(exp(x)) + sum(x * w): x feeds two branches that meet only at the final add.
  Tensor loss = hg::sum(hg::exp(x)) + hg::sum(x * w);
  loss.backward();
  const std::vector<double> xs = {0.3, -1.2, 2.0}, ws = {2.0, 3.0, -1.0};
  std::vector<double> expected;
  for (size_t i = 0; i < xs.size(); ++i) expected.push_back(std::exp(xs[i]) + ws[i]);
  CHECK_CLOSE(x.grad(), vec(expected, hg::f64));
  CHECK_CLOSE(w.grad(), vec(xs, hg::f64));
}

TEST_CASE("autograd.engine.two_backward_calls_on_two_graphs_sum_into_grad") {
  Tensor x = vec({1.0, 2.0, 3.0}, hg::f64, true);
  hg::sum(x * 2.0).backward();
  CHECK_CLOSE(x.grad(), vec({2.0, 2.0, 2.0}, hg::f64));
  hg::sum(x * x).backward();  // + 2x
  CHECK_CLOSE(x.grad(), vec({4.0, 6.0, 8.0}, hg::f64));
  // A third graph, with the gradient entering through a different op.
  hg::sum(hg::exp(x * 0.0)).backward();  // + 0
  CHECK_CLOSE(x.grad(), vec({4.0, 6.0, 8.0}, hg::f64));
}

TEST_CASE("autograd.engine.caller_gradient_is_never_aliased_by_grad") {
  // backward(g) with the caller's own g: the leaf's .grad() must not become g's buffer, or the
  // next accumulation (in place) writes into the caller's tensor. PyTorch clones in this case.
  Tensor x = vec({1.0, 2.0, 3.0}, hg::f32, true);
  const Tensor g = vec({1.0, 1.0, 1.0});
  for (int i = 0; i < 3; ++i) x.clone().backward(g);  // clone's backward passes g straight through
  CHECK_CLOSE(g, vec({1.0, 1.0, 1.0}));
  CHECK_CLOSE(x.grad(), vec({3.0, 3.0, 3.0}));
  CHECK(x.grad().raw_data() != g.raw_data());
}

TEST_CASE("autograd.engine.no_gradient_path_leaves_grad_undefined") {
  // A custom op that returns "no gradient" for an input: nothing reaches that leaf.
  Tensor a = vec({1.0, 2.0}, hg::f32, true);
  Tensor b = vec({3.0, 4.0}, hg::f32, true);
  hg::sum(OnlyFirst::apply(a, b)).backward();
  CHECK_CLOSE(a.grad(), vec({1.0, 1.0}));
  CHECK_FALSE(b.grad().defined());
}

// ---- the graph is freed by backward -------------------------------------------------------------

TEST_CASE("autograd.graph.memory_returns_after_backward") {
  hg::manual_seed(0);
  Tensor x = hg::randn({64, 128}, {.requires_grad = true});
  Tensor w = hg::randn({128, 256}, {.requires_grad = true});
  const int64_t before = hg::memory::allocated();
  int64_t during = 0, after = 0, grads = 0, loss_bytes = 0;
  {
    // Saved for backward: x and w (matmul), h (tanh's output), e = exp(h) and h again (mul).
    Tensor h = hg::tanh(hg::matmul(x, w));  // (64, 256) f32 = 65536 bytes
    Tensor loss = hg::sum(hg::exp(h) * h);
    h = Tensor();  // the graph alone keeps h and exp(h) alive now
    during = hg::memory::allocated();
    loss.backward();
    after = hg::memory::allocated();
    grads = storage_bytes(x.grad()) + storage_bytes(w.grad());
    loss_bytes = storage_bytes(loss);
  }
  MESSAGE("before forward: ", before, " B; after forward: ", during, " B; after backward: ", after,
       " B, of which .grad: ", grads, " B and the loss: ", loss_bytes, " B");
  const int64_t h_bytes = 64 * 256 * 4;
  CHECK(during >= before + 2 * h_bytes);  // h and exp(h) held by the graph
  CHECK(grads == (64 * 128 + 128 * 256) * 4);
  CHECK(after - grads - loss_bytes == before);  // every saved tensor and pending gradient freed
  CHECK(hg::memory::allocated() - grads == before);  // the loss handle gone too
}

TEST_CASE("autograd.graph.dropped_graph_without_backward_frees_everything") {
  Tensor x = hg::ones({1000}, {.requires_grad = true});
  const int64_t before = hg::memory::allocated();
  {
    Tensor loss = hg::sum(hg::exp(x) * hg::log(x + 1.0));
    CHECK(hg::memory::allocated() > before + 3 * 4000);  // exp(x), x+1 saved
  }
  CHECK(hg::memory::allocated() == before);
}

// ---- deep graphs: freed and run without recursion (issue 11, item 1) ---------------------------
// A chain this long used to overflow the stack while its nodes were destroyed (each node freeing
// the next from inside its own destructor): 200k ops crashed at -O3.
constexpr int kDeepChain = 300'000;

TEST_CASE("autograd.deep_graph.running_total_without_item_is_freed") {
  // The everyday mistake: summing losses as tensors keeps every step's graph alive.
  const Tensor w = hg::full({}, 0.5, {.requires_grad = true});
  const int64_t before = hg::memory::allocated();
  {
    Tensor total = hg::zeros({});
    for (int step = 0; step < kDeepChain; ++step) total = total + w * 2.0;
    CHECK(total.item<float>() == float(kDeepChain));  // exact: every partial sum is an integer below 2^24
  }  // the 600k-node graph dies here
  CHECK(hg::memory::allocated() == before);
}

TEST_CASE("autograd.deep_graph.backward_through_a_chain_of_300k_ops") {
  const Tensor x = hg::full({}, 1.0, {.requires_grad = true});
  Tensor y = x;
  for (int i = 0; i < kDeepChain; ++i) y = y + 1.0;
  CHECK(y.item<float>() == float(kDeepChain + 1));
  y.backward();
  CHECK(x.grad().item<float>() == 1.0f);
  y = Tensor();  // frees the (released) chain
  const Tensor z = x * 3.0;  // the graph machinery still works afterwards
  z.backward();
  CHECK(x.grad().item<float>() == 4.0f);
}

TEST_CASE("autograd.graph.second_backward_throws") {
  Tensor x = vec({0.5, 1.5}, hg::f32, true);
  Tensor loss = hg::sum(hg::exp(x) * x);
  loss.backward();
  const std::vector<float> grad_after_first = x.grad().to_vector<float>();
  CHECK_THROWS_HG(loss.backward(), "second time");
  CHECK(x.grad().to_vector<float>() == grad_after_first);  // nothing accumulated by the failed call
}

TEST_CASE("autograd.graph.backward_through_a_freed_shared_subgraph_throws") {
  Tensor x = vec({0.5, 1.5}, hg::f32, true);
  Tensor y = hg::exp(x);
  Tensor a = hg::sum(y);
  Tensor b = hg::sum(y * 2.0);
  a.backward();  // frees exp's node, which b's graph also goes through
  CHECK_THROWS_HG(b.backward(), "second time");
}

// ---- grad mode, detach, requires_grad_ ----------------------------------------------------------

TEST_CASE("autograd.grad_mode.no_grad_guard_records_nothing") {
  Tensor x = vec({1.0, 2.0}, hg::f32, true);
  CHECK(hg::GradMode::is_enabled());
  {
    hg::NoGradGuard no_grad;
    CHECK_FALSE(hg::GradMode::is_enabled());
    Tensor y = hg::exp(x) * x;
    CHECK(y.grad_fn() == nullptr);
    CHECK_FALSE(y.requires_grad());
    CHECK(y.is_leaf());
    CHECK_THROWS_HG(hg::sum(y).backward(), "does not require grad");
  }
  CHECK(hg::GradMode::is_enabled());
  Tensor z = x * 2.0;
  CHECK(z.grad_fn() != nullptr);
  CHECK(z.requires_grad());
}

TEST_CASE("autograd.grad_mode.nested_guards_restore") {
  CHECK(hg::GradMode::is_enabled());
  {
    hg::NoGradGuard outer;
    {
      hg::NoGradGuard inner;
      CHECK_FALSE(hg::GradMode::is_enabled());
    }
    CHECK_FALSE(hg::GradMode::is_enabled());  // the inner guard restores "off", not "on"
  }
  CHECK(hg::GradMode::is_enabled());

  hg::GradMode::set_enabled(false);
  { hg::NoGradGuard guard; }
  CHECK_FALSE(hg::GradMode::is_enabled());  // restores what it found
  hg::GradMode::set_enabled(true);

  try {
    hg::NoGradGuard guard;
    throw hg::Error("boom");
  } catch (const hg::Error&) {
  }
  CHECK(hg::GradMode::is_enabled());  // restored on throw
}

TEST_CASE("autograd.detach.shares_storage_without_history") {
  Tensor x = vec({1.0, 2.0, 3.0}, hg::f32, true);
  Tensor y = x * 2.0;
  Tensor d = y.detach();
  CHECK(d.raw_data() == y.raw_data());
  CHECK(d.impl()->storage == y.impl()->storage);
  CHECK(d.is_leaf());
  CHECK_FALSE(d.requires_grad());
  CHECK_FALSE((d * 3.0).requires_grad());  // ops on it record nothing
  d.fill_(7.0);
  CHECK(y.to_vector<float>() == std::vector<float>{7.0f, 7.0f, 7.0f});  // same memory
  CHECK(y.requires_grad());  // the original keeps its history
  CHECK(y.grad_fn() != nullptr);
}

TEST_CASE("autograd.requires_grad.integer_tensor_throws") {
  Tensor i = hg::arange(4, {.dtype = hg::i64});
  CHECK_THROWS_HG(i.requires_grad_(), "only floating");
  CHECK_FALSE(i.requires_grad());
  CHECK_THROWS_HG(hg::zeros({3}, {.dtype = hg::i32, .requires_grad = true}), "only floating");
  CHECK_THROWS_HG(hg::ones({3}, {.dtype = hg::u8, .requires_grad = true}), "only floating");
}

TEST_CASE("autograd.requires_grad.non_leaf_throws") {
  Tensor x = vec({1.0}, hg::f32, true);
  Tensor y = x * 2.0;
  CHECK_THROWS_HG(y.requires_grad_(), "leaf");
  CHECK_THROWS_HG(y.requires_grad_(false), "leaf");
  Tensor leaf = y.detach();
  leaf.requires_grad_();  // detach() starts a new leaf
  CHECK(leaf.requires_grad());
}

TEST_CASE("autograd.backward.non_scalar_without_gradient_throws") {
  Tensor x = vec({1.0, 2.0}, hg::f32, true);
  Tensor y = x * 2.0;
  CHECK_THROWS_HG(y.backward(), "implicitly created only for scalar outputs");
  CHECK_FALSE(x.grad().defined());
  y.backward(vec({1.0, 10.0}));  // with a gradient it works, and the graph was not consumed
  CHECK_CLOSE(x.grad(), vec({2.0, 20.0}));
}

TEST_CASE("autograd.backward.gradient_of_wrong_shape_throws") {
  Tensor x = vec({1.0, 2.0}, hg::f32, true);
  Tensor y = x * 2.0;
  CHECK_THROWS_HG(y.backward(vec({1.0, 1.0, 1.0})), "does not match");
  CHECK_THROWS_HG(y.backward(hg::ones({2, 1})), "does not match");
  CHECK_THROWS_HG(hg::sum(y).backward(vec({1.0, 1.0})), "does not match");
  CHECK_FALSE(x.grad().defined());
}

// ---- saved tensors and the version counter ------------------------------------------------------

TEST_CASE("autograd.saved_tensor.in_place_change_makes_backward_name_the_op") {
  SUBCASE("mul: an input written through detach()") {
    Tensor x = vec({1.0, 2.0}, hg::f32, true);
    Tensor w = vec({3.0, 4.0}, hg::f32, true);
    Tensor loss = hg::sum(x * w);
    w.detach().add_(vec({1.0, 1.0}));
    CHECK_THROWS_HG(loss.backward(), "'mul'");
    CHECK_FALSE(x.grad().defined());
  }
  SUBCASE("mul: a leaf written in place under NoGradGuard") {
    Tensor x = vec({1.0, 2.0}, hg::f32, true);
    Tensor w = vec({3.0, 4.0}, hg::f32, true);
    Tensor loss = hg::sum(x * w);
    {
      hg::NoGradGuard no_grad;
      x.mul_(2.0);
    }
    CHECK_THROWS_HG(loss.backward(), "modified by an in-place operation");
    Tensor loss2 = hg::sum(x * w);
    { hg::NoGradGuard no_grad; x.mul_(2.0); }
    CHECK_THROWS_HG(loss2.backward(), "'mul'");
  }
  SUBCASE("exp: its saved output overwritten") {
    Tensor x = vec({0.0, 1.0}, hg::f32, true);
    Tensor y = hg::exp(x);
    Tensor loss = hg::sum(y * 2.0);  // the scalar mul saves nothing; exp saved y itself
    y.detach().mul_(0.5);
    CHECK_THROWS_HG(loss.backward(), "'exp'");
  }
  SUBCASE("matmul: the right operand written through a view of its storage") {
    Tensor a = hg::ones({2, 3}, {.requires_grad = true});
    Tensor b = hg::ones({3, 4}, {.requires_grad = true});
    Tensor loss = hg::sum(hg::matmul(a, b));
    b.detach().t().fill_(2.0);  // a transposed view: same storage, same version counter
    CHECK_THROWS_HG(loss.backward(), "'matmul'");
  }
  SUBCASE("an in-place change to a tensor nobody saved is fine") {
    Tensor x = vec({1.0, 2.0}, hg::f32, true);
    Tensor w = vec({3.0, 4.0}, hg::f32, true);
    Tensor loss = hg::sum(x + w);  // add saves no tensors
    w.detach().add_(vec({1.0, 1.0}));
    Tensor copy = x.detach().clone();  // and writing to a copy never counts
    Tensor loss2 = hg::sum(hg::exp(copy.requires_grad_()));
    copy.detach().clone().fill_(9.0);
    CHECK_NOTHROW(loss.backward());
    CHECK_NOTHROW(loss2.backward());
    CHECK_CLOSE(x.grad(), vec({1.0, 1.0}));
    CHECK_CLOSE(copy.grad(), vec({std::exp(1.0), std::exp(2.0)}));
  }
}

// ---- dtypes -------------------------------------------------------------------------------------

TEST_CASE("autograd.dtype.gradient_arrives_in_the_leaf_dtype") {
  SUBCASE("f32 leaf used in f16") {
    Tensor x = vec({0.5, -1.0, 2.0}, hg::f32, true);
    Tensor h = x.to(hg::f16);
    Tensor loss = hg::sum(h * h);  // an f16 graph
    loss.backward();
    REQUIRE(x.grad().defined());
    CHECK(x.grad().dtype() == hg::f32);
    CHECK_CLOSE(x.grad(), vec({1.0, -2.0, 4.0}));  // 2x is exact in f16 for these values
  }
  SUBCASE("bf16 leaf promoted into an f32 op") {
    Tensor x = vec({0.5, -1.0}, hg::bf16, true);
    Tensor w = vec({3.0, 4.0}, hg::f32, true);
    hg::sum(x * w).backward();  // bf16 * f32 -> f32
    CHECK(x.grad().dtype() == hg::bf16);
    CHECK(w.grad().dtype() == hg::f32);
    CHECK_CLOSE(x.grad(), vec({3.0, 4.0}, hg::bf16));
    CHECK_CLOSE(w.grad(), vec({0.5, -1.0}));
  }
  SUBCASE("an explicit gradient of another dtype is converted to the output's") {
    Tensor x = vec({1.0, 2.0}, hg::f64, true);
    Tensor y = x * 3.0;
    y.backward(vec({1.0, 1.0}, hg::f32));
    CHECK(x.grad().dtype() == hg::f64);
    CHECK_CLOSE(x.grad(), vec({3.0, 3.0}, hg::f64));
  }
}

// ---- custom ops: hg::autograd::Function<T> ------------------------------------------------------

TEST_CASE("autograd.function.context_saves_tensors_flags_and_data") {
  scaled_mul_seen() = {};
  Tensor a = vec({1.0, 2.0, 3.0}, hg::f64, true);
  Tensor b = vec({4.0, 5.0, 6.0}, hg::f64);  // no gradient wanted
  Tensor y = ScaledMul::apply(a, b, 0.5);
  CHECK_FALSE(scaled_mul_seen().forward_grad_mode);  // forward runs unrecorded
  CHECK(hg::GradMode::is_enabled());
  CHECK_CLOSE(y, vec({2.0, 5.0, 9.0}, hg::f64));
  REQUIRE(y.grad_fn() != nullptr);
  CHECK(y.grad_fn()->name() == "scaled_mul");
  hg::sum(y).backward();
  const ScaledMulSeen& seen = scaled_mul_seen();
  CHECK(seen.backward_calls == 1);
  CHECK(seen.needs_a);
  CHECK_FALSE(seen.needs_b);
  CHECK(seen.alpha == 0.5);
  CHECK_CLOSE(a.grad(), vec({2.0, 2.5, 3.0}, hg::f64));
  CHECK_FALSE(b.grad().defined());
}

TEST_CASE("autograd.function.both_inputs_and_non_tensor_args") {
  scaled_mul_seen() = {};
  Tensor a = vec({1.0, 2.0}, hg::f64, true);
  Tensor b = vec({3.0, -1.0}, hg::f64, true);
  hg::sum(ScaledMul::apply(a, b, 2.0) * a).backward();  // 2 a^2 b
  CHECK(scaled_mul_seen().needs_a);
  CHECK(scaled_mul_seen().needs_b);
  CHECK_CLOSE(a.grad(), vec({12.0, -8.0}, hg::f64));  // 4 a b
  CHECK_CLOSE(b.grad(), vec({2.0, 8.0}, hg::f64));    // 2 a^2
}

TEST_CASE("autograd.function.not_recorded_without_grad") {
  scaled_mul_seen() = {};
  Tensor a = vec({1.0, 2.0}, hg::f64);
  Tensor b = vec({3.0, 4.0}, hg::f64);
  Tensor y = ScaledMul::apply(a, b, 1.0);
  CHECK_FALSE(y.requires_grad());
  CHECK(y.grad_fn() == nullptr);
  Tensor c = vec({1.0, 2.0}, hg::f64, true);
  {
    hg::NoGradGuard no_grad;
    Tensor z = ScaledMul::apply(c, b, 1.0);
    CHECK_FALSE(z.requires_grad());
    CHECK(z.grad_fn() == nullptr);
  }
}

TEST_CASE("autograd.function.apply_rejects_wrong_gradient_count") {
  Tensor a = vec({1.0, 2.0}, hg::f32, true);
  Tensor b = vec({3.0, 4.0}, hg::f32, true);
  Tensor loss = hg::sum(TooFewGrads::apply(a, b));
  CHECK_THROWS_HG(loss.backward(), "too_few_grads: backward returned 1 gradients");
  CHECK_FALSE(a.grad().defined());
}

TEST_CASE("autograd.function.apply_rejects_wrong_gradient_shape") {
  Tensor x = vec({1.0, 2.0, 3.0}, hg::f32, true);
  Tensor loss = hg::sum(WrongShapeGrad::apply(x));
  CHECK_THROWS_HG(loss.backward(), "wrong_shape_grad: backward returned a gradient of shape");
  CHECK_FALSE(x.grad().defined());
}

TEST_CASE("autograd.function.saved_tensor_changed_in_place_names_the_op") {
  Tensor a = vec({1.0, 2.0}, hg::f32, true);
  Tensor b = vec({3.0, 4.0}, hg::f32, true);
  Tensor loss = hg::sum(ScaledMul::apply(a, b, 1.0));
  b.detach().mul_(2.0);
  CHECK_THROWS_HG(loss.backward(), "modified by an in-place operation");
  Tensor loss2 = hg::sum(ScaledMul::apply(a, b, 1.0));
  b.detach().mul_(2.0);
  CHECK_THROWS_HG(loss2.backward(), "scaled_mul");  // the custom op's own name, like "mul" for mul
}

TEST_CASE("autograd.function.forward_returning_its_input_keeps_the_input_a_leaf") {
  Tensor x = vec({1.0, 2.0}, hg::f32, true);
  Tensor y = ReturnsInput::apply(x);
  CHECK(x.is_leaf());
  CHECK(x.grad_fn() == nullptr);
  CHECK(y.requires_grad());
  hg::sum(y * 3.0).backward();
  REQUIRE(x.grad().defined());
  CHECK_CLOSE(x.grad(), vec({3.0, 3.0}));
  // x is still an ordinary leaf: a new graph through it works (no freed node in its history).
  CHECK_NOTHROW(hg::sum(x * 2.0).backward());
  CHECK_CLOSE(x.grad(), vec({5.0, 5.0}));
}

TEST_CASE("autograd.function.forward_receives_tensor_arguments_in_order") {
  const Tensor a = vec({10.0, 20.0});
  const Tensor b = vec({1.0, 2.0});
  CHECK_CLOSE(Minus::apply(a, 2.0, b, 1), vec({19.0, 37.0}));  // (a - b) * 2 + 1, not (b - a) * 2 + 1
}

TEST_CASE("autograd.function.gradcheck_passes_a_correct_backward") {
  hg::manual_seed(1);
  const std::vector<Tensor> inputs{hg::randn({3, 4}, {.dtype = hg::f64, .requires_grad = true})};
  auto square = [](const std::vector<Tensor>& in) { return Square::apply(in[0]); };
  const auto report = hg::autograd::gradcheck_report(square, inputs);
  CHECK_MESSAGE(!report.has_value(), report.value_or(""));
  CHECK(hg::autograd::gradcheck(square, inputs, {.eps = 1e-6, .atol = 1e-5, .rtol = 1e-3}));

  const std::vector<Tensor> two{hg::randn({5}, {.dtype = hg::f64, .requires_grad = true}),
                                hg::randn({5}, {.dtype = hg::f64, .requires_grad = true})};
  CHECK(hg::autograd::gradcheck([](const std::vector<Tensor>& in) { return ScaledMul::apply(in[0], in[1], -1.5); },
                                two));
}

TEST_CASE("autograd.function.gradcheck_fails_a_wrong_backward") {
  hg::manual_seed(2);
  const std::vector<Tensor> inputs{hg::randn({3, 4}, {.dtype = hg::f64, .requires_grad = true})};
  auto wrong = [](const std::vector<Tensor>& in) { return WrongSquare::apply(in[0]); };
  CHECK_FALSE(hg::autograd::gradcheck(wrong, inputs));
  const auto report = hg::autograd::gradcheck_report(wrong, inputs);
  REQUIRE(report.has_value());
  CHECK(report->find("Jacobian mismatch") != std::string::npos);
  // f32 inputs are refused: finite differences need f64.
  const std::vector<Tensor> f32_inputs{hg::randn({2}, {.requires_grad = true})};
  CHECK_THROWS_HG(hg::autograd::gradcheck(wrong, f32_inputs), "f64");
}

// ---- docs/testing.md scenario 30 ---------------------------------------------------------------------

TEST_CASE("autograd.scenario30.misuse_errors") {
  // 1. backward twice without retaining the graph.
  {
    Tensor x = vec({1.0, 2.0}, hg::f32, true);
    Tensor loss = hg::sum(hg::exp(x));
    loss.backward();
    CHECK_THROWS_HG(loss.backward(), "second time");
  }
  // 2. a tensor saved for backward modified in place (version counter).
  {
    Tensor x = vec({1.0, 2.0}, hg::f32, true);
    Tensor y = hg::exp(x);
    Tensor loss = hg::sum(y * x);
    { hg::NoGradGuard no_grad; x.add_(vec({1.0, 1.0})); }
    CHECK_THROWS_HG(loss.backward(), "modified by an in-place operation");
  }
  // 3. backward on a non-scalar without a grad_output.
  {
    Tensor x = vec({1.0, 2.0}, hg::f32, true);
    CHECK_THROWS_HG((x * 2.0).backward(), "implicitly created only for scalar outputs");
  }
  // 4. requires_grad on an integer tensor.
  {
    Tensor i = hg::arange(3, {.dtype = hg::i64});
    CHECK_THROWS_HG(i.requires_grad_(true), "only floating");
  }
}

// ---- docs/testing.md scenario 29: anomaly mode --------------------------------------------------------

namespace {
// sqrt's derivative at 0 is infinite; an incoming gradient of 0 makes its backward 0 * inf = NaN
// while every other op's gradients stay finite.
Tensor loss_whose_sqrt_backward_makes_nan(const Tensor& x) { return hg::sum(hg::sqrt(x) * 0.0); }

std::string anomaly_message(const Tensor& loss) {
  try {
    loss.backward();
  } catch (const hg::Error& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST_CASE("autograd.scenario29.anomaly_mode_names_the_op_whose_backward_made_nan_and_where_it_was_created") {
  hg::autograd::DetectAnomalyGuard detect;
  const Tensor x = vec({0.0, 1.0, 4.0}, hg::f32, true);
  const std::string message = anomaly_message(loss_whose_sqrt_backward_makes_nan(x));
  INFO(message);
  CHECK(message.find("anomaly mode: the backward of 'sqrt' returned NaN in the gradient for its input 0") !=
        std::string::npos);
  CHECK(message.find("(shape [3], f32)") != std::string::npos);
  CHECK(message.find("was created at:") != std::string::npos);
  CHECK(message.find("  #0 ") != std::string::npos);
  // The stack is the forward's: it passes through the public op that created the node.
  CHECK(message.find("hg::sqrt(") != std::string::npos);
  CHECK_FALSE(x.grad().defined());  // the error came before the NaN reached the leaf
}

TEST_CASE("autograd.scenario29.anomaly_mode_is_off_by_default_and_the_guard_restores_it") {
  CHECK_FALSE(hg::autograd::AnomalyMode::is_enabled());
  {
    hg::autograd::DetectAnomalyGuard outer;
    CHECK(hg::autograd::AnomalyMode::is_enabled());
    {
      hg::autograd::DetectAnomalyGuard inner;
      CHECK(hg::autograd::AnomalyMode::is_enabled());
    }
    CHECK(hg::autograd::AnomalyMode::is_enabled());
  }
  CHECK_FALSE(hg::autograd::AnomalyMode::is_enabled());
  // Off: nothing is checked, the NaN reaches the leaf (PyTorch's default too).
  const Tensor x = vec({0.0, 1.0}, hg::f32, true);
  loss_whose_sqrt_backward_makes_nan(x).backward();
  const std::vector<double> g = x.grad().to_vector<double>();
  CHECK(std::isnan(g[0]));
  CHECK(g[1] == 0.0);
}

TEST_CASE("autograd.scenario29.graph_recorded_with_the_mode_off_still_names_the_op") {
  const Tensor x = vec({0.0}, hg::f32, true);
  const Tensor loss = loss_whose_sqrt_backward_makes_nan(x);  // recorded without stacks
  hg::autograd::DetectAnomalyGuard detect;
  const std::string message = anomaly_message(loss);
  INFO(message);
  CHECK(message.find("the backward of 'sqrt' returned NaN") != std::string::npos);
  CHECK(message.find("recorded while anomaly mode was off") != std::string::npos);
}

TEST_CASE("autograd.scenario29.finite_gradients_are_unchanged_by_anomaly_mode") {
  const auto gradient = [](bool detect) {
    std::optional<hg::autograd::DetectAnomalyGuard> guard;
    if (detect) guard.emplace();
    const Tensor x = vec({0.5, 1.0, 4.0}, hg::f32, true);
    hg::sum(hg::sqrt(x) * hg::exp(x)).backward();
    return x.grad().to_vector<double>();
  };
  CHECK(gradient(true) == gradient(false));
}

// ---- post-accumulate-grad hooks and end-of-backward callbacks (what DataParallel builds on) -----

TEST_CASE("autograd.post_accumulate_grad_hook_sees_the_summed_gradient_once") {
  Tensor w = vec({1, 2, 3}, hg::f32, true), b = vec({0.5}, hg::f32, true);
  std::vector<std::string> log;
  std::vector<std::vector<float>> seen;
  const int64_t id = w.register_post_accumulate_grad_hook([&](const Tensor& leaf) {
    log.push_back("w");
    seen.push_back(leaf.grad().to_vector<float>());
  });
  b.register_post_accumulate_grad_hook([&](const Tensor&) { log.push_back("b"); });
  // w is used twice: the hook runs once, after both paths' gradients were summed (2w + 1).
  const auto loss = [&] { return hg::sum(w * w + w * b); };
  loss().backward();
  CHECK(log.size() == 2);
  CHECK(std::count(log.begin(), log.end(), "w") == 1);
  REQUIRE(seen.size() == 1);
  CHECK(seen[0] == std::vector<float>{2.5f, 4.5f, 6.5f});
  // A second backward accumulates, and the hook sees the running sum.
  loss().backward();
  REQUIRE(seen.size() == 2);
  CHECK(seen[1] == std::vector<float>{5.0f, 9.0f, 13.0f});
  // Removed: no longer called; an unknown id is ignored.
  w.remove_post_accumulate_grad_hook(id);
  w.remove_post_accumulate_grad_hook(id + 1000);
  loss().backward();
  CHECK(seen.size() == 2);
  CHECK(std::count(log.begin(), log.end(), "b") == 3);

  Tensor not_leaf = w * 2;
  CHECK_THROWS_HG(not_leaf.register_post_accumulate_grad_hook([](const Tensor&) {}), "leaf");
  Tensor frozen = vec({1});
  CHECK_THROWS_HG(frozen.register_post_accumulate_grad_hook([](const Tensor&) {}), "does not require grad");
}

TEST_CASE("autograd.queue_callback_runs_once_at_the_end_of_backward") {
  Tensor a = vec({1, 2}, hg::f32, true), c = vec({3, 4}, hg::f32, true);
  std::vector<std::string> log;
  bool queued = false;
  const auto on_leaf = [&](const std::string& name) {
    return [&, name](const Tensor&) {
      log.push_back(name);
      if (!queued) {  // the first hook of this backward queues the callback, like DataParallel
        queued = true;
        hg::autograd::queue_callback([&] {
          log.push_back("end");
          // Every gradient is in place when the callback runs; it may queue another.
          CHECK(a.grad().defined());
          CHECK(c.grad().defined());
          hg::autograd::queue_callback([&] { log.push_back("end2"); });
        });
      }
    };
  };
  a.register_post_accumulate_grad_hook(on_leaf("a"));
  c.register_post_accumulate_grad_hook(on_leaf("c"));
  hg::sum(a * c).backward();
  REQUIRE(log.size() == 4);
  CHECK(log[2] == "end");
  CHECK(log[3] == "end2");
  CHECK_THROWS_HG(hg::autograd::queue_callback([] {}), "only valid while a backward runs");
  // An exception from a callback leaves backward.
  queued = false;
  log.clear();
  Tensor d = vec({1}, hg::f32, true);
  d.register_post_accumulate_grad_hook([](const Tensor&) {
    hg::autograd::queue_callback([] { throw hg::Error("callback failed"); });
  });
  CHECK_THROWS_HG(hg::sum(d * 2).backward(), "callback failed");
}
