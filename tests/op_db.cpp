// The entries of the per-op test database (op_db.h), one per fixture op name, grouped by golden
// fixture family, each with the samples (shapes, broadcasts, arguments) its op is run on. Each
// entry's reference is written on ref::Arrays from ops_test_helpers.h, so a kernel bug cannot
// also be in its oracle.
#include "op_db.h"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <utility>

#include "nn/attention.h"
#include "ops/activation.h"
#include "ops/attention.h"
#include "ops/conv.h"
#include "ops/dropout.h"
#include "ops/elementwise.h"
#include "ops/embedding.h"
#include "ops/indexing.h"
#include "ops/interpolate.h"
#include "ops/linalg.h"
#include "ops/loss.h"
#include "ops/masking.h"
#include "ops/math.h"
#include "ops/norm.h"
#include "ops/pool.h"
#include "ops/reduce.h"
#include "ops/shape.h"
#include "ops/sort.h"
#include "ops/statistics.h"
#include "ops/softmax.h"

namespace hg_test {

// ---- reading an op's arguments -----------------------------------------------------------------

const Args& arg(const Args& args, std::string_view key, Args::Kind kind) {
  const Args* v = args.find(key);
  HG_CHECK(v != nullptr && v->kind == kind, "op args: argument \"", key, "\" missing or mistyped");
  return *v;
}
double number(const Args& args, std::string_view key) { return std::stod(arg(args, key, Args::Kind::Number).text); }
int64_t integer(const Args& args, std::string_view key) { return std::stoll(arg(args, key, Args::Kind::Number).text); }
int64_t integer(const Args& args, std::string_view key, int64_t absent) {
  return args.find(key) == nullptr ? absent : integer(args, key);
}
bool flag(const Args& args, std::string_view key) { return arg(args, key, Args::Kind::Bool).boolean; }
hg::Shape integers(const Args& args, std::string_view key) {
  hg::Shape out;
  for (const Args& v : arg(args, key, Args::Kind::Array).items) out.push_back(std::stoll(v.text));
  return out;
}

namespace {

using hg::Tensor;
using hg::amp::Op;
using Arrays = std::vector<ref::Array>;
using A = const Args&;
using I = const Inputs&;

// ---- calls with optional inputs ----------------------------------------------------------------

// Inputs are [x, (running_mean, running_var)?, (weight, bias)?], as the "stats"/"affine" flags say.
Tensor call_batch_norm(I in, A a) {
  const bool stats = flag(a, "stats"), affine = flag(a, "affine");
  const Tensor mean = stats ? in[1] : Tensor(), var = stats ? in[2] : Tensor();
  const Tensor weight = affine ? in[in.size() - 2] : Tensor(), bias = affine ? in[in.size() - 1] : Tensor();
  return hg::batch_norm(in[0], mean, var, weight, bias, flag(a, "training"), number(a, "momentum"), number(a, "eps"));
}

Tensor call_layer_norm(I in, A a) {
  const bool affine = flag(a, "affine");
  return hg::layer_norm(in[0], integers(a, "normalized_shape"), affine ? in[1] : Tensor(), affine ? in[2] : Tensor(),
                        number(a, "eps"));
}

// Without "dims" the reduction is over every element.
Tensor call_reduction(Tensor (*all)(const Tensor&), Tensor (*dims)(const Tensor&, hg::Shape, bool), I in, A a) {
  return a.find("dims") ? dims(in[0], integers(a, "dims"), flag(a, "keepdim")) : all(in[0]);
}

Tensor optional_input(I in, size_t i) { return in.size() > i ? in[i] : Tensor(); }

// ---- naive references the ref namespace lacks ----------------------------------------------------

std::vector<int64_t> as_indices(const ref::Array& a) { return {a.v.begin(), a.v.end()}; }
std::vector<double> optional_values(const Arrays& x, size_t i) { return x.size() > i ? x[i].v : std::vector<double>{}; }

ref::Array argmax(const ref::Array& a, int64_t dim) {
  int64_t outer, D, inner;
  ref::lines(a.shape, dim, outer, D, inner);
  ref::Array out = ref::amax(a, dim, false);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      int64_t best = 0;  // the first maximum, as PyTorch; a NaN is larger than anything (the first wins)
      for (int64_t d = 1; d < D && !std::isnan(a.v[size_t((o * D + best) * inner + i)]); ++d) {
        const double v = a.v[size_t((o * D + d) * inner + i)];
        if (std::isnan(v) || v > a.v[size_t((o * D + best) * inner + i)]) best = d;
      }
      out.v[size_t(o * inner + i)] = double(best);
    }
  return out;
}

ref::Array embedding(const ref::Array& indices, const ref::Array& weight) {
  const int64_t dim = weight.shape[1];
  ref::Array out{indices.shape, {}};
  out.shape.push_back(dim);
  for (int64_t row : as_indices(indices))
    for (int64_t k = 0; k < dim; ++k) out.v.push_back(weight.v[size_t(row * dim + k)]);
  return out;
}

ref::Array cat(const Arrays& parts, int64_t dim) {
  ref::Array out{parts[0].shape, {}};
  const int d = int((dim + out.shape.ndim()) % out.shape.ndim());
  out.shape[d] = 0;
  for (const ref::Array& p : parts) out.shape[d] += p.shape[d];
  int64_t outer, D, inner;
  ref::lines(out.shape, d, outer, D, inner);
  for (int64_t o = 0; o < outer; ++o)
    for (const ref::Array& p : parts) {
      const int64_t block = p.shape[d] * inner;  // this part's slice of one outer row
      out.v.insert(out.v.end(), p.v.begin() + o * block, p.v.begin() + (o + 1) * block);
    }
  return out;
}

// Training normalises with the batch's own (biased) statistics: the output does not read the
// running ones. Eval normalises with the running statistics (inputs 1 and 2).
ref::Array batch_norm(const Arrays& x, A a) {
  std::vector<double> mean, var;
  if (flag(a, "training")) {
    ref::channel_stats(x[0], mean, var);
  } else {
    HG_CHECK(flag(a, "stats"), "op_db: batch_norm in eval needs running statistics");
    mean = x[1].v, var = x[2].v;
  }
  const bool affine = flag(a, "affine");
  const std::vector<double> weight = affine ? x[x.size() - 2].v : std::vector<double>{};
  const std::vector<double> bias = affine ? x[x.size() - 1].v : std::vector<double>{};
  return ref::batch_norm(x[0], mean, var, weight, bias, number(a, "eps"));
}

ref::Array layer_norm(const Arrays& x, A a) {
  return ref::layer_norm(x[0], ref::numel(integers(a, "normalized_shape")), optional_values(x, 1),
                         optional_values(x, 2), number(a, "eps"));
}

// ---- writing samples ---------------------------------------------------------------------------

const hg::Shape kSmall{3, 4};

std::string json_list(const std::vector<int64_t>& values) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < values.size(); ++i) os << (i ? ", " : "") << values[i];
  os << "]";
  return os.str();
}

void append(std::vector<SampleSpec>& to, const std::vector<SampleSpec>& more) {
  to.insert(to.end(), more.begin(), more.end());
}

// The elementwise shapes: 0-d, one element, odd and prime sizes, a 256-element chunk boundary
// crossed, and one above the 32768-element grain where work is split across threads.
const std::vector<hg::Shape> kElementwiseShapes = {{},    {1},   {7},        {3, 5}, {13, 17},
                                                   {33},  {257}, {2, 3, 31}, {1031}, {40009}};

// One input of each elementwise shape, with `args`: N(0, 9), far into the saturating tails, or for
// ops defined on positive values uniform in [0.05, 4.05), close to 0 and well past 1.
std::vector<SampleSpec> on_every_shape(Values values, const std::string& args = "") {
  std::vector<SampleSpec> out;
  for (const hg::Shape& shape : kElementwiseShapes) {
    const InputSpec normal{.shape = shape, .stddev = 3};
    const InputSpec positive{.shape = shape, .values = Values::Positive, .low = 0.05, .high = 4.05};
    out.push_back({.inputs = {values == Values::Positive ? positive : normal}, .args = args});
  }
  return out;
}

// ---- the elementwise ops -----------------------------------------------------------------------

// An elementwise op of one input whose reference is f(x, args) element by element, on a small
// input and on every elementwise shape.
OpEntry unary(Op op, std::string name, OpCall call, std::function<double(double, A)> f, std::string family,
              std::string args = "{}", Values values = Values::Normal) {
  Reference reference = [f](const Arrays& x, A a) { return ref::map(x[0], [&](double v) { return f(v, a); }); };
  return {.op = op, .name = std::move(name), .call = std::move(call), .default_args = std::move(args),
          .inputs = {{kSmall, values}}, .reference = std::move(reference), .f32_tolerance = kF32,
          .golden_family = std::move(family), .more_samples = on_every_shape(values)};
}

// `x <op> scalar`, the fixtures' "<op>_scalar" cases.
OpEntry scalar_form(Op op, std::string name, Tensor (*call)(const Tensor&, double), double (*f)(double, double)) {
  return unary(
      op, std::move(name), [call](I in, A a) { return call(in[0], number(a, "scalar")); },
      [f](double x, A a) { return f(x, number(a, "scalar")); }, "elementwise", R"({"scalar": -2.5})");
}

// Operand shapes that broadcast every way: 0-d against 0-d and against a tensor, size-1 dims on
// either side, a missing leading dim, equal shapes, and the chunk and thread-grain sizes.
const std::pair<hg::Shape, hg::Shape> kBroadcastPairs[] = {
    {{}, {}},           {{1}, {7}},           {{3, 5}, {3, 5}},   {{3, 1, 4}, {5, 4}}, {{257}, {}},
    {{13, 1}, {1, 17}}, {{2, 3, 31}, {3, 1}}, {{1031}, {1031}}, {{40009}, {1}},      {{}, {2, 3, 31}},
};

// The shape `a <op> b` broadcasts to.
hg::Shape broadcast_shape(const hg::Shape& a, const hg::Shape& b) {
  const size_t n = std::max(a.size(), b.size());
  hg::Shape out(n, 1);
  for (size_t d = 0; d < n; ++d) {
    const int64_t da = d < n - a.size() ? 1 : a[d - (n - a.size())], db = d < n - b.size() ? 1 : b[d - (n - b.size())];
    out[d] = da == 1 ? db : da;
  }
  return out;
}

// `a <op> b`, the second operand N(0, std^2) or, as a denominator, positive in [low, high); an
// operand smaller than the result is broadcast.
std::vector<InputSpec> operands(const hg::Shape& a, const hg::Shape& b, Values second, double stddev, double low,
                                double high) {
  const hg::Shape out = broadcast_shape(a, b);
  const InputSpec first{.shape = a, .stddev = stddev, .broadcast = a != out};
  const InputSpec normal{.shape = b, .stddev = stddev, .broadcast = b != out};
  const InputSpec positive{.shape = b, .values = Values::Positive, .low = low, .high = high, .broadcast = b != out};
  return {first, second == Values::Positive ? positive : normal};
}

// `a <op> b` with broadcasting: (3, 1, 4) against (5, 4) -> (3, 5, 4), and each of kBroadcastPairs
// both ways round (the operand order matters to sub and div), N(0, 4) against N(0, 4) or, for a
// denominator, uniform in [0.5, 4.5).
OpEntry binary(Op op, std::string name, Tensor (*call)(const Tensor&, const Tensor&), double (*f)(double, double),
               Values second = Values::Normal) {
  std::vector<SampleSpec> samples;
  for (const auto& shapes : kBroadcastPairs)
    for (bool swapped : {false, true}) {
      if (swapped && shapes.first == shapes.second) continue;
      const hg::Shape& a = swapped ? shapes.second : shapes.first;
      const hg::Shape& b = swapped ? shapes.first : shapes.second;
      samples.push_back({.inputs = operands(a, b, second, 2, 0.5, 4.5)});
    }
  return {.op = op, .name = std::move(name), .call = [call](I in, A) { return call(in[0], in[1]); },
          .default_args = "{}", .inputs = operands({3, 1, 4}, {5, 4}, second, 1, 0.5, 1.5),
          .reference = [f](const Arrays& x, A) { return ref::zip(x[0], x[1], f); }, .f32_tolerance = kF32,
          .golden_family = "elementwise", .more_samples = std::move(samples)};
}

Tensor add(const Tensor& a, const Tensor& b) { return hg::add(a, b); }
Tensor sub(const Tensor& a, const Tensor& b) { return hg::sub(a, b); }
Tensor mul(const Tensor& a, const Tensor& b) { return hg::mul(a, b); }
Tensor div(const Tensor& a, const Tensor& b) { return hg::div(a, b); }
Tensor add_scalar(const Tensor& a, double s) { return hg::add(a, s); }
Tensor sub_scalar(const Tensor& a, double s) { return hg::sub(a, s); }
Tensor mul_scalar(const Tensor& a, double s) { return hg::mul(a, s); }
Tensor div_scalar(const Tensor& a, double s) { return hg::div(a, s); }
double plus(double a, double b) { return a + b; }
double minus(double a, double b) { return a - b; }
double times(double a, double b) { return a * b; }
double divided(double a, double b) { return a / b; }

std::vector<OpEntry> elementwise_entries() {
  OpEntry pow = unary(
      Op::Pow, "pow", [](I in, A a) { return hg::pow(in[0], number(a, "exponent")); },
      [](double x, A a) { return std::pow(x, number(a, "exponent")); }, "elementwise", R"({"exponent": 1.5})",
      Values::Positive);
  for (const char* integral : {R"({"exponent": 2})", R"({"exponent": 3})", R"({"exponent": 1})"})
    append(pow.more_samples, on_every_shape(Values::Normal, integral));  // negative bases too
  for (const char* fractional : {R"({"exponent": 0.5})", R"({"exponent": -0.5})", R"({"exponent": -1.5})"})
    append(pow.more_samples, on_every_shape(Values::Positive, fractional));

  OpEntry clamp = unary(
      Op::Clamp, "clamp", [](I in, A a) { return hg::clamp(in[0], number(a, "min"), number(a, "max")); },
      [](double x, A a) { return std::min(std::max(x, number(a, "min")), number(a, "max")); }, "elementwise",
      R"({"min": -0.5, "max": 0.8})");
  for (const char* bounds :
       {R"({"min": -0.5, "max": 0.5})", R"({"min": -10, "max": 0.25})", R"({"min": -1, "max": 1.5})"})
    append(clamp.more_samples, on_every_shape(Values::Normal, bounds));

  return {
      binary(Op::Add, "add", add, plus),
      binary(Op::Sub, "sub", sub, minus),
      binary(Op::Mul, "mul", mul, times),
      binary(Op::Div, "div", div, divided, Values::Positive),
      scalar_form(Op::Add, "add_scalar", add_scalar, plus),
      scalar_form(Op::Sub, "sub_scalar", sub_scalar, minus),
      scalar_form(Op::Mul, "mul_scalar", mul_scalar, times),
      scalar_form(Op::Div, "div_scalar", div_scalar, divided),
      unary(Op::Neg, "neg", [](I in, A) { return hg::neg(in[0]); }, [](double x, A) { return -x; }, "elementwise"),
      unary(Op::Exp, "exp", [](I in, A) { return hg::exp(in[0]); }, [](double x, A) { return std::exp(x); },
            "elementwise"),
      unary(Op::Log, "log", [](I in, A) { return hg::log(in[0]); }, [](double x, A) { return std::log(x); },
            "elementwise", "{}", Values::Positive),
      unary(Op::Sqrt, "sqrt", [](I in, A) { return hg::sqrt(in[0]); }, [](double x, A) { return std::sqrt(x); },
            "elementwise", "{}", Values::Positive),
      unary(Op::Abs, "abs", [](I in, A) { return hg::abs(in[0]); }, [](double x, A) { return std::fabs(x); },
            "elementwise"),
      pow,
      clamp,
  };
}

// ops/math.h: the functions beyond arithmetic, with their f64 formulas as references.
double nearest_even(double x) { return std::nearbyint(x); }

