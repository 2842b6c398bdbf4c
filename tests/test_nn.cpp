// nn: module registration and dotted names, copies sharing state, train/eval, to(dtype), state
// dicts and their strict errors, PyTorch's default initialisation, hg::nn::init, every layer
// against its functional op, clip_grad_norm_, and save/load through safetensors -- including
// loading a saved MLP into torch.nn.Sequential (tests/load_into_torch.py) when torch is present.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <numeric>
#include <set>

#include "core/json.h"
#include "core/safetensors.h"
#include "test_support.h"

using hg::Tensor;
namespace nn = hg::nn;

namespace {

// A user module: own parameter and buffer, children (one a Sequential), registered by name.
struct Net : nn::Module {
  nn::Linear fc1{4, 8};
  nn::Sequential body{nn::Linear(8, 8), nn::ReLU(), nn::Dropout(0.5)};
  nn::Linear fc2{8, 3};
  Tensor scale, offset;
  Net() {
    scale = register_parameter("scale", hg::ones({3}));
    offset = register_buffer("offset", hg::full({3}, 0.25));
    register_module("fc1", fc1);
    register_module("body", body);
    register_module("fc2", fc2);
  }
  Tensor forward(const Tensor& x) override { return fc2(body(hg::relu(fc1(x)))) * scale + offset; }
};

std::vector<std::string> names_of(const std::vector<std::pair<std::string, Tensor>>& named) {
  std::vector<std::string> out;
  for (const auto& [name, _] : named) out.push_back(name);
  return out;
}

bool bitwise_equal(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() && a.to_vector<double>() == b.to_vector<double>();
}

struct Stats {
  double min, max, mean, std;
};
Stats stats_of(const Tensor& t) {
  const std::vector<double> v = t.to_vector<double>();
  const double mean = std::accumulate(v.begin(), v.end(), 0.0) / double(v.size());
  double sq = 0;
  for (double x : v) sq += (x - mean) * (x - mean);
  return {*std::min_element(v.begin(), v.end()), *std::max_element(v.begin(), v.end()), mean,
          std::sqrt(sq / double(v.size()))};
}

// U(-bound, bound): every value inside (up to f32 rounding), the extremes reached, mean 0 and
// std = bound / sqrt(3), each within 5 standard errors of the sample estimate.
void check_uniform(const Tensor& t, double bound) {
  const Stats s = stats_of(t);
  const double n = double(t.numel()), sd = bound / std::sqrt(3.0);
  INFO("bound ", bound, ": min ", s.min, " max ", s.max, " mean ", s.mean, " std ", s.std, " n ", n);
  CHECK(s.min >= -bound * (1 + 1e-6));
  CHECK(s.max <= bound * (1 + 1e-6));
  CHECK(s.min < -(1 - 20 / n) * bound);
  CHECK(s.max > (1 - 20 / n) * bound);
  CHECK(std::fabs(s.mean) < 5 * sd / std::sqrt(n));
  CHECK(std::fabs(s.std / sd - 1) < 5 * std::sqrt(0.2 / n));  // var of a sample std: (kurtosis - 1) / 4n
}

void check_normal(const Tensor& t, double mean, double std) {
  const Stats s = stats_of(t);
  const double n = double(t.numel());
  INFO("mean ", s.mean, " std ", s.std, " n ", n);
  CHECK(std::fabs(s.mean - mean) < 5 * std / std::sqrt(n));
  CHECK(std::fabs(s.std / std - 1) < 5 * std::sqrt(0.5 / n));
}

}  // namespace

// ---- registration and shared state ---------------------------------------------------------------

TEST_CASE("nn.module.dotted_names_for_nested_modules") {
  Net net;
  CHECK(names_of(net.named_parameters()) ==
        std::vector<std::string>{"scale", "fc1.weight", "fc1.bias", "body.0.weight", "body.0.bias", "fc2.weight",
                                 "fc2.bias"});
  CHECK(names_of(net.named_parameters(/*recurse=*/false)) == std::vector<std::string>{"scale"});
  CHECK(names_of(net.named_buffers()) == std::vector<std::string>{"offset"});
  CHECK(net.parameters().size() == 7);
  CHECK(net.buffers().size() == 1);
  std::vector<std::string> children;
  for (const auto& [name, _] : net.children()) children.push_back(name);
  CHECK(children == std::vector<std::string>{"fc1", "body", "fc2"});
  // The registered child shares the member's tensors: same parameter objects.
  CHECK(net.named_parameters()[1].second.is_same(net.fc1.weight));
  for (const Tensor& p : net.parameters()) CHECK(p.requires_grad());

  nn::Sequential seq{nn::Flatten(), nn::Linear(6, 5), nn::ReLU(), nn::BatchNorm2d(5)};
  CHECK(names_of(seq.named_parameters()) == std::vector<std::string>{"1.weight", "1.bias", "3.weight", "3.bias"});
  CHECK(names_of(seq.named_buffers()) ==
        std::vector<std::string>{"3.running_mean", "3.running_var", "3.num_batches_tracked"});
}

TEST_CASE("nn.module.registration_errors") {
  nn::Module m;
  m.register_parameter("w", hg::zeros({2}));
  CHECK_THROWS_HG(m.register_parameter("w", hg::zeros({2})), "already a parameter");
  CHECK_THROWS_HG(m.register_buffer("w", hg::zeros({2})), "already a parameter");
  CHECK_THROWS_HG(m.register_parameter("a.b", hg::zeros({2})), "invalid name");
  CHECK_THROWS_HG(m.register_parameter("", hg::zeros({2})), "invalid name");
  nn::Linear child(2, 2);
  m.register_module("child", child);
  CHECK_THROWS_HG(m.register_module("child", child), "already a child");
  CHECK_THROWS_HG(m(hg::zeros({2})), "no forward");
}

