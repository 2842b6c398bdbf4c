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

class ShadowCheck {
 public:
  explicit ShadowCheck(DType autocast_dtype);

  // Runs `forward` under Autocast and again in f32; returns the autocast run's result. Each call
  // adds to the same report.
  Tensor run(const std::function<Tensor()>& forward, const std::vector<Tensor>& restore = {});

  const PrecisionReport& report() const { return report_; }
  void print(std::ostream& os) const;
  void write_csv(const std::string& path) const { report_.write_csv(path); }
  double autocast_seconds() const { return autocast_seconds_; }  // time of the autocast runs, summed
  double f32_seconds() const { return f32_seconds_; }            // time of the f32 re-runs (the cost)

 private:
  DType dtype_;
  PrecisionReport report_;
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