std::vector<OpEntry> math_entries() {
  auto f = [](double (*fn)(double)) { return [fn](double x, A) { return fn(x); }; };
  // NaN in either operand wins (PyTorch's maximum/minimum).
  const auto max_of = [](double a, double b) { return std::isnan(a) || std::isnan(b) ? a + b : a > b ? a : b; };
  const auto min_of = [](double a, double b) { return std::isnan(a) || std::isnan(b) ? a + b : a < b ? a : b; };
  // pow with a tensor exponent: positive bases (a negative base has no real power), exponents
  // N(0, 1); broadcast either way.
  OpEntry pow_tensor{
      .op = Op::Pow, .name = "pow_tensor", .call = [](I in, A) { return hg::pow(in[0], in[1]); }, .default_args = "{}",
      .inputs = {{.shape = {3, 1, 4}, .values = Values::Positive, .broadcast = true}, {.shape = {5, 4}, .broadcast = true}},
      .reference = [](const Arrays& x, A) { return ref::zip(x[0], x[1], [](double a, double b) { return std::pow(a, b); }); },
      .f32_tolerance = kF32, .golden_family = "elementwise",
      .more_samples = {{.inputs = {{.shape = {7}, .values = Values::Positive}, {.shape = {7}}}},
                       {.inputs = {{.shape = {2, 3}, .values = Values::Positive, .low = 0.2, .high = 3},
                                   {.shape = {}, .broadcast = true}}}}};
  // clamp with tensor bounds: lo around -0.5, hi around 0.5, broadcast; one sample with lo > hi.
  OpEntry clamp_tensor{
      .op = Op::Clamp, .name = "clamp_tensor", .call = [](I in, A) { return hg::clamp(in[0], in[1], in[2]); },
      .default_args = "{}",
      .inputs = {{.shape = {3, 4}}, {.shape = {4}, .mean = -0.5, .stddev = 0.3, .broadcast = true},
                 {.shape = {3, 1}, .mean = 0.5, .stddev = 0.3, .broadcast = true}},
      .reference =
          [](const Arrays& x, A) {
            const ref::Array low = ref::zip(x[0], x[1], [](double v, double lo) { return v < lo ? lo : v; });
            return ref::zip(low, x[2], [](double v, double hi) { return v > hi ? hi : v; });
          },
      .f32_tolerance = kF32, .golden_family = "elementwise",
      .more_samples = {{.inputs = {{.shape = {2, 5}}, {.shape = {2, 5}, .mean = -0.3}, {.shape = {2, 5}, .mean = 0.3}}},
                       {.inputs = {{.shape = {6}}, {.shape = {}, .mean = 1, .stddev = 0.1, .broadcast = true},
                                   {.shape = {}, .mean = -1, .stddev = 0.1, .broadcast = true}}}}};
  return {
      unary(Op::Reciprocal, "reciprocal", [](I in, A) { return hg::reciprocal(in[0]); },
            [](double x, A) { return 1 / x; }, "elementwise", "{}", Values::Positive),
      unary(Op::Rsqrt, "rsqrt", [](I in, A) { return hg::rsqrt(in[0]); }, [](double x, A) { return 1 / std::sqrt(x); },
            "elementwise", "{}", Values::Positive),
      unary(Op::Log1p, "log1p", [](I in, A) { return hg::log1p(in[0]); }, f(std::log1p), "elementwise", "{}",
            Values::Positive),
      unary(Op::Expm1, "expm1", [](I in, A) { return hg::expm1(in[0]); }, f(std::expm1), "elementwise"),
      unary(Op::Erf, "erf", [](I in, A) { return hg::erf(in[0]); }, f(std::erf), "elementwise"),
      unary(Op::Sin, "sin", [](I in, A) { return hg::sin(in[0]); }, f(std::sin), "elementwise"),
      unary(Op::Cos, "cos", [](I in, A) { return hg::cos(in[0]); }, f(std::cos), "elementwise"),
      unary(Op::Sign, "sign", [](I in, A) { return hg::sign(in[0]); },
            [](double x, A) { return double((x > 0) - (x < 0)); }, "elementwise"),
      unary(Op::Floor, "floor", [](I in, A) { return hg::floor(in[0]); }, f(std::floor), "elementwise"),
      unary(Op::Ceil, "ceil", [](I in, A) { return hg::ceil(in[0]); }, f(std::ceil), "elementwise"),
      unary(Op::Round, "round", [](I in, A) { return hg::round(in[0]); }, f(nearest_even), "elementwise"),
      binary(Op::Maximum, "maximum", hg::maximum, +max_of),
      binary(Op::Minimum, "minimum", hg::minimum, +min_of),
      pow_tensor,
      clamp_tensor,
  };
}

// Gradients that op_db.f16_and_bf16_match_f32 cannot hold to one rounding of f32's.
const char* const kFromSaved16BitOutput =
    "it differentiates from its saved 16-bit output: near saturation 1 - y (or g - sum(g * y)) cancels and "
    "amplifies that rounding far beyond T(f16) (PyTorch loosens these per op)";

std::vector<OpEntry> activation_entries() {
  // Without "negative_slope" the call takes the default, PyTorch's 0.01.
  OpEntry leaky_relu = unary(
      Op::LeakyRelu, "leaky_relu",
      [](I in, A a) {
        return a.find("negative_slope") ? hg::leaky_relu(in[0], number(a, "negative_slope")) : hg::leaky_relu(in[0]);
      },
      [](double x, A a) { return x >= 0 ? x : (a.find("negative_slope") ? number(a, "negative_slope") : 0.01) * x; },
      "activation", R"({"negative_slope": 0.2})");
  append(leaky_relu.more_samples, on_every_shape(Values::Normal, "{}"));
  // Both branches: beta x around the threshold (20 by default, 2 in the samples), beta != 1.
  OpEntry softplus = unary(
      Op::Softplus, "softplus",
      [](I in, A a) { return hg::softplus(in[0], number(a, "beta"), number(a, "threshold")); },
      [](double x, A a) {
        const double beta = number(a, "beta"), bx = beta * x;
        return bx > number(a, "threshold") ? x : std::log1p(std::exp(bx)) / beta;
      },
      "activation", R"({"beta": 1, "threshold": 20})");
  softplus.more_samples.push_back({.inputs = {{.shape = {4, 9}, .stddev = 3}}, .args = R"({"beta": 2, "threshold": 2})"});
  softplus.more_samples.push_back({.inputs = {{.shape = {7}}}, .args = R"({"beta": 0.5, "threshold": 20})"});
  OpEntry sigmoid = unary(Op::Sigmoid, "sigmoid", [](I in, A) { return hg::sigmoid(in[0]); },
                          [](double x, A) { return ref::sigmoid(x); }, "activation");
  OpEntry tanh = unary(Op::Tanh, "tanh", [](I in, A) { return hg::tanh(in[0]); },
                       [](double x, A) { return std::tanh(x); }, "activation");
  sigmoid.no_16_bit_backward_because = tanh.no_16_bit_backward_because = kFromSaved16BitOutput;
  // Without "approximate" the call is gelu(x); with it, gelu(x, {.approximate}).
  OpEntry gelu = unary(
      Op::Gelu, "gelu",
      [](I in, A a) {
        const Args* approximate = a.find("approximate");
        return approximate ? hg::gelu(in[0], {.approximate = approximate->text}) : hg::gelu(in[0]);
      },
      [](double x, A a) {
        const Args* approximate = a.find("approximate");
        if (approximate == nullptr || approximate->text == "none") return ref::gelu(x);
        return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
      },
      "activation");
  append(gelu.more_samples, on_every_shape(Values::Normal, R"({"approximate": "tanh"})"));
  append(gelu.more_samples, on_every_shape(Values::Normal, R"({"approximate": "none"})"));

  // The piecewise ones: N(0, 16) samples reach every branch (relu6's 6, hardswish's +-3).
  const auto wide = [](OpEntry entry, std::vector<std::string> more_args = {}) {
    more_args.insert(more_args.begin(), entry.default_args);
    for (const std::string& args : more_args) {
      entry.more_samples.push_back({.inputs = {{.shape = {5, 9}, .stddev = 4}}, .args = args});
      entry.more_samples.push_back({.inputs = {{.shape = {67}, .stddev = 4}}, .args = args});
    }
    return entry;
  };
  const double selu_alpha = 1.6732632423543772848170429916717, selu_scale = 1.0507009873554804934193349852946;
  std::vector<OpEntry> vision = {
      wide(unary(Op::Relu6, "relu6", [](I in, A) { return hg::relu6(in[0]); },
                 [](double x, A) { return std::min(std::max(x, 0.0), 6.0); }, "activation")),
      wide(unary(Op::Hardtanh, "hardtanh",
                 [](I in, A a) { return hg::hardtanh(in[0], number(a, "min_val"), number(a, "max_val")); },
                 [](double x, A a) { return std::min(std::max(x, number(a, "min_val")), number(a, "max_val")); },
                 "activation", R"({"min_val": -1, "max_val": 1})"),
           {R"({"min_val": -2, "max_val": 0.5})"}),
      wide(unary(Op::Hardsigmoid, "hardsigmoid", [](I in, A) { return hg::hardsigmoid(in[0]); },
                 [](double x, A) { return std::min(std::max(x + 3, 0.0), 6.0) / 6; }, "activation")),
      wide(unary(Op::Hardswish, "hardswish", [](I in, A) { return hg::hardswish(in[0]); },
                 [](double x, A) { return x * std::min(std::max(x + 3, 0.0), 6.0) / 6; }, "activation")),
      wide(unary(Op::Elu, "elu", [](I in, A a) { return hg::elu(in[0], number(a, "alpha")); },
                 [](double x, A a) { return x > 0 ? x : number(a, "alpha") * std::expm1(x); }, "activation",
                 R"({"alpha": 1})"),
           {R"({"alpha": 0.3})"}),
      wide(unary(Op::Selu, "selu", [](I in, A) { return hg::selu(in[0]); },
                 [=](double x, A) { return selu_scale * (x > 0 ? x : selu_alpha * std::expm1(x)); }, "activation")),
      wide(unary(Op::Celu, "celu", [](I in, A a) { return hg::celu(in[0], number(a, "alpha")); },
                 [](double x, A a) {
                   const double alpha = number(a, "alpha");
                   return x > 0 ? x : alpha * std::expm1(x / alpha);
                 },
                 "activation", R"({"alpha": 1})"),
           {R"({"alpha": 2.5})"}),
      wide(unary(Op::Mish, "mish", [](I in, A) { return hg::mish(in[0]); },
                 [](double x, A) { return x * std::tanh(std::log1p(std::exp(x))); }, "activation")),
      wide(unary(Op::Softsign, "softsign", [](I in, A) { return hg::softsign(in[0]); },
                 [](double x, A) { return x / (1 + std::fabs(x)); }, "activation")),
      wide(unary(Op::LogSigmoid, "logsigmoid", [](I in, A) { return hg::logsigmoid(in[0]); },
                 [](double x, A) { return std::log(ref::sigmoid(x)); }, "activation")),
  };
  std::vector<OpEntry> entries = {
      unary(Op::Relu, "relu", [](I in, A) { return hg::relu(in[0]); }, [](double x, A) { return std::max(x, 0.0); },
            "activation"),
      leaky_relu,
      gelu,
      unary(Op::Silu, "silu", [](I in, A) { return hg::silu(in[0]); },
            [](double x, A) { return x * ref::sigmoid(x); }, "activation"),
      sigmoid,
      tanh,
      softplus,
  };
  entries.insert(entries.end(), vision.begin(), vision.end());
  return entries;
}

// ---- reductions --------------------------------------------------------------------------------

// sum or mean in the reference: over "dims" (with "keepdim") or, without them, over every element.
ref::Array reduce_like(ref::Array (*f)(const ref::Array&, std::vector<int64_t>, bool), const ref::Array& x, A a) {
  return a.find("dims") ? f(x, integers(a, "dims"), flag(a, "keepdim")) : f(x, ref::all_dims(x), false);
}

// From 0-d to long rows: sum and mean accumulate in double, so they stay within T(f32) of the
// exact result even over 40009 elements.
const std::vector<hg::Shape> kReductionShapes = {{}, {1}, {7}, {3, 5}, {13, 17}, {2, 3, 31}, {257}, {5, 1031}, {40009}};

// sum or mean of every reduction shape: over all elements, and over {0}, {-1}, {0, 1}, the
// non-adjacent {0, 2} and the middle {1} and {-2}, as far as the shape has the dims, with and
// without keepdim.
std::vector<SampleSpec> sum_or_mean_samples() {
  std::vector<SampleSpec> out;
  for (const hg::Shape& shape : kReductionShapes) {
    out.push_back({.inputs = {{shape}}, .args = "{}"});
    std::vector<std::vector<int64_t>> dim_sets = {{0}, {-1}};
    if (shape.ndim() >= 2) dim_sets.push_back({0, 1});
    if (shape.ndim() == 3) dim_sets.insert(dim_sets.end(), {{0, 2}, {1}, {-2}});
    for (const std::vector<int64_t>& dims : dim_sets)
      for (const char* keepdim : {"false", "true"})
        out.push_back({.inputs = {{shape}},
                       .args = R"({"dims": )" + json_list(dims) + R"(, "keepdim": )" + keepdim + "}"});
  }
  return out;
}

// amax over every dim of every reduction shape (a 0-d tensor has dims 0 and -1), with and without
// keepdim (the 0-d samples without keepdim found a backward that returned a [1] gradient).
std::vector<SampleSpec> amax_samples() {
  std::vector<SampleSpec> out;
  for (const hg::Shape& shape : kReductionShapes) {
    const int nd = std::max(shape.ndim(), 1);
    for (int dim = -nd; dim < nd; ++dim)
      for (const char* keepdim : {"false", "true"})
        out.push_back({.inputs = {{shape}},
                       .args = R"({"dim": )" + std::to_string(dim) + R"(, "keepdim": )" + keepdim + "}"});
  }
  return out;
}

std::vector<OpEntry> reduction_entries() {
  // Ties: argmax gives the first maximal index, x = [[1, 5, 5], [2, 7, 0], [7, 7, -1]].
  const InputSpec ties{.shape = {3, 3}, .given = {1, 5, 5, 2, 7, 0, 7, 7, -1}, .differentiable = false};
  return {
      {.op = Op::Sum, .name = "sum", .call = [](I in, A a) { return call_reduction(hg::sum, hg::sum, in, a); },
       .default_args = R"({"dims": [0, 2], "keepdim": false})", .inputs = {{{2, 3, 4}}},
       .reference = [](const Arrays& x, A a) { return reduce_like(ref::sum, x[0], a); },
       .f32_tolerance = kF32, .golden_family = "reduce", .more_samples = sum_or_mean_samples()},
      {.op = Op::Mean, .name = "mean", .call = [](I in, A a) { return call_reduction(hg::mean, hg::mean, in, a); },
       .default_args = R"({"dims": [-1], "keepdim": true})", .inputs = {{{2, 3, 4}}},
       .reference = [](const Arrays& x, A a) { return reduce_like(ref::mean, x[0], a); },
       .f32_tolerance = kF32, .golden_family = "reduce", .more_samples = sum_or_mean_samples()},
      // NOTE: random inputs have no ties, so amax's gradient (to the one maximum) is well defined.
      // A maximum is one of its inputs: exact.
      {.op = Op::Amax, .name = "amax",
       .call = [](I in, A a) { return hg::amax(in[0], int(integer(a, "dim")), flag(a, "keepdim")); },
       .default_args = R"({"dim": 1, "keepdim": false})", .inputs = {{{3, 4, 2}}},
       .reference = [](const Arrays& x, A a) { return ref::amax(x[0], integer(a, "dim"), flag(a, "keepdim")); },
       .f32_tolerance = kExact, .golden_family = "reduce", .more_samples = amax_samples()},
      {.op = Op::Argmax, .name = "argmax", .call = [](I in, A a) { return hg::argmax(in[0], int(integer(a, "dim"))); },
       .default_args = R"({"dim": 1})", .inputs = {{.shape = {3, 5}, .differentiable = false}},
       .reference = [](const Arrays& x, A a) { return argmax(x[0], integer(a, "dim")); }, .f32_tolerance = kExact,
       .golden_family = "reduce",
       .more_samples = {{.inputs = {ties}, .args = R"({"dim": 1})"}, {.inputs = {ties}, .args = R"({"dim": 0})"}}},
  };
}

// ---- sorting and the composed reductions (ops/sort.h, ops/statistics.h) ------------------------

// f applied to each line of x along dim (a vector of D values -> m values): the result has m
// along dim.
ref::Array along(const ref::Array& x, int64_t dim, const std::function<std::vector<double>(std::vector<double>)>& f) {
  const int64_t d = dim < 0 ? dim + int64_t(x.shape.size()) : dim;
  int64_t outer, D, inner;
  ref::lines(x.shape, d, outer, D, inner);
  ref::Array out{x.shape, {}};
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      std::vector<double> line(static_cast<size_t>(D));
      for (int64_t k = 0; k < D; ++k) line[size_t(k)] = x.v[size_t((o * D + k) * inner + i)];
      const std::vector<double> result = f(line);
      const int64_t m = int64_t(result.size());
      if (out.v.empty()) {
        out.shape[size_t(d)] = m;
        out.v.resize(size_t(outer * m * inner));
      }
      for (int64_t k = 0; k < m; ++k) out.v[size_t((o * m + k) * inner + i)] = result[size_t(k)];
    }
  if (outer * inner == 0) out.shape[size_t(d)] = int64_t(f(std::vector<double>(static_cast<size_t>(D))).size());
  return out;
}

// f applied to the values of each group reduced over `dims` (all when empty).
ref::Array over_groups(const ref::Array& x, hg::Shape dims, bool keepdim, const std::function<double(const std::vector<double>&)>& f) {
  const int nd = x.shape.ndim();
  std::vector<bool> reduced(size_t(nd), dims.ndim() == 0);
  for (int64_t d : dims) reduced[size_t((d + nd) % nd)] = true;
  hg::Shape keep, kept;
  for (int d = 0; d < nd; ++d) {
    keep.push_back(reduced[size_t(d)] ? 1 : x.shape[d]);
    if (!reduced[size_t(d)]) kept.push_back(x.shape[d]);
  }
  std::vector<std::vector<double>> groups(size_t(ref::numel(keep)));
  for (int64_t i = 0; i < ref::numel(x.shape); ++i) {
    auto c = ref::coords(i, x.shape);
    for (int d = 0; d < nd; ++d)
      if (reduced[size_t(d)]) c[size_t(d)] = 0;
    groups[size_t(ref::offset(c, keep))].push_back(x.v[size_t(i)]);
  }
  ref::Array out{keepdim ? keep : kept, {}};
  for (const auto& g : groups) out.v.push_back(f(g));
  return out;
}

// Ascending with NaN last (descending: NaN first), stable -- PyTorch's order.
std::vector<double> sorted_line(std::vector<double> v, bool descending) {
  std::stable_sort(v.begin(), v.end(), [descending](double a, double b) {
    if (std::isnan(a) || std::isnan(b)) return descending ? std::isnan(a) && !std::isnan(b) : !std::isnan(a) && std::isnan(b);
    return descending ? a > b : a < b;
  });
  return v;
}

double extreme(const std::vector<double>& v, bool largest) {
  double best = v.at(0);
  for (double x : v) {
    if (std::isnan(x)) return x;
    if (largest ? x > best : x < best) best = x;
  }
  return best;
}

double variance(const std::vector<double>& v, double correction) {
  double mean = 0, sq = 0;
  for (double x : v) mean += x;
  mean /= double(v.size());
  for (double x : v) sq += (x - mean) * (x - mean);
  return sq / std::max(0.0, double(v.size()) - correction);
}

double p_norm(const std::vector<double>& v, double p) {
  if (std::isinf(p)) {
    double best = p > 0 ? 0 : std::numeric_limits<double>::infinity();
    for (double x : v) best = std::isnan(x) || std::isnan(best) ? std::nan("") : p > 0 ? std::max(best, std::fabs(x)) : std::min(best, std::fabs(x));
    return best;
  }
  double s = 0;
  for (double x : v) s += p == 0 ? double(x != 0) : std::pow(std::fabs(x), p);
  return p == 0 ? s : std::pow(s, 1 / p);
}

