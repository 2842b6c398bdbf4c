// The entries of the per-op test database (op_db.h), one per fixture op name, grouped by golden
// fixture family. Each entry's reference is written on ref::Arrays from ops_test_helpers.h,
// so a kernel bug cannot also be in its oracle.
#include "op_db.h"

#include <cmath>
#include <utility>

#include "ops/activation.h"
#include "ops/conv.h"
#include "ops/dropout.h"
#include "ops/elementwise.h"
#include "ops/embedding.h"
#include "ops/linalg.h"
#include "ops/loss.h"
#include "ops/norm.h"
#include "ops/pool.h"
#include "ops/reduce.h"
#include "ops/shape.h"
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
      int64_t best = 0;  // the first maximum, as PyTorch
      for (int64_t d = 1; d < D; ++d)
        if (a.v[size_t((o * D + d) * inner + i)] > a.v[size_t((o * D + best) * inner + i)]) best = d;
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

// Training mode, no running statistics: normalised with the batch's own (biased) statistics.
ref::Array batch_norm(const Arrays& x, A a) {
  HG_CHECK(flag(a, "training") && !flag(a, "stats"), "op_db: the batch_norm reference covers training without stats");
  std::vector<double> mean, var;
  ref::channel_stats(x[0], mean, var);
  return ref::batch_norm(x[0], mean, var, optional_values(x, 1), optional_values(x, 2), number(a, "eps"));
}

ref::Array layer_norm(const Arrays& x, A a) {
  return ref::layer_norm(x[0], ref::numel(integers(a, "normalized_shape")), optional_values(x, 1),
                         optional_values(x, 2), number(a, "eps"));
}

// ---- entry builders for the one-input elementwise ops ------------------------------------------

const hg::Shape kSmall{3, 4};

// An elementwise op of one input whose reference is f(x, args) element by element.
OpEntry unary(Op op, std::string name, OpCall call, std::function<double(double, A)> f, std::string family,
              std::string args = "{}", Values values = Values::Normal) {
  Reference reference = [f](const Arrays& x, A a) { return ref::map(x[0], [&](double v) { return f(v, a); }); };
  return {.op = op, .name = std::move(name), .call = std::move(call), .default_args = std::move(args),
          .inputs = {{kSmall, values}}, .reference = std::move(reference), .grads = {0}, .f32_tolerance = kF32,
          .golden_family = std::move(family)};
}

// `x <op> scalar`, the fixtures' "<op>_scalar" cases.
OpEntry scalar_form(Op op, std::string name, Tensor (*call)(const Tensor&, double), double (*f)(double, double)) {
  return unary(
      op, std::move(name), [call](I in, A a) { return call(in[0], number(a, "scalar")); },
      [f](double x, A a) { return f(x, number(a, "scalar")); }, "elementwise", R"({"scalar": -2.5})");
}

// `a <op> b` with broadcasting: (3, 1, 4) against (5, 4) -> (3, 5, 4).
OpEntry binary(Op op, std::string name, Tensor (*call)(const Tensor&, const Tensor&), double (*f)(double, double),
               Values second = Values::Normal) {
  return {.op = op, .name = std::move(name), .call = [call](I in, A) { return call(in[0], in[1]); },
          .default_args = "{}", .inputs = {{{3, 1, 4}}, {{5, 4}, second}},
          .reference = [f](const Arrays& x, A) { return ref::zip(x[0], x[1], f); }, .grads = {0, 1},
          .f32_tolerance = kF32, .golden_family = "elementwise"};
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
      unary(Op::Pow, "pow", [](I in, A a) { return hg::pow(in[0], number(a, "exponent")); },
            [](double x, A a) { return std::pow(x, number(a, "exponent")); }, "elementwise", R"({"exponent": 1.5})",
            Values::Positive),
      unary(Op::Clamp, "clamp", [](I in, A a) { return hg::clamp(in[0], number(a, "min"), number(a, "max")); },
            [](double x, A a) { return std::min(std::max(x, number(a, "min")), number(a, "max")); }, "elementwise",
            R"({"min": -0.5, "max": 0.8})"),
  };
}

