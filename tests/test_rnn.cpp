// nn::LSTM, GRU, LSTMCell, GRUCell: torch 1.13's modules (tests/golden/rnn.safetensors, from
// make_golden.py rnn) loaded under their parameter names give its outputs and gradients in f32 and
// f64; an f64 gradcheck through every parameter; dropout between layers in training only;
// unbatched input; bf16 autocast; PyTorch's initialisation; and the shape errors.
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "core/json.h"
#include "core/safetensors.h"
#include "test_support.h"

using hg::Tensor;
namespace nn = hg::nn;

namespace {

const hg::SafetensorsContents& fixtures() {
  static const hg::SafetensorsContents file = hg::load_with_metadata(std::string(HG_TEST_DIR) + "/golden/rnn.safetensors");
  return file;
}

// One case of the fixture file in one dtype: its tensors without the "<case>.<dtype>." prefix.
struct Golden {
  std::map<std::string, Tensor> tensors;
  hg::json::Value options;
  double tolerance;

  Golden(const std::string& name, hg::DType dtype)
      : options(hg::json::parse(fixtures().metadata.at(name), "rnn metadata")), tolerance(dtype == hg::f64 ? 1e-10 : 1e-5) {
    const std::string prefix = name + "." + std::string(hg::dtype_name(dtype)) + ".";
    for (const auto& [key, value] : fixtures().tensors)
      if (key.starts_with(prefix)) tensors[key.substr(prefix.size())] = value;
  }
  bool has(const std::string& key) const { return tensors.count(key) > 0; }
  const Tensor& at(const std::string& key) const { return tensors.at(key); }
  std::string text(const char* key) const { return options.find(key)->text; }
  bool flag(const char* key) const { return options.find(key)->boolean; }
  // The torch state dict: every tensor that is not an input, an output or a gradient.
  std::map<std::string, Tensor> state_dict() const {
    std::map<std::string, Tensor> state;
    for (const auto& [key, value] : tensors)
      if (!key.starts_with("grad.") && key != "x" && key != "h0" && key != "c0" && key != "out" && key != "h_n" &&
          key != "c_n" && key != "h" && key != "c")
        state[key] = value;
    return state;
  }
  // A fresh leaf holding the fixture's input (or state), or undefined when the case has none.
  Tensor leaf(const std::string& key) const { return has(key) ? at(key).clone().requires_grad_() : Tensor(); }

  void check(const std::string& key, const Tensor& actual) const {
    CAPTURE(key);
    REQUIRE(actual.defined());
    CHECK_CLOSE_TOL(actual, at(key), tolerance, tolerance);
  }
  // The gradients of the inputs given and of every parameter.
  void check_grads(const nn::Module& module, const std::map<std::string, Tensor>& inputs) const {
    for (const auto& input : inputs)
      if (input.second.defined()) check("grad." + input.first, input.second.grad());
    for (const auto& named : module.named_parameters()) check("grad." + named.first, named.second.grad());
  }
};

std::vector<std::string> names_of(const nn::Module& module) {
  std::vector<std::string> names;
  for (const auto& named : module.named_parameters()) names.push_back(named.first);
  return names;
}

Tensor flat(const std::vector<Tensor>& parts) {
  std::vector<Tensor> rows;
  for (const Tensor& t : parts) rows.push_back(t.reshape({-1}));
  return hg::cat(rows, 0);
}

}  // namespace

TEST_CASE("nn.lstm_matches_torch") {
  for (const std::string name : {"lstm_one_layer", "lstm_two_layers_bidirectional_batch_first", "lstm_with_state"}) {
    for (const hg::DType dtype : {hg::f32, hg::f64}) {
      CAPTURE(name);
      CAPTURE(hg::dtype_name(dtype));
      const Golden golden(name, dtype);
      nn::LSTM lstm(3, 4,
                    {.num_layers = std::stoi(golden.text("layers")), .batch_first = golden.flag("batch_first"),
                     .bidirectional = golden.flag("bidirectional")});
      lstm.to(dtype);
      lstm.load_state_dict(golden.state_dict());  // strict: the names and shapes are PyTorch's
      const Tensor x = golden.leaf("x"), h0 = golden.leaf("h0"), c0 = golden.leaf("c0");
      const auto [out, state] = lstm(x, {h0, c0});
      const auto [h_n, c_n] = state;
      golden.check("out", out);
      golden.check("h_n", h_n);
      golden.check("c_n", c_n);
      (hg::sum(out * out) + hg::sum(h_n) + hg::sum(c_n * c_n)).backward();
      golden.check_grads(lstm, {{"x", x}, {"h0", h0}, {"c0", c0}});
    }
  }
}

