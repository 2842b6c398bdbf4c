// ShadowCheck: the twin runs (autocast, then f32 fed the autocast run's inputs), the pairing of
// every op's two outputs (an FP8 op's with the plain op's), and the error arithmetic.
// compare_step: the same for gradients.
#include "amp_tools/shadow_check.h"

#include <chrono>
#include <algorithm>
#include <cmath>
#include <limits>
#include <iomanip>
#include <ostream>
#include <sstream>

#include "amp/autocast.h"
#include "amp/fp8.h"
#include "autograd/grad_mode.h"
#include "autograd/node.h"
#include "core/file.h"
#include "core/rng.h"
#include "ops/elementwise.h"
#include "ops/fp8_ops.h"

namespace hg::amp {

namespace {

// ---- the numbers ---------------------------------------------------------------------------------

// The spacing above 1: a correctly rounded result is within half of it, relatively.
double epsilon_of(DType d) {
  const int mantissa_bits = d == f16 ? 10 : d == bf16 ? 7 : d == f8e4m3 ? 3 : d == f8e5m2 ? 2 : 23;
  return std::ldexp(1.0, -mantissa_bits);
}

std::vector<double> values_of(const Tensor& t) { return t.to(Device::cpu()).to(f64).contiguous().to_vector<double>(); }

// The 16-bit output against the f32 one, element by element.
// NOTE: relative to max(|f32 value|, RMS of the f32 output). An element much smaller than its
// tensor's typical size is usually the difference of larger terms (a GEMM sum, a pre-activation
// near 0) and carries their absolute rounding error; divided by its own tiny value that error
// would read as thousands of epsilons and say nothing about the format. Elements of typical size
// and above get their plain relative error.
ShadowError compare_outputs(const Tensor& low, const Tensor& reference, DType dtype) {
  ShadowError e;
  if (low.shape() != reference.shape() || !is_floating(low.dtype()) || !is_floating(reference.dtype())) return e;
  const std::vector<double> a = values_of(low), r = values_of(reference);
  double sum_squares = 0;
  int64_t finite = 0;
  for (double v : r)
    if (std::isfinite(v)) sum_squares += v * v, ++finite;
  const double rms = finite ? std::sqrt(sum_squares / double(finite)) : 0.0;
  const double eps = epsilon_of(dtype);
  for (size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(r[i])) {  // nothing to measure against
      ++e.unmeasured;
      continue;
    }
    ++e.elements;
    if (!std::isfinite(a[i])) {
      ++e.overflows;
      continue;
    }
    if (a[i] == 0 && r[i] != 0) ++e.flushed_to_zero;
    const double scale = std::max({std::fabs(r[i]), rms, std::numeric_limits<double>::min()});
    const double error = std::fabs(a[i] - r[i]) / scale / eps;
    e.max_error = std::max(e.max_error, error);
    e.sum_error += error;
  }
  return e;
}

// ---- the recorder: sees every op's inputs (prepare) and output (record) in both runs -----------

struct Call {
  std::string op;
  std::vector<Tensor> inputs;   // as they arrived in the autocast run; replayed (widened) in f32
  std::vector<DType> arrived;   // their floating dtypes: the report row's key
  DType compute = f32;
  Tensor output, reference;     // the autocast run's output, the f32 run's
  bool fp8 = false;             // an FP8 op (its f32 run: the plain op) and the scales it used
  float input_scale = 1, weight_scale = 1;

  Call(std::string_view name, std::span<const Tensor> given) : op(name) {
    for (const Tensor& t : given) {
      inputs.push_back(t.defined() ? t.detach() : t);
      if (t.defined() && is_floating(t.dtype())) arrived.push_back(t.dtype());
    }
  }
};

class Recorder final : public detail::PrepareObserver, public autograd::OutputObserver, public detail::Fp8OpObserver {
 public:
  bool replaying = false;  // false: the autocast run (record calls); true: the f32 run (replay them)
  std::vector<Call> calls;
  size_t replayed = 0;

  void arrived(std::string_view op, std::span<Tensor> inputs) override {
    if (!replaying) {
      calls.emplace_back(op, inputs);
      pending_.push_back(calls.size() - 1);
      return;
    }
    HG_CHECK(replayed < calls.size() && calls[replayed].op == op && calls[replayed].inputs.size() == inputs.size(),
             "ShadowCheck: the f32 re-run called op '", op, "' where the autocast run called '",
             replayed < calls.size() ? calls[replayed].op : std::string("nothing"),
             "' (op #", replayed, "): the forward must run the same ops every time it is called");
    const Call& call = calls[replayed];
    for (size_t i = 0; i < inputs.size(); ++i) {
      const Tensor& t = call.inputs[i];
      inputs[i] = t.defined() ? t.to(compute_dtype(t.dtype())) : t;  // 16-bit inputs widened to f32
    }
    pending_.push_back(replayed++);
  }