TEST_CASE("nn.module.copies_share_state") {
  Net a;
  Net b = a;  // a copy refers to the same parameters, children and training flag
  CHECK(b.fc1.weight.is_same(a.fc1.weight));
  CHECK(b.named_parameters()[3].second.is_same(a.named_parameters()[3].second));
  hg::NoGradGuard no_grad;
  Tensor(a.fc2.bias).fill_(3.0);
  CHECK(b.named_parameters().back().second.to_vector<float>() == std::vector<float>(3, 3.0f));
  b.eval();
  CHECK_FALSE(a.is_training());
  CHECK_FALSE(a.fc1.is_training());
  nn::Linear fc(3, 2);
  nn::Linear fc_copy = fc;
  fc_copy.to(hg::f64);
  CHECK(fc.weight.dtype() == hg::f64);
}

TEST_CASE("nn.module.train_eval_recurse") {
  Net net;
  CHECK(net.is_training());
  net.eval();
  CHECK_FALSE(net.is_training());
  for (const auto& [name, child] : net.children()) CHECK_FALSE(child->is_training());
  for (const auto& [name, grandchild] : net.body.children()) CHECK_FALSE(grandchild->is_training());
  // The Dropout inside body is now the identity: two forwards agree.
  const Tensor x = hg::randn({6, 4});
  CHECK(bitwise_equal(net(x), net(x)));
  net.train();
  CHECK(net.body.children()[2].second->is_training());
  hg::manual_seed(1);
  const Tensor y1 = net(x);
  const Tensor y2 = net(x);
  CHECK_FALSE(bitwise_equal(y1, y2));  // dropout masks differ between calls in training mode
}

TEST_CASE("nn.module.to_dtype_converts_in_place") {
  for (hg::DType dtype : {hg::f16, hg::bf16}) {
    INFO(hg::dtype_name(dtype));
    Net net;
    nn::BatchNorm2d bn(3);
    net.register_module("bn", bn);
    const auto before = net.state_dict();
    std::map<std::string, Tensor> copies;
    for (const auto& [name, t] : before) copies[name] = t.clone();
    net.to(dtype);
    // Member handles see the conversion; so does every copy of the module.
    CHECK(net.fc1.weight.dtype() == dtype);
    CHECK(net.scale.dtype() == dtype);
    CHECK(net.offset.dtype() == dtype);
    CHECK(bn.running_var.dtype() == dtype);
    CHECK(bn.num_batches_tracked.dtype() == hg::i64);  // integer buffers stay integer
    for (const auto& entry : net.named_parameters()) {  // (no structured binding: clang 14 cannot capture one in INFO)
      const auto& name = entry.first;
      const auto& t = entry.second;
      INFO(name);
      CHECK(t.dtype() == dtype);
      CHECK(t.requires_grad());
      CHECK(t.is_leaf());
      CHECK(bitwise_equal(t.detach(), copies.at(name).to(dtype)));
    }
    Tensor y = net(hg::randn({2, 4}).to(dtype));
    CHECK(y.dtype() == dtype);
    hg::sum(y).backward();
    CHECK(net.fc1.weight.grad().dtype() == dtype);
    net.to(hg::f32);
    CHECK(net.fc2.weight.dtype() == hg::f32);
    CHECK_THROWS_HG(net.to(hg::i64), "floating");
  }
}

TEST_CASE("nn.module.zero_grad") {
  Net net;
  hg::sum(net(hg::randn({5, 4}))).backward();
  for (const Tensor& p : net.parameters()) CHECK(p.grad().defined());
  net.zero_grad();
  for (const Tensor& p : net.parameters()) CHECK_FALSE(p.grad().defined());
}

// ---- state dicts ---------------------------------------------------------------------------------

TEST_CASE("nn.state_dict.round_trip") {
  hg::manual_seed(1);
  Net a;
  hg::manual_seed(2);
  Net b;
  const auto state = a.state_dict();
  CHECK(state.size() == 8);
  for (const auto& [name, t] : state) CHECK_FALSE(t.requires_grad());
  CHECK_FALSE(bitwise_equal(b.fc1.weight.detach(), a.fc1.weight.detach()));
  b.load_state_dict(state);
  for (const auto& entry : b.state_dict()) {  // (no structured binding: clang 14 cannot capture one in INFO)
    const auto& name = entry.first;
    const auto& t = entry.second;
    INFO(name);
    CHECK(bitwise_equal(t, state.at(name)));
  }
  // Loading copies values: the two models stay independent.
  hg::NoGradGuard no_grad;
  Tensor(a.fc1.weight).fill_(0.5);
  CHECK_FALSE(bitwise_equal(b.fc1.weight.detach(), a.fc1.weight.detach()));
  // state_dict() shares data with the module (like PyTorch's detached tensors).
  Tensor(b.state_dict().at("fc2.bias")).fill_(-1.0);
  CHECK(b.fc2.bias.to_vector<float>() == std::vector<float>(3, -1.0f));
}

TEST_CASE("nn.state_dict.strict_errors_list_every_problem") {
  Net net;
  const auto snapshot = [&] {
    std::map<std::string, Tensor> out;
    for (const auto& [k, v] : net.state_dict()) out[k] = v.clone();
    return out;
  }();
  auto bad = snapshot;
  bad.erase("fc1.bias");                                     // missing
  bad["extra.weight"] = hg::zeros({2});                      // unexpected
  bad["fc2.weight"] = hg::zeros({3, 9});                     // shape mismatch
  bad["scale"] = hg::ones({3}, {.dtype = hg::f64});          // dtype mismatch
  Net other;
  const auto before = other.state_dict();
  std::map<std::string, std::vector<double>> values;
  for (const auto& [k, v] : before) values[k] = v.to_vector<double>();
  try {
    other.load_state_dict(bad);
    FAIL("load_state_dict accepted a bad state dict");
  } catch (const hg::Error& e) {
    const std::string message = e.what();
    INFO(message);
    for (const char* needle : {"Missing key(s): fc1.bias", "Unexpected key(s): \"extra.weight\"", "fc2.weight",
                               "[3, 9]", "scale", "f64"})
      CHECK(message.find(needle) != std::string::npos);
  }
  // Nothing was loaded: a failed load leaves the model as it was.
  for (const auto& [k, v] : other.state_dict()) CHECK(v.to_vector<double>() == values.at(k));

  // Each problem alone is also an error.
  auto missing = snapshot;
  missing.erase("body.0.bias");
  CHECK_THROWS_HG(other.load_state_dict(missing), "Missing key(s): body.0.bias");
  auto unexpected = snapshot;
  unexpected["fc3.weight"] = hg::zeros({1});
  CHECK_THROWS_HG(other.load_state_dict(unexpected), "Unexpected key(s): \"fc3.weight\"");
  auto shape = snapshot;
  shape["fc1.weight"] = hg::zeros({4, 8});
  CHECK_THROWS_HG(other.load_state_dict(shape), "fc1.weight");
  auto dtype = snapshot;
  dtype["offset"] = hg::zeros({3}, {.dtype = hg::bf16});
  CHECK_THROWS_HG(other.load_state_dict(dtype), "offset");

  // Non-strict: missing and unexpected keys are allowed; what is present is loaded.
  auto partial = missing;
  partial["fc3.weight"] = hg::zeros({1});
  other.load_state_dict(partial, /*strict=*/false);
  CHECK(bitwise_equal(other.fc1.weight.detach(), snapshot.at("fc1.weight")));
  CHECK_THROWS_HG(other.load_state_dict(shape, /*strict=*/false), "fc1.weight");
}

