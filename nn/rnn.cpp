// nn::LSTM, nn::GRU and their cells (see rnn.h): the gate arithmetic of one step as PyTorch
// writes it, and the loops over layers, directions and time around it.
#include "nn/rnn.h"

#include <cmath>
#include <optional>
#include <string>

#include "amp/autocast.h"
#include "autograd/grad_mode.h"
#include "core/half.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/vector_math.h"
#include "nn/init.h"
#include "ops/activation.h"
#include "ops/dropout.h"
#include "ops/elementwise.h"
#include "ops/function.h"
#include "ops/linalg.h"
#include "ops/reduce.h"
#include "ops/shape.h"

namespace hg::nn {

namespace {

// ---- one step --------------------------------------------------------------------------------

// LSTM: gates = x_gates + h W_hh^T (x_gates [B, 4H] holds x W_ih^T and both biases), in PyTorch's
// order i, f, g, o; c' = f * c + i * g; h' = o * tanh(c'). The gates are narrow views of one GEMM.
std::tuple<Tensor, Tensor> lstm_step(const Tensor& x_gates, const Tensor& h, const Tensor& c, const Tensor& w_hh) {
  const int64_t H = h.size(1);
  const Tensor gates = x_gates + linear(h, w_hh);  // [B, 4H]
  const Tensor input_forget = sigmoid(narrow(gates, 1, 0, 2 * H));
  const Tensor cell = tanh(narrow(gates, 1, 2 * H, H));
  const Tensor out = sigmoid(narrow(gates, 1, 3 * H, H));
  const Tensor c_next = narrow(input_forget, 1, H, H) * c + narrow(input_forget, 1, 0, H) * cell;
  return {out * tanh(c_next), c_next};
}

// GRU: r, z = sigmoid(x_r + h_r), sigmoid(x_z + h_z); n = tanh(x_n + r * h_n) with h_n holding
// b_hn (PyTorch's form: the reset gate scales the hidden part and its bias); h' = (1 - z) n + z h,
// computed as n + z (h - n). x_gates [B, 3H] holds x W_ih^T + b_ih.
Tensor gru_step(const Tensor& x_gates, const Tensor& h, const Tensor& w_hh, const Tensor& b_hh) {
  const int64_t H = h.size(1);
  const Tensor h_gates = linear(h, w_hh, b_hh);  // [B, 3H]
  const Tensor reset_update = sigmoid(narrow(x_gates, 1, 0, 2 * H) + narrow(h_gates, 1, 0, 2 * H));
  const Tensor n = tanh(narrow(x_gates, 1, 2 * H, H) + narrow(reset_update, 1, 0, H) * narrow(h_gates, 1, 2 * H, H));
  return n + narrow(reset_update, 1, H, H) * (h - n);
}

// ---- parameters ------------------------------------------------------------------------------

// PyTorch's reset_parameters: every weight and bias U(-1/sqrt(H), 1/sqrt(H)).
Tensor uniform_parameter(Module& module, const std::string& name, const Shape& shape, int64_t hidden_size) {
  const double bound = 1.0 / std::sqrt(double(hidden_size));
  Tensor t = module.register_parameter(name, empty(shape));
  init::uniform_(t, -bound, bound);
  return t;
}

// ---- the recurrence of one layer and direction, composed (CUDA) --------------------------------

// projected [T, B, G * H] -> the outputs of every time [T, B, H] (and the last state), one
// composite step at a time. Each step's narrow view costs a full-size gradient in backward; the
// CPU runs the fused Functions below instead.
std::tuple<Tensor, Tensor, Tensor> lstm_layer_composed(const Tensor& projected, const Tensor& w_hh, Tensor h, Tensor c,
                                                       bool reverse) {
  const int64_t T = projected.shape()[0];
  std::vector<Tensor> hs(static_cast<size_t>(T));
  for (int64_t s = 0; s < T; ++s) {
    const int64_t t = reverse ? T - 1 - s : s;
    std::tie(h, c) = lstm_step(squeeze(narrow(projected, 0, t, 1), 0), h, c, w_hh);
    hs[size_t(t)] = h;
  }
  return {stack(hs, 0), h, c};
}

std::tuple<Tensor, Tensor> gru_layer_composed(const Tensor& projected, const Tensor& w_hh, const Tensor& b_hh, Tensor h,
                                              bool reverse) {
  const int64_t T = projected.shape()[0];
  std::vector<Tensor> hs(static_cast<size_t>(T));
  for (int64_t s = 0; s < T; ++s) {
    const int64_t t = reverse ? T - 1 - s : s;
    h = gru_step(squeeze(narrow(projected, 0, t, 1), 0), h, w_hh, b_hh);
    hs[size_t(t)] = h;
  }
  return {stack(hs, 0), h};
}

// ---- the recurrence of one layer and direction, fused ------------------------------------------
//
// The composite step above records ~10 ops a step, and each narrow view of the sequence's
// projection costs a full-size zero gradient in backward (O(T^2)). So LSTM and GRU run the loop
// over time as one custom Function: forward does one GEMM a step (h W_hh^T, under the autocast
// state, so bf16 with autocast) and the gate arithmetic in f32 (f64 for f64) on raw arrays,
// keeping the activated gates; backward walks the steps in reverse with one GEMM a step
// (dgates W_hh) and then gets dW_hh for the whole sequence in one GEMM ([T * B, G]^T @ [T * B, H])
// instead of T small ones. The composite steps stay the cells' path and the tests' oracle.

// sigmoid and tanh over an array, in place (tanh_into: out of place). f32 on the vectorised math
// functions (kernels/cpu/vector_math.h, within 2 ulp). tanh there takes 0.64 ns per element on
// 512-bit vectors with fused multiply-adds (1.26 on 256-bit ones without, 2.64 for the three
// passes over exp it replaced): ~1.4 ms of the 2-layer, H = 256 LSTM's training step (2.1
// million tanh a step).
void sigmoid_(float* x, int64_t n) { kernels::cpu::sigmoid_f32(x, x, n); }
void sigmoid_(double* x, int64_t n) {
  for (int64_t j = 0; j < n; ++j) x[j] = 1.0 / (1.0 + std::exp(-x[j]));
}
void tanh_into(const float* x, float* y, int64_t n) { kernels::cpu::tanh_f32(x, y, n); }
void tanh_into(const double* x, double* y, int64_t n) {
  for (int64_t j = 0; j < n; ++j) y[j] = std::tanh(x[j]);
}
void tanh_(float* x, int64_t n) { tanh_into(x, x, n); }
void tanh_(double* x, int64_t n) { tanh_into(x, x, n); }

// The dtype the gate arithmetic runs in: f64 for f64, f32 for everything else (16-bit inputs
// through f32), and the call of `f` with that type.
DType compute_dtype(const Tensor& t) { return t.dtype() == f64 ? f64 : f32; }
template <class F>
void visit_compute(DType dtype, F&& f) {
  if (dtype == f64) f.template operator()<double>();
  else f.template operator()<float>();
}
Tensor as_compute(const Tensor& t, DType dtype) { return t.to(dtype).contiguous(); }

// h @ W, step after step, with the same W [K, N] (gemm dtype, contiguous or a transposed view)
// for the whole sequence, returned in the compute dtype. On the CPU's packed GEMM W is packed once
// (kernels/cpu/gemm.h's pack_rhs) instead of at every step -- for [32, 256] x [256, 1024] that
// packing cost about as much as the product -- and the f32 result is rounded to the GEMM dtype
// as matmul would, so the numbers are matmul's bit for bit. Elsewhere (CUDA, f64): matmul.
class RecurrentProduct {
 public:
  RecurrentProduct(Tensor w, DType compute) : w_(std::move(w)), compute_(compute) {
    if (!w_.device().is_cpu() || !kernels::cpu::has_packed_gemm() || w_.dtype() == f64 || w_.numel() == 0) return;
    visit_floating(w_.dtype(), "lstm", [&]<class T> {
      if constexpr (!std::is_same_v<T, double>) packed_ = kernels::cpu::pack_rhs<T>(kernels::cpu::matrix_view(w_));
    });
  }