std::vector<OpEntry> activation_entries() {
  return {
      unary(Op::Relu, "relu", [](I in, A) { return hg::relu(in[0]); }, [](double x, A) { return std::max(x, 0.0); },
            "activation"),
      unary(Op::LeakyRelu, "leaky_relu", [](I in, A a) { return hg::leaky_relu(in[0], number(a, "negative_slope")); },
            [](double x, A a) { return x >= 0 ? x : number(a, "negative_slope") * x; }, "activation",
            R"({"negative_slope": 0.2})"),
      unary(Op::Gelu, "gelu", [](I in, A) { return hg::gelu(in[0]); }, [](double x, A) { return ref::gelu(x); },
            "activation"),
      unary(Op::Silu, "silu", [](I in, A) { return hg::silu(in[0]); },
            [](double x, A) { return x * ref::sigmoid(x); }, "activation"),
      unary(Op::Sigmoid, "sigmoid", [](I in, A) { return hg::sigmoid(in[0]); },
            [](double x, A) { return ref::sigmoid(x); }, "activation"),
      unary(Op::Tanh, "tanh", [](I in, A) { return hg::tanh(in[0]); }, [](double x, A) { return std::tanh(x); },
            "activation"),
  };
}

std::vector<int64_t> dims_or_all(const ref::Array& x, A a) { return a.find("dims") ? integers(a, "dims") : ref::all_dims(x); }

std::vector<OpEntry> reduction_entries() {
  return {
      {.op = Op::Sum, .name = "sum", .call = [](I in, A a) { return call_reduction(hg::sum, hg::sum, in, a); },
       .default_args = R"({"dims": [0, 2], "keepdim": false})", .inputs = {{{2, 3, 4}}},
       .reference = [](const Arrays& x, A a) { return ref::sum(x[0], dims_or_all(x[0], a), flag(a, "keepdim")); },
       .grads = {0}, .f32_tolerance = kF32, .golden_family = "reduce"},
      {.op = Op::Mean, .name = "mean", .call = [](I in, A a) { return call_reduction(hg::mean, hg::mean, in, a); },
       .default_args = R"({"dims": [-1], "keepdim": true})", .inputs = {{{2, 3, 4}}},
       .reference = [](const Arrays& x, A a) { return ref::mean(x[0], dims_or_all(x[0], a), flag(a, "keepdim")); },
       .grads = {0}, .f32_tolerance = kF32, .golden_family = "reduce"},
      // NOTE: random inputs have no ties, so amax's gradient (to the one maximum) is well defined.
      {.op = Op::Amax, .name = "amax",
       .call = [](I in, A a) { return hg::amax(in[0], int(integer(a, "dim")), flag(a, "keepdim")); },
       .default_args = R"({"dim": 1, "keepdim": false})", .inputs = {{{3, 4, 2}}},
       .reference = [](const Arrays& x, A a) { return ref::amax(x[0], integer(a, "dim"), flag(a, "keepdim")); },
       .grads = {0}, .f32_tolerance = kF32, .golden_family = "reduce"},
      {.op = Op::Argmax, .name = "argmax", .call = [](I in, A a) { return hg::argmax(in[0], int(integer(a, "dim"))); },
       .default_args = R"({"dim": 1})", .inputs = {{{3, 5}}},
       .reference = [](const Arrays& x, A a) { return argmax(x[0], integer(a, "dim")); }, .grads = {},
       .f32_tolerance = kExact, .golden_family = "reduce"},
  };
}