double log_sum_exp(const std::vector<double>& v) {
  double m = -std::numeric_limits<double>::infinity(), s = 0;
  for (double x : v) m = std::isnan(x) || std::isnan(m) ? std::nan("") : std::max(m, x);
  if (std::isinf(m)) m = 0;
  for (double x : v) s += std::exp(x - m);
  return std::log(s) + m;
}

std::string norm_args(const char* p, const char* dims, bool keepdim) {
  return std::string(R"({"p": )") + p + R"(, "dims": )" + dims + R"(, "keepdim": )" + (keepdim ? "true" : "false") + "}";
}

std::vector<OpEntry> statistics_entries() {
  // A row with ties (2 and 7 repeat) for the stable order.
  // (Not differentiated: at a tie the gradient goes to the one position sorted there, where finite
  // differences, which reorder the tie, see half of it.)
  const InputSpec ties{.shape = {2, 5}, .given = {2, 7, 1, 7, 2, 0, 3, 3, -1, 5}, .differentiable = false};
  const auto get0 = [](std::tuple<Tensor, Tensor> t) { return std::get<0>(t); };
  return {
      {.op = Op::Sort, .name = "sort",
       .call = [get0](I in, A a) { return get0(hg::sort(in[0], int(integer(a, "dim")), flag(a, "descending"))); },
       .default_args = R"({"dim": -1, "descending": false})", .inputs = {{{3, 6}}},
       .reference =
           [](const Arrays& x, A a) {
             return along(x[0], integer(a, "dim"), [&](std::vector<double> v) { return sorted_line(v, flag(a, "descending")); });
           },
       .f32_tolerance = kExact, .golden_family = "statistics",
       .more_samples = {{.inputs = {{{4, 3, 2}}}, .args = R"({"dim": 0, "descending": true})"},
                        {.inputs = {ties}, .args = R"({"dim": 1, "descending": false})"},
                        {.inputs = {{{7}}}, .args = R"({"dim": 0, "descending": true})"}},
       .composed = true},
      {.op = Op::Topk, .name = "topk",
       .call = [get0](I in, A a) { return get0(hg::topk(in[0], integer(a, "k"), int(integer(a, "dim")), flag(a, "largest"))); },
       .default_args = R"({"k": 3, "dim": -1, "largest": true})", .inputs = {{{4, 6}}},
       .reference =
           [](const Arrays& x, A a) {
             return along(x[0], integer(a, "dim"), [&](std::vector<double> v) {
               v = sorted_line(v, flag(a, "largest"));
               v.resize(size_t(integer(a, "k")));
               return v;
             });
           },
       .f32_tolerance = kExact, .golden_family = "statistics",
       .more_samples = {{.inputs = {{{5, 3}}}, .args = R"({"k": 2, "dim": 0, "largest": false})"},
                        {.inputs = {{{2, 4}}}, .args = R"({"k": 0, "dim": 1, "largest": true})"}},
       .composed = true},
      {.op = Op::Max, .name = "max",
       .call = [get0](I in, A a) { return get0(hg::max(in[0], int(integer(a, "dim")), flag(a, "keepdim"))); },
       .default_args = R"({"dim": 1, "keepdim": false})", .inputs = {{{3, 4, 2}}},
       .reference =
           [](const Arrays& x, A a) {
             return over_groups(x[0], {integer(a, "dim")}, flag(a, "keepdim"), [](const auto& v) { return extreme(v, true); });
           },
       .f32_tolerance = kExact, .golden_family = "statistics",
       .more_samples = {{.inputs = {{{5}}}, .args = R"({"dim": 0, "keepdim": true})"}},
       .composed = true},
      {.op = Op::Min, .name = "min",
       .call = [get0](I in, A a) { return get0(hg::min(in[0], int(integer(a, "dim")), flag(a, "keepdim"))); },
       .default_args = R"({"dim": -1, "keepdim": true})", .inputs = {{{3, 4}}},
       .reference =
           [](const Arrays& x, A a) {
             return over_groups(x[0], {integer(a, "dim")}, flag(a, "keepdim"), [](const auto& v) { return extreme(v, false); });
           },
       .f32_tolerance = kExact, .golden_family = "statistics",
       .more_samples = {{.inputs = {{{2, 3, 2}}}, .args = R"({"dim": 0, "keepdim": false})"}},
       .composed = true},
      {.op = Op::Amin, .name = "amin", .call = [](I in, A a) { return hg::amin(in[0], int(integer(a, "dim")), flag(a, "keepdim")); },
       .default_args = R"({"dim": 0, "keepdim": false})", .inputs = {{{4, 3}}},
       .reference =
           [](const Arrays& x, A a) {
             return over_groups(x[0], {integer(a, "dim")}, flag(a, "keepdim"), [](const auto& v) { return extreme(v, false); });
           },
       .f32_tolerance = kExact, .golden_family = "statistics",
       .composed = true},
      {.op = Op::Argmin, .name = "argmin", .call = [](I in, A a) { return hg::argmin(in[0], int(integer(a, "dim"))); },
       .default_args = R"({"dim": 1})", .inputs = {{.shape = {3, 5}, .differentiable = false}},
       .reference =
           [](const Arrays& x, A a) {
             return over_groups(x[0], {integer(a, "dim")}, false, [](const std::vector<double>& v) {
               size_t best = 0;  // the first minimum; a NaN wins (the first one)
               for (size_t k = 1; k < v.size() && !std::isnan(v[best]); ++k)
                 if (std::isnan(v[k]) || v[k] < v[best]) best = k;
               return double(best);
             });
           },
       .f32_tolerance = kExact, .golden_family = "statistics",
       .more_samples = {{.inputs = {{.shape = {2, 5}, .given = {2, 7, 1, 7, 1, 0, 3, 0, -1, -1}, .differentiable = false}},
                         .args = R"({"dim": 1})"}}},
      {.op = Op::Var, .name = "var",
       .call = [](I in, A a) {
         return hg::var(in[0], integers(a, "dims"), {.correction = number(a, "correction"), .keepdim = flag(a, "keepdim")});
       },
       .default_args = R"({"dims": [1], "correction": 1, "keepdim": false})", .inputs = {{{3, 5}}},
       .reference =
           [](const Arrays& x, A a) {
             const double c = number(a, "correction");
             return over_groups(x[0], integers(a, "dims"), flag(a, "keepdim"), [c](const auto& v) { return variance(v, c); });
           },
       .f32_tolerance = kF32, .golden_family = "statistics",
       .more_samples = {{.inputs = {{{2, 3, 4}}}, .args = R"({"dims": [0, 2], "correction": 0, "keepdim": true})"},
                        {.inputs = {{{6}}}, .args = R"({"dims": [], "correction": 1, "keepdim": false})"}},
       .composed = true},
      {.op = Op::Std, .name = "std",
       .call = [](I in, A a) {
         return hg::std(in[0], integers(a, "dims"), {.correction = number(a, "correction"), .keepdim = flag(a, "keepdim")});
       },
       .default_args = R"({"dims": [-1], "correction": 1, "keepdim": true})", .inputs = {{{4, 6}}},
       .reference =
           [](const Arrays& x, A a) {
             const double c = number(a, "correction");
             return over_groups(x[0], integers(a, "dims"), flag(a, "keepdim"), [c](const auto& v) { return std::sqrt(variance(v, c)); });
           },
       .f32_tolerance = kF32, .golden_family = "statistics",
       .more_samples = {{.inputs = {{{2, 3, 4}}}, .args = R"({"dims": [], "correction": 0, "keepdim": false})"}},
       .composed = true},
      {.op = Op::Prod, .name = "prod",
       .call = [](I in, A a) {
         return a.find("dim") ? hg::prod(in[0], int(integer(a, "dim")), flag(a, "keepdim")) : hg::prod(in[0]);
       },
       .default_args = R"({"dim": 1, "keepdim": false})", .inputs = {{{3, 5}}},
       .reference =
           [](const Arrays& x, A a) {
             const hg::Shape dims = a.find("dim") ? hg::Shape{integer(a, "dim")} : hg::Shape{};
             return over_groups(x[0], dims, a.find("dim") && flag(a, "keepdim"), [](const auto& v) {
               double p = 1;
               for (double e : v) p *= e;
               return p;
             });
           },
       .f32_tolerance = kF32, .golden_family = "statistics",
       // A zero factor: its gradient is the product of the others, the rest get 0.
       .more_samples = {{.inputs = {{.shape = {2, 4}, .given = {0.5, 0, 2, -1.5, 1.25, -0.75, 2, 0.5}}},
                         .args = R"({"dim": 1, "keepdim": true})"},
                        {.inputs = {{{7}}}, .args = "{}"},
                        {.inputs = {{{2, 3, 4}}}, .args = R"({"dim": 0, "keepdim": false})"}},
       .composed = true},
      {.op = Op::Logsumexp, .name = "logsumexp",
       .call = [](I in, A a) { return hg::logsumexp(in[0], integers(a, "dims"), flag(a, "keepdim")); },
       .default_args = R"({"dims": [1], "keepdim": false})", .inputs = {{.shape = {3, 5}, .stddev = 4}},
       .reference =
           [](const Arrays& x, A a) {
             return over_groups(x[0], integers(a, "dims"), flag(a, "keepdim"), [](const auto& v) { return log_sum_exp(v); });
           },
       .f32_tolerance = kF32, .golden_family = "statistics",
       .more_samples = {{.inputs = {{{2, 3, 4}}}, .args = R"({"dims": [0, 2], "keepdim": true})"}},
       .composed = true},
      {.op = Op::Norm, .name = "norm",
       .call = [](I in, A a) { return hg::norm(in[0], number(a, "p"), integers(a, "dims"), flag(a, "keepdim")); },
       .default_args = norm_args("2", "[]", false), .inputs = {{{3, 5}}},
       .reference =
           [](const Arrays& x, A a) {
             const double p = number(a, "p");
             return over_groups(x[0], integers(a, "dims"), flag(a, "keepdim"), [p](const auto& v) { return p_norm(v, p); });
           },
       .f32_tolerance = kF32, .golden_family = "statistics",
       .more_samples = {{.inputs = {{{3, 4}}}, .args = norm_args("1", "[1]", true)},
                        {.inputs = {{{3, 4}}}, .args = norm_args("3", "[0]", false)},
                        {.inputs = {{{2, 3, 4}}}, .args = norm_args("2", "[0, 2]", false)}},
       .composed = true},
      {.op = Op::Cumsum, .name = "cumsum", .call = [](I in, A a) { return hg::cumsum(in[0], int(integer(a, "dim"))); },
       .default_args = R"({"dim": 1})", .inputs = {{{3, 7}}},
       .reference =
           [](const Arrays& x, A a) {
             return along(x[0], integer(a, "dim"), [](std::vector<double> v) {
               for (size_t k = 1; k < v.size(); ++k) v[k] += v[k - 1];
               return v;
             });
           },
       .f32_tolerance = kF32, .golden_family = "statistics",
       .more_samples = {{.inputs = {{{33}}}, .args = R"({"dim": 0})"}, {.inputs = {{{2, 5, 3}}}, .args = R"({"dim": -2})"}},
       .composed = true},
  };
}

// ---- matmul, linear, conv2d: GEMMs, whose f32 tolerance grows with the inner dimension ---------

// The operands of a @ b: a 2-D operand against a batch, or a batch of 1 against a larger one, is
// broadcast over the batch.
std::vector<InputSpec> matmul_operands(const hg::Shape& a, const hg::Shape& b, bool b_differentiable = true) {
  // An operand is broadcast when the result's batch dims (all but the last two) hold more
  // matrices than its own: its gradient then sums over the copies.
  auto batch_count = [](const hg::Shape& s) {
    int64_t n = 1;
    for (int d = 0; d + 2 < s.ndim(); ++d) n *= s[d];
    return s.ndim() > 2 ? n : 0;  // 0: no batch dims
  };
  // The result's batch dims broadcast both operands' ([2, 1] against [3]: 6 matrices, not 3).
  auto batch_dims = [](const hg::Shape& s) {
    hg::Shape dims;
    for (int d = 0; d + 2 < s.ndim(); ++d) dims.push_back(s[d]);
    return dims;
  };
  int64_t batch = a.ndim() > 2 || b.ndim() > 2 ? 1 : 0;
  for (int64_t d : broadcast_shape(batch_dims(a), batch_dims(b))) batch *= d;
  return {{.shape = a, .broadcast = batch_count(a) != batch},
          {.shape = b, .differentiable = b_differentiable, .broadcast = batch_count(b) != batch}};
}

SampleSpec matmul_sample(const hg::Shape& a, const hg::Shape& b, bool b_differentiable = true) {
  return {.inputs = matmul_operands(a, b, b_differentiable), .f32_tolerance = gemm_tolerance(a.back())};
}

SampleSpec linear_sample(hg::Shape x, hg::Shape w, bool bias) {
  const int64_t in = w[1], out = w[0];
  std::vector<InputSpec> inputs{{std::move(x)}, {std::move(w)}};
  if (bias) inputs.push_back({{out}});
  return {.inputs = std::move(inputs), .f32_tolerance = gemm_tolerance(in)};
}

SampleSpec conv2d_sample(hg::Shape x, hg::Shape w, bool bias, int64_t stride, int64_t padding, double w_stddev = 1,
                         int64_t dilation = 1, int64_t groups = 1) {
  const int64_t K = w[1] * w[2] * w[3], out = w[0];
  std::vector<InputSpec> inputs{{std::move(x)}, {.shape = std::move(w), .stddev = w_stddev}};
  if (bias) inputs.push_back({{out}});
  return {.inputs = std::move(inputs),
          .args = R"({"stride": )" + std::to_string(stride) + R"(, "padding": )" + std::to_string(padding) +
                  R"(, "dilation": )" + std::to_string(dilation) + R"(, "groups": )" + std::to_string(groups) + "}",
          .f32_tolerance = gemm_tolerance(K)};
}

// Depthwise (groups == channels, one input channel per weight) and grouped convolutions, dilated ones.
SampleSpec grouped_sample(hg::Shape x, hg::Shape w, bool bias, int64_t stride, int64_t padding, int64_t dilation,
                          int64_t groups) {
  return conv2d_sample(std::move(x), std::move(w), bias, stride, padding, 1, dilation, groups);
}

std::vector<OpEntry> linalg_entries() {
  return {
      // A batched operand against a 2-D one: the 2-D side broadcasts over the batch.
      {.op = Op::Matmul, .name = "matmul", .call = [](I in, A) { return hg::matmul(in[0], in[1]); },
       .default_args = "{}", .inputs = matmul_operands({2, 3, 4}, {4, 5}),
       .reference = [](const Arrays& x, A) { return ref::matmul(x[0], x[1]); },
       .f32_tolerance = gemm_tolerance(4), .golden_family = "linalg",
       .more_samples = {
           // 2-D, batched, either side 2-D against a batch, a batch of 1 broadcast, K = 1, and
           // sizes past the register tiles.
           matmul_sample({3, 4}, {4, 2}), matmul_sample({2, 3, 4}, {2, 4, 2}), matmul_sample({3, 4}, {2, 4, 2}),
           matmul_sample({1, 3, 4}, {2, 4, 2}), matmul_sample({1, 1}, {1, 1}), matmul_sample({3, 5}, {5, 7}),
           matmul_sample({17, 33}, {33, 13}), matmul_sample({67, 65}, {65, 33}), matmul_sample({2, 3, 5}, {2, 5, 4}),
           matmul_sample({3, 4, 6}, {6, 5}), matmul_sample({5, 7}, {2, 7, 3}), matmul_sample({1, 3, 4}, {4, 4, 2}),
           matmul_sample({4, 9, 33}, {1, 33, 17}), matmul_sample({129, 1}, {1, 131}), matmul_sample({5, 67}, {67, 33}),
           matmul_sample({3, 5, 17}, {3, 17, 4}),
           matmul_sample({3, 4}, {4, 2}, false),  // only one operand differentiated
           // Any rank: attention's [B, H, T, D] @ [B, H, D, T], batch dims broadcast both ways,
           // an N-d operand against a 2-D one, and vectors on either side.
           matmul_sample({2, 3, 4, 5}, {2, 3, 5, 4}), matmul_sample({2, 1, 3, 4}, {3, 4, 2}),
           matmul_sample({2, 2, 3, 4}, {4, 5}), matmul_sample({3, 4}, {2, 2, 4, 3}),
           matmul_sample({4}, {4}), matmul_sample({4}, {2, 4, 3}), matmul_sample({2, 3, 4}, {4}),
       }},
      {.op = Op::Linear, .name = "linear",
       .call = [](I in, A) { return hg::linear(in[0], in[1], optional_input(in, 2)); }, .default_args = "{}",
       .inputs = {{{3, 4}}, {{2, 4}}, {{2}}},
       .reference = [](const Arrays& x, A) { return ref::linear(x[0], x[1], optional_values(x, 2)); },
       .f32_tolerance = gemm_tolerance(4), .golden_family = "linalg",
       .more_samples = {
           // Without a bias, 3-D and 1-D inputs, one row, 1 x 1, and sizes past the register tiles.
           linear_sample({3, 4}, {2, 4}, false), linear_sample({2, 3, 4}, {2, 4}, true),
           linear_sample({4}, {3, 4}, true), linear_sample({5, 7}, {3, 7}, true),
           linear_sample({2, 3, 7}, {4, 7}, false), linear_sample({7}, {3, 7}, true),
           linear_sample({1, 7}, {3, 7}, true), linear_sample({33, 65}, {17, 65}, true),
           linear_sample({1, 1}, {1, 1}, true), linear_sample({2, 1, 5}, {6, 5}, true),
           linear_sample({5, 67}, {9, 67}, true),
       }},
      {.op = Op::Conv2d, .name = "conv2d",
       .call =
           [](I in, A a) {
             return hg::conv2d(in[0], in[1], optional_input(in, 2),
                               {.stride = integer(a, "stride"), .padding = integer(a, "padding"),
                                .dilation = integer(a, "dilation", 1), .groups = integer(a, "groups", 1)});
           },
       .default_args = R"({"stride": 2, "padding": 1})", .inputs = {{{1, 2, 5, 5}}, {{3, 2, 3, 3}}, {{3}}},
       .reference =
           [](const Arrays& x, A a) {
             return ref::conv2d(x[0], x[1], optional_values(x, 2), integer(a, "stride"), integer(a, "padding"),
                                integer(a, "dilation", 1), integer(a, "groups", 1));
           },
       .f32_tolerance = gemm_tolerance(2 * 3 * 3), .golden_family = "conv2d",
       .more_samples = {
           // Strides 1 to 3, padding 0 to 2, with and without a bias; 1 x 1, 2 x 2, 2 x 3, 4 x 4
           // and 5 x 5 kernels; one channel to 17; small weights N(0, 0.09).
           conv2d_sample({2, 3, 5, 5}, {4, 3, 3, 3}, true, 1, 0),
           conv2d_sample({1, 2, 4, 4}, {2, 2, 3, 3}, false, 1, 1),
           conv2d_sample({2, 2, 6, 5}, {3, 2, 2, 2}, false, 2, 0),
           conv2d_sample({1, 1, 3, 3}, {2, 1, 1, 1}, true, 1, 0),
           conv2d_sample({2, 3, 7, 7}, {4, 3, 3, 3}, true, 1, 0),
           conv2d_sample({2, 3, 7, 7}, {4, 3, 3, 3}, true, 2, 1),
           conv2d_sample({1, 1, 5, 5}, {1, 1, 1, 1}, false, 1, 0),
           conv2d_sample({2, 5, 9, 11}, {6, 5, 3, 3}, false, 2, 0),
           conv2d_sample({1, 2, 4, 4}, {3, 2, 4, 4}, true, 1, 1),
           conv2d_sample({3, 17, 6, 5}, {5, 17, 2, 3}, true, 3, 2),
           conv2d_sample({1, 3, 19, 23}, {2, 3, 5, 5}, true, 1, 2),
           conv2d_sample({2, 3, 9, 9}, {4, 3, 3, 3}, true, 2, 1, 0.3),
           // Depthwise 3 x 3 at stride 1 and 2 (MobileNet's), with a channel multiplier of 2;
           // groups of 2 and 3 channels; dilation 2 and 3, alone and with groups and stride.
           grouped_sample({2, 4, 6, 6}, {4, 1, 3, 3}, true, 1, 1, 1, 4),
           grouped_sample({2, 3, 7, 7}, {3, 1, 3, 3}, false, 2, 1, 1, 3),
           grouped_sample({1, 2, 5, 5}, {4, 1, 3, 3}, true, 1, 1, 1, 2),
           grouped_sample({2, 4, 5, 6}, {6, 2, 3, 3}, true, 1, 1, 1, 2),
           grouped_sample({1, 6, 5, 5}, {3, 2, 1, 1}, false, 1, 0, 1, 3),
           grouped_sample({2, 2, 9, 8}, {3, 2, 3, 3}, true, 1, 2, 2, 1),
           grouped_sample({1, 3, 11, 10}, {2, 3, 3, 2}, false, 2, 1, 3, 1),
           grouped_sample({2, 4, 9, 9}, {4, 2, 3, 3}, true, 2, 2, 2, 2),
       }},
  };
}