  Tensor operator()(const Tensor& h) const {
    if (!packed_) return as_compute(matmul(h.to(w_.dtype()), w_), compute_);
    const Tensor a = h.to(w_.dtype()).contiguous();
    Tensor product = empty({a.shape()[0], w_.shape()[1]});  // f32
    visit_floating(w_.dtype(), "lstm", [&]<class T> {
      if constexpr (!std::is_same_v<T, double>) {
        float* c = product.data_ptr<float>();
        kernels::cpu::packed_gemm<T>(kernels::cpu::matrix_view(a), *packed_, c, w_.shape()[1], false);
        if constexpr (!std::is_same_v<T, float>) round_through<T>(c, size_t(product.numel()));  // matmul's one rounding
      }
    });
    return as_compute(product, compute_);
  }

 private:
  Tensor w_;
  DType compute_;
  std::optional<kernels::cpu::PackedRhs> packed_;
};


// The dtype of the GEMMs: autocast's inside a region (the 16-bit copy of W_hh made once per
// call, not once per step), else W_hh's own.
DType gemm_dtype(const Tensor& w_hh) { return amp::is_enabled() ? amp::autocast_dtype() : w_hh.dtype(); }

// Time index of step s, and the index holding the state before it (-1: the initial state).
int64_t time_of(int64_t s, int64_t T, bool reverse) { return reverse ? T - 1 - s : s; }
int64_t before(int64_t t, int64_t T, bool reverse) { return reverse ? (t + 1 < T ? t + 1 : -1) : t - 1; }

// Rows of `all` [T, B, H] at time t, or `initial` [B, H] for t = -1.
template <class T>
const T* row_or(const Tensor& all, const Tensor& initial, int64_t t, int64_t rows) {
  return t < 0 ? initial.data_ptr<T>() : all.data_ptr<T>() + t * rows;
}

// The previous h of every step, in time order: [T * B, H] for dW_hh.
Tensor previous_states(const Tensor& out, const Tensor& h0, bool reverse) {
  const int64_t T = out.shape()[0];
  std::vector<Tensor> parts;
  if (!reverse) parts = {unsqueeze(h0, 0), narrow(out, 0, 0, T - 1)};
  else parts = {narrow(out, 0, 1, T - 1), unsqueeze(h0, 0)};
  return cat(parts, 0).reshape({-1, out.shape()[2]});
}

// LSTM. acts [T, B, 4H]: i, f, g, o after their activations; cells [T, B, H]: c after each time,
// and tanh(c) beside it (kept for backward, which recomputed it before: a million tanh a layer
// in our char-LSTM's step, 3% of its bf16 time, for 2 MiB), in the compute dtype V; the
// projection read and h written in the storage dtype S (bf16 under autocast: the next step's
// GEMM reads h as it is, with no conversion pass of its own). h_row: scratch, H values.
template <class V, class S>
void lstm_forward_step(const S* proj, const V* rec, const V* c_prev, V* acts, V* c_next, V* tanh_next, S* h_next,
                       int64_t B, int64_t H, V* h_row) {
  for (int64_t b = 0; b < B; ++b) {
    V* a = acts + b * 4 * H;
    const V* r = rec + b * 4 * H;
    if constexpr (std::is_same_v<S, V>) {  // one pass, not a copy and then an add
      for (int64_t j = 0; j < 4 * H; ++j) a[j] = proj[b * 4 * H + j] + r[j];
    } else {  // (V is f32 here)
      convert_to_float(proj + b * 4 * H, a, size_t(4 * H));
      for (int64_t j = 0; j < 4 * H; ++j) a[j] += r[j];
    }
    sigmoid_(a, 2 * H);
    tanh_(a + 2 * H, H);
    sigmoid_(a + 3 * H, H);
    V* c = c_next + b * H;
    V* tc = tanh_next + b * H;
    V* h = h_row;
    if constexpr (std::is_same_v<S, V>) h = h_next + b * H;
    for (int64_t j = 0; j < H; ++j) c[j] = a[H + j] * c_prev[b * H + j] + a[j] * a[2 * H + j];
    tanh_into(c, tc, H);
    for (int64_t j = 0; j < H; ++j) h[j] = a[3 * H + j] * tc[j];
    if constexpr (!std::is_same_v<S, V>) convert_from_float(h, h_next + b * H, size_t(H));
  }
}

// dh: dL/dh at this time (in); dc: dL/dc at this time (in), dL/dc of the previous time (out).
// The arrays never overlap; __restrict tells the compiler so, and the j loop becomes vector code
// (without it a store to dgates might change dc, and the loop ran one float at a time).
template <class T>
void lstm_backward_step(const T* __restrict acts, const T* __restrict c_prev, const T* __restrict tanh_now,
                        const T* __restrict dh, T* __restrict dc, T* __restrict dgates, int64_t B, int64_t H) {
  for (int64_t b = 0; b < B; ++b) {
    const T* a = acts + b * 4 * H;
    T* d = dgates + b * 4 * H;
    for (int64_t j = 0; j < H; ++j) {
      const T i = a[j], f = a[H + j], g = a[2 * H + j], o = a[3 * H + j], tc = tanh_now[b * H + j], dh_j = dh[b * H + j];
      const T dc_j = dc[b * H + j] + dh_j * o * (T(1) - tc * tc);
      d[j] = dc_j * g * i * (T(1) - i);
      d[H + j] = dc_j * c_prev[b * H + j] * f * (T(1) - f);
      d[2 * H + j] = dc_j * i * (T(1) - g * g);
      d[3 * H + j] = dh_j * tc * o * (T(1) - o);
      dc[b * H + j] = dc_j * f;
    }
  }
}

struct LstmLayer : autograd::Function<LstmLayer> {
  static constexpr const char* name = "lstm_layer";
  // Under autocast the layer runs in the autocast dtype, as PyTorch's CPU autocast runs its LSTM
  // layer (mkldnn_rnn_layer is on its lower-precision list): the projection comes in and h goes
  // out in bf16 / f16, the GEMMs multiply in it, and the gates and the cell state inside the
  // sequence stay f32. With the F32 policy this layer had before, the [T, B, 4H] projection was
  // widened to f32 on the way in and its gradient narrowed three times on the way out (for the
  // recurrent GEMM, dW_hh's GEMM and the input's cast); now each row is converted once, in
  // cache, inside the step: hg-train --model lstm --precision bf16 runs in 10% less time, its
  // peak memory 131 -> 99 MiB.
  static constexpr amp::CastPolicy policy = amp::CastPolicy::Lower;

