// nn::LSTM, nn::GRU, nn::LSTMCell, nn::GRUCell: PyTorch's recurrent layers, with its parameter
// names (weight_ih_l0, weight_hh_l0, bias_ih_l0, bias_hh_l0, ..._reverse), gate order (LSTM: i, f,
// g, o; GRU: r, z, n) and initialisation (every parameter U(-1/sqrt(H), 1/sqrt(H))), so a
// torch.nn.LSTM's state dict loads here and gives its outputs.
//
//   nn::LSTM lstm(3, 4, {.num_layers = 2, .batch_first = true});
//   auto [out, state] = lstm(x);                  // x [B, T, 3] -> out [B, T, 4]
//   auto [h_n, c_n] = state;                      // [num_layers * directions, B, 4]
//   auto [out2, state2] = lstm.forward(x, state); // continue from (h, c)
//
// Per layer and direction, the input projection of the whole sequence is one GEMM ([T * B, in] @
// W_ih^T, differentiable linear); the loop over time is one custom Function on the CPU (one GEMM a
// step for all the gates, h @ W_hh^T, the gate arithmetic in f32 on raw arrays, and in backward
// dW_hh for the whole sequence in one GEMM) and composed steps of differentiable ops elsewhere --
// the cells' path, which the tests hold the fused one to. Under autocast the GEMMs run in the
// autocast dtype and the gates in f32; the LSTM layer's outputs are in the autocast dtype (as
// PyTorch's CPU autocast gives them, the cell state f32 inside the sequence), the GRU's f32 (its
// hidden state, its only state, stays f32). Unbatched input ([T, in]) works as in PyTorch.
#pragma once
#include <tuple>
#include <vector>

#include "nn/module.h"

namespace hg::nn {

// Options of LSTM and GRU, PyTorch's keyword arguments in its order.
struct RNNOptions {
  int64_t num_layers = 1;
  bool bias = true;
  bool batch_first = false;  // input and output [B, T, F] instead of [T, B, F]; h and c stay [L * D, B, H]
  double dropout = 0.0;      // on each layer's output but the last, in training mode
  bool bidirectional = false;
};
using LSTMOptions = RNNOptions;
using GRUOptions = RNNOptions;

struct RNNCellOptions {
  bool bias = true;
};
using LSTMCellOptions = RNNCellOptions;
using GRUCellOptions = RNNCellOptions;

namespace detail {
// What LSTM and GRU share: the stack of layers, its parameters and the shape checks.
class RecurrentBase : public Module {
 public:
  int64_t input_size, hidden_size;
  RNNOptions options;

 protected:
  RecurrentBase(const char* name, int64_t gates, int64_t input_size, int64_t hidden_size, RNNOptions options);
  struct Weights {
    Tensor w_ih, w_hh, b_ih, b_hh;
  };
  int directions() const { return options.bidirectional ? 2 : 1; }
  const Weights& weights(int64_t layer, int direction) const {
    return weights_[size_t(layer * directions() + direction)];
  }
  // x as [T, B, F] and whether it came unbatched; checks rank and feature size.
  std::tuple<Tensor, bool> time_major(const Tensor& x) const;
  // h0 ([L * D, B, H], or [L * D, H] unbatched) as [L * D, B, H], zeros when undefined.
  Tensor initial_state(const Tensor& state, const char* what, const Tensor& x, bool unbatched) const;
  // The layer output [T, B, D * H] back in the caller's layout.
  Tensor caller_layout(const Tensor& out, bool unbatched) const;
  Tensor between_layers(const Tensor& out, int64_t layer) const;

  const char* name_;

 private:
  std::vector<Weights> weights_;  // [layer * directions + direction]
};
}  // namespace detail

class LSTM : public detail::RecurrentBase {
 public:
  using Output = std::tuple<Tensor, std::tuple<Tensor, Tensor>>;  // (output, (h_n, c_n))
  LSTM(int64_t input_size, int64_t hidden_size, LSTMOptions options = {});
  // x [T, B, input] ([B, T, input] with batch_first, or [T, input]); state (h0, c0) each
  // [L * D, B, H], undefined for zeros.
  Output forward(const Tensor& x, const std::tuple<Tensor, Tensor>& state);
  Output operator()(const Tensor& x, const std::tuple<Tensor, Tensor>& state = {}) { return forward(x, state); }
  // The output alone (so an LSTM can sit in a Sequential).
  Tensor forward(const Tensor& x) override { return std::get<0>(forward(x, {})); }
};

class GRU : public detail::RecurrentBase {
 public:
  using Output = std::tuple<Tensor, Tensor>;  // (output, h_n)
  GRU(int64_t input_size, int64_t hidden_size, GRUOptions options = {});
  Output forward(const Tensor& x, const Tensor& h0);
  Output operator()(const Tensor& x, const Tensor& h0 = {}) { return forward(x, h0); }
  Tensor forward(const Tensor& x) override { return std::get<0>(forward(x, Tensor())); }
};

namespace detail {
// The cells' parameters: weight_ih [G * H, input], weight_hh [G * H, H], bias_ih, bias_hh [G * H].
class CellBase : public Module {
 public:
  int64_t input_size, hidden_size;
  Tensor weight_ih, weight_hh, bias_ih, bias_hh;

 protected:
  CellBase(const char* name, int64_t gates, int64_t input_size, int64_t hidden_size, RNNCellOptions options);
};
}  // namespace detail

// One step: x [B, input] (or [input]), state [B, H] (or [H]), zeros when undefined.
class LSTMCell : public detail::CellBase {
 public:
  LSTMCell(int64_t input_size, int64_t hidden_size, LSTMCellOptions options = {});
  std::tuple<Tensor, Tensor> forward(const Tensor& x, const std::tuple<Tensor, Tensor>& state);  // (h', c')
  std::tuple<Tensor, Tensor> operator()(const Tensor& x, const std::tuple<Tensor, Tensor>& state = {}) {
    return forward(x, state);
  }
  Tensor forward(const Tensor& x) override { return std::get<0>(forward(x, {})); }  // h' alone
};

class GRUCell : public detail::CellBase {
 public:
  GRUCell(int64_t input_size, int64_t hidden_size, GRUCellOptions options = {});
  Tensor forward(const Tensor& x, const Tensor& h);  // h'
  Tensor forward(const Tensor& x) override { return forward(x, Tensor()); }
  using Module::operator();
  Tensor operator()(const Tensor& x, const Tensor& h) { return forward(x, h); }
};

}  // namespace hg::nn
