// Behaviour of the ops, docs/testing.md scenarios 1 and 3, beyond what the per-op harness checks. Every
// op's forward against the naive f64 reference (scenario 1) and its f16/bf16 results against f32
// (scenario 3) run on every sample of its entry in tests/op_db.cpp, in test_op_db
// (op_db.matches_the_naive_reference, op_db.f16_and_bf16_match_f32). Here: the operator spellings
// with a scalar, the 16-bit GEMMs on every operand layout, batch_norm's running statistics, f64
// precision through the norms, cat of mixed dtypes, and dropout's generator.
// Scenarios 4-5 are in test_ops_layouts.cpp, 6-13 in test_ops_errors.cpp, 14-16 in
// test_ops_numerics.cpp.
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "ops_test_helpers.h"

namespace {

// Shapes for the elementwise ops: 0-d, one element, odd and prime sizes, a 256-element chunk
// boundary crossed, and one above the 32768-element grain where work is split across threads.
const std::vector<hg::Shape> kElementwiseShapes = {{}, {1}, {7}, {3, 5}, {13, 17}, {33}, {257},
                                                   {2, 3, 31}, {1031}, {40009}};

}  // namespace

// ---- scenario 1: every op against the naive f64 reference, within T(f32) ---------------------------

// The operators with a scalar: `x op s` spells add/sub/mul/div(x, s), `-x` neg(x), and `s - x`,
// `s / x` are compositions (add(neg(x), s), mul(pow(x, -1), s)) that no op_db entry runs.
TEST_CASE("ops.scenario01.scalar_operators_match_reference") {
  hg::manual_seed(101);
  struct Op {
    const char* name;
    std::function<Tensor(const Tensor&)> op;
    std::function<double(double)> reference;
    bool positive_domain;
  };
  const Op ops[] = {
      {"unary -", [](const Tensor& x) { return -x; }, [](double x) { return -x; }, false},
      {"x + 2.5", [](const Tensor& x) { return x + 2.5; }, [](double x) { return x + 2.5; }, false},
      {"x - 1.5", [](const Tensor& x) { return x - 1.5; }, [](double x) { return x - 1.5; }, false},
      {"x * -3", [](const Tensor& x) { return x * -3.0; }, [](double x) { return x * -3.0; }, false},
      {"x / 4", [](const Tensor& x) { return x / 4.0; }, [](double x) { return x / 4.0; }, false},
      {"2.5 - x", [](const Tensor& x) { return 2.5 - x; }, [](double x) { return 2.5 - x; }, false},
      {"3 / x", [](const Tensor& x) { return 3.0 / x; }, [](double x) { return 3.0 / x; }, true},
  };
  for (const hg::Shape& shape : kElementwiseShapes) {
    CAPTURE(shape);
    const Tensor x = normal(shape, 3.0), p = positive(shape);
    for (const Op& op : ops) {
      const std::string op_name = op.name;
      CAPTURE(op_name);
      const Tensor in = op.positive_domain ? p : x;
      const Tensor y = op.op(in);
      CHECK(y.dtype() == hg::f32);
      CHECK_MATCHES_REF(y, ref::map(ref::of(in), op.reference), kF32);
    }
  }
}