  // projected [T, B, 4H] = x W_ih^T + b_ih + b_hh, w_hh [4H, H], h0, c0 [B, H] -> (out [T, B, H], h_n, c_n),
  // the outputs in projected's dtype (the storage dtype).
  static std::tuple<Tensor, Tensor, Tensor> forward(autograd::Context& ctx, const Tensor& projected_in,
                                                    const Tensor& w_hh, const Tensor& h0_in, const Tensor& c0_in,
                                                    bool reverse) {
    const DType dtype = compute_dtype(projected_in), storage = projected_in.dtype();
    const Tensor projected = projected_in.contiguous(), h0 = h0_in.to(storage).contiguous(), c0 = as_compute(c0_in, dtype);
    const int64_t T = projected.shape()[0], B = projected.shape()[1], H = w_hh.shape()[1];
    const TensorOptions options{.dtype = dtype, .device = projected.device()};
    Tensor out = empty({T, B, H}, {.dtype = storage, .device = projected.device()});
    Tensor cells = empty({T, B, H}, options), tanh_cells = empty({T, B, H}, options), acts = empty({T, B, 4 * H}, options);
    const DType gemm = gemm_dtype(w_hh);
    const RecurrentProduct recurrent(w_hh.to(gemm).transpose(0, 1).contiguous(), dtype);  // W_hh^T [H, 4H]
    std::vector<double> h_row(static_cast<size_t>(H));  // read as V (double is wide enough for both)
    for (int64_t s = 0; s < T; ++s) {
      const int64_t t = time_of(s, T, reverse), p = before(t, T, reverse);
      const Tensor h = p < 0 ? h0 : squeeze(narrow(out, 0, p, 1), 0);
      const Tensor rec = recurrent(h);  // [B, 4H]
      visit_compute(dtype, [&]<class V> {
        visit_floating(storage, "lstm", [&]<class S> {
          if constexpr (std::is_same_v<V, double> == std::is_same_v<S, double>)
            lstm_forward_step<V, S>(projected.data_ptr<S>() + t * B * 4 * H, rec.data_ptr<V>(),
                                    row_or<V>(cells, c0, p, B * H), acts.data_ptr<V>() + t * B * 4 * H,
                                    cells.data_ptr<V>() + t * B * H, tanh_cells.data_ptr<V>() + t * B * H,
                                    out.data_ptr<S>() + t * B * H, B, H, reinterpret_cast<V*>(h_row.data()));
        });
      });
    }
    const int64_t last = time_of(T - 1, T, reverse);
    ctx.save_for_backward({w_hh, h0, c0});
    // (out detached: the returned tensor's node holds ctx, which must not hold it back)
    ctx.save("out", out.detach()), ctx.save("cells", cells), ctx.save("tanh_cells", tanh_cells), ctx.save("acts", acts);
    ctx.save("reverse", reverse);
    ctx.save("h0_dtype", h0_in.dtype()), ctx.save("c0_dtype", c0_in.dtype());
    return {out, squeeze(narrow(out, 0, last, 1), 0).clone(), squeeze(narrow(cells, 0, last, 1), 0).clone().to(storage)};
  }