// ---- initialisation ------------------------------------------------------------------------------

TEST_CASE("nn.init.defaults_match_pytorch") {
  hg::manual_seed(0);
  nn::Linear fc(1000, 500);  // kaiming_uniform(a = sqrt(5)) = U(-1/sqrt(in), 1/sqrt(in)) for weight and bias
  check_uniform(fc.weight, 1 / std::sqrt(1000.0));
  check_uniform(fc.bias, 1 / std::sqrt(1000.0));
  nn::Conv2d conv(64, 32, 3);  // fan_in = 64 * 3 * 3
  check_uniform(conv.weight, 1 / 24.0);
  nn::Conv2d conv2(3, 600, 5);
  check_uniform(conv2.bias, 1 / std::sqrt(75.0));
  nn::Embedding emb(1000, 100);
  check_normal(emb.weight, 0, 1);
  nn::BatchNorm2d bn(4);
  CHECK(bn.weight.to_vector<float>() == std::vector<float>(4, 1.0f));
  CHECK(bn.bias.to_vector<float>() == std::vector<float>(4, 0.0f));
  CHECK(bn.running_mean.to_vector<float>() == std::vector<float>(4, 0.0f));
  CHECK(bn.running_var.to_vector<float>() == std::vector<float>(4, 1.0f));
  CHECK(bn.num_batches_tracked.item<int64_t>() == 0);
  nn::LayerNorm ln({2, 3});
  CHECK(ln.weight.to_vector<float>() == std::vector<float>(6, 1.0f));
  CHECK(ln.bias.to_vector<float>() == std::vector<float>(6, 0.0f));
  // Two layers draw different numbers; the same seed draws the same ones.
  hg::manual_seed(3);
  nn::Linear a(20, 10);
  nn::Linear b(20, 10);
  hg::manual_seed(3);
  nn::Linear c(20, 10);
  CHECK_FALSE(bitwise_equal(a.weight.detach(), b.weight.detach()));
  CHECK(bitwise_equal(a.weight.detach(), c.weight.detach()));
  CHECK(bitwise_equal(a.bias.detach(), c.bias.detach()));
}

TEST_CASE("nn.init.functions") {
  hg::manual_seed(0);
  const Tensor t = hg::empty({300, 400});
  check_uniform(nn::init::uniform_(t, -2, 4) - 1.0, 3.0);
  check_normal(nn::init::normal_(t, 1, 2), 1, 2);
  CHECK(nn::init::constant_(t, 2.5).to_vector<float>() == std::vector<float>(t.numel(), 2.5f));
  CHECK(nn::init::zeros_(t).to_vector<float>() == std::vector<float>(t.numel(), 0.0f));
  CHECK(nn::init::ones_(t).to_vector<float>() == std::vector<float>(t.numel(), 1.0f));

  CHECK(nn::init::fan_in(hg::empty({8, 3, 5, 5})) == 75);
  CHECK(nn::init::fan_out(hg::empty({8, 3, 5, 5})) == 200);
  CHECK(nn::init::fan_in(t) == 400);
  CHECK(nn::init::fan_out(t) == 300);
  CHECK_THROWS_HG(nn::init::fan_in(hg::empty({5})), "at least 2 dimensions");
  CHECK(nn::init::calculate_gain("linear") == 1.0);
  CHECK(nn::init::calculate_gain("conv2d") == 1.0);
  CHECK(nn::init::calculate_gain("sigmoid") == 1.0);
  CHECK(nn::init::calculate_gain("tanh") == doctest::Approx(5.0 / 3.0));
  CHECK(nn::init::calculate_gain("relu") == doctest::Approx(std::sqrt(2.0)));
  CHECK(nn::init::calculate_gain("leaky_relu", 0.2) == doctest::Approx(std::sqrt(2.0 / 1.04)));
  CHECK_THROWS_HG(nn::init::calculate_gain("swish"), "swish");

  check_uniform(nn::init::kaiming_uniform_(t), std::sqrt(6.0 / 400));  // a = 0: relu gain
  check_uniform(nn::init::kaiming_uniform_(t, 0, /*use_fan_in=*/false), std::sqrt(6.0 / 300));
  check_uniform(nn::init::kaiming_uniform_(t, 0, true, "tanh"), 5.0 / 3.0 * std::sqrt(3.0 / 400));
  check_normal(nn::init::kaiming_normal_(t), 0, std::sqrt(2.0 / 400));
  check_normal(nn::init::kaiming_normal_(t, 0, false, "linear"), 0, std::sqrt(1.0 / 300));
  check_uniform(nn::init::xavier_uniform_(t, 2.0), 2.0 * std::sqrt(6.0 / 700));
  check_normal(nn::init::xavier_normal_(t), 0, std::sqrt(2.0 / 700));

  // On a parameter: filled in place, still a leaf that requires grad; 16-bit tensors work too.
  nn::Linear fc(50, 40);
  const Tensor w = fc.weight;
  nn::init::xavier_uniform_(w);
  CHECK(w.is_same(fc.weight));
  CHECK(w.is_leaf());
  CHECK(w.requires_grad());
  const Tensor h = hg::empty({200, 300}, {.dtype = hg::f16});
  nn::init::uniform_(h, -1, 1);
  CHECK(h.dtype() == hg::f16);
  check_uniform(h, 1.0);
}