// The 16-bit GEMMs (bf16 natively on AVX512-BF16, f16 widened while packing) on shapes that
// leave partial register tiles and odd depths, with each operand row- or column-major and with
// or without a padded leading dimension (an even stride under an odd depth takes other packing
// paths): the result equals the exact product of the same 16-bit values, rounded once.
TEST_CASE("ops.scenario01.sixteen_bit_matmul_matches_the_exact_product_of_its_inputs") {
  hg::manual_seed(112);
  const std::pair<hg::Shape, hg::Shape> shapes[] = {
      {{1, 1}, {1, 1}}, {{5, 9}, {9, 7}}, {{13, 31}, {31, 33}}, {{25, 257}, {257, 40}}, {{12, 2}, {2, 64}}, {{16, 784}, {784, 9}},
  };
  // A (rows x cols) matrix of 16-bit values stored row- or column-major, its leading dimension
  // one longer than needed when padded.
  const auto matrix = [](const hg::Shape& s, hg::DType dtype, bool column_major, bool padded) {
    const int64_t outer = column_major ? s[1] : s[0], inner = column_major ? s[0] : s[1];
    const Tensor view = hg::narrow(normal({outer, inner + (padded ? 1 : 0)}).to(dtype), 1, 0, inner);
    return column_major ? view.t() : view;
  };
  for (const hg::DType dtype : {hg::f16, hg::bf16})
    for (const auto& [sa_binding, sb_binding] : shapes) {
      const hg::Shape &sa = sa_binding, &sb = sb_binding;  // (clang 14: no binding in CAPTURE)
      for (int layout = 0; layout < 8; ++layout) {
        CAPTURE(dtype);
        CAPTURE(sa);
        CAPTURE(sb);
        CAPTURE(layout);
        const bool padded = layout & 4;
        const Tensor a = matrix(sa, dtype, layout & 1, padded), b = matrix(sb, dtype, layout & 2, padded);
        const Tensor y = hg::matmul(a, b);
        CHECK(y.dtype() == dtype);
        CHECK_MATCHES_REF(y, ref::matmul(ref::of(a), ref::of(b)), hg_test::tolerance_for(dtype));
      }
    }
}

// Training updates the running statistics in place: (1 - momentum) * old + momentum * the batch's,
// the variance unbiased, as PyTorch. (The output, in training and eval, is op_db's; that eval and
// the other ops leave their inputs alone is op_db.a_second_call_agrees_and_leaves_its_inputs_alone.)
TEST_CASE("ops.scenario01.batch_norm_updates_running_statistics") {
  hg::manual_seed(110);
  const std::vector<hg::Shape> shapes = {{4, 3}, {2, 3, 5, 5}, {7, 2, 33}, {2, 1}, {3, 17, 2, 3}};
  for (const hg::Shape& shape : shapes) {
    CAPTURE(shape);
    const int64_t C = shape[1];
    const Tensor x = normal(shape, 2.0) + 1.0, w = normal({C}), b = normal({C});
    std::vector<double> mean, var;
    ref::channel_stats(ref::of(x), mean, var);
    const Tensor running_mean = normal({C}), running_var = positive({C});
    const std::vector<double> rm = values(running_mean), rv = values(running_var);
    const double momentum = 0.1, count = double(ref::numel(shape) / C);
    hg::batch_norm(x, running_mean, running_var, w, b, true, momentum, 1e-5);
    ref::Array expected_mean{{C}, {}}, expected_var{{C}, {}};
    for (int64_t c = 0; c < C; ++c) {
      expected_mean.v.push_back((1 - momentum) * rm[size_t(c)] + momentum * mean[size_t(c)]);
      expected_var.v.push_back((1 - momentum) * rv[size_t(c)] + momentum * var[size_t(c)] * count / (count - 1));
    }
    CHECK_MATCHES_REF(running_mean, expected_mean, kF32);
    CHECK_MATCHES_REF(running_var, expected_var, kF32);  // the unbiased variance, as PyTorch
  }
}

