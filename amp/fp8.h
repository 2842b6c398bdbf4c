// FP8 training recipes for linear, matmul and conv2d, chosen with an RAII guard as Autocast is:
//
//   hg::amp::Fp8State fp8({.scaling = hg::amp::Fp8Scaling::Delayed});   // lives as long as the run
//   for (...) {
//     { hg::amp::Fp8Autocast guard(fp8);           // linear/matmul/conv2d quantise to FP8
//       loss = hg::cross_entropy(model(x), y); }
//     loss.backward();                              // gradients quantised to E5M2 (HYBRID)
//     opt.step();
//   }
//   checkpoint.add("fp8", fp8);                     // amax histories and scales resume bitwise
//
// What one FP8 op does (Transformer Engine's recipe; NVIDIA's FP8 GEMMs):
//   forward   x^ = Q(x * s_x) / s_x, w^ = Q(w * s_w) / s_w  (Q: round to E4M3, saturating)
//             y  = x^ w^T  with f32 accumulation, then + bias
//   backward  g^ = Q(g * s_g) / s_g  (E5M2 under HYBRID, E4M3 under E4M3), then the usual
//             gradients from g^, x^, w^ (the bias gradient from g itself)
// Every scale is a power of two (Transformer Engine's power_2_scale; MXFP8's E8M0 scales), so
// dividing by it is exact: x^ holds FP8 values times 2^k, and the f32 GEMM on them is what an FP8
// tensor-core GEMM with f32 accumulation and scale-after computes. That is the CPU emulation, bit
// for bit up to the order of the f32 sums.
//
// The scales, s = 2^floor(log2(largest / amax)) / 2^margin:
//   Delayed  per tensor, from the amax of earlier steps (a history of amax_history_len steps;
//            its max, or its most recent value), so the step itself needs no amax pass: the FP8
//            op of call k in a region uses slot k of the state, and records this step's amaxes
//            there. Step 0 (empty history) uses 1.
//   Current  per tensor, from this step's own amax.
//   Block    per tile, from its own amax: activations and gradients in 1 x block tiles along
//            their last dimension, weights in block x block tiles (DeepSeek-V3's scheme). conv2d
//            under Block scales per tensor (Current): its GEMM operands are not materialised.
// FP8 ops return f32 (the accumulator); inside Autocast(bf16) they multiply the quantised
// operands in bf16, which holds them exactly, and return bf16 (Transformer Engine's bf16 output).
//
// On a GPU: the quantiser runs on the device (kernels/cuda/fp8.h; the same codes as the CPU's, bit
// for bit). Where the GPU has FP8 tensor cores (compute capability 8.9+: Ada, Hopper), linear and
// 2-D matmul under Delayed or Current scaling with M, N and K multiples of 16 store the operands
// as real FP8 tensors and multiply them with cuBLASLt's FP8 GEMM, forward and both backward
// GEMMs (E5M2 gradients x E4M3 operands under Hybrid): the emulation's result up to the order of
// the f32 sums. Everything else (Block scaling, conv2d, other shapes, older GPUs) is emulated on
// the device. Each quantisation reads its amax back to the host (one wait): the histories are
// host state.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace hg::amp {

enum class Fp8Scaling : uint8_t { Delayed, Current, Block };
// Hybrid: E4M3 for activations and weights, E5M2 (range) for gradients -- Transformer Engine's
// default. E4M3: E4M3 everywhere.
enum class Fp8Formats : uint8_t { Hybrid, E4M3 };

struct Fp8Recipe {
  Fp8Scaling scaling = Fp8Scaling::Delayed;
  Fp8Formats formats = Fp8Formats::Hybrid;
  int64_t amax_history_len = 1024;        // Delayed: steps of amax kept (Transformer Engine's default)
  std::string amax_compute_algo = "max";  // Delayed: "max" of the history or its "most_recent" value
  int margin = 0;                         // scales are divided by 2^margin (headroom)
  int64_t block = 128;                    // Block: the tile side
};

// The scaling of one operand of one FP8 op: its amax history (newest last) and the scale in use.
struct Fp8TensorScaling {
  std::vector<float> amax_history;
  float scale = 1.0f;
};

// One FP8 op call site (the k-th FP8 op of a region): its input, weight and gradient scaling.
struct Fp8Slot {
  Fp8TensorScaling input, weight, grad;
};