  static std::vector<Tensor> backward(autograd::Context& ctx, std::vector<Tensor> grads) {
    NoGradGuard no_grad;
    const std::vector<Tensor> saved = ctx.saved();
    const Tensor &w_hh = saved[0], &h0 = saved[1], &c0 = saved[2];
    const Tensor out = ctx.get<Tensor>("out"), cells = ctx.get<Tensor>("cells"), acts = ctx.get<Tensor>("acts");
    const Tensor tanh_cells = ctx.get<Tensor>("tanh_cells");
    const bool reverse = ctx.get<bool>("reverse");
    const DType dtype = cells.dtype(), storage = out.dtype();
    const int64_t T = out.shape()[0], B = out.shape()[1], H = out.shape()[2];
    const Tensor g_out = as_compute(grads[0], dtype);
    Tensor dh = as_compute(grads[1], dtype).clone(), dc = as_compute(grads[2], dtype).clone();
    // The gates' gradient in the storage dtype: the recurrent GEMM, dW_hh's GEMM and the
    // projection's gradient all read it as it is. Each step computes its rows in the compute
    // dtype first (d_row) and rounds them once.
    Tensor dgates = empty({T, B, 4 * H}, {.dtype = storage, .device = out.device()});
    std::vector<double> d_row(static_cast<size_t>(B * 4 * H));  // read as V
    const DType gemm = gemm_dtype(w_hh);
    const RecurrentProduct recurrent(w_hh.to(gemm).contiguous(), dtype);  // W_hh [4H, H]
    for (int64_t s = T - 1; s >= 0; --s) {
      const int64_t t = time_of(s, T, reverse), p = before(t, T, reverse);
      dh = dh + squeeze(narrow(g_out, 0, t, 1), 0);
      visit_compute(dtype, [&]<class V> {
        visit_floating(storage, "lstm", [&]<class S> {
          if constexpr (std::is_same_v<V, double> == std::is_same_v<S, double>) {
            S* rows = dgates.data_ptr<S>() + t * B * 4 * H;
            V* d = reinterpret_cast<V*>(d_row.data());
            if constexpr (std::is_same_v<S, V>) d = rows;
            lstm_backward_step<V>(acts.data_ptr<V>() + t * B * 4 * H, row_or<V>(cells, c0, p, B * H),
                                  tanh_cells.data_ptr<V>() + t * B * H, dh.data_ptr<V>(), dc.data_ptr<V>(), d, B, H);
            if constexpr (!std::is_same_v<S, V>) convert_from_float(d, rows, size_t(B * 4 * H));
          }
        });
      });
      dh = recurrent(squeeze(narrow(dgates, 0, t, 1), 0));  // [B, H]
    }
    Tensor dw_hh;
    if (ctx.needs_input_grad(1))
      dw_hh = matmul(dgates.reshape({-1, 4 * H}).to(gemm).transpose(0, 1), previous_states(out, h0, reverse).to(gemm))
                  .to(w_hh.dtype());  // (converted before the transpose: a strided conversion is slow)
    return {dgates, dw_hh, dh.to(ctx.get<DType>("h0_dtype")), dc.to(ctx.get<DType>("c0_dtype"))};
  }
};

// GRU. acts [T, B, 4H]: r, z, n and the hidden part of n's pre-activation (h W_hn^T + b_hn).
// rec [B, 3H] = h W_hh^T without b_hh (bias: b_hh or nullptr).
template <class T>
void gru_forward_step(const T* proj, T* rec, const T* bias, const T* h_prev, T* acts, T* h_next, int64_t B,
                      int64_t H) {
  for (int64_t b = 0; b < B; ++b) {
    const T* x = proj + b * 3 * H;
    T* r = rec + b * 3 * H;
    if (bias != nullptr)
      for (int64_t j = 0; j < 3 * H; ++j) r[j] += bias[j];
    T* a = acts + b * 4 * H;
    for (int64_t j = 0; j < 2 * H; ++j) a[j] = x[j] + r[j];
    sigmoid_(a, 2 * H);
    for (int64_t j = 0; j < H; ++j) a[3 * H + j] = r[2 * H + j], a[2 * H + j] = x[2 * H + j] + a[j] * r[2 * H + j];
    tanh_(a + 2 * H, H);
    for (int64_t j = 0; j < H; ++j) {
      const T n = a[2 * H + j];
      h_next[b * H + j] = n + a[H + j] * (h_prev[b * H + j] - n);
    }
  }
}

// dh: dL/dh' (in), dL/dh through the direct path z * h (out); dx [B, 3H], dhg [B, 3H]: the
// gradients of the input and hidden gate pre-activations. (__restrict: as lstm_backward_step.)
template <class T>
void gru_backward_step(const T* __restrict acts, const T* __restrict h_prev, T* __restrict dh, T* __restrict dx,
                       T* __restrict dhg, int64_t B, int64_t H) {
  for (int64_t b = 0; b < B; ++b) {
    const T* a = acts + b * 4 * H;
    T* x = dx + b * 3 * H;
    T* g = dhg + b * 3 * H;
    for (int64_t j = 0; j < H; ++j) {
      const T r = a[j], z = a[H + j], n = a[2 * H + j], hn = a[3 * H + j], d = dh[b * H + j];
      const T dn = d * (T(1) - z) * (T(1) - n * n);
      const T dz = d * (h_prev[b * H + j] - n) * z * (T(1) - z);
      const T dr = dn * hn * r * (T(1) - r);
      x[j] = g[j] = dr;
      x[H + j] = g[H + j] = dz;
      x[2 * H + j] = dn;
      g[2 * H + j] = dn * r;
      dh[b * H + j] = d * z;
    }
  }
}

struct GruLayer : autograd::Function<GruLayer> {
  static constexpr const char* name = "gru_layer";
  // f32 under autocast, unlike the LSTM layer: h is the GRU's only state, and kept in bf16 it
  // would be rounded at every step.
  static constexpr amp::CastPolicy policy = amp::CastPolicy::F32;