TEST_CASE("nn.gru_matches_torch") {
  for (const std::string name : {"gru_one_layer", "gru_two_layers_bidirectional_batch_first", "gru_with_state"}) {
    for (const hg::DType dtype : {hg::f32, hg::f64}) {
      CAPTURE(name);
      CAPTURE(hg::dtype_name(dtype));
      const Golden golden(name, dtype);
      nn::GRU gru(3, 4,
                  {.num_layers = std::stoi(golden.text("layers")), .batch_first = golden.flag("batch_first"),
                   .bidirectional = golden.flag("bidirectional")});
      gru.to(dtype);
      gru.load_state_dict(golden.state_dict());
      const Tensor x = golden.leaf("x"), h0 = golden.leaf("h0");
      const auto [out, h_n] = gru(x, h0);
      golden.check("out", out);
      golden.check("h_n", h_n);
      (hg::sum(out * out) + hg::sum(h_n)).backward();
      golden.check_grads(gru, {{"x", x}, {"h0", h0}});
    }
  }
}

TEST_CASE("nn.rnn_cells_match_torch") {
  for (const hg::DType dtype : {hg::f32, hg::f64}) {
    CAPTURE(hg::dtype_name(dtype));
    const Golden lstm_golden("lstm_cell", dtype);
    nn::LSTMCell lstm(3, 4);
    lstm.to(dtype);
    lstm.load_state_dict(lstm_golden.state_dict());
    const Tensor x = lstm_golden.leaf("x"), h0 = lstm_golden.leaf("h0"), c0 = lstm_golden.leaf("c0");
    const auto [h, c] = lstm(x, {h0, c0});
    lstm_golden.check("h", h);
    lstm_golden.check("c", c);
    (hg::sum(h * h) + hg::sum(c)).backward();
    lstm_golden.check_grads(lstm, {{"x", x}, {"h0", h0}, {"c0", c0}});

    const Golden gru_golden("gru_cell", dtype);
    nn::GRUCell gru(3, 4);
    gru.to(dtype);
    gru.load_state_dict(gru_golden.state_dict());
    const Tensor gx = gru_golden.leaf("x"), gh0 = gru_golden.leaf("h0");
    const Tensor gh = gru(gx, gh0);
    gru_golden.check("h", gh);
    hg::sum(gh * gh).backward();
    gru_golden.check_grads(gru, {{"x", gx}, {"h0", gh0}});
  }
}