// The recipe and, for delayed scaling, every call site's amax history and scale. Save it with a
// Checkpoint (state_dict / load_state_dict) to resume bitwise.
class Fp8State {
 public:
  explicit Fp8State(Fp8Recipe recipe = {});
  const Fp8Recipe& recipe() const { return recipe_; }
  // The call sites seen so far, in call order.
  const std::vector<std::shared_ptr<Fp8Slot>>& slots() const { return slots_; }

  std::map<std::string, Tensor> state_dict() const;
  void load_state_dict(const std::map<std::string, Tensor>& state);

  // ---- used by Fp8Autocast and the FP8 ops ----
  void begin_region();                   // new delayed scales from the histories; call index 0
  std::shared_ptr<Fp8Slot> next_slot();  // the next call site's slot (created on first use)

 private:
  Fp8Recipe recipe_;
  std::vector<std::shared_ptr<Fp8Slot>> slots_;
  size_t next_ = 0;
};

// Inside the guard, on this thread, linear / matmul / conv2d run the FP8 recipe of `state`.
class Fp8Autocast {
 public:
  explicit Fp8Autocast(Fp8State& state, bool enabled = true);
  ~Fp8Autocast();
  Fp8Autocast(const Fp8Autocast&) = delete;
  Fp8Autocast& operator=(const Fp8Autocast&) = delete;

 private:
  Fp8State* previous_;
};

bool fp8_enabled();  // inside an enabled Fp8Autocast on this thread (and not inside an FP8 op)

// The scale that maps amax to the top of a format: 2^floor(log2(largest / amax)) / 2^margin; 1
// for amax 0 or not finite.
float fp8_scale_for(float amax, DType format, int margin = 0);

// The FP8 value nearest x * scale (saturating), divided by scale again, for every element of t,
// with one scale per tile of tile_rows x tile_cols elements of t seen as a matrix (rows: all
// dims but the last); a tile side of 0 means the whole extent (per-tensor). Returns f32; the
// amax of each tile goes to `amaxes` if given. Not differentiable: a kernel. A CUDA t with one tile
// is quantised on the device (the same values, bit for bit); tiles of a CUDA t on a host copy.
struct Fp8Quantised {
  Tensor values;              // f32, each an FP8 value times 2^k, on t's device
  std::vector<float> amaxes;  // one per tile, row-major over tiles
  std::vector<float> scales;  // the scale each tile used
};
Fp8Quantised fp8_quantise(const Tensor& t, DType format, int64_t tile_rows, int64_t tile_cols, int margin = 0,
                          const float* fixed_scale = nullptr);

namespace detail {
// For the FP8 ops (ops/fp8_ops.h): the innermost region's state; an RAII mark under which the
// ops an FP8 op is made of run unquantised; appending a step's amax to a delayed history (the
// newest `length` kept).
Fp8State& current_fp8_state();
class InsideFp8Op {
 public:
  InsideFp8Op();
  ~InsideFp8Op();
  InsideFp8Op(const InsideFp8Op&) = delete;
  InsideFp8Op& operator=(const InsideFp8Op&) = delete;
};
void record_amax(Fp8TensorScaling& scaling, float amax, int64_t length);
// While alive, every Fp8Autocast on this thread is off, one opened inside as well, and leaves its
// state alone (no begin_region): amp::ShadowCheck's f32 re-run runs the plain ops in place of the
// FP8 ones without touching the scales the FP8 run used.
class SuspendFp8 {
 public:
  SuspendFp8();
  ~SuspendFp8();
  SuspendFp8(const SuspendFp8&) = delete;
  SuspendFp8& operator=(const SuspendFp8&) = delete;
};
// The graph nodes the FP8 ops are built around: an operand quantised by the recipe (its gradient
// passes straight through), and the identity whose backward quantises the incoming gradient;
// `remember` keeps what a quantisation leaves in an operand's scaling (delayed: the amax).
Tensor quantise_operand(const Tensor& t, Fp8TensorScaling& scaling, const Fp8Recipe& recipe, bool is_weight,
                        bool block_allowed);
Tensor quantise_gradient(const Tensor& y, const std::shared_ptr<Fp8Slot>& slot, const Fp8Recipe& recipe,
                         bool block_allowed);
void remember(Fp8TensorScaling& scaling, const Fp8Recipe& recipe, bool block, float amax, float scale);
// The formats of a recipe: E4M3 forward; E5M2 (Hybrid) or E4M3 for gradients.
inline DType forward_format(const Fp8Recipe&) { return f8e4m3; }
inline DType gradient_format(const Fp8Recipe& recipe) { return recipe.formats == Fp8Formats::Hybrid ? f8e5m2 : f8e4m3; }
}  // namespace detail

}  // namespace hg::amp