  // projected [T, B, 3H] = x W_ih^T + b_ih, w_hh [3H, H], b_hh [3H], h0 [B, H] -> (out [T, B, H], h_n)
  static std::tuple<Tensor, Tensor> forward(autograd::Context& ctx, const Tensor& projected_in, const Tensor& w_hh,
                                            const Tensor& b_hh, const Tensor& h0_in, bool reverse) {
    const DType dtype = compute_dtype(projected_in);
    const Tensor projected = as_compute(projected_in, dtype), h0 = as_compute(h0_in, dtype);
    const int64_t T = projected.shape()[0], B = projected.shape()[1], H = w_hh.shape()[1];
    const TensorOptions options{.dtype = dtype, .device = projected.device()};
    Tensor out = empty({T, B, H}, options), acts = empty({T, B, 4 * H}, options);
    const DType gemm = gemm_dtype(w_hh);
    const RecurrentProduct recurrent(w_hh.to(gemm).transpose(0, 1).contiguous(), dtype);  // W_hh^T [H, 3H]
    const Tensor bias = b_hh.defined() ? as_compute(b_hh, dtype) : Tensor();
    for (int64_t s = 0; s < T; ++s) {
      const int64_t t = time_of(s, T, reverse), p = before(t, T, reverse);
      const Tensor h = p < 0 ? h0 : squeeze(narrow(out, 0, p, 1), 0);
      const Tensor rec = recurrent(h).clone();  // [B, 3H], the kernel adds b_hh (in place)
      visit_compute(dtype, [&]<class V> {
        gru_forward_step<V>(projected.data_ptr<V>() + t * B * 3 * H, rec.data_ptr<V>(),
                            bias.defined() ? bias.data_ptr<V>() : nullptr, row_or<V>(out, h0, p, B * H),
                            acts.data_ptr<V>() + t * B * 4 * H, out.data_ptr<V>() + t * B * H, B, H);
      });
    }
    ctx.save_for_backward({w_hh, h0});
    ctx.save("out", out.detach()), ctx.save("acts", acts), ctx.save("reverse", reverse);
    const DType result = projected_in.dtype();
    ctx.save("result", result);
    return {out.to(result), squeeze(narrow(out, 0, time_of(T - 1, T, reverse), 1), 0).clone().to(result)};
  }