TEST_CASE("nn.rnn_parameter_names_and_init_are_pytorchs") {
  nn::LSTM lstm(3, 4, {.num_layers = 2, .bidirectional = true});
  CHECK(names_of(lstm) ==
        std::vector<std::string>{"weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0", "weight_ih_l0_reverse",
                                 "weight_hh_l0_reverse", "bias_ih_l0_reverse", "bias_hh_l0_reverse", "weight_ih_l1",
                                 "weight_hh_l1", "bias_ih_l1", "bias_hh_l1", "weight_ih_l1_reverse",
                                 "weight_hh_l1_reverse", "bias_ih_l1_reverse", "bias_hh_l1_reverse"});
  CHECK(lstm.state_dict().at("weight_ih_l1").shape() == hg::Shape{16, 8});  // layer 1 reads both directions
  // The fixture's torch state dict has exactly these keys (load_state_dict is strict too).
  std::vector<std::string> torch_keys;
  for (const auto& entry : Golden("lstm_two_layers_bidirectional_batch_first", hg::f32).state_dict())
    torch_keys.push_back(entry.first);
  std::vector<std::string> ours;
  for (const auto& entry : lstm.state_dict()) ours.push_back(entry.first);
  CHECK(ours == torch_keys);

  CHECK(names_of(nn::GRU(3, 5, {.bias = false})) == std::vector<std::string>{"weight_ih_l0", "weight_hh_l0"});
  nn::GRU gru(3, 5);
  CHECK(gru.state_dict().at("weight_hh_l0").shape() == hg::Shape{15, 5});
  CHECK(names_of(nn::LSTMCell(3, 4)) == std::vector<std::string>{"weight_ih", "weight_hh", "bias_ih", "bias_hh"});
  CHECK(names_of(nn::GRUCell(3, 4, {.bias = false})) == std::vector<std::string>{"weight_ih", "weight_hh"});

  // Every parameter U(-1/sqrt(H), 1/sqrt(H)), as PyTorch's reset_parameters.
  nn::LSTM wide(8, 64);
  for (const Tensor& p : wide.parameters()) {
    CHECK(hg::amax(hg::abs(p).reshape({-1}), 0).item<double>() <= 1 / std::sqrt(64.0));
    CHECK(hg::amax(hg::abs(p).reshape({-1}), 0).item<double>() > 0.9 / std::sqrt(64.0));
  }
  // Module::to converts them (the layers keep computing with the converted ones).
  wide.to(hg::f64);
  for (const Tensor& p : wide.parameters()) CHECK(p.dtype() == hg::f64);
  CHECK(std::get<0>(wide(hg::randn({3, 2, 8}, {.dtype = hg::f64}))).dtype() == hg::f64);
}

TEST_CASE("nn.rnn_gradcheck_f64") {
  // Two bidirectional layers with a given state: every parameter, the input and the state.
  hg::manual_seed(3);
  nn::LSTM lstm(2, 2, {.num_layers = 2, .bidirectional = true});
  lstm.to(hg::f64);
  std::vector<Tensor> inputs{hg::randn({3, 1, 2}, {.dtype = hg::f64, .requires_grad = true}),
                             hg::randn({4, 1, 2}, {.dtype = hg::f64, .requires_grad = true}),
                             hg::randn({4, 1, 2}, {.dtype = hg::f64, .requires_grad = true})};
  for (const Tensor& p : lstm.parameters()) inputs.push_back(p);
  const auto lstm_fn = [&](const std::vector<Tensor>& in) {
    const auto [out, state] = lstm(in[0], {in[1], in[2]});
    return flat({out, std::get<0>(state), std::get<1>(state)});
  };
  CHECK(hg::autograd::gradcheck_report(lstm_fn, inputs).value_or("") == "");

  nn::GRU gru(2, 2, {.num_layers = 2, .batch_first = true, .bidirectional = true});
  gru.to(hg::f64);
  std::vector<Tensor> gru_inputs{hg::randn({1, 3, 2}, {.dtype = hg::f64, .requires_grad = true}),
                                 hg::randn({4, 1, 2}, {.dtype = hg::f64, .requires_grad = true})};
  for (const Tensor& p : gru.parameters()) gru_inputs.push_back(p);
  const auto gru_fn = [&](const std::vector<Tensor>& in) {
    const auto [out, h_n] = gru(in[0], in[1]);
    return flat({out, h_n});
  };
  CHECK(hg::autograd::gradcheck_report(gru_fn, gru_inputs).value_or("") == "");

  nn::LSTMCell cell(2, 3);
  cell.to(hg::f64);
  std::vector<Tensor> cell_inputs{hg::randn({2, 2}, {.dtype = hg::f64, .requires_grad = true})};
  for (const Tensor& p : cell.parameters()) cell_inputs.push_back(p);
  const auto cell_fn = [&](const std::vector<Tensor>& in) {
    const auto [h, c] = cell(in[0]);
    return flat({h, c});
  };
  CHECK(hg::autograd::gradcheck_report(cell_fn, cell_inputs).value_or("") == "");
}