// batch_norm's statistics take one pass over memory (kernels/norm.cpp: blocks of a row in f32,
// merged in double). Data far from zero -- 1e4 plus noise of 1e-2, a variance 1e12 times smaller
// than the mean's square -- is where sum(x^2) - sum(x)^2 / n would lose every digit; the variance
// must still match the f64 reference within T(f32), for 1 and 2 threads alike, bitwise. The same
// shapes near zero check that every block's values count.
TEST_CASE("ops.scenario01.batch_norm_statistics_of_data_far_from_zero") {
  hg::manual_seed(112);
  // (Rows of 4096 values or more are cut into blocks, the last one shorter: {3, 2, 9000}; shorter
  // rows are grouped, several images' rows of a channel per block: 1073 values 3 rows a block,
  // 49 values 83, one value 4096. {8, 3, 37, 29}, {9000, 2} and {200, 3, 7, 7} have several blocks
  // per channel, merged in order.)
  for (const hg::Shape& shape : std::vector<hg::Shape>{{8, 3, 37, 29}, {300, 2}, {9000, 2}, {5, 2, 257}, {3, 2, 9000},
                                                        {13, 3, 7, 7}, {200, 3, 7, 7}, {9, 2, 10, 12}}) {
    for (const bool far : {true, false}) {  // (near zero, a value left out would show)
      CAPTURE(shape);
      CAPTURE(far);
      const int64_t C = shape[1];
      const Tensor x = far ? normal(shape, 1e-2) + 1e4 : normal(shape, 1.0);
      std::vector<double> mean, var;
      ref::channel_stats(ref::of(x), mean, var);
      const double count = double(ref::numel(shape) / C);
      std::vector<std::vector<double>> runs;
      for (const int threads : {1, 2}) {
        const int before = hg::get_num_threads();
        hg::set_num_threads(threads);
        const Tensor running_mean = hg::zeros({C}, {.dtype = hg::f64}), running_var = hg::zeros({C}, {.dtype = hg::f64});
        hg::batch_norm(x, running_mean, running_var, {}, {}, true, 1.0, 1e-5);  // momentum 1: the batch's
        hg::set_num_threads(before);
        ref::Array expected_mean{{C}, mean}, expected_var{{C}, {}};
        for (int64_t c = 0; c < C; ++c) expected_var.v.push_back(var[size_t(c)] * count / (count - 1));
        CHECK_MATCHES_REF(running_mean, expected_mean, kF32);
        CHECK_MATCHES_REF(running_var, expected_var, kF32);
        runs.push_back(values(running_var));
      }
      CHECK(runs[0] == runs[1]);
    }
  }
}

// A shift taken from a channel's first values (as a one-pass design would take it) is far from
// the mean where those are outliers -- 50 above the rest of a channel that sits at 1e4 with noise
// of 1e-2: every other value's x - s would be about -50. The statistics must still match the f64
// reference within T(f32).
TEST_CASE("ops.scenario01.batch_norm_statistics_when_the_first_values_are_outliers") {
  hg::manual_seed(113);
  const int64_t N = 64, C = 2, S = 49;  // 7x7 maps: a channel is one block of 64 images' rows
  std::vector<float> v = (normal({N, C, S}, 1e-2) + 1e4).to_vector<float>();
  for (int64_t c = 0; c < C; ++c)
    for (int64_t i = 0; i < 16; ++i) v[size_t(c * S + i)] += 50.0f;
  const Tensor x = hg::from_vector(v, {N, C, S});
  std::vector<double> mean, var;
  ref::channel_stats(ref::of(x), mean, var);
  const double count = double(N * S);
  const Tensor running_mean = hg::zeros({C}, {.dtype = hg::f64}), running_var = hg::zeros({C}, {.dtype = hg::f64});
  hg::batch_norm(x, running_mean, running_var, {}, {}, true, 1.0, 1e-5);
  ref::Array expected_mean{{C}, mean}, expected_var{{C}, {}};
  for (int64_t c = 0; c < C; ++c) expected_var.v.push_back(var[size_t(c)] * count / (count - 1));
  CHECK_MATCHES_REF(running_mean, expected_mean, kF32);
  CHECK_MATCHES_REF(running_var, expected_var, kF32);
}