// ---- softmax and losses ------------------------------------------------------------------------

// Every position of the softmax dim (first, middle, last, negative), from 0-d to long rows, N(0, 9).
std::vector<SampleSpec> softmax_samples() {
  const std::pair<hg::Shape, int> cases[] = {{{}, 0},        {{1}, 0},       {{7}, 0},        {{3, 5}, 0},
                                             {{3, 5}, 1},    {{3, 5}, -1},   {{2, 3, 31}, 1}, {{2, 3, 31}, 0},
                                             {{4, 257}, -1}, {{1031}, 0},    {{33, 2, 17}, -2}, {{5, 67}, 0},
                                             {{5, 67}, 1}};
  std::vector<SampleSpec> out;
  for (const auto& c : cases)
    out.push_back({.inputs = {{.shape = c.first, .stddev = 3}},
                   .args = R"({"dim": )" + std::to_string(c.second) + "}"});
  return out;
}

std::string cross_entropy_args(double label_smoothing, int64_t ignore_index = -100,
                               const std::string& reduction = "mean") {
  std::ostringstream os;
  os << R"({"label_smoothing": )" << label_smoothing << R"(, "ignore_index": )" << ignore_index
     << R"(, "reduction": ")" << reduction << R"("})";
  return os.str();
}

std::string reduction_of(A a) { return a.find("reduction") ? arg(a, "reduction", Args::Kind::String).text : "mean"; }

// The reference's reduction of per-element losses.
ref::Array reduced(const ref::Array& per, const std::string& reduction) {
  if (reduction == "none") return per;
  double total = 0;
  for (double v : per.v) total += v;
  return {{}, {reduction == "sum" ? total : total / double(per.v.size())}};
}

// nll over (N, C, d...) log-probabilities: -w[t] logp[t] per position, the weighted mean over the
// kept positions. With smoothing (no weight): (1 - eps) nll + eps * mean over classes of -logp.
ref::Array nll(const ref::Array& logp, const std::vector<int64_t>& targets, const std::vector<double>& weight,
               int64_t ignore, const std::string& reduction, double eps = 0) {
  const int64_t N = logp.shape[0], C = logp.shape[1];
  int64_t inner = 1;
  hg::Shape per_shape = {N};
  for (int d = 2; d < logp.shape.ndim(); ++d) inner *= logp.shape[d], per_shape.push_back(logp.shape[d]);
  ref::Array per{per_shape, std::vector<double>(size_t(N * inner), 0.0)};
  double weights = 0;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t i = 0; i < inner; ++i) {
      const int64_t t = targets[size_t(n * inner + i)];
      if (t == ignore) continue;
      const double w = weight.empty() ? 1.0 : weight[size_t(t)];
      double smooth = 0;  // (only with eps > 0: 0 * inf would be NaN for a -inf logit)
      if (eps > 0)
        for (int64_t c = 0; c < C; ++c) smooth -= logp.v[size_t((n * C + c) * inner + i)] / double(C);
      per.v[size_t(n * inner + i)] = (1 - eps) * -w * logp.v[size_t((n * C + t) * inner + i)] + (eps > 0 ? eps * smooth : 0.0);
      weights += w;
    }
  if (reduction != "mean") return reduced(per, reduction);
  double total = 0;
  for (double v : per.v) total += v;
  return {{}, {total / weights}};
}

// Targets for `rows` rows of `classes` classes with the first one ignored (-100): the others
// spread over the classes.
InputSpec first_target_ignored(int64_t rows, int64_t classes) {
  std::vector<double> targets{-100};
  for (int64_t r = 1; r < rows; ++r) targets.push_back(double((7 * r) % classes));
  return {.shape = {rows}, .values = Values::ClassIndex, .classes = classes, .given = targets};
}

// Logits N(0, 9) of one row to many classes, with label smoothing 0, 0.1 and 1, and with some
// targets ignored (under label smoothing too, and with another ignore_index).
std::vector<SampleSpec> cross_entropy_samples() {
  std::vector<SampleSpec> out;
  const std::pair<int64_t, int64_t> sizes[] = {{1, 1}, {5, 7}, {33, 257}, {3, 2}};
  for (const auto& size : sizes) {
    const int64_t rows = size.first, classes = size.second;
    const InputSpec logits{.shape = {rows, classes}, .stddev = 3};
    const InputSpec targets{.shape = {rows}, .values = Values::ClassIndex, .classes = classes};
    for (double label_smoothing : {0.0, 0.1, 1.0})
      out.push_back({.inputs = {logits, targets}, .args = cross_entropy_args(label_smoothing)});
    if (rows == 1) continue;
    for (double label_smoothing : {0.0, 0.2})
      out.push_back({.inputs = {logits, first_target_ignored(rows, classes)},
                     .args = cross_entropy_args(label_smoothing)});
  }
  const InputSpec logits{{4, 5}};
  const auto given = [](std::vector<double> targets) {
    return InputSpec{.shape = {4}, .values = Values::ClassIndex, .classes = 5, .given = std::move(targets)};
  };
  out.push_back({.inputs = {logits, given({1, 0, 4, 2})}, .args = cross_entropy_args(0)});
  out.push_back({.inputs = {logits, given({1, -100, 3, -100})}, .args = cross_entropy_args(0)});
  out.push_back({.inputs = {logits, given({1, -100, 3, -100})}, .args = cross_entropy_args(0.2)});
  out.push_back({.inputs = {logits, given({2, 0, 2, 4})}, .args = cross_entropy_args(0, 2)});
  out.push_back(
      {.inputs = {{.shape = {5, 67}, .stddev = 2}, {.shape = {5}, .values = Values::ClassIndex, .classes = 67}}});
  // The composed path: per-element and summed losses, (N, C, d) inputs, a class weight.
  out.push_back({.inputs = {logits, given({1, -100, 3, 0})}, .args = cross_entropy_args(0, -100, "none")});
  out.push_back({.inputs = {logits, given({1, -100, 3, 0})}, .args = cross_entropy_args(0.1, -100, "sum")});
  out.push_back({.inputs = {{{2, 5, 3}}, {{2, 3}, Values::ClassIndex, 5}}, .args = cross_entropy_args(0)});
  out.push_back({.inputs = {{{2, 5, 3}}, {{2, 3}, Values::ClassIndex, 5}}, .args = cross_entropy_args(0.2, -100, "none")});
  out.push_back({.inputs = {logits, given({1, 4, 3, 0}), {.shape = {5}, .values = Values::Positive, .differentiable = false}},
                 .args = cross_entropy_args(0)});
  out.push_back({.inputs = {logits, given({1, -100, 3, 0}), {.shape = {5}, .values = Values::Positive, .differentiable = false}},
                 .args = cross_entropy_args(0, -100, "none")});
  return out;
}

std::vector<SampleSpec> loss_reductions(const std::vector<InputSpec>& inputs, const std::string& extra = "") {
  std::vector<SampleSpec> out;
  for (const char* r : {"none", "sum"})
    out.push_back({.inputs = inputs, .args = R"({"reduction": ")" + std::string(r) + "\"" + extra + "}"});
  return out;
}

// The elementwise losses: per-element formula f(input, target), then the reduction.
template <class F>
ref::Array pointwise_loss(const Arrays& x, A a, F f) {
  return reduced(ref::zip(x[0], x[1], f), reduction_of(a));
}

std::vector<OpEntry> more_loss_entries() {
  const InputSpec probability{.shape = {3, 4}, .values = Values::Positive, .low = 0.05, .high = 0.95};
  const InputSpec label{.shape = {3, 4}, .values = Values::Positive, .low = 0.0, .high = 1.0};
  const InputSpec log_probs{.shape = {3, 4}, .mean = -1.5};
  return {
      {.op = Op::NllLoss, .name = "nll_loss",
       .call = [](I in, A a) {
         return hg::nll_loss(in[0], in[1], {.weight = in.size() > 2 ? in[2] : Tensor(),
                                            .ignore_index = a.find("ignore_index") ? integer(a, "ignore_index") : -100,
                                            .reduction = reduction_of(a)});
       },
       .default_args = "{}", .inputs = {{{4, 5}, Values::Normal, 0, -1.0}, {{4}, Values::ClassIndex, 5}},
       .reference = [](const Arrays& x, A a) {
         return nll(x[0], as_indices(x[1]), x.size() > 2 ? x[2].v : std::vector<double>{},
                    a.find("ignore_index") ? integer(a, "ignore_index") : -100, reduction_of(a));
       },
       .f32_tolerance = kF32, .golden_family = "loss",
       .more_samples = {{.inputs = {{{4, 5}}, {.shape = {4}, .values = Values::ClassIndex, .classes = 5, .given = {1, -100, 3, 0}}},
                         .args = R"({"reduction": "none"})"},
                        {.inputs = {{{2, 5, 3}}, {{2, 3}, Values::ClassIndex, 5}}, .args = R"({"reduction": "sum"})"},
                        {.inputs = {{{4, 5}}, {.shape = {4}, .values = Values::ClassIndex, .classes = 5, .given = {1, 2, 3, 2}},
                                    {.shape = {5}, .values = Values::Positive, .differentiable = false}},
                         .args = R"({"ignore_index": 2})"}},
       .composed = true},
      {.op = Op::L1Loss, .name = "l1_loss",
       .call = [](I in, A a) { return hg::l1_loss(in[0], in[1], {.reduction = reduction_of(a)}); },
       .default_args = "{}", .inputs = {{kSmall}, {kSmall}},
       .reference = [](const Arrays& x, A a) { return pointwise_loss(x, a, [](double p, double t) { return std::fabs(p - t); }); },
       .f32_tolerance = kF32, .golden_family = "loss", .more_samples = loss_reductions({{kSmall}, {kSmall}}),
       .composed = true},
      {.op = Op::SmoothL1Loss, .name = "smooth_l1_loss",
       .call = [](I in, A a) {
         return hg::smooth_l1_loss(in[0], in[1], {.reduction = reduction_of(a), .beta = number(a, "beta")});
       },
       .default_args = R"({"beta": 0.5})", .inputs = {{kSmall}, {kSmall}},
       .reference = [](const Arrays& x, A a) {
         const double beta = number(a, "beta");
         return pointwise_loss(x, a, [beta](double p, double t) {
           const double d = std::fabs(p - t);
           return beta == 0 ? d : d < beta ? 0.5 * d * d / beta : d - 0.5 * beta;
         });
       },
       .f32_tolerance = kF32, .golden_family = "loss",
       .more_samples = {{.inputs = {{kSmall}, {kSmall}}, .args = R"({"beta": 1.0, "reduction": "none"})"},
                        {.inputs = {{kSmall}, {kSmall}}, .args = R"({"beta": 0.0, "reduction": "sum"})"}},
       .composed = true},
      {.op = Op::HuberLoss, .name = "huber_loss",
       .call = [](I in, A a) {
         return hg::huber_loss(in[0], in[1], {.reduction = reduction_of(a), .delta = number(a, "delta")});
       },
       .default_args = R"({"delta": 0.5})", .inputs = {{kSmall}, {kSmall}},
       .reference = [](const Arrays& x, A a) {
         const double delta = number(a, "delta");
         return pointwise_loss(x, a, [delta](double p, double t) {
           const double d = std::fabs(p - t);
           return d < delta ? 0.5 * d * d : delta * (d - 0.5 * delta);
         });
       },
       .f32_tolerance = kF32, .golden_family = "loss",
       .more_samples = {{.inputs = {{kSmall}, {kSmall}}, .args = R"({"delta": 2.0, "reduction": "none"})"}},
       .composed = true},
      {.op = Op::BinaryCrossEntropy, .name = "binary_cross_entropy",
       .call = [](I in, A a) {
         return hg::binary_cross_entropy(in[0], in[1], {.weight = in.size() > 2 ? in[2] : Tensor(),
                                                        .reduction = reduction_of(a)});
       },
       .default_args = "{}", .inputs = {probability, label},
       .reference = [](const Arrays& x, A a) {
         ref::Array per = ref::zip(x[0], x[1], [](double p, double y) {
           return -(y * std::max(std::log(p), -100.0) + (1 - y) * std::max(std::log(1 - p), -100.0));
         });
         if (x.size() > 2) per = ref::zip(per, x[2], [](double l, double w) { return l * w; });
         return reduced(per, reduction_of(a));
       },
       .f32_tolerance = kF32, .golden_family = "loss",
       .more_samples = {{.inputs = {probability, label}, .args = R"({"reduction": "none"})"},
                        {.inputs = {probability, label, {.shape = {4}, .values = Values::Positive, .differentiable = false}},
                         .args = R"({"reduction": "sum"})"}},
       .composed = true},
      {.op = Op::BinaryCrossEntropyWithLogits, .name = "binary_cross_entropy_with_logits",
       .call = [](I in, A a) {
         return hg::binary_cross_entropy_with_logits(in[0], in[1], {.reduction = reduction_of(a),
                                                                    .pos_weight = in.size() > 2 ? in[2] : Tensor()});
       },
       .default_args = "{}", .inputs = {{.shape = {3, 4}, .stddev = 3}, label},
       .reference = [](const Arrays& x, A a) {
         std::vector<double> pos = x.size() > 2 ? x[2].v : std::vector<double>{};
         ref::Array per = x[0];
         const int64_t last = x[0].shape[x[0].shape.ndim() - 1];
         for (size_t i = 0; i < per.v.size(); ++i) {
           const double z = x[0].v[i], y = x[1].v[i], pw = pos.empty() ? 1.0 : pos[i % size_t(last)];
           // PyTorch's formula (so a -inf logit gives its NaN): -log sigmoid(z) = log1p(exp(-|z|)) + max(-z, 0).
           per.v[i] = (1 - y) * z + (1 + (pw - 1) * y) * (std::log1p(std::exp(-std::fabs(z))) + std::max(-z, 0.0));
         }
         return reduced(per, reduction_of(a));
       },
       .f32_tolerance = kF32, .golden_family = "loss",
       .more_samples = {{.inputs = {{.shape = {3, 4}, .stddev = 3}, label}, .args = R"({"reduction": "none"})"},
                        {.inputs = {{.shape = {3, 4}, .stddev = 3}, label,
                                    {.shape = {4}, .values = Values::Positive, .differentiable = false}},
                         .args = R"({"reduction": "sum"})"}},
       .composed = true},
      {.op = Op::KlDiv, .name = "kl_div",
       .call = [](I in, A a) { return hg::kl_div(in[0], in[1], {.reduction = reduction_of(a)}); },
       .default_args = R"({"reduction": "batchmean"})", .inputs = {log_probs, probability},
       .reference = [](const Arrays& x, A a) {
         const ref::Array per = ref::zip(x[0], x[1], [](double in, double t) { return t == 0 ? 0.0 : t * (std::log(t) - in); });
         if (reduction_of(a) != "batchmean") return reduced(per, reduction_of(a));
         double total = 0;
         for (double v : per.v) total += v;
         return ref::Array{{}, {total / double(x[0].shape[0])}};
       },
       .f32_tolerance = kF32, .golden_family = "loss",
       .more_samples = {{.inputs = {log_probs, probability}, .args = R"({"reduction": "none"})"},
                        {.inputs = {log_probs, probability}, .args = R"({"reduction": "mean"})"}},
       .composed = true},
  };
}