TEST_CASE("nn.rnn_layers_equal_their_cells_step_by_step") {
  // The layers run a fused recurrence (one Function per layer and direction); the cells are the
  // composite of differentiable ops. Both directions, with and without biases, T = 1 included.
  for (const bool bias : {true, false}) {
    for (const int64_t T : {int64_t(1), int64_t(4)}) {
      CAPTURE(bias);
      CAPTURE(T);
      hg::manual_seed(21);
      nn::LSTM lstm(3, 5, {.bias = bias, .bidirectional = true});
      nn::GRU gru(3, 5, {.bias = bias, .bidirectional = true});
      nn::LSTMCell lstm_cell(3, 5, {.bias = bias});
      nn::GRUCell gru_cell(3, 5, {.bias = bias});
      for (nn::Module* m : std::vector<nn::Module*>{&lstm, &gru, &lstm_cell, &gru_cell}) m->to(hg::f64);
      const Tensor x = hg::randn({T, 2, 3}, {.dtype = hg::f64});
      for (const std::string suffix : {"_l0", "_l0_reverse"}) {
        CAPTURE(suffix);
        std::map<std::string, Tensor> lstm_weights, gru_weights;
        for (const std::string name : {"weight_ih", "weight_hh", "bias_ih", "bias_hh"}) {
          if (!bias && name.starts_with("bias")) continue;
          lstm_weights[name] = lstm.state_dict().at(name + suffix);
          gru_weights[name] = gru.state_dict().at(name + suffix);
        }
        lstm_cell.load_state_dict(lstm_weights);
        gru_cell.load_state_dict(gru_weights);
        const bool reverse = suffix == "_l0_reverse";
        std::vector<Tensor> lstm_steps(static_cast<size_t>(T)), gru_steps(static_cast<size_t>(T));
        std::tuple<Tensor, Tensor> state;
        Tensor h;
        for (int64_t s = 0; s < T; ++s) {
          const int64_t t = reverse ? T - 1 - s : s;
          const Tensor x_t = hg::squeeze(hg::narrow(x, 0, t, 1), 0);
          state = lstm_cell(x_t, state);
          h = gru_cell(x_t, h);
          lstm_steps[size_t(t)] = std::get<0>(state);
          gru_steps[size_t(t)] = h;
        }
        const int64_t half = reverse ? 5 : 0;
        CHECK_CLOSE_TOL(hg::narrow(std::get<0>(lstm(x)), 2, half, 5), hg::stack(lstm_steps, 0), 1e-12, 1e-12);
        CHECK_CLOSE_TOL(hg::narrow(std::get<0>(gru(x)), 2, half, 5), hg::stack(gru_steps, 0), 1e-12, 1e-12);
      }
      // And the gradients: the fused backward against gradcheck's finite differences.
      std::vector<Tensor> inputs{x.clone().requires_grad_()};
      for (const Tensor& p : lstm.parameters()) inputs.push_back(p);
      const auto fn = [&](const std::vector<Tensor>& in) {
        const auto [out, hc] = lstm(in[0]);
        return flat({out, std::get<1>(hc)});
      };
      CHECK(hg::autograd::gradcheck_report(fn, inputs).value_or("") == "");
    }
  }
}

TEST_CASE("nn.rnn_dropout_between_layers_in_training_only") {
  hg::manual_seed(5);
  const Tensor x = hg::randn({6, 3, 4});
  nn::LSTM deep(4, 8, {.num_layers = 2, .dropout = 0.5});
  deep.eval();
  const Tensor reference = std::get<0>(deep(x));
  CHECK_CLOSE_TOL(std::get<0>(deep(x)), reference, 0, 0);  // eval: no dropout, deterministic
  deep.train();
  const Tensor first = std::get<0>(deep(x)), second = std::get<0>(deep(x));
  CHECK(hg::amax(hg::abs(first - reference).reshape({-1}), 0).item<double>() > 1e-3);
  CHECK(hg::amax(hg::abs(first - second).reshape({-1}), 0).item<double>() > 1e-3);
  // Not after the last layer: one layer with dropout trains as it evaluates.
  nn::GRU shallow(4, 8, {.dropout = 0.5});
  const Tensor trained = std::get<0>(shallow(x));
  shallow.eval();
  CHECK_CLOSE_TOL(std::get<0>(shallow(x)), trained, 0, 0);
}