// ---- each layer against its functional op -------------------------------------------------------

TEST_CASE("nn.layers.linear_and_conv2d") {
  hg::manual_seed(0);
  nn::Linear fc(7, 5);
  const Tensor x = hg::randn({3, 2, 7});
  CHECK_CLOSE(fc(x), hg::linear(x, fc.weight, fc.bias));
  CHECK(fc(x).shape() == hg::Shape{3, 2, 5});
  nn::Linear no_bias(7, 5, false);
  CHECK_FALSE(no_bias.bias.defined());
  CHECK(names_of(no_bias.named_parameters()) == std::vector<std::string>{"weight"});
  CHECK_CLOSE(no_bias(x), hg::linear(x, no_bias.weight));
  hg::sum(fc(x)).backward();
  CHECK(fc.weight.grad().shape() == hg::Shape{5, 7});
  CHECK_CLOSE(fc.bias.grad(), hg::full({5}, 6.0));

  nn::Conv2d conv(3, 4, 3, {.stride = 2, .padding = 1});
  const Tensor img = hg::randn({2, 3, 9, 9});
  const Tensor y = conv(img);
  CHECK(y.shape() == hg::Shape{2, 4, 5, 5});
  CHECK_CLOSE(y, hg::conv2d(img, conv.weight, conv.bias, {.stride = 2, .padding = 1}));
  nn::Conv2d conv_nb(3, 2, 1, {.bias = false});
  CHECK(names_of(conv_nb.named_parameters()) == std::vector<std::string>{"weight"});
  CHECK_CLOSE(conv_nb(img), hg::conv2d(img, conv_nb.weight));
}

TEST_CASE("nn.layers.batchnorm2d_running_stats") {
  hg::manual_seed(0);
  nn::BatchNorm2d bn(3);
  {
    hg::NoGradGuard no_grad;
    Tensor(bn.weight).copy_(hg::from_vector<float>({1.5f, 0.5f, 2.0f}, {3}));
    Tensor(bn.bias).copy_(hg::from_vector<float>({0.1f, -0.2f, 0.3f}, {3}));
  }
  const Tensor x = hg::randn({4, 3, 5, 5}) * 2.0 + 1.0;
  Tensor rm = hg::zeros({3}), rv = hg::ones({3});
  const Tensor expected = hg::batch_norm(x, rm, rv, bn.weight, bn.bias, true, 0.1, 1e-5);
  CHECK_CLOSE(bn(x), expected);
  CHECK(bn.num_batches_tracked.item<int64_t>() == 1);
  CHECK_CLOSE(bn.running_mean, rm);
  CHECK_CLOSE(bn.running_var, rv);
  // PyTorch's update, independently: 0.9 * old + 0.1 * batch mean / unbiased batch variance.
  const Tensor mean = hg::mean(x, {0, 2, 3});
  const Tensor centred = x - mean.reshape({1, 3, 1, 1});
  const Tensor unbiased = hg::sum(centred * centred, {0, 2, 3}) / 99.0;
  CHECK_CLOSE_TOL(bn.running_mean, mean * 0.1, 1e-5, 1e-6);
  CHECK_CLOSE_TOL(bn.running_var, unbiased * 0.1 + 0.9, 1e-5, 1e-6);
  bn(x);
  CHECK(bn.num_batches_tracked.item<int64_t>() == 2);
  CHECK_CLOSE_TOL(bn.running_mean, mean * 0.19, 1e-5, 1e-6);

  bn.eval();
  const Tensor rm_before = bn.running_mean.clone(), rv_before = bn.running_var.clone();
  const Tensor z = hg::randn({2, 3, 4, 4});
  const Tensor by_hand = (z - rm_before.reshape({1, 3, 1, 1})) / hg::sqrt(rv_before + 1e-5).reshape({1, 3, 1, 1}) *
                             bn.weight.detach().reshape({1, 3, 1, 1}) + bn.bias.detach().reshape({1, 3, 1, 1});
  CHECK_CLOSE_TOL(bn(z), by_hand, 1e-5, 1e-5);
  CHECK(bitwise_equal(bn.running_mean, rm_before));
  CHECK(bitwise_equal(bn.running_var, rv_before));
  CHECK(bn.num_batches_tracked.item<int64_t>() == 2);
  CHECK_THROWS_HG(bn(hg::randn({2, 3})), "4-D");
}

TEST_CASE("nn.layers.batchnorm2d_counter_from_a_checkpoint_cannot_overflow") {
  // num_batches_tracked may come from any checkpoint: incrementing INT64_MAX was signed overflow
  // (issue 11, item 4), and a count written through a double stopped counting at 2^53.
  nn::BatchNorm2d bn(2);
  const Tensor x = hg::randn({4, 2, 3, 3});
  const auto load_count = [&bn](int64_t count) {
    auto state = bn.state_dict();
    state["num_batches_tracked"] = hg::from_vector(std::vector<int64_t>{count}, {});
    bn.load_state_dict(state);
  };
  load_count(int64_t(1) << 53);
  bn(x);
  CHECK(bn.num_batches_tracked.item<int64_t>() == (int64_t(1) << 53) + 1);
  load_count(std::numeric_limits<int64_t>::max());
  bn(x);
  CHECK(bn.num_batches_tracked.item<int64_t>() == std::numeric_limits<int64_t>::max());  // saturates
}