std::vector<OpEntry> softmax_and_loss_entries() {
  return {
      {.op = Op::Softmax, .name = "softmax", .call = [](I in, A a) { return hg::softmax(in[0], int(integer(a, "dim"))); },
       .default_args = R"({"dim": -1})", .inputs = {{kSmall}},
       .reference = [](const Arrays& x, A a) { return ref::softmax(x[0], integer(a, "dim"), false); },
       .f32_tolerance = kF32, .golden_family = "softmax", .more_samples = softmax_samples(),
       .no_16_bit_backward_because = kFromSaved16BitOutput},
      {.op = Op::LogSoftmax, .name = "log_softmax",
       .call = [](I in, A a) { return hg::log_softmax(in[0], int(integer(a, "dim"))); },
       .default_args = R"({"dim": 1})", .inputs = {{{2, 3, 4}}},
       .reference = [](const Arrays& x, A a) { return ref::softmax(x[0], integer(a, "dim"), true); },
       .f32_tolerance = kF32, .golden_family = "softmax", .more_samples = softmax_samples(),
       .no_16_bit_backward_because = kFromSaved16BitOutput},
      {.op = Op::CrossEntropy, .name = "cross_entropy",
       .call =
           [](I in, A a) {
             return hg::cross_entropy(in[0], in[1],
                                      {.label_smoothing = number(a, "label_smoothing"),
                                       .ignore_index = integer(a, "ignore_index"),
                                       .weight = in.size() > 2 ? in[2] : Tensor(), .reduction = reduction_of(a)});
           },
       .default_args = cross_entropy_args(0.1), .inputs = {{{4, 5}}, {{4}, Values::ClassIndex, 5}},
       .reference =
           [](const Arrays& x, A a) {
             return nll(ref::softmax(x[0], 1, true), as_indices(x[1]), x.size() > 2 ? x[2].v : std::vector<double>{},
                        integer(a, "ignore_index"), reduction_of(a), number(a, "label_smoothing"));
           },
       .f32_tolerance = kF32, .golden_family = "loss", .more_samples = cross_entropy_samples(),
       .composed_for = [](const std::vector<InputSpec>& in, A a) {
         return reduction_of(a) != "mean" || in.size() > 2 || in[0].shape.size() > 2;
       }},
      {.op = Op::MseLoss, .name = "mse_loss",
       .call = [](I in, A a) { return hg::mse_loss(in[0], in[1], {.reduction = reduction_of(a)}); },
       .default_args = "{}", .inputs = {{kSmall}, {kSmall}},
       .reference =
           [](const Arrays& x, A a) {
             return pointwise_loss(x, a, [](double p, double t) { return (p - t) * (p - t); });
           },
       .f32_tolerance = kF32, .golden_family = "loss",
       .more_samples = {{.inputs = {{{1, 1}}, {{1, 1}}}}, {.inputs = {{{5, 7}}, {{5, 7}}}},
                        {.inputs = {{{33, 257}}, {{33, 257}}}}, {.inputs = {{{3, 2}}, {{3, 2}}}},
                        {.inputs = {{{5}}, {.shape = {5}, .differentiable = false}}},  // a constant target
                        {.inputs = {{.shape = {5, 67}, .stddev = 2}, {.shape = {5, 67}, .stddev = 2}}},
                        {.inputs = {{kSmall}, {kSmall}}, .args = R"({"reduction": "none"})"}},
       .composed = true},
  };
}

// ---- pooling and normalisation -----------------------------------------------------------------

// (input shape, kernel, stride): windows that tile, overlap (stride < kernel) and skip (stride >
// kernel), a window the size of the input, 1 x 1, and rows whose ends no window reaches; then
// padding (a ResNet stem's 3x3/2 pad 1), ceil_mode's last partial window and, for the average,
// count_include_pad off.
std::vector<SampleSpec> pool_samples(bool average) {
  struct Case {
    hg::Shape x;
    int kernel, stride, padding = 0;
    bool ceil_mode = false, count_include_pad = true;
  };
  std::vector<Case> cases = {{{1, 2, 4, 4}, 2, 2}, {{1, 1, 5, 5}, 3, 1}, {{2, 1, 6, 7}, 3, 2}, {{1, 2, 5, 5}, 2, 1},
                             {{1, 2, 5, 5}, 3, 2}, {{2, 3, 7, 7}, 2, 2}, {{2, 3, 7, 7}, 3, 1}, {{1, 2, 9, 8}, 3, 2},
                             {{1, 1, 4, 4}, 4, 1}, {{1, 1, 1, 1}, 1, 1}, {{3, 5, 17, 33}, 2, 3}, {{2, 3, 9, 9}, 3, 2},
                             {{2, 3, 8, 8}, 3, 2, 1}, {{1, 2, 7, 6}, 3, 2, 1, true}, {{1, 2, 5, 7}, 2, 2, 0, true},
                             {{1, 1, 6, 6}, 4, 3, 2, true}, {{2, 2, 4, 5}, 2, 1, 1}};
  if (average)
    cases.insert(cases.end(), {{{2, 3, 8, 8}, 3, 2, 1, false, false}, {{1, 2, 7, 6}, 3, 2, 1, true, false},
                               {{1, 2, 5, 7}, 3, 3, 1, true, false}});
  std::vector<SampleSpec> out;
  for (const Case& c : cases) {
    std::ostringstream args;
    args << std::boolalpha << R"({"kernel": )" << c.kernel << R"(, "stride": )" << c.stride << R"(, "padding": )"
         << c.padding << R"(, "ceil_mode": )" << c.ceil_mode;
    if (average) args << R"(, "count_include_pad": )" << c.count_include_pad;
    args << "}";
    out.push_back({.inputs = {{c.x}}, .args = args.str()});
  }
  return out;
}

// The options a pooling sample names (padding, ceil_mode, count_include_pad default as PyTorch's).
int64_t padding_of(A a) { return a.find("padding") ? integer(a, "padding") : 0; }
bool ceil_mode_of(A a) { return a.find("ceil_mode") ? flag(a, "ceil_mode") : false; }
bool count_include_pad_of(A a) { return a.find("count_include_pad") ? flag(a, "count_include_pad") : true; }

// (input shape, output size): bins that tile, that overlap (5 -> 3), more bins than rows (3 -> 5),
// global average pooling (1 x 1) and the identity.
std::vector<SampleSpec> adaptive_pool_samples() {
  const std::pair<hg::Shape, std::pair<int, int>> cases[] = {{{1, 2, 6, 6}, {3, 3}}, {{2, 3, 5, 9}, {3, 4}},
                                                             {{1, 2, 3, 3}, {5, 4}}, {{2, 4, 7, 7}, {1, 1}},
                                                             {{1, 1, 4, 5}, {4, 5}}, {{1, 3, 7, 7}, {2, 2}}};
  std::vector<SampleSpec> out;
  for (const auto& [shape, size] : cases)
    out.push_back({.inputs = {{shape}},
                   .args = R"({"output_size": [)" + std::to_string(size.first) + ", " + std::to_string(size.second) + "]}"});
  return out;
}

// x N(1, 4) (a mean for the normalisation to remove) of 2-D to 4-D shapes, one channel to many:
// training with and without running statistics (the output does not read them), weight and bias;
// eval, which normalises with the running statistics (held fixed, variances in [0.05, 4.05)).
std::vector<SampleSpec> batch_norm_samples() {
  const auto args = [](bool training, bool stats, bool affine, double eps) {
    std::ostringstream os;
    os << std::boolalpha << R"({"training": )" << training << R"(, "momentum": 0.1, "eps": )" << eps
       << R"(, "stats": )" << stats << R"(, "affine": )" << affine << "}";
    return os.str();
  };
  // x, then the running statistics and the weight and bias that the flags ask for.
  const auto inputs = [](const InputSpec& x, bool stats, bool affine) {
    const int64_t C = x.shape[1];
    std::vector<InputSpec> in{x};
    if (stats) {
      in.push_back({.shape = {C}, .differentiable = false});
      in.push_back({.shape = {C}, .values = Values::Positive, .low = 0.05, .high = 4.05, .differentiable = false});
    }
    if (affine) in.insert(in.end(), {{{C}}, {{C}}});
    return in;
  };
  std::vector<SampleSpec> out;
  const std::vector<hg::Shape> shapes = {{4, 3}, {2, 3, 5, 5}, {7, 2, 33}, {2, 1}, {3, 17, 2, 3}};
  for (const hg::Shape& shape : shapes) {
    const InputSpec x{.shape = shape, .mean = 1, .stddev = 2};
    out.push_back({.inputs = inputs(x, true, true), .args = args(true, true, true, 1e-5)});
    out.push_back({.inputs = inputs(x, false, false), .args = args(true, false, false, 1e-5)});
    out.push_back({.inputs = inputs(x, true, true), .args = args(false, true, true, 1e-3)});
    out.push_back({.inputs = inputs(x, true, false), .args = args(false, true, false, 1e-3)});
  }
  out.push_back({.inputs = inputs({{3, 3, 2, 2}}, false, true), .args = args(true, false, true, 1e-5)});
  out.push_back({.inputs = inputs({{2, 3, 3}}, false, false), .args = args(true, false, false, 1e-5)});
  out.push_back({.inputs = inputs({{2, 3, 2, 2}}, true, true), .args = args(false, true, true, 1e-5)});
  out.push_back({.inputs = inputs({{2, 3, 2}}, true, false), .args = args(false, true, false, 1e-5)});
  out.push_back({.inputs = inputs({{2, 3, 9, 9}}, false, true), .args = args(true, false, true, 1e-5)});
  return out;
}

// x N(0.5, 4): one or two normalized dims, rows of 1 to 257, with and without weight and bias.
std::vector<SampleSpec> layer_norm_samples() {
  const std::pair<hg::Shape, hg::Shape> cases[] = {{{3, 7}, {7}},         {{2, 3, 31}, {3, 31}}, {{5, 257}, {257}},
                                                   {{1, 1}, {1}},         {{4, 2, 3, 5}, {3, 5}}, {{2, 5}, {5}},
                                                   {{2, 3, 4}, {3, 4}},   {{5, 67}, {67}}};
  std::vector<SampleSpec> out;
  for (const auto& c : cases) {
    const std::vector<int64_t> normalized(c.second.begin(), c.second.end());
    for (bool affine : {true, false}) {
      std::vector<InputSpec> in{{.shape = c.first, .mean = 0.5, .stddev = 2}};
      if (affine) in.insert(in.end(), {{c.second}, {c.second}});
      out.push_back({.inputs = in,
                     .args = R"({"normalized_shape": )" + json_list(normalized) + R"(, "eps": 1e-5, "affine": )" +
                             (affine ? "true" : "false") + "}"});
    }
  }
  return out;
}

std::vector<OpEntry> pool_and_norm_entries() {
  return {
      // A maximum is one of its inputs: exact.
      {.op = Op::MaxPool2d, .name = "max_pool2d",
       .call = [](I in, A a) {
         return hg::max_pool2d(in[0], {.kernel = integer(a, "kernel"), .stride = integer(a, "stride"),
                                       .padding = padding_of(a), .ceil_mode = ceil_mode_of(a)});
       },
       .default_args = R"({"kernel": 2, "stride": 2})", .inputs = {{{1, 2, 4, 4}}},
       .reference = [](const Arrays& x, A a) {
         return ref::pool2d(x[0], integer(a, "kernel"), integer(a, "stride"), true, padding_of(a), ceil_mode_of(a));
       },
       .f32_tolerance = kExact, .golden_family = "pool", .more_samples = pool_samples(false)},
      // Overlapping windows (kernel 3, stride 2): an element's gradient sums over two windows.
      {.op = Op::AvgPool2d, .name = "avg_pool2d",
       .call = [](I in, A a) {
         return hg::avg_pool2d(in[0], {.kernel = integer(a, "kernel"), .stride = integer(a, "stride"),
                                       .padding = padding_of(a), .ceil_mode = ceil_mode_of(a),
                                       .count_include_pad = count_include_pad_of(a)});
       },
       .default_args = R"({"kernel": 3, "stride": 2})", .inputs = {{{1, 2, 5, 5}}},
       .reference = [](const Arrays& x, A a) {
         return ref::pool2d(x[0], integer(a, "kernel"), integer(a, "stride"), false, padding_of(a), ceil_mode_of(a),
                            count_include_pad_of(a));
       },
       .f32_tolerance = kF32, .golden_family = "pool", .more_samples = pool_samples(true)},
      {.op = Op::AdaptiveAvgPool2d, .name = "adaptive_avg_pool2d",
       .call = [](I in, A a) { return hg::adaptive_avg_pool2d(in[0], integers(a, "output_size")); },
       .default_args = R"({"output_size": [2, 3]})", .inputs = {{{2, 3, 5, 7}}},
       .reference = [](const Arrays& x, A a) {
         const hg::Shape size = integers(a, "output_size");
         return ref::adaptive_avg_pool2d(x[0], size[0], size[1]);
       },
       .f32_tolerance = kF32, .golden_family = "pool", .more_samples = adaptive_pool_samples()},
      {.op = Op::BatchNorm, .name = "batch_norm", .call = call_batch_norm,
       .default_args = R"({"training": true, "momentum": 0.1, "eps": 1e-5, "stats": false, "affine": true})",
       .inputs = {{{3, 2, 2, 2}}, {{2}}, {{2}}}, .reference = batch_norm, .f32_tolerance = kF32,
       .golden_family = "norm", .more_samples = batch_norm_samples()},
      {.op = Op::LayerNorm, .name = "layer_norm", .call = call_layer_norm,
       .default_args = R"({"normalized_shape": [4], "eps": 1e-5, "affine": true})",
       .inputs = {{kSmall}, {{4}}, {{4}}}, .reference = layer_norm, .f32_tolerance = kF32,
       .golden_family = "norm", .more_samples = layer_norm_samples()},
  };
}

// ---- dropout, embedding, cat ---------------------------------------------------------------------

std::vector<OpEntry> other_entries() {
  const auto dropout_args = [](double p, bool training) {
    std::ostringstream os;
    os << std::boolalpha << R"({"p": )" << p << R"(, "training": )" << training << "}";
    return os.str();
  };
  // 10^4 values in [1, 2) (none 0 by itself): enough draws for op_db.dropout_keeps_or_scales's count.
  const InputSpec many{.shape = {100, 100}, .values = Values::Positive, .low = 1, .high = 2};
  const auto indices = [](hg::Shape shape, std::vector<double> given, hg::DType dtype = hg::i64) {
    return InputSpec{
        .shape = std::move(shape), .values = Values::ClassIndex, .given = std::move(given), .index_dtype = dtype};
  };
  return {
      {.op = Op::Dropout, .name = "dropout",
       .call = [](I in, A a) { return hg::dropout(in[0], number(a, "p"), flag(a, "training")); },
       .default_args = dropout_args(0.3, true), .inputs = {{kSmall}}, .reference = {},
       .no_reference_because = "its mask comes from halfgrad's Philox stream; op_db.dropout_keeps_or_scales checks "
                               "that each element is dropped or scaled by 1/(1-p), as often as p says",
       .f32_tolerance = kF32, .golden_family = "",
       // 10^4 draws at p = 0.3; p = 0 and eval, the identity; p = 1, everything dropped.
       .more_samples = {{.inputs = {many}, .args = dropout_args(0.3, true)},
                        {.inputs = {many}, .args = dropout_args(0, true)},
                        {.inputs = {many}, .args = dropout_args(1, true)},
                        {.inputs = {many}, .args = dropout_args(0.3, false)},
                        {.inputs = {{.shape = {5, 67}, .stddev = 2}}, .args = dropout_args(0.25, true)}}},
      // Index 2 is likely used twice: its row's gradient is then the sum of both uses.
      {.op = Op::Embedding, .name = "embedding", .call = [](I in, A) { return hg::embedding(in[0], in[1]); },
       .default_args = "{}", .inputs = {{{2, 3}, Values::ClassIndex, 4}, {{4, 3}}},
       .reference = [](const Arrays& x, A) { return embedding(x[0], x[1]); }, .f32_tolerance = kExact,
       .golden_family = "embedding",
       // Index 2 used three times, rows picked out of order, and i32 indices.
       .more_samples = {{.inputs = {indices({2, 3}, {0, 2, 2, 4, 1, 2}), {{5, 3}}}},
                        {.inputs = {indices({2, 3}, {3, 0, 10, 3, 7, 1}), {{11, 5}}}},
                        {.inputs = {indices({1}, {10}, hg::i32), {{11, 5}}}},
                        {.inputs = {indices({2, 2}, {6, 0, 3, 2}), {{7, 6}}}}}},
      {.op = Op::Cat, .name = "cat", .call = [](I in, A a) { return hg::cat(in, int(integer(a, "dim"))); },
       .default_args = R"({"dim": 1})", .inputs = {{{2, 1}}, {{2, 3}}, {{2, 2}}},
       .reference = [](const Arrays& x, A a) { return cat(x, integer(a, "dim")); }, .f32_tolerance = kExact,
       .golden_family = "cat",
       .more_samples = {{.inputs = {{{2, 3}}, {{1, 3}}, {{3, 3}}}, .args = R"({"dim": 0})"},
                        {.inputs = {{{2, 1}}, {{2, 3}}, {{2, 2}}}, .args = R"({"dim": -1})"},
                        {.inputs = {{{2, 3}}, {{2, 1}}, {{2, 4}}}, .args = R"({"dim": 1})"},
                        {.inputs = {{{2, 3}}, {{2, 3}}}, .args = R"({"dim": 0})"},
                        {.inputs = {{.shape = {5, 67}, .stddev = 2}, {.shape = {5, 67}, .stddev = 2}},
                         .args = R"({"dim": 0})"}}},
  };
}