std::vector<OpEntry> linalg_entries() {
  return {
      // A batched operand against a 2-D one: the 2-D side broadcasts over the batch.
      {.op = Op::Matmul, .name = "matmul", .call = [](I in, A) { return hg::matmul(in[0], in[1]); },
       .default_args = "{}", .inputs = {{{2, 3, 4}}, {{4, 5}}},
       .reference = [](const Arrays& x, A) { return ref::matmul(x[0], x[1]); }, .grads = {0, 1},
       .f32_tolerance = gemm_tolerance(4), .golden_family = "linalg"},
      {.op = Op::Linear, .name = "linear",
       .call = [](I in, A) { return hg::linear(in[0], in[1], optional_input(in, 2)); }, .default_args = "{}",
       .inputs = {{{3, 4}}, {{2, 4}}, {{2}}},
       .reference = [](const Arrays& x, A) { return ref::linear(x[0], x[1], optional_values(x, 2)); },
       .grads = {0, 1, 2}, .f32_tolerance = gemm_tolerance(4), .golden_family = "linalg"},
      {.op = Op::Conv2d, .name = "conv2d",
       .call =
           [](I in, A a) {
             return hg::conv2d(in[0], in[1], optional_input(in, 2),
                               {.stride = integer(a, "stride"), .padding = integer(a, "padding")});
           },
       .default_args = R"({"stride": 2, "padding": 1})", .inputs = {{{1, 2, 5, 5}}, {{3, 2, 3, 3}}, {{3}}},
       .reference =
           [](const Arrays& x, A a) {
             return ref::conv2d(x[0], x[1], optional_values(x, 2), integer(a, "stride"), integer(a, "padding"));
           },
       .grads = {0, 1, 2}, .f32_tolerance = gemm_tolerance(2 * 3 * 3), .golden_family = "conv2d"},
  };
}

std::vector<OpEntry> softmax_and_loss_entries() {
  return {
      {.op = Op::Softmax, .name = "softmax", .call = [](I in, A a) { return hg::softmax(in[0], int(integer(a, "dim"))); },
       .default_args = R"({"dim": -1})", .inputs = {{kSmall}},
       .reference = [](const Arrays& x, A a) { return ref::softmax(x[0], integer(a, "dim"), false); }, .grads = {0},
       .f32_tolerance = kF32, .golden_family = "softmax"},
      {.op = Op::LogSoftmax, .name = "log_softmax",
       .call = [](I in, A a) { return hg::log_softmax(in[0], int(integer(a, "dim"))); },
       .default_args = R"({"dim": 1})", .inputs = {{{2, 3, 4}}},
       .reference = [](const Arrays& x, A a) { return ref::softmax(x[0], integer(a, "dim"), true); }, .grads = {0},
       .f32_tolerance = kF32, .golden_family = "softmax"},
      {.op = Op::CrossEntropy, .name = "cross_entropy",
       .call =
           [](I in, A a) {
             return hg::cross_entropy(in[0], in[1],
                                      {.label_smoothing = number(a, "label_smoothing"),
                                       .ignore_index = integer(a, "ignore_index")});
           },
       .default_args = R"({"label_smoothing": 0.1, "ignore_index": -100})",
       .inputs = {{{4, 5}}, {{4}, Values::ClassIndex, 5}},
       .reference =
           [](const Arrays& x, A a) {
             return ref::Array{{}, {ref::cross_entropy(x[0], as_indices(x[1]), number(a, "label_smoothing"),
                                                       integer(a, "ignore_index"))}};
           },
       .grads = {0}, .f32_tolerance = kF32, .golden_family = "loss"},
      {.op = Op::MseLoss, .name = "mse_loss", .call = [](I in, A) { return hg::mse_loss(in[0], in[1]); },
       .default_args = "{}", .inputs = {{kSmall}, {kSmall}},
       .reference =
           [](const Arrays& x, A) {
             const ref::Array squared = ref::zip(x[0], x[1], [](double a, double b) { return (a - b) * (a - b); });
             return ref::mean(squared, ref::all_dims(squared), false);
           },
       .grads = {0, 1}, .f32_tolerance = kF32, .golden_family = "loss"},
  };
}