TEST_CASE("ops.scenario01.f64_norms_keep_f64_precision") {
  // An f64 model must not lose precision through f32 temporaries: outputs, running statistics
  // and weight gradients of f64 tensors are computed in double, so they agree with the
  // reference to ~1e-15. The tolerance is 1e-12, not T(f64): T(f64)'s rtol of 1e-7 would not
  // notice a round trip through f32 (2^-24 = 6e-8).
  const Tolerance kDouble{1e-12, 1e-12};
  hg::manual_seed(111);
  const hg::TensorOptions f64{.dtype = hg::f64};
  const Tensor x = hg::randn({4, 3}, f64) * 3.0 + 1.0;
  const Tensor w = hg::randn({3}, f64).requires_grad_(), b = hg::randn({3}, f64).requires_grad_();
  const Tensor running_mean = hg::randn({3}, f64), running_var = hg::rand({3}, f64) + 0.5;
  const std::vector<double> rm = values(running_mean), rv = values(running_var);
  std::vector<double> mean, var;
  ref::channel_stats(ref::of(x), mean, var);
  const Tensor y = hg::batch_norm(x, running_mean, running_var, w, b, true, 0.1, 1e-5);
  CHECK_MATCHES_REF(y, ref::batch_norm(ref::of(x), mean, var, values(w), values(b), 1e-5), kDouble);
  ref::Array expected_mean{{3}, {}}, expected_var{{3}, {}};
  for (size_t c = 0; c < 3; ++c) {
    expected_mean.v.push_back(0.9 * rm[c] + 0.1 * mean[c]);
    expected_var.v.push_back(0.9 * rv[c] + 0.1 * var[c] * 4.0 / 3.0);
  }
  CHECK_MATCHES_REF(running_mean, expected_mean, kDouble);
  CHECK_MATCHES_REF(running_var, expected_var, kDouble);
  hg::sum(y * y).backward();  // d/dw[c] = 2 * sum over the channel of y * xhat; d/db[c] = 2 * sum y
  const ref::Array xhat = ref::batch_norm(ref::of(x), mean, var, {}, {}, 1e-5);
  const ref::Array yr = ref::batch_norm(ref::of(x), mean, var, values(w), values(b), 1e-5);
  ref::Array expected_dw{{3}, {0, 0, 0}}, expected_db{{3}, {0, 0, 0}};
  for (size_t i = 0; i < 12; ++i) expected_dw.v[i % 3] += 2 * yr.v[i] * xhat.v[i], expected_db.v[i % 3] += 2 * yr.v[i];
  REQUIRE(w.grad().defined());
  REQUIRE(b.grad().defined());
  CHECK(w.grad().dtype() == hg::f64);
  CHECK_MATCHES_REF(w.grad(), expected_dw, kDouble);
  CHECK_MATCHES_REF(b.grad(), expected_db, kDouble);

  const Tensor lw = hg::randn({3}, f64).requires_grad_();
  const Tensor z = hg::layer_norm(x, {3}, lw, {}, 1e-5);
  CHECK_MATCHES_REF(z, ref::layer_norm(ref::of(x), 3, values(lw), {}, 1e-5), kDouble);
  hg::sum(z * z).backward();
  const ref::Array lx = ref::layer_norm(ref::of(x), 3, {}, {}, 1e-5);
  ref::Array expected_lw{{3}, {0, 0, 0}};
  for (size_t i = 0; i < 12; ++i) expected_lw.v[i % 3] += 2 * lx.v[i] * lx.v[i] * values(lw)[i % 3];
  REQUIRE(lw.grad().defined());
  CHECK_MATCHES_REF(lw.grad(), expected_lw, kDouble);
}

// cat of two parts gives each back through narrow, and cat of mixed dtypes promotes like the
// binary ops. (cat's and embedding's values are op_db's.)
TEST_CASE("ops.scenario01.cat_promotes_mixed_dtypes_and_narrow_takes_a_part_back") {
  hg::manual_seed(113);
  const Tensor a = normal({2, 3}), b = normal({2, 1});
  const Tensor stacked = hg::cat({a, a * 2.0}, 0);
  CHECK(stacked.shape() == hg::Shape{4, 3});
  CHECK(values(hg::narrow(stacked, 0, 2, 2)) == values(a * 2.0));
  CHECK(hg::cat({a.to(hg::f16), b.to(hg::f32)}, 1).dtype() == hg::f32);
}