// ---- views and copies: they move values, so the reference moves them too --------------------------

// Element c of the result reads element source(c) of the input.
template <class F>
ref::Array gather_by(const ref::Array& x, const hg::Shape& shape, F source) {
  ref::Array out{shape, std::vector<double>(size_t(ref::numel(shape)))};
  for (int64_t i = 0; i < ref::numel(shape); ++i) out.v[size_t(i)] = x.v[size_t(ref::offset(source(ref::coords(i, shape)), x.shape))];
  return out;
}

ref::Array permuted(const ref::Array& x, const hg::Shape& dims) {
  hg::Shape shape(x.shape.size());
  for (size_t d = 0; d < dims.size(); ++d) shape[d] = x.shape[dims[d]];
  return gather_by(x, shape, [&](const std::vector<int64_t>& c) {
    std::vector<int64_t> src(c.size());
    for (size_t d = 0; d < dims.size(); ++d) src[size_t(dims[d])] = c[d];
    return src;
  });
}

ref::Array expanded(const ref::Array& x, const hg::Shape& shape) {
  const size_t lead = shape.size() - x.shape.size();
  return gather_by(x, shape, [&](const std::vector<int64_t>& c) {
    std::vector<int64_t> src(x.shape.size());
    for (size_t d = 0; d < src.size(); ++d) src[d] = x.shape[d] == 1 ? 0 : c[d + lead];
    return src;
  });
}

ref::Array narrowed(const ref::Array& x, int64_t dim, int64_t start, int64_t length) {
  hg::Shape shape = x.shape;
  shape[dim] = length;
  return gather_by(x, shape, [&](std::vector<int64_t> c) {
    c[size_t(dim)] += start;
    return c;
  });
}

// a where cond, else b: cond (i64 0/1) broadcast with the branches.
ref::Array where_ref(const Arrays& x) {
  const ref::Array cond_and_a = ref::zip(x[0], x[1], [](double c, double a) { return c != 0 ? a : std::nan(""); });
  return ref::zip(cond_and_a, ref::zip(x[0], x[2], [](double c, double b) { return c != 0 ? std::nan("") : b; }),
                  [](double a, double b) { return std::isnan(a) ? b : a; });
}

// ---- indexing and rearranging (ops/indexing.h) ------------------------------------------------

InputSpec index_input(hg::Shape shape, std::vector<double> given) {
  const int64_t classes = given.empty() ? 1 : int64_t(*std::max_element(given.begin(), given.end())) + 1;
  return {.shape = std::move(shape), .values = Values::ClassIndex, .classes = classes, .given = std::move(given)};
}

// out[c] = x[c with c[dim] = index[c[dim]]] (index_select) or index[c] (gather).
ref::Array index_select_ref(const ref::Array& x, const ref::Array& index, int64_t dim) {
  const int64_t d = dim < 0 ? dim + int64_t(x.shape.size()) : dim;
  hg::Shape shape = x.shape;
  shape[d] = int64_t(index.v.size());
  return gather_by(x, shape, [&](std::vector<int64_t> c) {
    c[size_t(d)] = int64_t(index.v[size_t(c[size_t(d)])]);
    return c;
  });
}

ref::Array gather_ref(const ref::Array& x, const ref::Array& index, int64_t dim) {
  const int64_t d = dim < 0 ? dim + int64_t(x.shape.size()) : dim;
  ref::Array out{index.shape, std::vector<double>(index.v.size())};
  for (int64_t i = 0; i < ref::numel(index.shape); ++i) {
    std::vector<int64_t> c = ref::coords(i, index.shape);
    c[size_t(d)] = int64_t(index.v[size_t(i)]);
    out.v[size_t(i)] = x.v[size_t(ref::offset(c, x.shape))];
  }
  return out;
}

ref::Array scatter_add_ref(const ref::Array& x, const ref::Array& index, const ref::Array& src, int64_t dim) {
  const int64_t d = dim < 0 ? dim + int64_t(x.shape.size()) : dim;
  ref::Array out = x;
  for (int64_t i = 0; i < ref::numel(index.shape); ++i) {
    const std::vector<int64_t> at = ref::coords(i, index.shape);
    std::vector<int64_t> c = at;
    c[size_t(d)] = int64_t(index.v[size_t(i)]);
    out.v[size_t(ref::offset(c, x.shape))] += src.v[size_t(ref::offset(at, src.shape))];
  }
  return out;
}

// PyTorch's F.pad written out: for each padded dim, output position j reads input j - left, or
// the constant, or its reflection / the nearest edge.
ref::Array pad_ref(const ref::Array& x, const hg::Shape& pads, const std::string& mode, double value) {
  const int64_t nd = int64_t(x.shape.size());
  hg::Shape shape = x.shape;
  for (size_t k = 0; k < pads.size() / 2; ++k) shape[size_t(nd - 1 - int64_t(k))] += pads[2 * k] + pads[2 * k + 1];
  ref::Array out{shape, std::vector<double>(size_t(ref::numel(shape)))};
  for (int64_t i = 0; i < ref::numel(shape); ++i) {
    std::vector<int64_t> c = ref::coords(i, shape);
    bool outside = false;
    for (size_t k = 0; k < pads.size() / 2; ++k) {
      const size_t d = size_t(nd - 1 - int64_t(k));
      const int64_t n = x.shape[d];
      int64_t j = c[d] - pads[2 * k];
      if (mode == "reflect") j = j < 0 ? -j : j >= n ? 2 * (n - 1) - j : j;
      if (mode == "replicate") j = std::clamp<int64_t>(j, 0, n - 1);
      outside = outside || j < 0 || j >= n;
      c[d] = j;
    }
    out.v[size_t(i)] = outside ? value : x.v[size_t(ref::offset(c, x.shape))];
  }
  return out;
}

std::string pad_args(const std::string& pads, const std::string& mode, double value = 0) {
  std::ostringstream os;
  os << R"({"pads": )" << pads << R"(, "mode": ")" << mode << R"(", "value": )" << value << "}";
  return os.str();
}

std::vector<OpEntry> indexing_entries() {
  const char* const kRepeatsRound = "repeated indices add several gradients, rounding after each (as PyTorch's kernels)";
  return {
      // Row 3 picked twice and row 2 not at all: its gradient is the sum of both uses.
      {.op = Op::IndexSelect, .name = "index_select",
       .call = [](I in, A a) { return hg::index_select(in[0], int(integer(a, "dim")), in[1]); },
       .default_args = R"({"dim": 0})", .inputs = {{{4, 5}}, index_input({5}, {3, 0, 3, 1, 0})},
       .reference = [](const Arrays& x, A a) { return index_select_ref(x[0], x[1], integer(a, "dim")); },
       .f32_tolerance = kExact, .golden_family = "indexing",
       .more_samples = {{.inputs = {{{3, 5, 2}}, index_input({3}, {4, 0, 2})}, .args = R"({"dim": 1})"},
                        {.inputs = {{{2, 3, 4}}, index_input({6}, {3, 3, 0, 1, 2, 3})}, .args = R"({"dim": -1})"},
                        {.inputs = {{{3, 2}}, index_input({0}, {})}, .args = R"({"dim": 0})"}},
       .no_16_bit_backward_because = kRepeatsRound},
      {.op = Op::Gather, .name = "gather", .call = [](I in, A a) { return hg::gather(in[0], int(integer(a, "dim")), in[1]); },
       .default_args = R"({"dim": 1})", .inputs = {{{3, 5}}, index_input({3, 4}, {4, 0, 4, 2, 1, 1, 3, 0, 2, 2, 2, 4})},
       .reference = [](const Arrays& x, A a) { return gather_ref(x[0], x[1], integer(a, "dim")); },
       .f32_tolerance = kExact, .golden_family = "indexing",
       .more_samples = {{.inputs = {{{4, 3}}, index_input({2, 3}, {3, 0, 1, 0, 3, 2})}, .args = R"({"dim": 0})"},
                        {.inputs = {{{2, 3, 4}}, index_input({2, 2, 4}, {0, 1, 2, 0, 2, 2, 1, 0, 1, 1, 0, 2, 0, 0, 2, 1})},
                         .args = R"({"dim": -2})"}},
       .no_16_bit_backward_because = kRepeatsRound},
      {.op = Op::ScatterAdd, .name = "scatter_add",
       .call = [](I in, A a) { return hg::scatter_add(in[0], int(integer(a, "dim")), in[1], in[2]); },
       .default_args = R"({"dim": 1})", .inputs = {{{3, 5}}, index_input({3, 4}, {4, 0, 4, 2, 1, 1, 3, 0, 2, 2, 2, 4}), {{3, 4}}},
       .reference = [](const Arrays& x, A a) { return scatter_add_ref(x[0], x[1], x[2], integer(a, "dim")); },
       .f32_tolerance = kF32, .golden_family = "indexing",
       // src larger than index (only its leading block is read) and dim 0.
       .more_samples = {{.inputs = {{{4, 3}}, index_input({2, 3}, {3, 0, 1, 0, 3, 2}), {{3, 4}}}, .args = R"({"dim": 0})"}},
       .no_16_bit_check_because = "repeated indices add several values into one, rounding after each (as PyTorch's)"},
      {.op = Op::Flip, .name = "flip", .call = [](I in, A a) { return hg::flip(in[0], integers(a, "dims")); },
       .default_args = R"({"dims": [0, 2]})", .inputs = {{{3, 4, 5}}},
       .reference =
           [](const Arrays& x, A a) {
             const hg::Shape dims = integers(a, "dims");
             return gather_by(x[0], x[0].shape, [&](std::vector<int64_t> c) {
               for (int64_t d : dims) {
                 const size_t k = size_t(d < 0 ? d + int64_t(c.size()) : d);
                 c[k] = x[0].shape[k] - 1 - c[k];
               }
               return c;
             });
           },
       .f32_tolerance = kExact, .golden_family = "indexing",
       .more_samples = {{.inputs = {{{6}}}, .args = R"({"dims": [-1]})"}, {.inputs = {{{2, 3}}}, .args = R"({"dims": []})"}},
       .composed = true},
      {.op = Op::Roll, .name = "roll",
       .call = [](I in, A a) { return hg::roll(in[0], integer(a, "shift"), int(integer(a, "dim"))); },
       .default_args = R"({"shift": 2, "dim": 1})", .inputs = {{{3, 5}}},
       .reference =
           [](const Arrays& x, A a) {
             const int64_t dim = integer(a, "dim"), d = dim < 0 ? dim + int64_t(x[0].shape.size()) : dim;
             const int64_t n = x[0].shape[size_t(d)], shift = integer(a, "shift");
             return gather_by(x[0], x[0].shape, [&](std::vector<int64_t> c) {
               c[size_t(d)] = (((c[size_t(d)] - shift) % n) + n) % n;
               return c;
             });
           },
       .f32_tolerance = kExact, .golden_family = "indexing",
       .more_samples = {{.inputs = {{{4, 3}}}, .args = R"({"shift": -7, "dim": 0})"},
                        {.inputs = {{{2, 3}}}, .args = R"({"shift": 3, "dim": -1})"}},
       .composed = true},
      {.op = Op::Repeat, .name = "repeat", .call = [](I in, A a) { return hg::repeat(in[0], integers(a, "repeats")); },
       .default_args = R"({"repeats": [2, 1, 3]})", .inputs = {{{2, 3}}},
       .reference =
           [](const Arrays& x, A a) {
             const hg::Shape r = integers(a, "repeats");
             const size_t lead = r.size() - x[0].shape.size();
             hg::Shape shape(r.size(), 1);
             for (size_t d = 0; d < r.size(); ++d) shape[d] = r[d] * (d < lead ? 1 : x[0].shape[d - lead]);
             return gather_by(x[0], shape, [&](const std::vector<int64_t>& c) {
               std::vector<int64_t> src(x[0].shape.size());
               for (size_t d = 0; d < src.size(); ++d) src[d] = c[d + lead] % x[0].shape[d];
               return src;
             });
           },
       .f32_tolerance = kExact, .golden_family = "indexing",
       .more_samples = {{.inputs = {{{3}}}, .args = R"({"repeats": [2]})"},
                        {.inputs = {{{2, 1, 2}}}, .args = R"({"repeats": [1, 3, 2]})"}},
       .no_16_bit_backward_because = "the gradient adds up the copies, rounding after each",
       .composed = true},
      {.op = Op::Pad, .name = "pad",
       .call =
           [](I in, A a) {
             const hg::Shape pads = integers(a, "pads");
             return hg::pad(in[0], std::vector<int64_t>(pads.begin(), pads.end()),
                            {.mode = arg(a, "mode", Args::Kind::String).text, .value = number(a, "value")});
           },
       .default_args = pad_args("[1, 2]", "constant", 0.5), .inputs = {{{2, 3, 5}}},
       .reference =
           [](const Arrays& x, A a) {
             return pad_ref(x[0], integers(a, "pads"), arg(a, "mode", Args::Kind::String).text, number(a, "value"));
           },
       .f32_tolerance = kExact, .golden_family = "indexing",
       .more_samples = {{.inputs = {{{2, 3, 5}}}, .args = pad_args("[2, 1, 1, 0]", "constant", -1)},
                        {.inputs = {{{2, 3, 5}}}, .args = pad_args("[-1, 2]", "constant")},
                        {.inputs = {{{2, 3, 5}}}, .args = pad_args("[2, 4]", "reflect")},
                        {.inputs = {{{1, 2, 4, 3}}}, .args = pad_args("[1, 2, 2, 1]", "reflect")},
                        {.inputs = {{{2, 3, 5}}}, .args = pad_args("[3, 1]", "replicate")},
                        {.inputs = {{{1, 2, 3, 3}}}, .args = pad_args("[1, 0, 2, 2]", "replicate")}},
       .no_16_bit_backward_because = "reflected and replicated positions add up their gradients, rounding after each",
       .composed = true},
  };
}

std::vector<OpEntry> layout_entries() {
  return {
      {.op = Op::Where, .name = "where", .call = [](I in, A) { return hg::where(in[0], in[1], in[2]); },
       .default_args = "{}", .inputs = {{{3, 4}, Values::ClassIndex, 2}, {{3, 4}}, {{3, 4}}},
       .reference = [](const Arrays& x, A) { return where_ref(x); }, .f32_tolerance = kExact, .golden_family = "shape",
       .more_samples = {{.inputs = {{{3, 1}, Values::ClassIndex, 2}, {{3, 4}}, {.shape = {4}, .broadcast = true}}},
                        {.inputs = {{{4}, Values::ClassIndex, 2}, {.shape = {}, .broadcast = true}, {{2, 4}}}}}},
      {.op = Op::View, .name = "view", .call = [](I in, A a) { return in[0].reshape(integers(a, "shape")); },
       .default_args = R"({"shape": [3, 4]})", .inputs = {{{2, 6}}},
       .reference = [](const Arrays& x, A a) { return ref::Array{integers(a, "shape"), x[0].v}; },
       .f32_tolerance = kExact, .golden_family = "shape",
       .more_samples = {{.inputs = {{{2, 3, 4}}}, .args = R"({"shape": [6, 4]})"},
                        {.inputs = {{{5}}}, .args = R"({"shape": [1, 5, 1]})"},
                        {.inputs = {{{0, 4}}}, .args = R"({"shape": [2, 0]})"}}},
      {.op = Op::Permute, .name = "permute", .call = [](I in, A a) { return in[0].permute(integers(a, "dims")); },
       .default_args = R"({"dims": [2, 0, 1]})", .inputs = {{{2, 3, 4}}},
       .reference = [](const Arrays& x, A a) { return permuted(x[0], integers(a, "dims")); }, .f32_tolerance = kExact,
       .golden_family = "shape",
       .more_samples = {{.inputs = {{{3, 5}}}, .args = R"({"dims": [1, 0]})"},
                        {.inputs = {{{2, 1, 3, 2}}}, .args = R"({"dims": [3, 1, 0, 2]})"}}},
      {.op = Op::Expand, .name = "expand", .call = [](I in, A a) { return hg::expand(in[0], integers(a, "shape")); },
       .default_args = R"({"shape": [2, 3, 4]})", .inputs = {{{3, 1}}},
       .reference = [](const Arrays& x, A a) { return expanded(x[0], integers(a, "shape")); }, .f32_tolerance = kExact,
       .golden_family = "shape",
       .more_samples = {{.inputs = {{{1}}}, .args = R"({"shape": [5]})"},
                        {.inputs = {{{2, 1, 3}}}, .args = R"({"shape": [2, 4, 3]})"}}},
      {.op = Op::Narrow, .name = "narrow",
       .call = [](I in, A a) {
         return hg::narrow(in[0], int(integer(a, "dim")), integer(a, "start"), integer(a, "length"));
       },
       .default_args = R"({"dim": 1, "start": 1, "length": 2})", .inputs = {{{3, 5}}},
       .reference = [](const Arrays& x, A a) {
         return narrowed(x[0], integer(a, "dim"), integer(a, "start"), integer(a, "length"));
       },
       .f32_tolerance = kExact, .golden_family = "shape",
       .more_samples = {{.inputs = {{{4, 2, 3}}}, .args = R"({"dim": 0, "start": 3, "length": 1})"},
                        {.inputs = {{{4, 2, 3}}}, .args = R"({"dim": 2, "start": 0, "length": 0})"}}},
      {.op = Op::Clone, .name = "clone", .call = [](I in, A) { return in[0].clone(); }, .default_args = "{}",
       .inputs = {{{2, 3}}},
       .reference = [](const Arrays& x, A) { return x[0]; }, .f32_tolerance = kExact, .golden_family = "shape",
       .more_samples = {{.inputs = {{{7}}}}, {.inputs = {{{}}}}}},
  };
}

// ---- the rest of the vision ops: conv1d, conv_transpose2d, prelu, group/instance norm,
// interpolate, adaptive_max_pool2d ------------------------------------------------------------------