std::vector<OpEntry> pool_and_norm_entries() {
  return {
      {.op = Op::MaxPool2d, .name = "max_pool2d",
       .call = [](I in, A a) { return hg::max_pool2d(in[0], int(integer(a, "kernel")), int(integer(a, "stride"))); },
       .default_args = R"({"kernel": 2, "stride": 2})", .inputs = {{{1, 2, 4, 4}}},
       .reference = [](const Arrays& x, A a) { return ref::pool2d(x[0], integer(a, "kernel"), integer(a, "stride"), true); },
       .grads = {0}, .f32_tolerance = kF32, .golden_family = "pool"},
      // Overlapping windows (kernel 3, stride 2): an element's gradient sums over two windows.
      {.op = Op::AvgPool2d, .name = "avg_pool2d",
       .call = [](I in, A a) { return hg::avg_pool2d(in[0], int(integer(a, "kernel")), int(integer(a, "stride"))); },
       .default_args = R"({"kernel": 3, "stride": 2})", .inputs = {{{1, 2, 5, 5}}},
       .reference = [](const Arrays& x, A a) { return ref::pool2d(x[0], integer(a, "kernel"), integer(a, "stride"), false); },
       .grads = {0}, .f32_tolerance = kF32, .golden_family = "pool"},
      {.op = Op::BatchNorm, .name = "batch_norm", .call = call_batch_norm,
       .default_args = R"({"training": true, "momentum": 0.1, "eps": 1e-5, "stats": false, "affine": true})",
       .inputs = {{{3, 2, 2, 2}}, {{2}}, {{2}}}, .reference = batch_norm, .grads = {0, 1, 2}, .f32_tolerance = kF32,
       .golden_family = "norm"},
      {.op = Op::LayerNorm, .name = "layer_norm", .call = call_layer_norm,
       .default_args = R"({"normalized_shape": [4], "eps": 1e-5, "affine": true})",
       .inputs = {{kSmall}, {{4}}, {{4}}}, .reference = layer_norm, .grads = {0, 1, 2}, .f32_tolerance = kF32,
       .golden_family = "norm"},
  };
}

std::vector<OpEntry> other_entries() {
  return {
      {.op = Op::Dropout, .name = "dropout",
       .call = [](I in, A a) { return hg::dropout(in[0], number(a, "p"), flag(a, "training")); },
       .default_args = R"({"p": 0.3, "training": true})", .inputs = {{kSmall}}, .reference = {},
       .no_reference_because = "its mask comes from halfgrad's Philox stream; op_db.dropout_keeps_or_scales checks "
                               "that each element is dropped or scaled by 1/(1-p)",
       .grads = {0}, .f32_tolerance = kF32, .golden_family = ""},
      // Index 2 is likely used twice: its row's gradient is then the sum of both uses.
      {.op = Op::Embedding, .name = "embedding", .call = [](I in, A) { return hg::embedding(in[0], in[1]); },
       .default_args = "{}", .inputs = {{{2, 3}, Values::ClassIndex, 4}, {{4, 3}}},
       .reference = [](const Arrays& x, A) { return embedding(x[0], x[1]); }, .grads = {1}, .f32_tolerance = kExact,
       .golden_family = "embedding"},
      {.op = Op::Cat, .name = "cat", .call = [](I in, A a) { return hg::cat(in, int(integer(a, "dim"))); },
       .default_args = R"({"dim": 1})", .inputs = {{{2, 1}}, {{2, 3}}, {{2, 2}}},
       .reference = [](const Arrays& x, A a) { return cat(x, integer(a, "dim")); }, .grads = {0, 1, 2},
       .f32_tolerance = kExact, .golden_family = "cat"},
  };
}

std::vector<OpEntry> all_entries() {
  std::vector<OpEntry> db;
  for (auto part : {elementwise_entries, activation_entries, reduction_entries, linalg_entries,
                    softmax_and_loss_entries, pool_and_norm_entries, other_entries})
    for (OpEntry& e : part()) db.push_back(std::move(e));
  return db;
}

}  // namespace

const std::vector<OpEntry>& op_db() {
  static const std::vector<OpEntry> db = all_entries();
  return db;
}

}  // namespace hg_test