TEST_CASE("nn.layers.layernorm_dropout_activations") {
  hg::manual_seed(0);
  nn::LayerNorm ln({5});
  { hg::NoGradGuard g; Tensor(ln.weight).copy_(hg::randn({5})); Tensor(ln.bias).copy_(hg::randn({5})); }
  const Tensor x = hg::randn({3, 4, 5});
  CHECK_CLOSE(ln(x), hg::layer_norm(x, {5}, ln.weight, ln.bias, 1e-5));

  nn::Dropout drop(0.3);
  const Tensor big = hg::randn({100, 100});
  hg::manual_seed(7);
  const Tensor d = drop(big);
  hg::manual_seed(7);
  CHECK(bitwise_equal(d, hg::dropout(big, 0.3, true)));
  const std::vector<float> in = big.to_vector<float>(), out = d.to_vector<float>();
  int zeros = 0;
  bool scaled = true;
  for (size_t i = 0; i < in.size(); ++i) {
    if (out[i] == 0.0f) ++zeros;
    else scaled = scaled && std::fabs(out[i] - in[i] / 0.7f) <= 1e-6f * std::fabs(in[i]) + 1e-7f;
  }
  CHECK(scaled);
  CHECK(double(zeros) / double(in.size()) == doctest::Approx(0.3).epsilon(0.07));
  drop.eval();
  CHECK(bitwise_equal(drop(big), big));
  CHECK_THROWS_HG(nn::Dropout(1.5), "p must be in");

  CHECK(bitwise_equal(nn::ReLU()(x), hg::relu(x)));
  CHECK(bitwise_equal(nn::GELU()(x), hg::gelu(x)));
  CHECK(bitwise_equal(nn::LeakyReLU()(x), hg::leaky_relu(x, 0.01)));
  nn::LeakyReLU leaky(0.2);
  CHECK(leaky.negative_slope == 0.2);
  CHECK(bitwise_equal(leaky(x), hg::leaky_relu(x, 0.2)));
  CHECK(leaky.parameters().empty());
  CHECK(hg::amax(nn::ReLU()(x).flatten(), 0).item<float>() > 0.0f);
}

TEST_CASE("nn.layers.pooling_flatten_embedding") {
  hg::manual_seed(0);
  const Tensor x = hg::randn({2, 3, 8, 9});
  nn::MaxPool2d mp(2);
  CHECK(mp.stride == 2);
  CHECK(mp(x).shape() == hg::Shape{2, 3, 4, 4});
  CHECK(bitwise_equal(mp(x), hg::max_pool2d(x, 2, 2)));
  CHECK(bitwise_equal(hg::max_pool2d(x, 2), mp(x)));  // the function's stride defaults to the kernel too
  CHECK(bitwise_equal(hg::avg_pool2d(x, 3), hg::avg_pool2d(x, 3, 3)));
  nn::AvgPool2d ap(3, 1);
  CHECK(ap(x).shape() == hg::Shape{2, 3, 6, 7});
  CHECK(bitwise_equal(ap(x), hg::avg_pool2d(x, 3, 1)));
  CHECK(nn::AvgPool2d(2)(x).shape() == hg::Shape{2, 3, 4, 4});

  CHECK(nn::Flatten()(x).shape() == hg::Shape{2, 216});
  CHECK(nn::Flatten(0, 1)(x).shape() == hg::Shape{6, 8, 9});
  CHECK(nn::Flatten()(x).to_vector<float>() == x.to_vector<float>());

  nn::Embedding emb(10, 4);
  const Tensor idx = hg::from_vector<int64_t>({3, 0, 9, 3, 1, 7}, {2, 3});
  const Tensor e = emb(idx);
  CHECK(e.shape() == hg::Shape{2, 3, 4});
  CHECK(bitwise_equal(e, hg::embedding(idx, emb.weight)));
  const std::vector<float> w = emb.weight.to_vector<float>(), got = e.to_vector<float>();
  const int64_t rows[] = {3, 0, 9, 3, 1, 7};
  for (int k = 0; k < 6; ++k)
    for (int j = 0; j < 4; ++j) CHECK(got[size_t(k * 4 + j)] == w[size_t(rows[k] * 4 + j)]);
}

TEST_CASE("nn.layers.sequential_and_push_back") {
  hg::manual_seed(0);
  nn::Linear l1(4, 8), l2(8, 2);
  nn::Sequential seq(l1, nn::ReLU(), l2);
  CHECK(seq.size() == 3);
  const Tensor x = hg::randn({5, 4});
  CHECK(bitwise_equal(seq(x), l2(hg::relu(l1(x)))));
  CHECK(seq.named_parameters()[0].second.is_same(l1.weight));
  CHECK(bitwise_equal(seq[2](hg::ones({1, 8})), l2(hg::ones({1, 8}))));
  seq.push_back(nn::Dropout(0.0)).push_back(nn::Linear(2, 6));
  CHECK(seq.size() == 5);
  CHECK(seq(x).shape() == hg::Shape{5, 6});
  CHECK(names_of(seq.named_parameters()) ==
        std::vector<std::string>{"0.weight", "0.bias", "2.weight", "2.bias", "4.weight", "4.bias"});
  nn::Sequential copy = seq;  // shares the layers
  copy.push_back(nn::ReLU());
  CHECK(seq.size() == 6);
}

// Braces fix the order in which the layers draw their initial weights (left to right), so one
// seed gives one model with every compiler and CPU (parentheses leave it unspecified).
TEST_CASE("nn.layers.sequential_in_braces_initialises_left_to_right") {
  hg::manual_seed(3);
  nn::Linear first(3, 4), second(4, 2);
  hg::manual_seed(3);
  nn::Sequential seq{nn::Linear(3, 4), nn::ReLU(), nn::Linear(4, 2)};
  CHECK(bitwise_equal(seq.named_parameters()[0].second, first.weight));
  CHECK(bitwise_equal(seq.named_parameters()[2].second, second.weight));
}

// ---- clip_grad_norm_ ----------------------------------------------------------------------------