TEST_CASE("nn.rnn_unbatched_and_layouts") {
  hg::manual_seed(9);
  nn::LSTM lstm(3, 4, {.num_layers = 2, .bidirectional = true});
  const Tensor x = hg::randn({5, 3});  // unbatched [T, input]
  const auto [out, state] = lstm(x);
  CHECK(out.shape() == hg::Shape{5, 8});
  CHECK(std::get<0>(state).shape() == hg::Shape{4, 4});
  const auto [batched, batched_state] = lstm(hg::unsqueeze(x, 1));
  CHECK_CLOSE(out, hg::squeeze(batched, 1));
  CHECK_CLOSE(std::get<1>(state), hg::squeeze(std::get<1>(batched_state), 1));
  // Continuing from a state equals running the concatenated sequence.
  nn::GRU gru(3, 4);
  const Tensor seq = hg::randn({6, 2, 3});
  const auto [whole, h_whole] = gru(seq);
  const auto [front, h_front] = gru(hg::narrow(seq, 0, 0, 2));
  const auto [back, h_back] = gru(hg::narrow(seq, 0, 2, 4), h_front);
  CHECK_CLOSE(hg::cat({front, back}, 0), whole);
  CHECK_CLOSE(h_back, h_whole);
  // batch_first: the same numbers, transposed.
  nn::GRU first(3, 4, {.batch_first = true});
  first.load_state_dict(gru.state_dict());
  CHECK_CLOSE(std::get<0>(first(seq.transpose(0, 1))).transpose(0, 1), whole);
  // The one-argument forward gives the output (an LSTM can sit in a Sequential).
  CHECK_CLOSE(lstm.forward(x), out);
  // A cell step is one step of the layer.
  nn::GRUCell cell(3, 4);
  cell.load_state_dict({{"weight_ih", gru.state_dict().at("weight_ih_l0")}, {"weight_hh", gru.state_dict().at("weight_hh_l0")},
                        {"bias_ih", gru.state_dict().at("bias_ih_l0")}, {"bias_hh", gru.state_dict().at("bias_hh_l0")}});
  const Tensor h1 = cell(hg::squeeze(hg::narrow(seq, 0, 0, 1), 0));
  CHECK_CLOSE(cell(hg::squeeze(hg::narrow(seq, 0, 1, 1), 0), h1), hg::squeeze(hg::narrow(whole, 0, 1, 1), 0));
  CHECK(cell(hg::randn({3})).shape() == hg::Shape{4});  // unbatched cell
}

TEST_CASE("nn.rnn_bf16_autocast_stays_close_to_f32") {
  hg::manual_seed(11);
  nn::LSTM lstm(16, 32, {.num_layers = 2, .batch_first = true});
  const Tensor x = hg::randn({4, 10, 16});
  const auto [reference, reference_state] = lstm(x);
  hg::sum(reference * reference).backward();
  std::map<std::string, Tensor> reference_grads;
  for (const auto& named : lstm.named_parameters()) reference_grads[named.first] = named.second.grad();
  lstm.zero_grad();
  Tensor out;
  {
    hg::amp::Autocast autocast(hg::bf16);
    const auto [output, state] = lstm(x);
    out = output;
    // The layer runs in the autocast dtype, as PyTorch's CPU autocast runs its LSTM layer; the
    // cell state is f32 inside the sequence and bf16 only where it comes out.
    CHECK(out.dtype() == hg::bf16);
    CHECK(std::get<0>(state).dtype() == hg::bf16);
    CHECK(std::get<1>(state).dtype() == hg::bf16);
    CHECK_CLOSE_TOL(std::get<1>(state).to(hg::f32), std::get<1>(reference_state), 0.05, 0.02);
    hg::sum(out.to(hg::f32) * out.to(hg::f32)).backward();
  }
  CHECK_CLOSE_TOL(out.to(hg::f32), reference, 0.05, 0.02);
  for (const auto& named : lstm.named_parameters()) {
    CAPTURE(named.first);
    REQUIRE(named.second.grad().defined());
    CHECK(named.second.grad().dtype() == hg::f32);
    const Tensor expected = reference_grads.at(named.first);
    const double scale = hg::amax(hg::abs(expected).reshape({-1}), 0).item<double>();
    CHECK(hg::amax(hg::abs(named.second.grad() - expected).reshape({-1}), 0).item<double>() <= 0.1 * scale);
  }
}