std::string conv_args(std::initializer_list<std::pair<const char*, int64_t>> fields) {
  std::string out = "{";
  for (const auto& [key, value] : fields) out += (out.size() > 1 ? ", \"" : "\"") + std::string(key) + "\": " + std::to_string(value);
  return out + "}";
}

SampleSpec conv1d_sample(hg::Shape x, hg::Shape w, bool bias, int64_t stride, int64_t padding, int64_t dilation = 1,
                         int64_t groups = 1) {
  const int64_t K = w[1] * w[2], out = w[0];
  std::vector<InputSpec> inputs{{std::move(x)}, {std::move(w)}};
  if (bias) inputs.push_back({{out}});
  return {.inputs = std::move(inputs),
          .args = conv_args({{"stride", stride}, {"padding", padding}, {"dilation", dilation}, {"groups", groups}}),
          .f32_tolerance = gemm_tolerance(K)};
}

SampleSpec conv_transpose2d_sample(hg::Shape x, hg::Shape w, bool bias, int64_t stride, int64_t padding,
                                   int64_t output_padding = 0, int64_t groups = 1, int64_t dilation = 1) {
  const int64_t out = w[1] * groups, K = w[0] / groups * w[2] * w[3];
  std::vector<InputSpec> inputs{{std::move(x)}, {std::move(w)}};
  if (bias) inputs.push_back({{out}});
  return {.inputs = std::move(inputs),
          .args = conv_args({{"stride", stride}, {"padding", padding}, {"output_padding", output_padding},
                             {"groups", groups}, {"dilation", dilation}}),
          .f32_tolerance = gemm_tolerance(K)};
}

// Inputs [x, (running_mean, running_var)?, (weight, bias)?], as for batch_norm.
Tensor call_instance_norm(I in, A a) {
  const bool stats = flag(a, "stats"), affine = flag(a, "affine");
  const Tensor mean = stats ? in[1] : Tensor(), var = stats ? in[2] : Tensor();
  const Tensor weight = affine ? in[in.size() - 2] : Tensor(), bias = affine ? in[in.size() - 1] : Tensor();
  return hg::instance_norm(in[0], mean, var, weight, bias, flag(a, "use_input_stats"), number(a, "momentum"),
                           number(a, "eps"));
}

ref::Array instance_norm(const Arrays& x, A a) {
  const bool affine = flag(a, "affine");
  const std::vector<double> weight = affine ? x[x.size() - 2].v : std::vector<double>{};
  const std::vector<double> bias = affine ? x[x.size() - 1].v : std::vector<double>{};
  if (!flag(a, "use_input_stats")) return ref::batch_norm(x[0], x[1].v, x[2].v, weight, bias, number(a, "eps"));
  return ref::group_norm(x[0], x[0].shape[1], weight, bias, number(a, "eps"));
}

std::vector<SampleSpec> instance_norm_samples() {
  const auto args = [](bool use_input_stats, bool stats, bool affine) {
    std::ostringstream os;
    os << std::boolalpha << R"({"use_input_stats": )" << use_input_stats << R"(, "momentum": 0.1, "eps": 1e-5, "stats": )"
       << stats << R"(, "affine": )" << affine << "}";
    return os.str();
  };
  const auto inputs = [](hg::Shape shape, bool stats, bool affine) {
    const int64_t C = shape[1];
    std::vector<InputSpec> in{{.shape = std::move(shape), .mean = 1, .stddev = 2}};
    if (stats) {
      in.push_back({.shape = {C}, .differentiable = false});
      in.push_back({.shape = {C}, .values = Values::Positive, .low = 0.05, .high = 4.05, .differentiable = false});
    }
    if (affine) in.insert(in.end(), {{{C}}, {{C}}});
    return in;
  };
  return {{.inputs = inputs({2, 3, 4, 5}, false, false), .args = args(true, false, false)},
          {.inputs = inputs({2, 3, 4, 5}, true, true), .args = args(true, true, true)},
          {.inputs = inputs({3, 2, 7}, false, true), .args = args(true, false, true)},
          {.inputs = inputs({1, 4, 3, 3}, true, false), .args = args(true, true, false)},
          {.inputs = inputs({2, 3, 4, 5}, true, true), .args = args(false, true, true)},
          {.inputs = inputs({2, 5, 9, 9}, false, true), .args = args(true, false, true)}};
}

Tensor call_group_norm(I in, A a) {
  const bool affine = flag(a, "affine");
  return hg::group_norm(in[0], integer(a, "num_groups"), affine ? in[1] : Tensor(), affine ? in[2] : Tensor(),
                        number(a, "eps"));
}

std::vector<SampleSpec> group_norm_samples() {
  const auto sample = [](hg::Shape shape, int64_t groups, bool affine, double eps = 1e-5) {
    const int64_t C = shape[1];
    std::vector<InputSpec> in{{.shape = std::move(shape), .mean = 0.5, .stddev = 2}};
    if (affine) in.insert(in.end(), {{{C}}, {{C}}});
    std::ostringstream os;
    os << std::boolalpha << R"({"num_groups": )" << groups << R"(, "eps": )" << eps << R"(, "affine": )" << affine << "}";
    return SampleSpec{.inputs = in, .args = os.str()};
  };
  // One group (layer norm over C, H, W), one channel per group, groups of 2 and 3 channels;
  // 2-D to 4-D inputs; a larger eps.
  return {sample({2, 6, 3, 3}, 1, true),  sample({2, 6, 3, 3}, 6, true), sample({2, 6, 3, 3}, 3, false),
          sample({3, 4, 5}, 2, true),     sample({4, 6}, 2, true),       sample({1, 9, 4, 4}, 3, true, 1e-3),
          sample({2, 32, 8, 8}, 8, true)};
}

ref::Array group_norm_ref(const Arrays& x, A a) {
  return ref::group_norm(x[0], integer(a, "num_groups"), optional_values(x, 1), optional_values(x, 2), number(a, "eps"));
}

Tensor call_interpolate(I in, A a) {
  hg::InterpolateOptions options{.mode = arg(a, "mode", Args::Kind::String).text};
  if (a.find("size")) options.size = integers(a, "size");
  if (a.find("scale_factor")) options.scale_factor = number(a, "scale_factor");
  if (a.find("align_corners")) options.align_corners = flag(a, "align_corners");
  return hg::interpolate(in[0], options);
}

ref::Array interpolate_ref(const Arrays& x, A a) {
  const bool bilinear = arg(a, "mode", Args::Kind::String).text == "bilinear";
  const bool align = a.find("align_corners") ? flag(a, "align_corners") : false;
  const double factor = a.find("scale_factor") ? number(a, "scale_factor") : 0.0;
  const int64_t H = x[0].shape[2], W = x[0].shape[3];
  const hg::Shape size = a.find("size") ? integers(a, "size")
                                        : hg::Shape{int64_t(std::floor(double(H) * factor)), int64_t(std::floor(double(W) * factor))};
  return ref::interpolate(x[0], size[0], size[1], bilinear, align, factor);
}

std::vector<SampleSpec> interpolate_samples() {
  const auto sample = [](hg::Shape shape, std::string args) {
    return SampleSpec{.inputs = {{std::move(shape)}}, .args = std::move(args)};
  };
  // Up and down, by size and by factor (2, 1.5, 0.5), non-square; bilinear with and without
  // align_corners, to one pixel; a 1-pixel input.
  return {sample({2, 3, 4, 5}, R"({"mode": "nearest", "size": [8, 10]})"),
          sample({1, 2, 7, 6}, R"({"mode": "nearest", "size": [3, 4]})"),
          sample({1, 2, 5, 4}, R"({"mode": "nearest", "size": [7, 9]})"),
          sample({2, 2, 4, 4}, R"({"mode": "nearest", "scale_factor": 2})"),
          sample({1, 3, 4, 6}, R"({"mode": "nearest", "scale_factor": 1.5})"),
          sample({1, 2, 3, 3}, R"({"mode": "bilinear", "size": [6, 5]})"),
          sample({1, 2, 3, 3}, R"({"mode": "bilinear", "size": [6, 5], "align_corners": true})"),
          sample({2, 2, 8, 7}, R"({"mode": "bilinear", "size": [3, 4]})"),
          sample({1, 2, 6, 5}, R"({"mode": "bilinear", "size": [3, 4], "align_corners": true})"),
          sample({1, 1, 4, 4}, R"({"mode": "bilinear", "scale_factor": 0.5})"),
          sample({1, 2, 4, 5}, R"({"mode": "bilinear", "scale_factor": 2})"),
          sample({1, 1, 1, 1}, R"({"mode": "bilinear", "size": [3, 2]})"),
          sample({1, 1, 5, 5}, R"({"mode": "bilinear", "size": [1, 1], "align_corners": true})")};
}

std::vector<OpEntry> vision_entries() {
  return {
      {.op = Op::Conv1d, .name = "conv1d",
       .call =
           [](I in, A a) {
             return hg::conv1d(in[0], in[1], optional_input(in, 2),
                               {.stride = integer(a, "stride"), .padding = integer(a, "padding"),
                                .dilation = integer(a, "dilation", 1), .groups = integer(a, "groups", 1)});
           },
       .default_args = R"({"stride": 1, "padding": 1})", .inputs = {{{2, 3, 7}}, {{4, 3, 3}}, {{4}}},
       .reference =
           [](const Arrays& x, A a) {
             return ref::conv1d(x[0], x[1], optional_values(x, 2), integer(a, "stride"), integer(a, "padding"),
                                integer(a, "dilation", 1), integer(a, "groups", 1));
           },
       .f32_tolerance = gemm_tolerance(9), .golden_family = "vision",
       .more_samples = {conv1d_sample({1, 2, 9}, {3, 2, 3}, false, 2, 0), conv1d_sample({2, 4, 10}, {4, 1, 5}, true, 1, 2, 1, 4),
                        conv1d_sample({1, 4, 11}, {6, 2, 3}, true, 2, 2, 2, 2), conv1d_sample({3, 5, 6}, {2, 5, 1}, true, 1, 0),
                        conv1d_sample({1, 3, 33}, {5, 3, 7}, false, 3, 3)}},
      {.op = Op::ConvTranspose2d, .name = "conv_transpose2d",
       .call =
           [](I in, A a) {
             return hg::conv_transpose2d(in[0], in[1], optional_input(in, 2),
                                         {.stride = integer(a, "stride"), .padding = integer(a, "padding"),
                                          .output_padding = integer(a, "output_padding", 0),
                                          .groups = integer(a, "groups", 1), .dilation = integer(a, "dilation", 1)});
           },
       .default_args = R"({"stride": 2, "padding": 1})", .inputs = {{{1, 3, 4, 4}}, {{3, 2, 3, 3}}, {{2}}},
       .reference =
           [](const Arrays& x, A a) {
             return ref::conv_transpose2d(x[0], x[1], optional_values(x, 2), integer(a, "stride"), integer(a, "padding"),
                                          integer(a, "output_padding", 0), integer(a, "groups", 1),
                                          integer(a, "dilation", 1));
           },
       .f32_tolerance = gemm_tolerance(27), .golden_family = "vision",
       .more_samples = {
           // A DCGAN-style 4x4/2 upsampling, output_padding, no padding, 1x1, groups and
           // depthwise, dilation.
           conv_transpose2d_sample({2, 4, 3, 3}, {4, 3, 4, 4}, true, 2, 1),
           conv_transpose2d_sample({1, 2, 3, 4}, {2, 3, 3, 3}, false, 2, 1, 1),
           conv_transpose2d_sample({2, 3, 2, 3}, {3, 2, 2, 2}, true, 1, 0),
           conv_transpose2d_sample({1, 5, 3, 3}, {5, 4, 1, 1}, true, 1, 0),
           conv_transpose2d_sample({1, 4, 3, 3}, {4, 3, 3, 3}, true, 2, 1, 1, 2),
           conv_transpose2d_sample({2, 3, 4, 4}, {3, 1, 3, 3}, false, 1, 1, 0, 3),
           conv_transpose2d_sample({1, 2, 3, 3}, {2, 2, 3, 3}, true, 1, 2, 0, 1, 2),
           conv_transpose2d_sample({1, 2, 4, 3}, {2, 3, 3, 2}, true, 3, 2, 2, 1, 1),
       }},
      // PyTorch's slope per channel or one for all; N(0, 4) reaches both sides.
      {.op = Op::Prelu, .name = "prelu", .call = [](I in, A) { return hg::prelu(in[0], in[1]); },
       .default_args = "{}", .inputs = {{.shape = {2, 3, 4}, .stddev = 2}, {{3}}},
       .reference = [](const Arrays& x, A) { return ref::prelu(x[0], x[1].v); }, .f32_tolerance = kF32,
       .golden_family = "vision",
       .more_samples = {{.inputs = {{.shape = {2, 3, 2, 2}, .stddev = 2}, {.shape = {1}, .broadcast = true}}},
                        {.inputs = {{.shape = {5, 4}, .stddev = 2}, {.shape = {4}, .broadcast = true}}},
                        {.inputs = {{.shape = {7}, .stddev = 2}, {.shape = {1}, .broadcast = true}}},
                        {.inputs = {{.shape = {2, 6, 3, 3}, .stddev = 2}, {.shape = {6}, .broadcast = true}}}}},
      {.op = Op::GroupNorm, .name = "group_norm", .call = call_group_norm,
       .default_args = R"({"num_groups": 2, "eps": 1e-5, "affine": true})",
       .inputs = {{.shape = {2, 4, 3, 3}, .mean = 0.5, .stddev = 2}, {{4}}, {{4}}}, .reference = group_norm_ref,
       .f32_tolerance = kF32, .golden_family = "vision", .more_samples = group_norm_samples()},
      {.op = Op::InstanceNorm, .name = "instance_norm", .call = call_instance_norm,
       .default_args = R"({"use_input_stats": true, "momentum": 0.1, "eps": 1e-5, "stats": false, "affine": true})",
       .inputs = {{.shape = {2, 3, 4, 4}, .mean = 1, .stddev = 2}, {{3}}, {{3}}}, .reference = instance_norm,
       .f32_tolerance = kF32, .golden_family = "vision", .more_samples = instance_norm_samples()},
      {.op = Op::Interpolate, .name = "interpolate", .call = call_interpolate,
       .default_args = R"({"mode": "bilinear", "size": [5, 7]})", .inputs = {{{2, 3, 3, 4}}},
       .reference = interpolate_ref, .f32_tolerance = kF32, .golden_family = "vision",
       .more_samples = interpolate_samples()},
      // A maximum is one of its inputs: exact.
      {.op = Op::AdaptiveMaxPool2d, .name = "adaptive_max_pool2d",
       .call = [](I in, A a) { return hg::adaptive_max_pool2d(in[0], integers(a, "output_size")); },
       .default_args = R"({"output_size": [2, 3]})", .inputs = {{{2, 3, 5, 7}}},
       .reference = [](const Arrays& x, A a) {
         const hg::Shape size = integers(a, "output_size");
         return ref::adaptive_max_pool2d(x[0], size[0], size[1]);
       },
       .f32_tolerance = kExact, .golden_family = "vision", .more_samples = adaptive_pool_samples()},
  };
}

// ---- the sequence ops: masks and pieces ------------------------------------------------------------

// x[..., i, j] kept where the triangle test holds, else 0.
ref::Array triangle_ref(const ref::Array& x, int64_t diagonal, bool lower) {
  ref::Array out = x;
  const int64_t rows = x.shape[x.shape.ndim() - 2], cols = x.shape.back();
  for (size_t e = 0; e < out.v.size(); ++e) {
    const int64_t i = int64_t(e) / cols % rows, j = int64_t(e) % cols;
    if (lower ? j - i > diagonal : j - i < diagonal) out.v[e] = 0;
  }
  return out;
}

// The pieces of `x` along `dim` (sizes given), concatenated in reverse order: every piece and its
// gradient lands somewhere other than where it started, so a wrong offset cannot hide.
ref::Array reversed_pieces_ref(const ref::Array& x, int dim, const std::vector<int64_t>& sizes) {
  const int64_t length = x.shape[dim];
  int64_t inner = 1, outer = 1;
  for (int d = dim + 1; d < x.shape.ndim(); ++d) inner *= x.shape[d];
  for (int d = 0; d < dim; ++d) outer *= x.shape[d];
  std::vector<int64_t> order;  // the source position along dim of each output position
  int64_t end = length;
  for (auto it = sizes.rbegin(); it != sizes.rend(); ++it) {
    for (int64_t k = end - *it; k < end; ++k) order.push_back(k);
    end -= *it;
  }
  ref::Array out = x;
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t p = 0; p < length; ++p)
      for (int64_t i = 0; i < inner; ++i)
        out.v[size_t((o * length + p) * inner + i)] = x.v[size_t((o * length + order[size_t(p)]) * inner + i)];
  return out;
}

hg::Tensor cat_reversed(std::vector<hg::Tensor> pieces, int dim) {
  std::reverse(pieces.begin(), pieces.end());
  return hg::cat(pieces, dim);
}

// The sizes split(x, size) / chunk(x, n) cut a dim of `length` into.
std::vector<int64_t> piece_sizes(int64_t length, int64_t size) {
  std::vector<int64_t> sizes;
  for (int64_t start = 0; start < length; start += size) sizes.push_back(std::min(size, length - start));
  return sizes;
}

SampleSpec mask_sample(hg::Shape x, hg::Shape mask, const std::string& args = "") {
  const bool broadcast = ref::numel(mask) > ref::numel(x);
  return {.inputs = {{.shape = std::move(x), .broadcast = broadcast},
                     {.shape = std::move(mask), .values = Values::ClassIndex, .classes = 2, .index_dtype = hg::u8}},
          .args = args};
}