TEST_CASE("nn.utils.clip_grad_norm") {
  const Tensor a = hg::zeros({2}, {.requires_grad = true}), b = hg::zeros({1}, {.requires_grad = true});
  const Tensor c = hg::zeros({3}, {.requires_grad = true});  // no grad: skipped
  a.set_grad(hg::from_vector<float>({3, 4}, {2}));
  b.set_grad(hg::from_vector<float>({12}, {1}));
  CHECK(nn::utils::clip_grad_norm_({a, b, c}, 26.0) == doctest::Approx(13.0).epsilon(1e-12));
  CHECK(a.grad().to_vector<float>() == std::vector<float>{3, 4});  // below max_norm: untouched
  CHECK(b.grad().to_vector<float>() == std::vector<float>{12});
  CHECK(nn::utils::clip_grad_norm_({a, b, c}, 6.5) == doctest::Approx(13.0).epsilon(1e-12));
  const double k = 6.5 / (13.0 + 1e-6);
  CHECK_CLOSE(a.grad(), hg::from_vector<float>({float(3 * k), float(4 * k)}, {2}));
  CHECK_CLOSE(b.grad(), hg::from_vector<float>({float(12 * k)}, {1}));
  CHECK_FALSE(c.grad().defined());
  CHECK(nn::utils::clip_grad_norm_({a, b}, 100.0) == doctest::Approx(6.5).epsilon(1e-6));
  CHECK_THROWS_HG(nn::utils::clip_grad_norm_({a}, 0.0), "max_norm");
}

// Gradients of every float dtype, several 65536-value chunks, a transposed (non-contiguous) one:
// the norm is the f64 norm of the values, the same bits at 1 and 2 threads.
TEST_CASE("nn.utils.clip_grad_norm_sums_every_dtype_in_double_whatever_the_thread_count") {
  hg::manual_seed(5);
  std::vector<Tensor> params;
  double expected = 0;
  for (hg::DType d : {hg::f32, hg::bf16, hg::f16, hg::f64}) {
    const Tensor p = hg::zeros({300, 700}, {.dtype = d, .requires_grad = true});
    const Tensor g = hg::randn({700, 300}).to(d).transpose(0, 1);
    p.set_grad(g);
    for (double v : g.to(hg::f64).contiguous().to_vector<double>()) expected += v * v;
    params.push_back(p);
  }
  const int saved = hg::get_num_threads();
  hg::set_num_threads(1);
  const double one = nn::utils::clip_grad_norm_(params, 1e9);
  hg::set_num_threads(2);
  const double two = nn::utils::clip_grad_norm_(params, 1e9);
  hg::set_num_threads(saved);
  CHECK(one == doctest::Approx(std::sqrt(expected)).epsilon(1e-12));
  CHECK(one == two);
}

// ---- save / load ---------------------------------------------------------------------------------

TEST_CASE("nn.serialize.save_load_round_trip") {
  hg::manual_seed(1);
  nn::Sequential a{nn::Conv2d(1, 2, 3), nn::BatchNorm2d(2), nn::ReLU(), nn::Flatten(), nn::Linear(8, 3)};
  a(hg::randn({2, 1, 4, 4}));  // moves the running statistics off their defaults
  const std::string path = hg_test::temp_path("seq.safetensors");
  nn::save(a, path);
  const hg::SafetensorsContents file = hg::load_with_metadata(path);
  CHECK(file.metadata.at("format") == "pt");
  CHECK(file.tensors.size() == a.state_dict().size());
  CHECK(file.tensors.at("1.num_batches_tracked").dtype() == hg::i64);

  hg::manual_seed(2);
  nn::Sequential b{nn::Conv2d(1, 2, 3), nn::BatchNorm2d(2), nn::ReLU(), nn::Flatten(), nn::Linear(8, 3)};
  CHECK_FALSE(bitwise_equal(b.state_dict().at("0.weight"), a.state_dict().at("0.weight")));
  nn::load(b, path);
  for (const auto& entry : a.state_dict()) {  // (no structured binding: clang 14 cannot capture one in INFO)
    const auto& name = entry.first;
    const auto& t = entry.second;
    INFO(name);
    CHECK(bitwise_equal(b.state_dict().at(name), t));
  }
  a.eval(), b.eval();
  const Tensor x = hg::randn({3, 1, 4, 4});
  CHECK(bitwise_equal(b(x), a(x)));

  nn::Sequential wrong{nn::Conv2d(1, 2, 3), nn::Flatten(), nn::Linear(8, 4)};
  CHECK_THROWS_HG(nn::load(wrong, path), "1.running_mean");
  CHECK_THROWS_HG(nn::load(b, hg_test::temp_path("no_such_file.safetensors")), "no_such_file");

  a.to(hg::bf16);
  nn::save(a, path);
  b.to(hg::bf16);
  nn::load(b, path);
  CHECK(bitwise_equal(b.state_dict().at("4.weight"), a.state_dict().at("4.weight")));
}

TEST_CASE("nn.serialize.hg_train_mlp_loads_into_torch") {
  if (std::system("/usr/bin/python3 -c 'import torch' > /dev/null 2>&1") != 0) {
    MESSAGE("skipped: /usr/bin/python3 with torch is not available");
    return;
  }
  hg::manual_seed(0);
  nn::Sequential mlp{nn::Flatten(), nn::Linear(784, 256), nn::ReLU(), nn::Linear(256, 128), nn::ReLU(),
                     nn::Linear(128, 10)};
  const std::string dir = hg_test::temp_path("torch_interop");
  std::filesystem::create_directories(dir);
  nn::save(mlp, dir + "/mlp.safetensors");
  const Tensor x = hg::rand({5, 1, 28, 28});
  {
    hg::NoGradGuard no_grad;
    hg::save(dir + "/io.safetensors", {{"x", x}, {"y", mlp(x)}});
  }
  // The script loads our file into torch.nn.Sequential (strict) and checks the forward pass; then
  // writes a torch-initialised model and its output for the other direction.
  const std::string command = "/usr/bin/python3 " + std::string(HG_TEST_DIR) + "/load_into_torch.py " + dir;
  REQUIRE(std::system(command.c_str()) == 0);
  nn::Sequential from_torch{nn::Flatten(), nn::Linear(784, 256), nn::ReLU(), nn::Linear(256, 128), nn::ReLU(),
                            nn::Linear(128, 10)};
  nn::load(from_torch, dir + "/torch_mlp.safetensors");
  const auto io = hg::load(dir + "/torch_io.safetensors");
  hg::NoGradGuard no_grad;
  CHECK_CLOSE_TOL(from_torch(io.at("x")), io.at("y"), 1e-5, 1e-5);  // summation order differs from torch
}