// The AMP loop calls backward after the autocast region has closed: the layers' backward runs
// under the autocast state their forward saw (ops/function.h), so the recurrent GEMMs still
// multiply in bf16 -- W_hh's gradient is a bf16 product's, bf16 values -- and the gradients are
// the same, bit for bit, as those of a backward run inside the region.
TEST_CASE("nn.rnn_backward_after_autocast_multiplies_in_the_forwards_dtype") {
  hg::manual_seed(12);
  nn::LSTM lstm(16, 32, {.num_layers = 2, .batch_first = true});
  nn::GRU gru(16, 32, {.num_layers = 2, .batch_first = true});
  const Tensor x = hg::randn({4, 10, 16});
  const auto gradients = [&](bool backward_inside) {
    std::map<std::string, Tensor> grads;
    lstm.zero_grad(), gru.zero_grad();
    Tensor loss;
    {
      hg::amp::Autocast autocast(hg::bf16);
      const Tensor a = std::get<0>(lstm(x)).to(hg::f32), b = std::get<0>(gru(x)).to(hg::f32);
      loss = hg::sum(a * a) + hg::sum(b * b);
      if (backward_inside) loss.backward();
    }
    if (!backward_inside) loss.backward();
    for (const auto& [name, p] : lstm.named_parameters()) grads["lstm." + name] = p.grad().clone();
    for (const auto& [name, p] : gru.named_parameters()) grads["gru." + name] = p.grad().clone();
    return grads;
  };
  const auto outside = gradients(false), inside = gradients(true);
  for (const auto& entry : outside) {
    const std::string& name = entry.first;  // (not a structured binding: CAPTURE's lambda takes it)
    const Tensor& grad = entry.second;
    CAPTURE(name);
    CHECK(grad.to_vector<float>() == inside.at(name).to_vector<float>());
    if (name.find("weight_hh") != std::string::npos)
      CHECK(grad.to(hg::bf16).to(hg::f32).to_vector<float>() == grad.to_vector<float>());
  }
}