  void prepared(std::string_view, std::span<const Tensor> inputs) override {
    if (replaying) return;
    // The dtype the op computes in, as the PrecisionReport row has it.
    std::optional<DType> compute;
    for (const Tensor& t : inputs)
      if (t.defined() && is_floating(t.dtype())) compute = compute ? promote_types(*compute, t.dtype()) : t.dtype();
    calls.back().compute = compute.value_or(f32);
  }

  // The output belongs to the innermost op of that name still waiting for one; ops inside it that
  // never recorded an output (composites) are given up.
  void on_output(std::string_view op, const Tensor& output) override {
    for (size_t k = pending_.size(); k-- > 0;) {
      Call& call = calls[pending_[k]];
      if (call.op != op) continue;
      (replaying ? call.reference : call.output) = output.detach();
      pending_.resize(k);
      return;
    }
  }

  // Only in the autocast run (the f32 run suspends FP8): the op with its output. The f32 run's plain
  // op arrives under the same name with as many inputs, and is paired with it as any op is.
  void fp8_op(std::string_view op, std::span<const Tensor> inputs, const Tensor& output, float input_scale,
              float weight_scale) override {
    Call& call = calls.emplace_back(op, inputs);
    call.compute = f8e4m3;
    call.output = output.detach();
    call.fp8 = true;
    call.input_scale = input_scale, call.weight_scale = weight_scale;
  }

  void start_replay() {
    replaying = true;
    pending_.clear();
  }