// The vision layers: PyTorch's parameter and buffer names, shapes and defaults, and each one
// computing its op (train and eval where it differs).
TEST_CASE("nn.layers.rmsnorm_is_rms_norm_with_pytorch_names_and_defaults") {
  hg::manual_seed(8);
  const Tensor x = hg::randn({2, 3, 8}) * 3.0;
  nn::RMSNorm norm({8});
  CHECK(names_of(norm.named_parameters()) == std::vector<std::string>{"weight"});
  CHECK(norm.weight.to_vector<float>() == std::vector<float>(8, 1.f));
  CHECK(!norm.options.eps.has_value());  // the input dtype's epsilon, as PyTorch's
  // With unit weight every row has mean square 1 (up to eps).
  CHECK_CLOSE_TOL(hg::mean(norm(x) * norm(x), {2}), hg::ones({2, 3}), 0, 1e-5);
  CHECK_CLOSE(norm(x), hg::rms_norm(x, {8}, norm.weight));
  nn::RMSNorm plain({3, 8}, {.eps = 0.5, .elementwise_affine = false});
  CHECK(plain.named_parameters().empty());
  CHECK_CLOSE(plain(x), hg::rms_norm(x, {3, 8}, {}, 0.5));
}

TEST_CASE("nn.multihead_attention_has_pytorchs_names_masks_and_weights") {
  hg::manual_seed(9);
  nn::MultiheadAttention mha(8, 2);
  CHECK(names_of(mha.named_parameters()) ==
        std::vector<std::string>{"in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias"});  // PyTorch's order
  CHECK(mha.in_proj_weight.shape() == hg::Shape{24, 8});
  CHECK(hg::sum(hg::abs(mha.in_proj_bias)).item<float>() == 0.f);
  CHECK(hg::sum(hg::abs(mha.out_proj.bias)).item<float>() == 0.f);
  const Tensor x = hg::randn({3, 5, 8});
  // Self-attention through the fused kernel equals the explicit-weights path.
  auto [fused, none] = mha.forward(x, x, x, {.need_weights = false});
  auto [explicit_out, weights] = mha.forward(x, x, x);
  CHECK(!none.defined());
  CHECK_CLOSE(fused, explicit_out);
  CHECK(weights.shape() == hg::Shape{3, 5, 5});  // averaged over the heads
  CHECK_CLOSE_TOL(hg::sum(weights, {2}), hg::ones({3, 5}), 0, 1e-5);
  CHECK(std::get<1>(mha.forward(x, x, x, {.average_attn_weights = false})).shape() == hg::Shape{3, 2, 5, 5});
  CHECK_CLOSE(mha(x), fused);
  // PyTorch's mask convention: nonzero = may NOT attend. A causal mask as a u8 triangle equals
  // is_causal, and its weights above the diagonal are 0.
  const Tensor future = hg::triu(hg::ones({5, 5}, {.dtype = hg::u8}), 1);
  auto [masked, masked_weights] = mha.forward(x, x, x, {.attn_mask = future});
  CHECK_CLOSE(masked, std::get<0>(mha.forward(x, x, x, {.need_weights = false, .is_causal = true})));
  CHECK(hg::sum(hg::triu(masked_weights, 1)).item<float>() == 0.f);
  // A padded key gets no weight from any query.
  const Tensor padding = hg::from_vector<uint8_t>({0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1}, {3, 5});
  const std::vector<float> w = std::get<1>(mha.forward(x, x, x, {.key_padding_mask = padding})).to_vector<float>();
  for (int q = 0; q < 5; ++q) {
    CHECK(w[size_t(q * 5 + 4)] == 0.f);
    CHECK(w[size_t(2 * 25 + q * 5 + 3)] == 0.f);
  }
  CHECK_CLOSE(std::get<0>(mha.forward(x, x, x, {.key_padding_mask = padding, .need_weights = false})),
              std::get<0>(mha.forward(x, x, x, {.key_padding_mask = padding})));
  // Cross-attention: keys and values of another length.
  const Tensor memory = hg::randn({3, 7, 8});
  CHECK(std::get<0>(mha.forward(x, memory, memory)).shape() == hg::Shape{3, 5, 8});
  // batch_first = false: [L, B, E] in and out, the same numbers.
  nn::MultiheadAttention seq_first(8, 2, {.batch_first = false});
  seq_first.load_state_dict(mha.state_dict());
  CHECK_CLOSE(seq_first(x.transpose(0, 1)).transpose(0, 1), fused);
  mha.to(hg::f64);
  CHECK(mha(x.to(hg::f64)).dtype() == hg::f64);
  CHECK_THROWS_HG(nn::MultiheadAttention(10, 3), "MultiheadAttention: embed_dim (10) must be positive and divisible by num_heads (3)");
  CHECK_THROWS_HG(mha(hg::randn({5, 8}).to(hg::f64)), "MultiheadAttention: expected 3-D query, key and value");
  CHECK_THROWS_HG(mha(hg::randn({2, 5, 6}).to(hg::f64)), "must end in embed_dim = 8");
  CHECK_THROWS_HG(mha.forward(x.to(hg::f64), x.to(hg::f64), x.to(hg::f64), {.attn_mask = hg::zeros({4, 4})}),
                  "attn_mask must be [L, S] = [5, 5]");
  CHECK_THROWS_HG(mha.forward(x.to(hg::f64), x.to(hg::f64), x.to(hg::f64), {.key_padding_mask = hg::zeros({3, 4})}),
                  "key_padding_mask must be [B, S] = [3, 5]");
}