  static std::vector<Tensor> backward(autograd::Context& ctx, std::vector<Tensor> grads) {
    NoGradGuard no_grad;
    const std::vector<Tensor> saved = ctx.saved();
    const Tensor &w_hh = saved[0], &h0 = saved[1];
    const Tensor out = ctx.get<Tensor>("out"), acts = ctx.get<Tensor>("acts");
    const bool reverse = ctx.get<bool>("reverse");
    const DType dtype = out.dtype();
    const int64_t T = out.shape()[0], B = out.shape()[1], H = out.shape()[2];
    const Tensor g_out = as_compute(grads[0], dtype);
    Tensor dh = as_compute(grads[1], dtype).clone();
    const TensorOptions options{.dtype = dtype, .device = out.device()};
    Tensor dx = empty({T, B, 3 * H}, options), dhg = empty({T, B, 3 * H}, options);
    const DType gemm = gemm_dtype(w_hh);
    const RecurrentProduct recurrent(w_hh.to(gemm).contiguous(), dtype);  // W_hh [3H, H]
    for (int64_t s = T - 1; s >= 0; --s) {
      const int64_t t = time_of(s, T, reverse), p = before(t, T, reverse);
      dh = (dh + squeeze(narrow(g_out, 0, t, 1), 0)).contiguous();
      visit_compute(dtype, [&]<class V> {
        gru_backward_step<V>(acts.data_ptr<V>() + t * B * 4 * H, row_or<V>(out, h0, p, B * H), dh.data_ptr<V>(),
                             dx.data_ptr<V>() + t * B * 3 * H, dhg.data_ptr<V>() + t * B * 3 * H, B, H);
      });
      dh = dh + recurrent(squeeze(narrow(dhg, 0, t, 1), 0));  // [B, H]
    }
    const Tensor dhg_rows = dhg.reshape({-1, 3 * H});
    Tensor dw_hh, db_hh;
    if (ctx.needs_input_grad(1))
      dw_hh = matmul(dhg_rows.to(gemm).transpose(0, 1), previous_states(out, h0, reverse).to(gemm)).to(w_hh.dtype());
    if (ctx.needs_input_grad(2)) db_hh = sum(dhg_rows, {0}).to(w_hh.dtype());
    const DType result = ctx.get<DType>("result");
    return {dx.to(result), dw_hh, db_hh, dh.to(result)};
  }
};

}  // namespace

// ---- the layer stack -------------------------------------------------------------------------

namespace detail {

RecurrentBase::RecurrentBase(const char* name, int64_t gates, int64_t input, int64_t hidden, RNNOptions opts)
    : input_size(input), hidden_size(hidden), options(opts), name_(name) {
  HG_CHECK(input > 0 && hidden > 0, name, ": input_size and hidden_size must be positive, got ", input, " and ", hidden);
  HG_CHECK(opts.num_layers > 0, name, ": num_layers must be positive, got ", opts.num_layers);
  HG_CHECK(opts.dropout >= 0 && opts.dropout <= 1, name, ": dropout must be in [0, 1], got ", opts.dropout);
  for (int64_t layer = 0; layer < opts.num_layers; ++layer) {
    const int64_t in = layer == 0 ? input : hidden * directions();
    for (int direction = 0; direction < directions(); ++direction) {
      const std::string suffix = "_l" + std::to_string(layer) + (direction == 1 ? "_reverse" : "");
      Weights w;
      w.w_ih = uniform_parameter(*this, "weight_ih" + suffix, {gates * hidden, in}, hidden);
      w.w_hh = uniform_parameter(*this, "weight_hh" + suffix, {gates * hidden, hidden}, hidden);
      if (opts.bias) {
        w.b_ih = uniform_parameter(*this, "bias_ih" + suffix, {gates * hidden}, hidden);
        w.b_hh = uniform_parameter(*this, "bias_hh" + suffix, {gates * hidden}, hidden);
      }
      weights_.push_back(w);
    }
  }
}

std::tuple<Tensor, bool> RecurrentBase::time_major(const Tensor& x) const {
  HG_CHECK(x.dim() == 2 || x.dim() == 3, name_, ": expected input ",
           options.batch_first ? "[B, T, input_size]" : "[T, B, input_size]", " or unbatched [T, input_size], got ",
           x.shape());
  HG_CHECK(x.shape()[size_t(x.dim() - 1)] == input_size, name_, ": input must end in input_size = ", input_size,
           ", got ", x.shape());
  HG_CHECK(is_floating(x.dtype()), name_, ": expected a floating input, got ", x.dtype());
  if (x.dim() == 2) return {unsqueeze(x, 1), true};
  return {options.batch_first ? x.transpose(0, 1) : x, false};
}

Tensor RecurrentBase::initial_state(const Tensor& state, const char* what, const Tensor& x, bool unbatched) const {
  const int64_t layers = options.num_layers * directions(), batch = x.shape()[1];
  if (!state.defined()) return zeros({layers, batch, hidden_size}, {.dtype = x.dtype(), .device = x.device()});
  const Shape expected = unbatched ? Shape{layers, hidden_size} : Shape{layers, batch, hidden_size};
  HG_CHECK(state.shape() == expected, name_, ": ", what, " must be [num_layers * num_directions, ",
           unbatched ? "" : "B, ", "hidden_size] = ", expected, ", got ", state.shape());
  return unbatched ? unsqueeze(state, 1) : state;
}

Tensor RecurrentBase::caller_layout(const Tensor& out, bool unbatched) const {
  if (unbatched) return squeeze(out, 1);
  return options.batch_first ? out.transpose(0, 1) : out;
}

Tensor RecurrentBase::between_layers(const Tensor& out, int64_t layer) const {
  if (layer + 1 == options.num_layers || options.dropout == 0) return out;
  return dropout(out, options.dropout, is_training());
}

}  // namespace detail

// ---- LSTM and GRU ----------------------------------------------------------------------------

LSTM::LSTM(int64_t input, int64_t hidden, LSTMOptions opts) : RecurrentBase("LSTM", 4, input, hidden, opts) {}

LSTM::Output LSTM::forward(const Tensor& x_in, const std::tuple<Tensor, Tensor>& state) {
  const auto [x, unbatched] = time_major(x_in);  // [T, B, input]
  const Tensor h0 = initial_state(std::get<0>(state), "h0", x, unbatched);
  const Tensor c0 = initial_state(std::get<1>(state), "c0", x, unbatched);
  Tensor input = x;
  std::vector<Tensor> h_n, c_n;
  for (int64_t layer = 0; layer < options.num_layers; ++layer) {
    std::vector<Tensor> outputs;
    for (int direction = 0; direction < directions(); ++direction) {
      const Weights& w = weights(layer, direction);
      // The whole sequence's input projection in one GEMM, both biases folded into it.
      const Tensor projected = linear(input, w.w_ih, w.b_ih.defined() ? w.b_ih + w.b_hh : Tensor());  // [T, B, 4H]
      const int64_t index = layer * directions() + direction;
      const Tensor h_i = squeeze(narrow(h0, 0, index, 1), 0), c_i = squeeze(narrow(c0, 0, index, 1), 0);
      const auto [out, h, c] = x.device().is_cpu() ? LstmLayer::apply(projected, w.w_hh, h_i, c_i, direction == 1)
                                                   : lstm_layer_composed(projected, w.w_hh, h_i, c_i, direction == 1);
      outputs.push_back(out);
      h_n.push_back(h), c_n.push_back(c);
    }
    const Tensor out = outputs.size() == 1 ? outputs[0] : cat(outputs, 2);  // [T, B, D * H]
    input = between_layers(out, layer);
  }
  const Tensor h_last = stack(h_n, 0), c_last = stack(c_n, 0);
  if (unbatched) return {caller_layout(input, true), {squeeze(h_last, 1), squeeze(c_last, 1)}};
  return {caller_layout(input, false), {h_last, c_last}};
}

GRU::GRU(int64_t input, int64_t hidden, GRUOptions opts) : RecurrentBase("GRU", 3, input, hidden, opts) {}

GRU::Output GRU::forward(const Tensor& x_in, const Tensor& h0_in) {
  const auto [x, unbatched] = time_major(x_in);
  const Tensor h0 = initial_state(h0_in, "h0", x, unbatched);
  Tensor input = x;
  std::vector<Tensor> h_n;
  for (int64_t layer = 0; layer < options.num_layers; ++layer) {
    std::vector<Tensor> outputs;
    for (int direction = 0; direction < directions(); ++direction) {
      const Weights& w = weights(layer, direction);
      const Tensor projected = linear(input, w.w_ih, w.b_ih);  // [T, B, 3H]
      const Tensor h_i = squeeze(narrow(h0, 0, layer * directions() + direction, 1), 0);
      const auto [out, h] = x.device().is_cpu() ? GruLayer::apply(projected, w.w_hh, w.b_hh, h_i, direction == 1)
                                                : gru_layer_composed(projected, w.w_hh, w.b_hh, h_i, direction == 1);
      outputs.push_back(out);
      h_n.push_back(h);
    }
    const Tensor out = outputs.size() == 1 ? outputs[0] : cat(outputs, 2);
    input = between_layers(out, layer);
  }
  const Tensor h_last = stack(h_n, 0);
  return {caller_layout(input, unbatched), unbatched ? squeeze(h_last, 1) : h_last};
}

// ---- the cells -------------------------------------------------------------------------------

namespace {

// x [B, input] or [input] as [B, input]; the state as [B, H] (zeros when undefined).
Tensor cell_input(const char* name, const Tensor& x, int64_t input_size) {
  HG_CHECK(x.dim() == 1 || x.dim() == 2, name, ": expected input [B, input_size] or [input_size], got ", x.shape());
  HG_CHECK(x.shape()[size_t(x.dim() - 1)] == input_size, name, ": input must end in input_size = ", input_size,
           ", got ", x.shape());
  HG_CHECK(is_floating(x.dtype()), name, ": expected a floating input, got ", x.dtype());
  return x.dim() == 1 ? unsqueeze(x, 0) : x;
}

Tensor cell_state(const char* name, const char* what, const Tensor& state, const Tensor& x_in, const Tensor& x,
                  int64_t hidden) {
  const Shape expected = x_in.dim() == 1 ? Shape{hidden} : Shape{x.shape()[0], hidden};
  if (!state.defined()) return zeros({x.shape()[0], hidden}, {.dtype = x.dtype(), .device = x.device()});
  HG_CHECK(state.shape() == expected, name, ": ", what, " must be ", expected, " (the input's batch, hidden_size), got ",
           state.shape());
  return x_in.dim() == 1 ? unsqueeze(state, 0) : state;
}

}  // namespace

namespace detail {

CellBase::CellBase(const char* name, int64_t gates, int64_t input, int64_t hidden, RNNCellOptions opts)
    : input_size(input), hidden_size(hidden) {
  HG_CHECK(input > 0 && hidden > 0, name, ": input_size and hidden_size must be positive, got ", input, " and ", hidden);
  weight_ih = uniform_parameter(*this, "weight_ih", {gates * hidden, input}, hidden);
  weight_hh = uniform_parameter(*this, "weight_hh", {gates * hidden, hidden}, hidden);
  if (opts.bias) {
    bias_ih = uniform_parameter(*this, "bias_ih", {gates * hidden}, hidden);
    bias_hh = uniform_parameter(*this, "bias_hh", {gates * hidden}, hidden);
  }
}

}  // namespace detail

LSTMCell::LSTMCell(int64_t input, int64_t hidden, LSTMCellOptions opts) : CellBase("LSTMCell", 4, input, hidden, opts) {}

std::tuple<Tensor, Tensor> LSTMCell::forward(const Tensor& x_in, const std::tuple<Tensor, Tensor>& state) {
  const Tensor x = cell_input("LSTMCell", x_in, input_size);
  const Tensor h = cell_state("LSTMCell", "h", std::get<0>(state), x_in, x, hidden_size);
  const Tensor c = cell_state("LSTMCell", "c", std::get<1>(state), x_in, x, hidden_size);
  const Tensor x_gates = linear(x, weight_ih, bias_ih.defined() ? bias_ih + bias_hh : Tensor());
  const auto [h_next, c_next] = lstm_step(x_gates, h, c, weight_hh);
  if (x_in.dim() == 1) return {squeeze(h_next, 0), squeeze(c_next, 0)};
  return {h_next, c_next};
}

GRUCell::GRUCell(int64_t input, int64_t hidden, GRUCellOptions opts) : CellBase("GRUCell", 3, input, hidden, opts) {}

Tensor GRUCell::forward(const Tensor& x_in, const Tensor& h_in) {
  const Tensor x = cell_input("GRUCell", x_in, input_size);
  const Tensor h = cell_state("GRUCell", "h", h_in, x_in, x, hidden_size);
  const Tensor h_next = gru_step(linear(x, weight_ih, bias_ih), h, weight_hh, bias_hh);
  return x_in.dim() == 1 ? squeeze(h_next, 0) : h_next;
}

}  // namespace hg::nn