TEST_CASE("nn.rnn_errors_name_the_shapes") {
  nn::LSTM lstm(3, 4, {.num_layers = 2});
  CHECK_THROWS_HG(lstm(hg::randn({2, 5, 3, 1})), "LSTM: expected input [T, B, input_size] or unbatched [T, input_size], got [2, 5, 3, 1]");
  CHECK_THROWS_HG(lstm(hg::randn({5, 2, 6})), "LSTM: input must end in input_size = 3, got [5, 2, 6]");
  CHECK_THROWS_HG(lstm(hg::randn({5, 2, 3}), {hg::zeros({1, 2, 4}), Tensor()}),
                  "LSTM: h0 must be [num_layers * num_directions, B, hidden_size] = [2, 2, 4], got [1, 2, 4]");
  CHECK_THROWS_HG(lstm(hg::randn({5, 2, 3}), {Tensor(), hg::zeros({2, 3, 4})}),
                  "LSTM: c0 must be [num_layers * num_directions, B, hidden_size] = [2, 2, 4], got [2, 3, 4]");
  CHECK_THROWS_HG(lstm(hg::randn({5, 3}), {hg::zeros({2, 1, 4}), Tensor()}),
                  "LSTM: h0 must be [num_layers * num_directions, hidden_size] = [2, 4], got [2, 1, 4]");
  nn::GRU gru(3, 4, {.batch_first = true, .bidirectional = true});
  CHECK_THROWS_HG(gru(hg::randn({3})), "GRU: expected input [B, T, input_size] or unbatched [T, input_size], got [3]");
  CHECK_THROWS_HG(gru(hg::randn({2, 5, 3}), hg::zeros({1, 2, 4})), "GRU: h0 must be [num_layers * num_directions, B, hidden_size] = [2, 2, 4]");
  CHECK_THROWS_HG(gru(hg::ones({2, 5, 3}, {.dtype = hg::i64})), "GRU: expected a floating input, got i64");
  CHECK_THROWS_HG(nn::LSTM(0, 4), "LSTM: input_size and hidden_size must be positive, got 0 and 4");
  CHECK_THROWS_HG(nn::GRU(3, 4, {.num_layers = 0}), "GRU: num_layers must be positive, got 0");
  CHECK_THROWS_HG(nn::GRU(3, 4, {.dropout = 1.5}), "GRU: dropout must be in [0, 1], got 1.5");

  nn::LSTMCell cell(3, 4);
  CHECK_THROWS_HG(cell(hg::randn({2, 2, 3})), "LSTMCell: expected input [B, input_size] or [input_size], got [2, 2, 3]");
  CHECK_THROWS_HG(cell(hg::randn({2, 5})), "LSTMCell: input must end in input_size = 3, got [2, 5]");
  CHECK_THROWS_HG(cell(hg::randn({2, 3}), {hg::zeros({2, 4}), hg::zeros({3, 4})}),
                  "LSTMCell: c must be [2, 4] (the input's batch, hidden_size), got [3, 4]");
  nn::GRUCell gru_cell(3, 4);
  CHECK_THROWS_HG(gru_cell(hg::randn({2, 3}), hg::zeros({2, 5})), "GRUCell: h must be [2, 4] (the input's batch, hidden_size), got [2, 5]");
  CHECK_THROWS_HG(nn::GRUCell(3, -1), "GRUCell: input_size and hidden_size must be positive, got 3 and -1");
}

TEST_CASE("nn.rnn_cuda_matches_cpu" * doctest::skip(!hg_test::cuda_available())) {
  // On CUDA the layers run the composed steps (the fused recurrence is the CPU's).
  hg::manual_seed(13);
  nn::LSTM lstm(3, 4, {.num_layers = 2, .batch_first = true, .bidirectional = true});
  nn::GRU gru(3, 4, {.num_layers = 2, .bidirectional = true});
  nn::LSTM lstm_gpu(3, 4, {.num_layers = 2, .batch_first = true, .bidirectional = true});
  nn::GRU gru_gpu(3, 4, {.num_layers = 2, .bidirectional = true});
  lstm_gpu.load_state_dict(lstm.state_dict());
  gru_gpu.load_state_dict(gru.state_dict());
  lstm_gpu.to(hg::Device::cuda());
  gru_gpu.to(hg::Device::cuda());
  const Tensor x = hg::randn({2, 5, 3});
  const Tensor lstm_cpu = std::get<0>(lstm(x)), gru_cpu = std::get<0>(gru(x));
  const Tensor lstm_cuda = std::get<0>(lstm_gpu(x.to(hg::Device::cuda()))), gru_cuda = std::get<0>(gru_gpu(x.to(hg::Device::cuda())));
  CHECK_CLOSE_TOL(lstm_cuda.to(hg::Device::cpu()), lstm_cpu, 1e-5, 1e-5);
  CHECK_CLOSE_TOL(gru_cuda.to(hg::Device::cpu()), gru_cpu, 1e-5, 1e-5);
  hg::sum(lstm_cpu * lstm_cpu).backward();
  hg::sum(lstm_cuda * lstm_cuda).backward();
  const auto cpu_params = lstm.named_parameters(), gpu_params = lstm_gpu.named_parameters();
  for (size_t i = 0; i < cpu_params.size(); ++i) {
    CAPTURE(cpu_params[i].first);
    CHECK_CLOSE_TOL(gpu_params[i].second.grad().to(hg::Device::cpu()), cpu_params[i].second.grad(), 1e-4, 1e-5);
  }
}