TEST_CASE("nn.transformer_encoder_layer_matches_pytorchs") {
  // tests/golden/encoder_layer.safetensors: torch 1.13's layers (post-norm ReLU; pre-norm GELU
  // with a causal mask), their state dicts loaded here under the same names, eval mode.
  const hg::SafetensorsContents file =
      hg::load_with_metadata(std::string(HG_TEST_DIR) + "/golden/encoder_layer.safetensors");
  for (const std::string name : {"post_norm_relu", "pre_norm_gelu_causal"}) {
    CAPTURE(name);
    const hg::json::Value o = hg::json::parse(file.metadata.at(name), "encoder_layer metadata");
    nn::TransformerEncoderLayer layer(8, 2,
                                      {.dim_feedforward = 16, .activation = o.find("activation")->text,
                                       .norm_first = o.find("norm_first")->boolean});
    std::map<std::string, Tensor> state;
    for (const auto& [key, value] : file.tensors)
      if (key.starts_with(name + ".") && key != name + ".x" && key != name + ".out") state[key.substr(name.size() + 1)] = value;
    layer.load_state_dict(state);  // strict: the names are PyTorch's
    layer.eval();
    const bool causal = o.find("causal")->boolean;
    const Tensor out = layer.forward(file.tensors.at(name + ".x"), {.is_causal = causal});
    CHECK_CLOSE_TOL(out, file.tensors.at(name + ".out"), 1e-5, 1e-5);
    // The same with the mask given as PyTorch's boolean one (nonzero = may not attend).
    const Tensor mask = hg::triu(hg::ones({5, 5}, {.dtype = hg::u8}), 1);
    if (causal) CHECK_CLOSE_TOL(layer.forward(file.tensors.at(name + ".x"), {.src_mask = mask}), out, 1e-6, 1e-6);
  }
  CHECK_THROWS_HG(nn::TransformerEncoderLayer(8, 2, {.activation = "tanh"}),
                  "TransformerEncoderLayer: activation must be \"relu\" or \"gelu\", got \"tanh\"");
  // Training mode: dropout changes the output, and the gradients reach every parameter.
  nn::TransformerEncoderLayer train(8, 2, {.dim_feedforward = 16});
  hg::sum(train(hg::randn({2, 5, 8}))).backward();
  for (const auto& named : train.named_parameters()) {  // (not a structured binding: CAPTURE's lambda, clang 14)
    CAPTURE(named.first);
    CHECK(named.second.grad().defined());
  }
}

TEST_CASE("nn.layers.vision_modules_are_their_ops") {
  hg::manual_seed(7);
  const Tensor image = hg::randn({2, 4, 5, 5});

  nn::ConvTranspose2d up(4, 3, 4, {.stride = 2, .padding = 1});  // DCGAN's upsampling: 5x5 -> 10x10
  CHECK(names_of(up.named_parameters()) == std::vector<std::string>{"weight", "bias"});
  CHECK(up.weight.shape() == hg::Shape{4, 3, 4, 4});
  CHECK(up(image).shape() == hg::Shape{2, 3, 10, 10});
  CHECK_CLOSE(up(image), hg::conv_transpose2d(image, up.weight, up.bias, {.stride = 2, .padding = 1}));

  nn::Conv1d conv1(4, 6, 3, {.padding = 1, .groups = 2});
  CHECK(conv1.weight.shape() == hg::Shape{6, 2, 3});
  CHECK(conv1(hg::randn({2, 4, 9})).shape() == hg::Shape{2, 6, 9});

  nn::PReLU prelu(4);
  CHECK(prelu.weight.to_vector<float>() == std::vector<float>(4, 0.25f));
  CHECK_CLOSE(prelu(image), hg::prelu(image, prelu.weight));

  nn::GroupNorm gn(2, 4);
  CHECK(names_of(gn.named_parameters()) == std::vector<std::string>{"weight", "bias"});
  CHECK_CLOSE(gn(image), hg::group_norm(image, 2, gn.weight, gn.bias, 1e-5));

  // BatchNorm1d on (N, C) and (N, C, L): batch_norm's statistics and running updates.
  nn::BatchNorm1d bn(4);
  const Tensor rows = hg::randn({8, 4}) * 2.0 + 1.0;
  const Tensor out = bn(rows);
  CHECK_CLOSE_TOL(hg::mean(out, {0}), hg::zeros({4}), 0, 1e-5);
  CHECK(bn.num_batches_tracked.item<int64_t>() == 1);
  CHECK_CLOSE(bn.running_mean, hg::mean(rows, {0}) * 0.1);
  CHECK(bn(hg::randn({3, 4, 6})).shape() == hg::Shape{3, 4, 6});

  // InstanceNorm2d: no parameters or buffers by default; with track_running_stats the buffers
  // move in training and normalise in eval, as batch_norm's would.
  nn::InstanceNorm2d plain(4);
  CHECK(plain.named_parameters().empty());
  CHECK(plain.named_buffers().empty());
  CHECK_CLOSE(plain(image), hg::group_norm(image, 4));
  nn::InstanceNorm2d tracked(4, {.affine = true, .track_running_stats = true});
  CHECK(names_of(tracked.named_buffers()) ==
        std::vector<std::string>{"running_mean", "running_var", "num_batches_tracked"});
  tracked(image);
  CHECK(tracked.num_batches_tracked.item<int64_t>() == 1);
  // The running mean: 0.1 x the batch's mean of per-image channel means.
  CHECK_CLOSE(tracked.running_mean, hg::mean(image, {0, 2, 3}) * 0.1);
  tracked.eval();
  CHECK_CLOSE(tracked(image), hg::batch_norm(image, tracked.running_mean, tracked.running_var, tracked.weight,
                                             tracked.bias, false, 0.1, 1e-5));

  nn::Upsample upsample({.scale_factor = 2.0, .mode = "bilinear"});
  CHECK(upsample(image).shape() == hg::Shape{2, 4, 10, 10});
  nn::AdaptiveMaxPool2d pool({1, 1});
  CHECK_CLOSE(pool(image), hg::amax(hg::amax(image, 3, true), 2, true));
}
