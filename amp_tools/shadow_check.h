// ShadowCheck: where does mixed precision lose accuracy? It runs a forward pass twice: once under
// Autocast(f16 or bf16), recording a PrecisionReport, then in f32 (autocast off, no graph) with
// every op fed exactly the inputs its autocast run saw -- the f32 originals of what autocast cast,
// the 16-bit values widened otherwise. So each op row shows the error *that op* added (its input
// casts, its 16-bit arithmetic, its rounded output), not the error it inherited:
//
//   hg::amp::ShadowCheck check(hg::bf16);
//   hg::Tensor loss = check.run([&] { return hg::cross_entropy(model(x), y); }, model.buffers());
//   loss.backward();                 // the autocast run's result, with its graph
//   check.print(std::cout);          // the PrecisionReport table + max/mean error, overflow, flushed
//
// and compare_step() does the same for a whole training step's gradients, parameter by parameter.
// Cost: the forward runs twice (the f32 run without a graph); compare_step runs forward and
// backward twice. The random generator is rewound for the second run (same dropout masks) and
// left where the autocast run left it. Pass the tensors a forward updates in place (batch_norm's
// running statistics: model.buffers()) as `restore`, so that they are updated once, not twice.
// The check keeps its own report: a PrecisionReport open around run() does not see these ops.
//
// FP8: under an amp::Fp8Autocast inside the forward, each FP8 op (linear, matmul, conv2d) is one
// row of fp8_ops(): its result against the plain op in f32 on the same, unquantised inputs, in
// epsilons of E4M3, with each operand's amax and the scale the recipe multiplied it by -- which
// layer loses most in FP8. ShadowCheck(f32) keeps autocast off, for the FP8 ops alone. The f32
// re-run leaves the FP8 state as the FP8 run left it (amp::detail::SuspendFp8).
// (PyTorch has no such tool.)
#pragma once
#include <functional>
#include <iosfwd>
#include <string>
#include <utility>
#include <vector>

#include "amp/precision_report.h"
#include "core/tensor.h"

namespace hg::amp {

// One FP8 op of the forward (the k-th of each run: a call site, a layer) against the plain op in
// f32 on the same, unquantised inputs, over every run of a ShadowCheck.
struct Fp8OpError {
  int64_t index = 0;                         // the k-th FP8 op of the forward, from 0
  std::string op;                            // linear, matmul or conv2d
  Shape input_shape, weight_shape;           // (x, w) of linear and conv2d, (a, b) of matmul
  double input_amax = 0, weight_amax = 0;    // the largest |value| of each operand, over the runs
  double input_scale = 1, weight_scale = 1;  // what the recipe multiplied it by before rounding, in
                                             // the last run (a power of 2; NaN: a scale per tile)
  int64_t calls = 0;                         // the runs that called it
  ShadowError error;                         // in epsilons of E4M3 (2^-3)
};

class ShadowCheck {
 public:
  // f16 or bf16: the dtype of the Autocast the forward runs under; f32: autocast off (the FP8
  // ops of an Fp8Autocast inside the forward are then all that differs from the f32 re-run).
  explicit ShadowCheck(DType autocast_dtype);

  // Runs `forward` under Autocast and again in f32; returns the autocast run's result. Each call
  // adds to the same report.
  Tensor run(const std::function<Tensor()>& forward, const std::vector<Tensor>& restore = {});

  const PrecisionReport& report() const { return report_; }
  const std::vector<Fp8OpError>& fp8_ops() const { return fp8_ops_; }  // in call order
  void print(std::ostream& os) const;  // the report, then the FP8 ops' table (if any ran)
  void write_csv(const std::string& path) const { report_.write_csv(path); }
  double autocast_seconds() const { return autocast_seconds_; }  // time of the autocast runs, summed
  double f32_seconds() const { return f32_seconds_; }            // time of the f32 re-runs (the cost)

 private:
  DType dtype_;
  PrecisionReport report_;
  std::vector<Fp8OpError> fp8_ops_;
  double autocast_seconds_ = 0, f32_seconds_ = 0;
};

// One parameter's gradient after a whole training step under autocast, against the same step in
// f32. Errors in epsilons of the autocast dtype.
struct GradientError {
  std::string name;
  Shape shape;
  double norm_error = 0;      // ||g_low - g_f32|| / ||g_f32||
  double max_error = 0;       // max |g_low - g_f32| / max |g_f32|
  int64_t flushed_to_zero = 0;  // elements 0 under autocast but not in f32 (underflow)
  int64_t nonfinite = 0;        // inf/NaN under autocast (the step a GradScaler would skip)
  int64_t elements = 0;
  int64_t unmeasured = 0;       // inf/NaN in f32: nothing to measure against (the errors skip them)
  // Whether any element was compared (else the errors are NaN, printed "n/a").
  bool measured() const { return elements > nonfinite + unmeasured; }
};

struct StepComparison {
  DType dtype = bf16;
  double epsilon = 0;
  double loss_scale = 1;
  double loss_f32 = 0, loss_autocast = 0;
  std::vector<GradientError> parameters;
  void print(std::ostream& os) const;
  void write_csv(const std::string& path) const;
};

struct CompareStepOptions {
  double loss_scale = 1.0;          // the autocast run's loss is multiplied by this before backward
                                    // (f16: what a GradScaler would use) and its gradients divided
  std::vector<Tensor> restore = {};  // tensors the forward updates in place (model.buffers())
};

// Runs loss_fn() and backward in f32, then under Autocast(dtype), and compares every parameter's
// gradient. The gradients are cleared before each run and left cleared (undefined) afterwards.
StepComparison compare_step(DType dtype, const std::vector<std::pair<std::string, Tensor>>& named_parameters,
                            const std::function<Tensor()>& loss_fn, CompareStepOptions options = {});

}  // namespace hg::amp