// dropout's mask comes from the generator: the same under the same manual_seed, different on the
// next call; p outside [0, 1] is an error. (That each element is dropped or scaled by 1/(1-p), as
// often as p says, and that eval and p = 0 are the identity and p = 1 drops everything, is
// op_db.dropout_keeps_or_scales.)
TEST_CASE("ops.scenario01.dropout_masks_follow_the_seed") {
  hg::manual_seed(114);
  const Tensor x = positive({100, 100}, 1.0, 1.0);  // no element is 0 by itself
  const double p = 0.3;
  hg::manual_seed(7);
  const std::vector<double> first = values(hg::dropout(x, p, true));
  hg::manual_seed(7);
  CHECK(values(hg::dropout(x, p, true)) == first);
  CHECK(values(hg::dropout(x, p, true)) != first);
  CHECK_THROWS_HG(hg::dropout(x, 1.5, true), "dropout: probability must be in [0, 1]");
}

// ---- scenario 3: f16 / bf16 against the f32 result ------------------------------------------------

namespace {

using MultiOp = std::function<Tensor(const std::vector<Tensor>&)>;

// Runs op on the inputs rounded to `dtype`, and on the same rounded values in f32 and f64;
// checks the output, and with `backward` the gradient of every floating input (upstream
// gradient: one random tensor, rounded to `dtype` as well).
void check_low_precision_op(const char* name, const MultiOp& op, const std::vector<Tensor>& inputs, hg::DType dtype,
                            bool backward) {
  const std::string op_name = name, dtype_name(hg::dtype_name(dtype));
  CAPTURE(op_name);
  CAPTURE(dtype_name);
  std::vector<Tensor> low, as32, as64;
  for (const Tensor& t : inputs) {
    if (!t.defined() || !hg::is_floating(t.dtype())) {
      low.push_back(t), as32.push_back(t), as64.push_back(t);
      continue;
    }
    const Tensor rounded = t.to(dtype);
    low.push_back(rounded.detach().requires_grad_(backward));
    as32.push_back(rounded.to(hg::f32).detach().requires_grad_(backward));
    as64.push_back(rounded.to(hg::f64).detach().requires_grad_(backward));
  }
  const Tensor y = op(low), y32 = op(as32), y64 = op(as64);
  CHECK(y.dtype() == dtype);
  CHECK_LOW_PRECISION(y, y32, y64);
  if (!backward) return;
  const Tensor g = hg::randn(y.shape()).to(dtype);
  y.backward(g);
  y32.backward(g.to(hg::f32));
  y64.backward(g.to(hg::f64));
  for (size_t i = 0; i < low.size(); ++i) {
    if (!low[i].defined() || !low[i].requires_grad()) continue;
    CAPTURE(i);
    REQUIRE(low[i].grad().defined());
    CHECK(low[i].grad().dtype() == dtype);
    CHECK_LOW_PRECISION(low[i].grad(), as32[i].grad(), as64[i].grad());
  }
}

}  // namespace

// The operators with a scalar (op_db.f16_and_bf16_match_f32 checks the ops themselves): `3 / x`,
// mul(pow(x, -1), 3), rounds twice, so only its output is held to the rule.
TEST_CASE("ops.scenario03.scalar_operators_f16_and_bf16_match_f32") {
  hg::manual_seed(301);
  const Tensor x = normal({5, 67}, 2.0), p = positive({5, 67}, 0.1, 4.0);
  using V = std::vector<Tensor>;
  struct Case {
    const char* name;
    MultiOp op;
    V inputs;
    bool backward;  // the gradient is also one rounding of an f32 computation from the inputs
  };
  const Case cases[] = {
      {"x * -3", [](const V& v) { return v[0] * -3.0; }, {x}, true},
      {"x + 2.5", [](const V& v) { return v[0] + 2.5; }, {x}, true},
      {"x / 3", [](const V& v) { return v[0] / 3.0; }, {x}, true},
      {"3 / x", [](const V& v) { return 3.0 / v[0]; }, {p}, false},
  };
  for (hg::DType dtype : {hg::f16, hg::bf16})
    for (const Case& c : cases) check_low_precision_op(c.name, c.op, c.inputs, dtype, c.backward);
}