// softmax(q k^T * scale + mask) v, row by row. The mask (x[3], if any) is boolean ("mask":
// "bool": nonzero = the key takes part) or added to the scores.
ref::Array attention_ref(const Arrays& x, const Args& a) {
  const hg::Shape& qs = x[0].shape;
  const int n = qs.ndim();
  const int64_t L = qs[n - 2], E = qs[n - 1], S = x[1].shape[n - 2], Ev = x[2].shape[n - 1];
  const int64_t batch = ref::numel(qs) / std::max<int64_t>(1, L * E);
  const double scale = a.find("scale") != nullptr ? number(a, "scale") : 1.0 / std::sqrt(double(E));
  const bool causal = a.find("is_causal") != nullptr && flag(a, "is_causal");
  const bool boolean = a.find("mask") != nullptr && arg(a, "mask", Args::Kind::String).text == "bool";
  hg::Shape scores_shape(std::vector<int64_t>(qs.begin(), qs.end() - 2));
  scores_shape.push_back(L);
  scores_shape.push_back(S);
  hg::Shape out_shape = qs;
  out_shape.back() = Ev;
  ref::Array out{out_shape, std::vector<double>(size_t(batch * L * Ev))};
  std::vector<double> p(static_cast<size_t>(S));
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t i = 0; i < L; ++i) {
      double top = -kInf;
      for (int64_t j = 0; j < S; ++j) {
        double s = 0;
        for (int64_t e = 0; e < E; ++e) s += x[0].v[size_t((b * L + i) * E + e)] * x[1].v[size_t((b * S + j) * E + e)];
        s *= scale;
        if (x.size() > 3) {
          const double m = ref::broadcast_at(x[3], ref::coords((b * L + i) * S + j, scores_shape));
          s = boolean ? (m != 0 ? s : -kInf) : s + m;
        }
        if (causal && j > i) s = -kInf;
        p[size_t(j)] = s;
        top = std::max(top, s);
      }
      double total = 0;
      for (double& s : p) total += (s = std::exp(s - top));
      for (int64_t d = 0; d < Ev; ++d) {
        double o = 0;
        for (int64_t j = 0; j < S; ++j) o += p[size_t(j)] / total * x[2].v[size_t((b * S + j) * Ev + d)];
        out.v[size_t((b * L + i) * Ev + d)] = o;
      }
    }
  return out;
}

hg::Tensor call_attention(I in, A a) {
  hg::ScaledDotProductAttentionOptions options{.attn_mask = optional_input(in, 3)};
  if (a.find("is_causal") != nullptr) options.is_causal = flag(a, "is_causal");
  if (a.find("scale") != nullptr) options.scale = number(a, "scale");
  return hg::scaled_dot_product_attention(in[0], in[1], in[2], options);
}

// q [..., L, E], k [..., S, E], v [..., S, Ev] (+ a mask).
std::vector<InputSpec> attention_inputs(hg::Shape batch, int64_t L, int64_t S, int64_t E, int64_t Ev) {
  auto with = [&](std::initializer_list<int64_t> last) {
    hg::Shape s = batch;
    s.insert(s.end(), last);
    return s;
  };
  return {{with({L, E})}, {with({S, E})}, {with({S, Ev})}};
}

// A boolean mask [rows, cols] with the key (i + shift) % cols taking part in every row, so that
// no row is fully masked (that row's output is NaN, as PyTorch's).
InputSpec attention_bool_mask(int64_t rows, int64_t cols, int64_t shift) {
  InputSpec mask{.shape = {rows, cols}, .values = Values::ClassIndex, .classes = 2, .index_dtype = hg::u8};
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) mask.given.push_back((i * 7 + j * 3) % 5 < 2 || j == (i + shift) % cols ? 1 : 0);
  return mask;
}

SampleSpec attention_sample(std::vector<InputSpec> inputs, std::string args) {
  return {.inputs = std::move(inputs), .args = std::move(args), .f32_tolerance = gemm_tolerance(64)};
}

ref::Array rms_norm_ref(const Arrays& x, const Args& a) {
  const hg::Shape shape = integers(a, "normalized_shape");
  const double eps = number(a, "eps");
  const int64_t D = ref::numel(shape), rows = D == 0 ? 0 : ref::numel(x[0].shape) / D;
  ref::Array out = x[0];
  for (int64_t r = 0; r < rows; ++r) {
    double squares = 0;
    for (int64_t d = 0; d < D; ++d) squares += x[0].v[size_t(r * D + d)] * x[0].v[size_t(r * D + d)];
    const double scale = 1 / std::sqrt(squares / double(D) + eps);
    for (int64_t d = 0; d < D; ++d)
      out.v[size_t(r * D + d)] *= scale * (x.size() > 1 ? x[1].v[size_t(d)] : 1.0);
  }
  return out;
}

hg::Tensor call_rms_norm(I in, A a) {
  return hg::rms_norm(in[0], integers(a, "normalized_shape"), optional_input(in, 1), number(a, "eps"));
}

// nn::MultiheadAttention's self-attention (inputs: x [B, T, E], in_proj_weight, in_proj_bias,
// out_proj.weight, out_proj.bias) as the naive f64 composition: project, split the heads,
// attention_ref per head, merge, project.
ref::Array multihead_ref(const Arrays& x, const Args& a) {
  const int64_t B = x[0].shape[0], T = x[0].shape[1], E = x[0].shape[2], H = integer(a, "num_heads"), Dh = E / H;
  const ref::Array qkv = ref::linear(x[0], x[1], x[2].v);  // [B, T, 3E]
  ref::Array merged{{B, T, E}, std::vector<double>(size_t(B * T * E))};
  Args head_args = hg::json::parse(a.find("is_causal") != nullptr && flag(a, "is_causal") ? R"({"is_causal": true})" : "{}",
                                   "multihead_ref");
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      Arrays qkv_head(3, ref::Array{{T, Dh}, std::vector<double>(size_t(T * Dh))});
      for (int part = 0; part < 3; ++part)
        for (int64_t t = 0; t < T; ++t)
          for (int64_t d = 0; d < Dh; ++d)
            qkv_head[size_t(part)].v[size_t(t * Dh + d)] = qkv.v[size_t((b * T + t) * 3 * E + part * E + h * Dh + d)];
      const ref::Array o = attention_ref(qkv_head, head_args);
      for (int64_t t = 0; t < T; ++t)
        for (int64_t d = 0; d < Dh; ++d) merged.v[size_t((b * T + t) * E + h * Dh + d)] = o.v[size_t(t * Dh + d)];
    }
  return ref::linear(merged, x[3], x[4].v);
}

hg::Tensor call_multihead(I in, A a) {
  hg::nn::MultiheadAttention mha(in[0].shape()[2], integer(a, "num_heads"));
  // The module computes with the inputs themselves (so that they get the gradients).
  mha.in_proj_weight = in[1], mha.in_proj_bias = in[2], mha.out_proj.weight = in[3], mha.out_proj.bias = in[4];
  const bool causal = a.find("is_causal") != nullptr && flag(a, "is_causal");
  const bool weights = a.find("need_weights") != nullptr && flag(a, "need_weights");
  return std::get<0>(mha.forward(in[0], in[0], in[0], {.need_weights = weights, .is_causal = causal}));
}

std::vector<InputSpec> multihead_inputs(int64_t B, int64_t T, int64_t E) {
  return {{.shape = {B, T, E}},          {.shape = {3 * E, E}, .stddev = 0.3}, {.shape = {3 * E}, .stddev = 0.1},
          {.shape = {E, E}, .stddev = 0.3}, {.shape = {E}, .stddev = 0.1}};
}

std::vector<OpEntry> sequence_entries() {
  return {
      // The fused kernel against the naive softmax(q k^T) v: blocks of 96 rows and keys (64 for
      // f64, 128 for 16-bit inputs), so the longer samples cross block edges (with causality, partial blocks on
      // the diagonal).
      {.op = Op::ScaledDotProductAttention, .name = "scaled_dot_product_attention", .call = call_attention,
       .default_args = "{}", .inputs = attention_inputs({2, 2}, 5, 6, 4, 3), .reference = attention_ref,
       .f32_tolerance = gemm_tolerance(64), .golden_family = "sequence",
       .more_samples = {
           attention_sample(attention_inputs({2}, 7, 7, 4, 4), R"({"is_causal": true})"),
           attention_sample(attention_inputs({1}, 100, 140, 8, 5), R"({"is_causal": true})"),
           attention_sample(attention_inputs({1}, 130, 130, 3, 2), R"({"is_causal": true})"),
           attention_sample(attention_inputs({1}, 3, 9, 2, 2), R"({"is_causal": true, "scale": 0.3})"),
           attention_sample(attention_inputs({}, 4, 3, 5, 2), R"({"scale": 2.5})"),
           [] {
             std::vector<InputSpec> in = attention_inputs({2, 3}, 5, 6, 4, 4);
             in.push_back(attention_bool_mask(5, 6, 0));
             return attention_sample(in, R"({"mask": "bool"})");
           }(),
           [] {
             std::vector<InputSpec> in = attention_inputs({2, 2}, 3, 70, 4, 4);
             in.push_back({.shape = {2, 1, 3, 70}, .differentiable = false});
             return attention_sample(in, R"({"mask": "float"})");
           }(),
       },
       .no_16_bit_check_because = "16-bit inputs round P and dS to 16 bits before their products, FlashAttention-2's "
                                  "scheme (test_attention.cpp bounds that rounding)"},
      // nn::MultiheadAttention (self-attention) against its naive composition and PyTorch's
      // module: linear -> heads -> scaled_dot_product_attention (or explicit weights) -> linear.
      {.op = Op::ScaledDotProductAttention, .name = "scaled_dot_product_attention_multihead", .call = call_multihead,
       .default_args = R"({"num_heads": 2})", .inputs = multihead_inputs(2, 5, 8), .reference = multihead_ref,
       .f32_tolerance = gemm_tolerance(64), .golden_family = "sequence",
       .more_samples = {{.inputs = multihead_inputs(1, 7, 12), .args = R"({"num_heads": 3, "is_causal": true})",
                         .f32_tolerance = gemm_tolerance(64)},
                        {.inputs = multihead_inputs(2, 4, 8), .args = R"({"num_heads": 4, "need_weights": true})",
                         .f32_tolerance = gemm_tolerance(64)}},
       .composed = true,
       .no_16_bit_check_because = "five ops (two linears, the heads' layout, attention), each rounding to 16 bits"},
      // Composed (elementwise ops and a mean in f32): no node of its own.
      {.op = Op::RmsNorm, .name = "rms_norm", .call = call_rms_norm,
       .default_args = R"({"normalized_shape": [6], "eps": 1e-6})", .inputs = {{.shape = {3, 6}, .mean = 0.5, .stddev = 2}, {{6}}},
       .reference = rms_norm_ref, .f32_tolerance = kF32, .golden_family = "sequence",
       .more_samples = {{.inputs = {{.shape = {2, 3, 4, 5}, .stddev = 3}, {{4, 5}}}, .args = R"({"normalized_shape": [4, 5], "eps": 1e-5})"},
                        {.inputs = {{{2, 7}}}, .args = R"({"normalized_shape": [7], "eps": 0.1})"},
                        {.inputs = {{{4, 1}}, {{1}}}, .args = R"({"normalized_shape": [1], "eps": 1e-6})"}},
       .composed = true},
      // A choice per element: exact. The mask broadcasts both ways (attention's [T, T] mask over
      // [B, H, T, T] scores, and a [B, 1, 1, T] padding mask).
      {.op = Op::MaskedFill, .name = "masked_fill",
       .call = [](I in, A a) { return hg::masked_fill(in[0], in[1], number(a, "value")); },
       .default_args = R"({"value": -2.5})", .inputs = mask_sample({3, 4}, {3, 4}).inputs,
       .reference =
           [](const Arrays& x, A a) {
             const double value = number(a, "value");
             return ref::zip(x[0], x[1], [value](double v, double m) { return m != 0 ? value : v; });
           },
       .f32_tolerance = kExact, .golden_family = "sequence",
       .more_samples = {mask_sample({2, 3, 4, 4}, {4, 4}), mask_sample({2, 2, 3, 5}, {2, 1, 1, 5}, R"({"value": 1e4})"),
                        mask_sample({4}, {3, 4}), mask_sample({2, 3}, {}, R"({"value": 0})")}},
      {.op = Op::Tril, .name = "tril", .call = [](I in, A a) { return hg::tril(in[0], integer(a, "diagonal")); },
       .default_args = R"({"diagonal": 0})", .inputs = {{{4, 5}}},
       .reference = [](const Arrays& x, A a) { return triangle_ref(x[0], integer(a, "diagonal"), true); },
       .f32_tolerance = kExact, .golden_family = "sequence",
       .more_samples = {{.inputs = {{{2, 3, 4, 4}}}}, {.inputs = {{{5, 3}}}, .args = R"({"diagonal": -1})"},
                        {.inputs = {{{3, 6}}}, .args = R"({"diagonal": 2})"}, {.inputs = {{{3, 3}}}, .args = R"({"diagonal": -4})"}}},
      {.op = Op::Triu, .name = "triu", .call = [](I in, A a) { return hg::triu(in[0], integer(a, "diagonal")); },
       .default_args = R"({"diagonal": 0})", .inputs = {{{4, 5}}},
       .reference = [](const Arrays& x, A a) { return triangle_ref(x[0], integer(a, "diagonal"), false); },
       .f32_tolerance = kExact, .golden_family = "sequence",
       .more_samples = {{.inputs = {{{2, 3, 4, 4}}}, .args = R"({"diagonal": 1})"},
                        {.inputs = {{{5, 3}}}, .args = R"({"diagonal": -2})"}, {.inputs = {{{3, 3}}}, .args = R"({"diagonal": 3})"}}},
      // split and chunk are narrow views (no row of their own): the pieces, concatenated in
      // reverse order, are the check.
      {.op = Op::Narrow, .name = "narrow_split",
       .call = [](I in, A a) {
         const int dim = int(integer(a, "dim"));
         if (a.find("sizes") != nullptr) return cat_reversed(hg::split(in[0], std::vector<int64_t>(integers(a, "sizes")), dim), dim);
         return cat_reversed(hg::split(in[0], integer(a, "size"), dim), dim);
       },
       .default_args = R"({"size": 2, "dim": 1})", .inputs = {{{3, 5, 2}}},
       .reference =
           [](const Arrays& x, A a) {
             const int dim = int(integer(a, "dim"));
             const std::vector<int64_t> sizes = a.find("sizes") != nullptr ? std::vector<int64_t>(integers(a, "sizes"))
                                                                        : piece_sizes(x[0].shape[dim], integer(a, "size"));
             return reversed_pieces_ref(x[0], dim, sizes);
           },
       .f32_tolerance = kExact, .golden_family = "sequence",
       .more_samples = {{.inputs = {{{7, 3}}}, .args = R"({"size": 3, "dim": 0})"},
                        {.inputs = {{{2, 6}}}, .args = R"({"sizes": [1, 0, 3, 2], "dim": 1})"},
                        {.inputs = {{{4, 2}}}, .args = R"({"size": 9, "dim": 0})"}},
       .composed = true},
      {.op = Op::Narrow, .name = "narrow_chunk",
       .call = [](I in, A a) {
         const int dim = int(integer(a, "dim"));
         return cat_reversed(hg::chunk(in[0], int(integer(a, "chunks")), dim), dim);
       },
       .default_args = R"({"chunks": 3, "dim": -1})", .inputs = {{{2, 3, 12}}},
       .reference =
           [](const Arrays& x, A a) {
             const int dim = int(integer(a, "dim")) < 0 ? x[0].shape.ndim() + int(integer(a, "dim")) : int(integer(a, "dim"));
             const int64_t length = x[0].shape[dim], n = integer(a, "chunks");
             return reversed_pieces_ref(x[0], dim, piece_sizes(length, (length + n - 1) / n));
           },
       .f32_tolerance = kExact, .golden_family = "sequence",
       .more_samples = {{.inputs = {{{6, 2}}}, .args = R"({"chunks": 4, "dim": 0})"},
                        {.inputs = {{{5, 2}}}, .args = R"({"chunks": 3, "dim": 0})"}},
       .composed = true},
  };
}

std::vector<OpEntry> all_entries() {
  std::vector<OpEntry> db;
  for (auto part : {elementwise_entries, math_entries, indexing_entries, statistics_entries, activation_entries, reduction_entries, linalg_entries,
                    softmax_and_loss_entries, more_loss_entries, pool_and_norm_entries, vision_entries, sequence_entries, other_entries,
                    layout_entries})
    for (OpEntry& e : part()) db.push_back(std::move(e));
  return db;
}

// Its input shapes and args, as a failure names a sample.
std::string describe(const std::vector<InputSpec>& inputs, const std::string& args) {
  std::ostringstream os;
  for (const InputSpec& in : inputs) os << in.shape << (in.given.empty() ? "" : " (given)") << " ";
  os << args;
  return os.str();
}

// The floating inputs the op differentiates.
std::vector<int> differentiated(const std::vector<InputSpec>& inputs) {
  std::vector<int> out;
  for (size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i].values != Values::ClassIndex && inputs[i].differentiable) out.push_back(int(i));
  return out;
}

}  // namespace

const std::vector<OpEntry>& op_db() {
  static const std::vector<OpEntry> db = all_entries();
  return db;
}

std::vector<Sample> samples(const OpEntry& entry) {
  const uint64_t index = uint64_t(&entry - op_db().data());
  HG_CHECK(index < op_db().size(), "op_db: samples() takes an entry of op_db()");
  std::vector<SampleSpec> specs{{.inputs = entry.inputs, .args = entry.default_args}};
  append(specs, entry.more_samples);
  std::vector<Sample> out;
  for (const SampleSpec& spec : specs) {
    const std::vector<InputSpec>& inputs = spec.inputs.empty() ? entry.inputs : spec.inputs;
    const std::string& args = spec.args.empty() ? entry.default_args : spec.args;
    out.push_back({.inputs = inputs,
                   .args = hg::json::parse(args, entry.name),
                   .f32_tolerance = spec.f32_tolerance.value_or(entry.f32_tolerance),
                   .grads = differentiated(inputs),
                   .seed = 1000 * (out.size() + 1) + index,
                   .entrys_own = out.empty(),
                   .text = describe(inputs, args)});
  }
  return out;
}

}  // namespace hg_test