 private:
  std::vector<size_t> pending_;  // calls whose output has not been recorded yet
};

// ---- the FP8 ops' rows -------------------------------------------------------------------------

double amax_of(const Tensor& t) {
  double amax = 0;
  for (const double v : values_of(t)) amax = std::max(amax, std::fabs(v));  // (NaN skipped)
  return amax;
}

// Adds one run's call of the k-th FP8 op to its row. The plain op may record its output in
// another shape (matmul of 1-D operands: the matrix product's): the same elements in order.
void add_fp8_call(std::vector<Fp8OpError>& rows, int64_t index, const Call& call) {
  auto row = std::find_if(rows.begin(), rows.end(),
                          [&](const Fp8OpError& r) { return r.index == index && r.op == call.op; });
  if (row == rows.end()) {
    row = rows.insert(rows.end(), Fp8OpError{});
    row->index = index, row->op = call.op;
    row->input_shape = call.inputs[0].shape(), row->weight_shape = call.inputs[1].shape();
  }
  row->input_amax = std::max(row->input_amax, amax_of(call.inputs[0]));
  row->weight_amax = std::max(row->weight_amax, amax_of(call.inputs[1]));
  row->input_scale = call.input_scale, row->weight_scale = call.weight_scale;
  ++row->calls;
  const Tensor& r = call.reference;
  if (r.defined() && r.numel() == call.output.numel())
    row->error.merge(compare_outputs(call.output, r.reshape(call.output.shape()), f8e4m3));
}

std::string text_of(const auto& value) {
  std::ostringstream s;
  s << std::setprecision(3) << value;
  return s.str();
}

void print_fp8_ops(std::ostream& os, const std::vector<Fp8OpError>& rows) {
  std::ostringstream t;
  t << "FP8 ops (the f8e4m3 rows above, call by call): each against the plain op in f32 on its unquantised inputs\n"
    << std::right << std::setw(3) << "#" << "  " << std::left << std::setw(8) << "op" << std::setw(16) << "input"
    << std::setw(16) << "weight" << std::right << std::setw(11) << "input amax" << std::setw(10) << "scale"
    << std::setw(12) << "weight amax" << std::setw(10) << "scale" << std::setw(10) << "max err" << std::setw(10)
    << "mean err" << std::setw(9) << "flushed" << '\n';
  const auto scale = [](double s) {  // a power of 2 (fp8_scale_for)
    return std::isnan(s) ? std::string("per tile") : "2^" + std::to_string(std::ilogb(s));
  };
  for (const Fp8OpError& r : rows) {
    t << std::right << std::setw(3) << r.index << "  " << std::left << std::setw(8) << r.op << std::setw(16)
      << text_of(r.input_shape) << std::setw(16) << text_of(r.weight_shape) << std::right << std::setw(11)
      << text_of(r.input_amax) << std::setw(10) << scale(r.input_scale) << std::setw(12) << text_of(r.weight_amax)
      << std::setw(10) << scale(r.weight_scale);
    if (r.error.measured())
      t << std::fixed << std::setprecision(3) << std::setw(10) << r.error.max_error << std::setw(10)
        << r.error.mean_error() << std::defaultfloat;
    else
      t << std::setw(10) << "n/a" << std::setw(10) << "n/a";
    t << std::setw(9) << r.error.flushed_to_zero << '\n';
  }
  t << "errors: |FP8 - f32| / max(|f32|, RMS of the f32 output), in epsilons of E4M3 (" << epsilon_of(f8e4m3)
    << "); amax: an operand's largest |value|; scale: the power of 2 the recipe multiplied it by before rounding "
       "(x^ = Q(x s) / s; per tile: block scaling)\n";
  os << t.str();
}

std::vector<Tensor> copies_of(const std::vector<Tensor>& tensors) {
  std::vector<Tensor> out;
  for (const Tensor& t : tensors) out.push_back(t.detach().clone());
  return out;
}

void copy_back(const std::vector<Tensor>& into, const std::vector<Tensor>& from) {
  NoGradGuard no_grad;
  for (size_t i = 0; i < into.size(); ++i) Tensor(into[i]).copy_(from[i]);
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

ShadowCheck::ShadowCheck(DType autocast_dtype) : dtype_(autocast_dtype), report_(PrecisionReport::NotRecording{}) {
  HG_CHECK(is_16bit_floating(autocast_dtype) || autocast_dtype == f32,
           "ShadowCheck: the autocast dtype must be f16 or bf16 (or f32: autocast off, for FP8 ops alone), got ",
           autocast_dtype);
  report_.shadow_epsilon = epsilon_of(autocast_dtype);
}

Tensor ShadowCheck::run(const std::function<Tensor()>& forward, const std::vector<Tensor>& restore) {
  const std::vector<Tensor> state_before = copies_of(restore);
  const random::GeneratorState rng_before = random::get_state();
  Recorder recorder;
  Tensor result;
  {
    detail::Observing observing(&recorder, &recorder, &recorder);
    PrecisionReport live;
    const auto start = std::chrono::steady_clock::now();
    {
      Autocast autocast(dtype_, dtype_ != f32);
      result = forward();
    }
    autocast_seconds_ += seconds_since(start);
    for (const PrecisionReport::Row& row : live.rows()) report_.record(row);
  }
  // The f32 re-run starts from the same generator and in-place state, and leaves both as the
  // autocast run left them.
  const random::GeneratorState rng_after = random::get_state();
  const std::vector<Tensor> state_after = copies_of(restore);
  copy_back(restore, state_before);
  random::set_state(rng_before);
  const auto leave_as_autocast_left_it = [&] {
    random::set_state(rng_after);
    copy_back(restore, state_after);
  };
  try {
    recorder.start_replay();
    detail::Observing observing(&recorder, &recorder, &recorder);
    detail::PauseReports pause;
    detail::SuspendFp8 plain_ops;  // linear, matmul, conv2d in f32, the FP8 state untouched
    NoGradGuard no_grad;
    Autocast off(dtype_, false);
    const auto start = std::chrono::steady_clock::now();
    forward();
    f32_seconds_ += seconds_since(start);
  } catch (...) {
    leave_as_autocast_left_it();
    throw;
  }
  leave_as_autocast_left_it();
  HG_CHECK(recorder.replayed == recorder.calls.size(), "ShadowCheck: the f32 re-run called ", recorder.replayed,
           " ops, the autocast run ", recorder.calls.size(), ": the forward must run the same ops every time");
  int64_t fp8_index = 0;
  for (const Call& call : recorder.calls)
    if (call.fp8)
      add_fp8_call(fp8_ops_, fp8_index++, call);
    else if (call.output.defined() && call.reference.defined())
      report_.add_shadow(call.op, call.arrived, call.compute, compare_outputs(call.output, call.reference, dtype_));
  return result;
}

void ShadowCheck::print(std::ostream& os) const {
  report_.print(os);
  if (!fp8_ops_.empty()) print_fp8_ops(os, fp8_ops_);
  std::ostringstream cost;
  cost << std::setprecision(3) << "cost: the autocast forward took " << autocast_seconds_ * 1e3
       << " ms, its f32 shadow re-run " << f32_seconds_ * 1e3 << " ms (each op runs twice)\n";
  os << cost.str();
}

// ---- compare_step ------------------------------------------------------------------------------

namespace {

void clear_gradients(const std::vector<std::pair<std::string, Tensor>>& named) {
  for (const auto& [name, p] : named) p.set_grad(Tensor());
}

// One parameter's two gradients; `scale` divides the autocast one (in f64: exact for powers of 2).
GradientError compare_gradient(const std::string& name, const Tensor& low_grad, const Tensor& f32_grad, double scale,
                               double eps) {
  GradientError e{name, f32_grad.shape(), 0, 0, 0, 0, f32_grad.numel()};
  const std::vector<double> a = values_of(low_grad), r = values_of(f32_grad);
  double diff2 = 0, ref2 = 0, max_diff = 0, max_ref = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double g = a[i] / scale;
    if (!std::isfinite(r[i])) {
      ++e.unmeasured;
      continue;
    }
    if (!std::isfinite(g)) {
      ++e.nonfinite;
      continue;
    }
    e.flushed_to_zero += g == 0 && r[i] != 0;
    diff2 += (g - r[i]) * (g - r[i]);
    ref2 += r[i] * r[i];
    max_diff = std::max(max_diff, std::fabs(g - r[i]));
    max_ref = std::max(max_ref, std::fabs(r[i]));
  }
  e.norm_error = ref2 > 0 ? std::sqrt(diff2 / ref2) / eps : 0.0;
  e.max_error = max_ref > 0 ? max_diff / max_ref / eps : 0.0;
  if (!e.measured()) e.norm_error = e.max_error = std::numeric_limits<double>::quiet_NaN();  // not 0: nothing compared
  return e;
}

}  // namespace

StepComparison compare_step(DType dtype, const std::vector<std::pair<std::string, Tensor>>& named_parameters,
                            const std::function<Tensor()>& loss_fn, CompareStepOptions options) {
  HG_CHECK(is_16bit_floating(dtype), "compare_step: the autocast dtype must be f16 or bf16, got ", dtype);
  HG_CHECK(options.loss_scale > 0 && std::isfinite(options.loss_scale),
           "compare_step: loss_scale must be positive and finite, got ", options.loss_scale);
  StepComparison out;
  out.dtype = dtype;
  out.epsilon = epsilon_of(dtype);
  out.loss_scale = options.loss_scale;
  const std::vector<Tensor> state_before = copies_of(options.restore);
  const random::GeneratorState rng_before = random::get_state();

  clear_gradients(named_parameters);
  {
    Autocast off(dtype, false);
    const Tensor loss = loss_fn();
    out.loss_f32 = loss.item<double>();
    loss.backward();
  }
  std::vector<Tensor> f32_grads;
  for (const auto& [name, p] : named_parameters) {
    HG_CHECK(p.grad().defined(), "compare_step: parameter \"", name, "\" got no gradient from the f32 step");
    f32_grads.push_back(p.grad());
  }

  clear_gradients(named_parameters);
  copy_back(options.restore, state_before);
  random::set_state(rng_before);
  Tensor loss;
  {
    Autocast autocast(dtype);
    loss = loss_fn();
  }
  out.loss_autocast = loss.item<double>();
  (loss * options.loss_scale).backward();
  for (size_t i = 0; i < named_parameters.size(); ++i) {
    const auto& [name, p] = named_parameters[i];
    HG_CHECK(p.grad().defined(), "compare_step: parameter \"", name, "\" got no gradient from the autocast step");
    out.parameters.push_back(compare_gradient(name, p.grad(), f32_grads[i], options.loss_scale, out.epsilon));
  }
  clear_gradients(named_parameters);
  return out;
}

void StepComparison::print(std::ostream& os) const {
  std::ostringstream t;
  t << "one training step under " << dtype << " autocast (loss x " << loss_scale << ") vs f32: loss " << loss_autocast
    << " vs " << loss_f32 << "\n";
  t << std::left << std::setw(16) << "parameter" << std::setw(18) << "shape" << std::right << std::setw(12)
    << "norm err" << std::setw(11) << "max err" << std::setw(9) << "flushed" << std::setw(11) << "nonfinite" << '\n';
  for (const GradientError& p : parameters) {
    std::ostringstream shape;
    shape << p.shape;
    t << std::left << std::setw(16) << p.name << std::setw(18) << shape.str() << std::right << std::fixed
      << std::setprecision(3);
    if (p.measured()) t << std::setw(12) << p.norm_error << std::setw(11) << p.max_error;
    else t << std::setw(12) << "n/a" << std::setw(11) << "n/a";
    t << std::defaultfloat << std::setw(9) << p.flushed_to_zero << std::setw(11) << p.nonfinite << '\n';
  }
  t << "errors in epsilons of " << dtype << " (" << epsilon << "): norm err = ||g - g_f32|| / ||g_f32||, max err = "
    << "max |g - g_f32| / max |g_f32| over the elements finite in f32 (n/a: none was); cost: forward and backward ran "
       "twice\n";
  os << t.str();
}

void StepComparison::write_csv(const std::string& path) const {
  std::ostringstream out;
  out << "parameter,elements,norm_error_eps,max_error_eps,flushed_to_zero,nonfinite\n";
  for (const GradientError& p : parameters)
    out << p.name << ',' << p.elements << ',' << p.norm_error << ',' << p.max_error << ',' << p.flushed_to_zero << ','
        << p.nonfinite << '\n';
  write_text_file(path, out.str(), "StepComparison::write_csv(\"" + path + "\")");
}

}  // namespace hg::amp
