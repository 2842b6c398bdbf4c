// Every check of the per-op test database (tests/op_db.h) run on every sample of every entry: the
// op table and the database name the same ops, f64 gradcheck, the naive reference in f64 and f32,
// strided layouts against contiguous ones, a second call, 16-bit against f32, the output dtype
// under autocast as the op-table row says, and CPU against CUDA. A failure names the entry (`op`)
// and the sample (its input shapes and args). The PyTorch golden parity of the same calls is in
// tests/test_parity.cpp.
#include <algorithm>
#include <cmath>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>

#include "core/safetensors.h"
#include "op_db.h"

namespace {

using hg::Tensor;
using hg::amp::CastPolicy;
using hg::amp::OutputDType;
using hg_test::Args;
using hg_test::Inputs;
using hg_test::InputSpec;
using hg_test::OpEntry;
using hg_test::Sample;
using hg_test::Values;

// Every call starts from the same generator state, so that dropout draws the same mask each time
// gradcheck re-runs it, and on both devices.
constexpr uint64_t kCallSeed = 77;

Tensor run(const OpEntry& entry, const Inputs& in, const Args& args) {
  hg::manual_seed(kCallSeed);
  return entry.call(in, args);
}

// The sample's inputs with floating values in `dtype` (drawn in f64, then rounded; indices stay
// integers).
Inputs make_inputs(const Sample& sample, hg::DType dtype) {
  hg::manual_seed(sample.seed);
  Inputs in;
  for (const InputSpec& spec : sample.inputs) {
    const hg::DType type = spec.values == Values::ClassIndex ? spec.index_dtype : dtype;
    if (!spec.given.empty()) {
      in.push_back(hg::from_vector(spec.given, spec.shape, {.dtype = type}));
      continue;
    }
    const hg::TensorOptions f64{.dtype = hg::f64};
    switch (spec.values) {
      case Values::Normal: in.push_back((hg::randn(spec.shape, f64) * spec.stddev + spec.mean).to(type)); break;
      case Values::Positive:
        in.push_back((hg::rand(spec.shape, f64) * (spec.high - spec.low) + spec.low).to(type));
        break;
      case Values::ClassIndex: in.push_back(hg::randint(0, spec.classes, spec.shape, {.dtype = type})); break;
    }
  }
  return in;
}

// Runs check(entry, sample) on every sample of every entry, naming both in a failure.
template <class Check>
void for_every_sample(const Check& check) {
  for (const OpEntry& entry : hg_test::op_db()) {
    const std::string op = entry.name;
    CAPTURE(op);
    for (const Sample& s : hg_test::samples(entry)) {
      const std::string sample = s.text;
      CAPTURE(sample);
      try {  // an op that throws fails its sample only
        check(entry, s);
      } catch (const std::exception& e) {
        FAIL_CHECK("threw: " << std::string(e.what()));
      }
    }
  }
}

std::string dtype_text(hg::DType dtype) { return std::string(hg::dtype_name(dtype)); }

// batch_norm's running statistics (inputs 1 and 2 with "stats"): buffers, as PyTorch's, that
// autocast does not cast and that training updates in place.
bool is_running_statistic(const OpEntry& entry, const Sample& sample, size_t input) {
  return (entry.op == hg::amp::Op::BatchNorm || entry.op == hg::amp::Op::InstanceNorm) &&
         hg_test::flag(sample.args, "stats") && (input == 1 || input == 2);
}

// Whether the op updates its running statistics on this sample: batch_norm in training,
// instance_norm with its input's statistics.
bool updates_running_statistics(const OpEntry& entry, const Sample& sample) {
  if (entry.op == hg::amp::Op::InstanceNorm) return hg_test::flag(sample.args, "use_input_stats");
  return hg_test::flag(sample.args, "training");
}

}  // namespace

// ---- the op table and the database name the same ops -------------------------------------------

TEST_CASE("op_db.every_op_table_row_has_an_entry") {
  std::set<hg::amp::Op> covered;
  std::set<std::string> names;
  for (const OpEntry& entry : hg_test::op_db()) {
    const std::string op = entry.name;
    CAPTURE(op);
    CHECK_MESSAGE(size_t(entry.op) < hg::amp::kNumOps, "the entry's op is not an op-table row");
    CHECK_MESSAGE(names.insert(op).second, "two entries share a name");
    CHECK_MESSAGE(entry.name.starts_with(hg::amp::op_name(entry.op)), "the name should start with its row's name");
    covered.insert(entry.op);
  }
  for (const hg::amp::OpInfo& row : hg::amp::kOpTable) {
    const std::string row_name(row.name);
    CAPTURE(row_name);
    CHECK_MESSAGE(covered.count(row.op) == 1, "add an entry for this op to tests/op_db.cpp");
  }
}

// Each entry's golden family holds PyTorch cases of that name; an entry without a family says why.
TEST_CASE("op_db.golden_family_holds_the_entry_cases") {
  std::map<std::string, std::set<std::string>> ops_in_family;
  for (const OpEntry& entry : hg_test::op_db()) {
    if (entry.golden_family.empty() || ops_in_family.count(entry.golden_family)) continue;
    const hg::SafetensorsContents file =
        hg::load_with_metadata(std::string(HG_TEST_DIR) + "/golden/" + entry.golden_family + ".safetensors");
    for (const auto& [case_name, text] : file.metadata)
      if (!case_name.starts_with("_"))
        ops_in_family[entry.golden_family].insert(
            hg_test::arg(hg::json::parse(text, "parity metadata"), "op", Args::Kind::String).text);
  }
  for (const OpEntry& entry : hg_test::op_db()) {
    const std::string op = entry.name, family = entry.golden_family;
    CAPTURE(op);
    CAPTURE(family);
    if (family.empty()) CHECK_MESSAGE(!entry.no_reference_because.empty(), "an op without PyTorch cases must say why");
    else CHECK(ops_in_family[family].count(op) == 1);
  }
}

// ---- gradients against finite differences, in f64 ----------------------------------------------

namespace {

// gradcheck runs a forward and a backward per output element and two forwards per differentiated
// input element, each over all of the sample's elements. Samples that would cost more passes x
// elements than this (the large shapes that cross the kernels' chunk and thread boundaries) are
// left to the other checks; the entry's own sample must never be one of them.
constexpr int64_t kGradcheckMaxWork = int64_t(1) << 22;

}  // namespace

// T64 (docs/testing.md scenario 2). Random normal values stay away from the kinks of abs/relu/clamp
// and from ties in amax/max_pool2d (a value within eps of a kink would make the finite difference
// meaningless).
TEST_CASE("op_db.gradcheck_f64") {
  for_every_sample([](const OpEntry& entry, const Sample& sample) {
    if (sample.grads.empty()) return;  // argmax: no gradient
    Inputs in = make_inputs(sample, hg::f64);
    const int64_t outputs = run(entry, in, sample.args).numel();
    int64_t passes = outputs, elements = outputs;
    for (int i : sample.grads) passes += 2 * in[size_t(i)].numel();
    for (const Tensor& t : in) elements += t.numel();
    if (passes * elements > kGradcheckMaxWork) {
      CHECK_MESSAGE(!sample.entrys_own, "the entry's own sample must be small enough to gradcheck");
      return;
    }
    for (int i : sample.grads) in[size_t(i)].requires_grad_(true);
    // gradcheck gets the floating inputs (and perturbs those that require grad); indices stay put.
    std::vector<size_t> floating_at;
    Inputs floating;
    for (size_t i = 0; i < in.size(); ++i)
      if (hg::is_floating(in[i].dtype())) floating_at.push_back(i), floating.push_back(in[i]);
    const auto call = [&](const Inputs& x) {
      Inputs all = in;
      for (size_t k = 0; k < x.size(); ++k) all[floating_at[k]] = x[k];
      return run(entry, all, sample.args);
    };
    const auto report = hg::autograd::gradcheck_report(call, floating);
    CHECK_MESSAGE(!report.has_value(), report.value_or(""));
  });
}

// ---- strided inputs give what their contiguous copies give -----------------------------------------

namespace {

// The layouts other than row-major that the harness gives an input. Each returns a detached copy
// with the same values, or an undefined tensor where the layout does not apply (or would be
// contiguous anyway).

// Every second element of a larger buffer, from element 1: a step-2, offset view (x[..., 1::2]).
Tensor step_two_offset(const Tensor& t) {
  if (t.numel() <= 1) return {};
  const Tensor base = hg::zeros({2 * t.numel() + 1}, t.options());
  hg::Shape strides = hg::contiguous_strides(t.shape());
  for (int64_t& s : strides) s *= 2;
  Tensor view = hg::as_strided(base, t.shape(), strides, 1);
  view.copy_(t);
  return view.detach();
}

// The last two dims swapped in memory: a GEMM's transposed operand.
Tensor transposed(const Tensor& t) {
  if (t.dim() < 2) return {};
  const Tensor view = t.transpose(t.dim() - 2, t.dim() - 1).contiguous().transpose(t.dim() - 2, t.dim() - 1).detach();
  return view.is_contiguous() ? Tensor() : view;
}

// (N, C, H, W) stored as (N, H, W, C).
Tensor channels_last(const Tensor& t) {
  if (t.dim() != 4) return {};
  const Tensor view = t.permute({0, 2, 3, 1}).contiguous().permute({0, 3, 1, 2}).detach();
  return view.is_contiguous() ? Tensor() : view;
}

// The call on `in` (the sample's differentiated inputs made leaves), and the gradients of
// sum(out * upstream) for a fixed upstream tensor.
struct Outcome {
  Tensor out;
  Inputs grads;
};
Outcome forward_and_backward(const OpEntry& entry, const Sample& sample, Inputs in) {
  for (int i : sample.grads) in[size_t(i)] = in[size_t(i)].detach().requires_grad_(true);  // a fresh leaf, no grad yet
  Outcome o{run(entry, in, sample.args), {}};
  if (sample.grads.empty()) return o;
  hg::manual_seed(5);
  o.out.backward(hg::randn(o.out.shape(), {.dtype = o.out.dtype()}));
  for (int i : sample.grads) o.grads.push_back(in[size_t(i)].grad());
  return o;
}

}  // namespace

// docs/testing.md scenario 4 for every sample: the same values laid out with strides give the same
// output and the same input gradients, in f64, for every combination of layouts over the floating
// inputs (a transposed weight with a strided input, ...). Kernels that read strides directly,
// kernels that take a transposed operand as it is and kernels that copy first must agree.
TEST_CASE("op_db.strided_inputs_match_contiguous") {
  const Tolerance same{1e-12, 1e-12};  // f64: only a different summation order may show
  for_every_sample([&](const OpEntry& entry, const Sample& sample) {
    const Inputs dense = make_inputs(sample, hg::f64);
    const Outcome expected = forward_and_backward(entry, sample, dense);
    // Each input's layouts: its contiguous self first, then the strided copies that apply.
    struct Laid {
      const char* layout;
      Tensor t;
    };
    std::vector<std::vector<Laid>> layouts;
    bool any_to_stride = false;  // (a test that strides nothing tests nothing)
    for (const Tensor& t : dense) {
      layouts.push_back({{"contiguous", t}});
      if (!hg::is_floating(t.dtype())) continue;
      any_to_stride = any_to_stride || t.numel() > 1;
      for (const Laid& copy : {Laid{"step-2 offset", step_two_offset(t)}, Laid{"transposed", transposed(t)},
                               Laid{"channels last", channels_last(t)}})
        if (copy.t.defined()) layouts.back().push_back(copy);
    }
    // Every combination but all-contiguous: an odometer over the inputs' layout lists.
    std::vector<size_t> pick(dense.size(), 0);
    int combinations = 0;
    while (true) {
      size_t i = 0;
      while (i < pick.size() && ++pick[i] == layouts[i].size()) pick[i++] = 0;
      if (i == pick.size()) break;
      std::string layout;  // each input's, in order
      Inputs strided;
      for (size_t j = 0; j < dense.size(); ++j) {
        const Laid& chosen = layouts[j][pick[j]];
        REQUIRE(chosen.t.is_contiguous() == (pick[j] == 0));
        strided.push_back(chosen.t);
        layout += std::string(chosen.layout) + "; ";
      }
      CAPTURE(layout);
      ++combinations;
      const Outcome got = forward_and_backward(entry, sample, strided);
      CHECK_CLOSE_WITH(got.out, expected.out, same);
      REQUIRE(got.grads.size() == expected.grads.size());
      for (size_t k = 0; k < got.grads.size(); ++k) {
        const int input = sample.grads[k];
        CAPTURE(input);
        REQUIRE(got.grads[k].defined() == expected.grads[k].defined());
        if (got.grads[k].defined()) CHECK_CLOSE_WITH(got.grads[k], expected.grads[k], same);
      }
    }
    CHECK((combinations > 0) == any_to_stride);
  });
}

// ---- the forward against the naive reference ----------------------------------------------------

namespace {

void check_reference(const OpEntry& entry, const Sample& sample, hg::DType dtype, Tolerance tolerance) {
  const std::string dtype_name = dtype_text(dtype);
  CAPTURE(dtype_name);
  const Inputs in = make_inputs(sample, dtype);
  std::vector<ref::Array> arrays;
  for (const Tensor& t : in) arrays.push_back(ref::of(t));  // exactly the values the op receives
  const Tensor out = run(entry, in, sample.args);
  const bool indices = hg::amp::op_info(entry.op).output == OutputDType::Index;
  CHECK(dtype_text(out.dtype()) == dtype_text(indices ? hg::i64 : dtype));
  CHECK_MATCHES_REF(out, entry.reference(arrays, sample.args), tolerance);
}

}  // namespace

TEST_CASE("op_db.matches_the_naive_reference") {
  for_every_sample([](const OpEntry& entry, const Sample& sample) {
    if (!entry.reference) {
      CHECK_MESSAGE(!entry.no_reference_because.empty(), "an entry without a reference must say why");
      return;
    }
    check_reference(entry, sample, hg::f64, hg_test::tolerance_for(hg::f64));
    check_reference(entry, sample, hg::f32, sample.f32_tolerance);
  });
}

// dropout's stand-in for a reference: each element is dropped or kept and scaled by 1/(1-p) (in
// training; eval is the identity), and the number dropped is Binomial(n, p): within 5 standard
// deviations of n p, so exactly none at p = 0 or in eval and all at p = 1. With 0 < p < 1 both
// happen. In f64 and f32.
TEST_CASE("op_db.dropout_keeps_or_scales") {
  for_every_sample([](const OpEntry& entry, const Sample& sample) {
    if (entry.op != hg::amp::Op::Dropout) return;
    const bool training = hg_test::flag(sample.args, "training");
    const double p = training ? hg_test::number(sample.args, "p") : 0.0;
    const double keep_scale = p < 1 ? 1 / (1 - p) : 1.0;
    for (hg::DType dtype : {hg::f64, hg::f32}) {
      const std::string dtype_name = dtype_text(dtype);
      CAPTURE(dtype_name);
      // A kept value is x / (1 - p) rounded once; the identity is exact.
      const double rtol = keep_scale == 1.0 ? 0.0 : dtype == hg::f64 ? 1e-12 : 1e-6;
      const Inputs in = make_inputs(sample, dtype);
      const std::vector<double> x = values(in[0]), y = values(run(entry, in, sample.args));
      REQUIRE(y.size() == x.size());
      int64_t dropped = 0, kept = 0;
      for (size_t i = 0; i < x.size(); ++i) {
        dropped += y[i] == 0.0;
        kept += std::fabs(y[i] - x[i] * keep_scale) <= rtol * std::fabs(x[i] * keep_scale);
      }
      const double n = double(x.size());
      CHECK(dropped + kept == int64_t(x.size()));
      CHECK(std::fabs(double(dropped) - n * p) <= 5 * std::sqrt(n * p * (1 - p)));
      if (0 < p && p < 1) {
        CHECK(dropped > 0);
        CHECK(kept > 0);
      }
    }
  });
}

// ---- a second call: the same output, and the inputs as they were -------------------------------

// An op never writes into its inputs (a bias is an input, never a GEMM's output buffer; only
// batch_norm in training and instance_norm update their running statistics), and a second call
// sees nothing the first one left behind.
TEST_CASE("op_db.a_second_call_agrees_and_leaves_its_inputs_alone") {
  for_every_sample([](const OpEntry& entry, const Sample& sample) {
    const Inputs in = make_inputs(sample, hg::f32);
    std::vector<std::vector<double>> before;
    for (const Tensor& t : in) before.push_back(values(t));
    const Tensor first = run(entry, in, sample.args), second = run(entry, in, sample.args);
    CHECK_CLOSE_WITH(second, first, kExact);
    for (size_t i = 0; i < in.size(); ++i) {
      CAPTURE(i);
      const bool updated = is_running_statistic(entry, sample, i) && updates_running_statistics(entry, sample);
      if (!updated) CHECK(values(in[i]) == before[i]);
    }
  });
}

// ---- 16-bit against f32 ---------------------------------------------------------------------------

// docs/testing.md scenario 3 (the rule: CHECK_LOW_PRECISION, ops_test_helpers.h). The op on 16-bit
// inputs, and on the same rounded values in f32 and f64: the output and, unless the entry says why
// not, the gradient of every differentiated input that is not broadcast (upstream gradient: one
// random tensor, rounded to the 16-bit dtype as well). Where the 16-bit output overflowed (inf
// where f32's is finite: exp of a large input) the gradients computed from it are not compared.
TEST_CASE("op_db.f16_and_bf16_match_f32") {
  for_every_sample([](const OpEntry& entry, const Sample& sample) {
    if (!entry.no_16_bit_check_because.empty()) return;
    const bool backward = !sample.grads.empty() && entry.no_16_bit_backward_because.empty();
    for (hg::DType dtype : {hg::f16, hg::bf16}) {
      const std::string dtype_name = dtype_text(dtype);
      CAPTURE(dtype_name);
      Inputs low = make_inputs(sample, dtype), as32 = low, as64 = low;
      for (size_t i = 0; i < low.size(); ++i)
        if (hg::is_floating(low[i].dtype())) as32[i] = low[i].to(hg::f32), as64[i] = low[i].to(hg::f64);
      if (backward)
        for (Inputs* in : {&low, &as32, &as64})
          for (int i : sample.grads) (*in)[size_t(i)] = (*in)[size_t(i)].detach().requires_grad_(true);
      const Tensor y = run(entry, low, sample.args), y32 = run(entry, as32, sample.args),
                   y64 = run(entry, as64, sample.args);
      const bool indices = hg::amp::op_info(entry.op).output == OutputDType::Index;
      CHECK(dtype_text(y.dtype()) == dtype_text(indices ? hg::i64 : dtype));
      CHECK_LOW_PRECISION(y, y32, y64);
      bool overflowed = false;
      if (!indices) {
        const std::vector<double> a = values(y), r = values(y32);
        for (size_t k = 0; k < a.size(); ++k) overflowed = overflowed || (std::isinf(a[k]) && std::isfinite(r[k]));
      }
      if (!backward || overflowed) continue;
      hg::manual_seed(5);
      const Tensor g = hg::randn(y.shape()).to(dtype);
      y.backward(g);
      y32.backward(g.to(hg::f32));
      y64.backward(g.to(hg::f64));
      for (int i : sample.grads) {
        if (sample.inputs[size_t(i)].broadcast) continue;
        CAPTURE(i);
        const Tensor& x = low[size_t(i)];
        REQUIRE(x.grad().defined());
        CHECK(x.grad().dtype() == dtype);
        CHECK_LOW_PRECISION(x.grad(), as32[size_t(i)].grad(), as64[size_t(i)].grad());
      }
    }
  });
}

// ---- the output dtype under autocast, as the op-table row says ----------------------------------

namespace {

// What autocast turns a floating input of dtype `input` into, by the row's cast policy.
hg::DType after_cast(CastPolicy policy, hg::DType autocast, hg::DType input, hg::DType widest) {
  switch (policy) {
    case CastPolicy::Lower: return autocast;
    case CastPolicy::F32: return hg::f32;
    case CastPolicy::Promote: return widest;
    case CastPolicy::Keep: return input;
  }
  return input;
}

// What the op-table row promises for these floating input dtypes (f16 and f32 only): the dtype
// the op computes in (the widest after the cast) and its output's.
struct Promise {
  hg::DType computed, output;
};

Promise promised(const hg::amp::OpInfo& row, hg::DType autocast, const std::vector<hg::DType>& floating) {
  bool any_f32 = false;
  for (hg::DType d : floating) any_f32 = any_f32 || d == hg::f32;
  const hg::DType widest = any_f32 ? hg::f32 : hg::f16;
  const hg::DType first = after_cast(row.policy, autocast, floating[0], widest);
  hg::DType computed = first;
  for (hg::DType d : floating)
    if (after_cast(row.policy, autocast, d, widest) == hg::f32) computed = hg::f32;
  return {computed, hg::amp::output_dtype(row.output, computed, first)};
}

// The three input mixes: all f32, all f16, and the first floating input f16 with the others f32
// (where Promote and the FirstInput rule differ from Keep).
enum class Mix { AllF32, AllF16, FirstF16 };

Inputs mixed_inputs(const Sample& sample, Mix mix) {
  Inputs in = make_inputs(sample, mix == Mix::AllF16 ? hg::f16 : hg::f32);
  if (mix == Mix::FirstF16)
    for (Tensor& t : in)
      if (hg::is_floating(t.dtype())) {
        t = t.to(hg::f16);
        break;
      }
  return in;
}

// The dtypes of the inputs autocast casts: the floating ones but running statistics.
std::vector<hg::DType> cast_dtypes(const OpEntry& entry, const Sample& sample, const Inputs& in) {
  std::vector<hg::DType> out;
  for (size_t i = 0; i < in.size(); ++i)
    if (hg::is_floating(in[i].dtype()) && !is_running_statistic(entry, sample, i)) out.push_back(in[i].dtype());
  return out;
}

}  // namespace

TEST_CASE("op_db.autocast_output_dtype") {
  for_every_sample([](const OpEntry& entry, const Sample& sample) {
    const hg::amp::OpInfo& row = hg::amp::op_info(entry.op);
    for (Mix mix : {Mix::AllF32, Mix::AllF16, Mix::FirstF16}) {
      const Inputs in = mixed_inputs(sample, mix);
      const std::vector<hg::DType> floating = cast_dtypes(entry, sample, in);
      std::string input_dtypes;
      for (const Tensor& t : in) input_dtypes += dtype_text(t.dtype()) + " ";
      for (hg::DType low : {hg::f16, hg::bf16}) {
        const std::string autocast = dtype_text(low);
        CAPTURE(input_dtypes);
        CAPTURE(autocast);
        hg::amp::Autocast region(low);
        const Tensor out = run(entry, in, sample.args);
        CHECK(dtype_text(out.dtype()) == dtype_text(promised(row, low, floating).output));
      }
    }
  });
}

namespace {

// The entry that carries an op-table row's own name (not a "<op>_scalar" form), of an op that goes
// through autocast (views and copies do not: they have no report row).
bool is_the_rows_entry(const OpEntry& entry) {
  return entry.name == hg::amp::op_name(entry.op) && hg::amp::op_info(entry.op).autocasts;
}

// The first report row (PrecisionReport's or ShadowCheck's) named op, or rows.end().
template <class Rows>
auto row_named(const Rows& rows, const std::string& op) {
  return std::find_if(rows.begin(), rows.end(), [&](const auto& r) { return r.op == op; });
}

}  // namespace

// PrecisionReport's row of each op carries the op-table row's name and policy, and the dtypes it
// promises -- ops name themselves by enum, so the report cannot drift from the table.
TEST_CASE("op_db.precision_report_row_is_the_op_table_row") {
  for_every_sample([](const OpEntry& entry, const Sample& sample) {
    if (!is_the_rows_entry(entry)) return;
    const std::string op = entry.name;
    const hg::amp::OpInfo& row = hg::amp::op_info(entry.op);
    for (Mix mix : {Mix::AllF32, Mix::AllF16, Mix::FirstF16}) {
      const Inputs in = mixed_inputs(sample, mix);
      const std::vector<hg::DType> floating = cast_dtypes(entry, sample, in);
      for (hg::DType low : {hg::f16, hg::bf16}) {
        const std::string autocast = dtype_text(low), first_input = dtype_text(floating[0]);
        CAPTURE(autocast);
        CAPTURE(first_input);
        hg::amp::PrecisionReport report;
        {
          hg::amp::Autocast region(low);
          run(entry, in, sample.args);
        }
        const auto it = row_named(report.rows(), op);
        REQUIRE_MESSAGE(it != report.rows().end(), "no PrecisionReport row named '", op, "'");
        const Promise promise = promised(row, low, floating);
        CHECK(it->policy == hg::amp::policy_name(row.policy));
        CHECK(it->compute == promise.computed);
        CHECK(it->output == promise.output);
      }
    }
  });
}

// ShadowCheck pairs an op's inputs (amp::prepare) with its output (autograd::record) by name: both
// come from the op's table row, so every op that records an output gets its shadow error.
TEST_CASE("op_db.shadow_check_sees_every_op_under_its_table_name") {
  for_every_sample([](const OpEntry& entry, const Sample& sample) {
    if (!is_the_rows_entry(entry)) return;
    const std::string op = entry.name;
    const Inputs in = mixed_inputs(sample, Mix::AllF32);
    hg::amp::ShadowCheck check(hg::bf16);
    check.run([&] { return run(entry, in, sample.args); });
    const auto& rows = check.report().rows();
    const auto it = row_named(rows, op);
    REQUIRE(it != rows.end());
    // No output node of their own, so nothing to compare: argmax/argmin (not differentiable), mse_loss
    // (composed of sub, pow and mean, each compared in its own row), and dropout where it is the
    // identity (eval, p = 0) or x * 0 (p = 1).
    const bool dropout_masks = entry.op != hg::amp::Op::Dropout ||
                               (hg_test::flag(sample.args, "training") && hg_test::number(sample.args, "p") > 0 &&
                                hg_test::number(sample.args, "p") < 1);
    const bool composed = entry.composed || (entry.composed_for && entry.composed_for(sample.inputs, sample.args));
    const bool indices = hg::amp::op_info(entry.op).output == hg::amp::OutputDType::Index;  // argmax, argmin
    const bool records_an_output = !indices && !composed && dropout_masks;
    CHECK(it->has_shadow == records_an_output);
  });
}

// ---- CPU against CUDA ---------------------------------------------------------------------------

// The f32 forward on the GPU against the CPU's, within twice the sample's tolerance (each side is
// within one tolerance of the truth), TF32 off. Gradients are compared by tests/test_cuda.cpp.
// Without a GPU this prints the line that CTest's SKIP_REGULAR_EXPRESSION (tests/CMakeLists.txt)
// reports as a skip.
TEST_CASE("op_db.cpu_matches_cuda") {
  if (!hg_test::cuda_available()) {
    std::cout << "op_db.cpu_matches_cuda skipped: no CUDA device\n";
    return;
  }
  struct Tf32Off {  // restored even when a call throws
    bool before = hg::cuda::tf32_allowed();
    Tf32Off() { hg::cuda::allow_tf32(false); }
    ~Tf32Off() { hg::cuda::allow_tf32(before); }
  } tf32_off;
  for_every_sample([](const OpEntry& entry, const Sample& sample) {
    const Inputs cpu_in = make_inputs(sample, hg::f32);
    Inputs cuda_in;
    for (const Tensor& t : cpu_in) cuda_in.push_back(t.to(hg::Device::cuda()));
    const Outcome on_cpu = forward_and_backward(entry, sample, cpu_in);
    const Outcome on_cuda = forward_and_backward(entry, sample, cuda_in);
    CHECK(on_cuda.out.device().is_cuda());
    const Tolerance t = sample.f32_tolerance, twice{2 * t.rtol, 2 * t.atol};
    CHECK_CLOSE_WITH(on_cuda.out.to(hg::Device::cpu()), on_cpu.out, twice);
    // The backward too (its upstream gradient is made on the CPU's generator for both).
    for (size_t k = 0; k < on_cpu.grads.size(); ++k) {
      const int input = sample.grads[k];
      CAPTURE(input);
      REQUIRE(on_cuda.grads[k].defined() == on_cpu.grads[k].defined());
      if (on_cpu.grads[k].defined()) CHECK_CLOSE_WITH(on_cuda.grads[k].to(hg::Device::cpu()), on_cpu.grads[k], twice);
    }
  });
}

// ---- the rest of an op's contract ---------------------------------------------------------------

namespace {

// The sample's inputs in f64 with one value of the first floating, differentiable input replaced.
Inputs with_one_value(const Sample& sample, double value) {
  Inputs in = make_inputs(sample, hg::f64);
  for (size_t i = 0; i < in.size(); ++i) {
    if (!hg::is_floating(in[i].dtype()) || in[i].numel() == 0) continue;
    Tensor flat = in[i].contiguous().reshape({in[i].numel()});
    flat = flat.clone();
    flat.data_ptr<double>()[flat.numel() / 2] = value;
    in[i] = flat.reshape(in[i].shape());
    return in;
  }
  return {};
}

}  // namespace

// docs/testing.md scenario 14: a NaN or an infinity in an input reaches the output as PyTorch's op
// would carry it -- no silent clamping, no max or relu that drops a NaN. The naive reference says
// where (it is PyTorch's formula written out); compared with NaN == NaN.
TEST_CASE("op_db.nan_and_inf_propagate_as_the_reference_says") {
  for_every_sample([](const OpEntry& entry, const Sample& sample) {
    if (!entry.reference) return;  // (dropout: checked by op_db.dropout_keeps_or_scales)
    for (const double special : {std::nan(""), std::numeric_limits<double>::infinity(),
                                 -std::numeric_limits<double>::infinity()}) {
      CAPTURE(special);
      const Inputs in = with_one_value(sample, special);
      if (in.empty()) return;  // no floating input
      std::vector<ref::Array> arrays;
      for (const Tensor& t : in) arrays.push_back(ref::of(t));
      const Tensor out = run(entry, in, sample.args);
      const Tensor expected = ref::tensor(entry.reference(arrays, sample.args));
      const auto report = hg_test::compare(out, expected, hg_test::tolerance_for(hg::f64), /*equal_nan=*/true);
      CHECK_MESSAGE(!report.has_value(), report.value_or(""));
    }
  });
}

// An op on integer tensors either computes what the reference computes (add, the views, cat: ops
// PyTorch defines for integers) or refuses with an hg::Error naming the op -- never a crash, a
// foreign exception or garbage.
TEST_CASE("op_db.integer_inputs_give_the_reference_or_a_clear_error") {
  for_every_sample([](const OpEntry& entry, const Sample& sample) {
    if (!entry.reference || !sample.entrys_own) return;
    Inputs in = make_inputs(sample, hg::f64);
    bool any = false;
    for (Tensor& t : in)
      if (hg::is_floating(t.dtype())) t = (t * 4.0).to(hg::i64), any = true;  // small integers, some repeated
    if (!any) return;
    try {
      const Tensor out = run(entry, in, sample.args);
      std::vector<ref::Array> arrays;
      for (const Tensor& t : in) arrays.push_back(ref::of(t));
      // Exact in an integer dtype; one rounding where the op computes in floating point (x / 2.5).
      const Tolerance t = hg::is_floating(out.dtype()) ? hg_test::tolerance_for(out.dtype()) : Tolerance{0.0, 0.0};
      CHECK_MATCHES_REF(out, entry.reference(arrays, sample.args), t);
    } catch (const hg::Error& e) {
      const std::string message = e.what(), op(hg::amp::op_name(entry.op));
      CAPTURE(message);
      CHECK(message.find(op) != std::string::npos);
    }
  });
}

// docs/testing.md scenario 5: with every input's first dimension 0, an op gives an empty output of
// the reference's shape (or, where an empty input means nothing -- a GEMM over an empty batch of
// rows is fine, a softmax over nothing is fine -- an hg::Error); no crash.
TEST_CASE("op_db.empty_inputs_give_empty_outputs_or_a_clear_error") {
  for_every_sample([](const OpEntry& entry, const Sample& sample) {
    if (!entry.reference || !sample.entrys_own) return;
    Inputs in = make_inputs(sample, hg::f64);
    for (Tensor& t : in)
      if (t.dim() > 0) t = hg::narrow(t, 0, 0, 0).contiguous();
    std::vector<ref::Array> arrays;
    for (const Tensor& t : in) arrays.push_back(ref::of(t));
    try {
      const Tensor out = run(entry, in, sample.args);
      const ref::Array expected = entry.reference(arrays, sample.args);
      CHECK(out.shape() == expected.shape);
      // A mean over nothing is NaN, PyTorch's documented choice (scenario 5).
      const auto report = hg_test::compare(out, ref::tensor(expected), hg_test::tolerance_for(hg::f64), true);
      CHECK_MESSAGE(!report.has_value(), report.value_or(""));
    } catch (const hg::Error& e) {
      const std::string message = e.what();
      CAPTURE(message);
      CHECK(!message.empty());
    }
  });
}

// ---- the nn module of an op against the op ------------------------------------------------------

namespace {

// The nn module that wraps an op, built from a sample: its parameters are the sample's inputs
// (loaded into the module), its options the sample's args. None for ops without a module.
std::optional<hg_test::OpCall> module_call(const OpEntry& entry) {
  using hg_test::flag;
  using hg_test::integer;
  using hg_test::number;
  namespace nn = hg::nn;
  const auto load = [](nn::Module& m, const std::map<std::string, Tensor>& state) {
    hg::NoGradGuard no_grad;
    for (const auto& [name, p] : m.named_parameters()) Tensor(p).copy_(state.at(name));
  };
  // A layer's weight (input 1) and bias (input 2, when given), in the weight's dtype.
  const auto load_layer = [load](nn::Module& m, const Inputs& in) {
    m.to(in[1].dtype());
    std::map<std::string, Tensor> state{{"weight", in[1]}};
    if (in.size() > 2) state["bias"] = in[2];
    load(m, state);
  };
  switch (entry.op) {
    case hg::amp::Op::Relu: return [](const Inputs& in, const Args&) { return nn::ReLU()(in[0]); };
    case hg::amp::Op::Gelu:
      return [](const Inputs& in, const Args& a) {
        const Args* approximate = a.find("approximate");
        return (approximate ? nn::GELU(approximate->text) : nn::GELU())(in[0]);
      };
    case hg::amp::Op::Relu6: return [](const Inputs& in, const Args&) { return nn::ReLU6()(in[0]); };
    case hg::amp::Op::Hardtanh:
      return [](const Inputs& in, const Args& a) {
        return nn::Hardtanh(number(a, "min_val"), number(a, "max_val"))(in[0]);
      };
    case hg::amp::Op::Hardsigmoid: return [](const Inputs& in, const Args&) { return nn::Hardsigmoid()(in[0]); };
    case hg::amp::Op::Hardswish: return [](const Inputs& in, const Args&) { return nn::Hardswish()(in[0]); };
    case hg::amp::Op::Elu: return [](const Inputs& in, const Args& a) { return nn::ELU(number(a, "alpha"))(in[0]); };
    case hg::amp::Op::Selu: return [](const Inputs& in, const Args&) { return nn::SELU()(in[0]); };
    case hg::amp::Op::Celu: return [](const Inputs& in, const Args& a) { return nn::CELU(number(a, "alpha"))(in[0]); };
    case hg::amp::Op::Mish: return [](const Inputs& in, const Args&) { return nn::Mish()(in[0]); };
    case hg::amp::Op::Softsign: return [](const Inputs& in, const Args&) { return nn::Softsign()(in[0]); };
    case hg::amp::Op::LogSigmoid: return [](const Inputs& in, const Args&) { return nn::LogSigmoid()(in[0]); };
    case hg::amp::Op::Silu: return [](const Inputs& in, const Args&) { return nn::SiLU()(in[0]); };
    case hg::amp::Op::Sigmoid: return [](const Inputs& in, const Args&) { return nn::Sigmoid()(in[0]); };
    case hg::amp::Op::Tanh: return [](const Inputs& in, const Args&) { return nn::Tanh()(in[0]); };
    case hg::amp::Op::Softplus:
      return [](const Inputs& in, const Args& a) { return nn::Softplus(number(a, "beta"), number(a, "threshold"))(in[0]); };
    case hg::amp::Op::LeakyRelu:
      return [](const Inputs& in, const Args& a) {
        return (a.find("negative_slope") ? nn::LeakyReLU(number(a, "negative_slope")) : nn::LeakyReLU())(in[0]);
      };
    case hg::amp::Op::Dropout:
      return [](const Inputs& in, const Args& a) {
        nn::Dropout m(number(a, "p"));
        m.train(flag(a, "training"));
        return m(in[0]);
      };
    case hg::amp::Op::MaxPool2d:
      return [](const Inputs& in, const Args& a) {
        if (!a.find("padding")) return nn::MaxPool2d(int(integer(a, "kernel")), int(integer(a, "stride")))(in[0]);
        return nn::MaxPool2d({.kernel = integer(a, "kernel"), .stride = integer(a, "stride"),
                              .padding = integer(a, "padding"), .ceil_mode = flag(a, "ceil_mode")})(in[0]);
      };
    case hg::amp::Op::AvgPool2d:
      return [](const Inputs& in, const Args& a) {
        if (!a.find("padding")) return nn::AvgPool2d(int(integer(a, "kernel")), int(integer(a, "stride")))(in[0]);
        return nn::AvgPool2d({.kernel = integer(a, "kernel"), .stride = integer(a, "stride"),
                              .padding = integer(a, "padding"), .ceil_mode = flag(a, "ceil_mode"),
                              .count_include_pad = flag(a, "count_include_pad")})(in[0]);
      };
    case hg::amp::Op::AdaptiveAvgPool2d:
      return [](const Inputs& in, const Args& a) { return nn::AdaptiveAvgPool2d(hg_test::integers(a, "output_size"))(in[0]); };
    case hg::amp::Op::Linear:
      return [load_layer](const Inputs& in, const Args&) {
        const Tensor& w = in[1];
        nn::Linear m(w.shape()[1], w.shape()[0], in.size() > 2);
        load_layer(m, in);
        return m(in[0]);
      };
    case hg::amp::Op::Conv2d:
      return [load_layer](const Inputs& in, const Args& a) {
        const Tensor& w = in[1];
        const int64_t groups = integer(a, "groups", 1);
        nn::Conv2d m(w.shape()[1] * groups, w.shape()[0], w.shape()[2],
                     {.stride = integer(a, "stride"), .padding = integer(a, "padding"),
                      .dilation = integer(a, "dilation", 1), .groups = groups, .bias = in.size() > 2});
        load_layer(m, in);
        return m(in[0]);
      };
    case hg::amp::Op::Embedding:
      return [load](const Inputs& in, const Args&) {
        nn::Embedding m(in[1].shape()[0], in[1].shape()[1]);
        m.to(in[1].dtype());
        load(m, {{"weight", in[1]}});
        return m(in[0]);
      };
    case hg::amp::Op::Conv1d:
      return [load_layer](const Inputs& in, const Args& a) {
        const Tensor& w = in[1];
        const int64_t groups = integer(a, "groups", 1);
        nn::Conv1d m(w.shape()[1] * groups, w.shape()[0], w.shape()[2],
                     {.stride = integer(a, "stride"), .padding = integer(a, "padding"),
                      .dilation = integer(a, "dilation", 1), .groups = groups, .bias = in.size() > 2});
        load_layer(m, in);
        return m(in[0]);
      };
    case hg::amp::Op::ConvTranspose2d:
      return [load_layer](const Inputs& in, const Args& a) {
        const Tensor& w = in[1];
        const int64_t groups = integer(a, "groups", 1);
        nn::ConvTranspose2d m(w.shape()[0], w.shape()[1] * groups, w.shape()[2],
                              {.stride = integer(a, "stride"), .padding = integer(a, "padding"),
                               .output_padding = integer(a, "output_padding", 0), .groups = groups,
                               .bias = in.size() > 2, .dilation = integer(a, "dilation", 1)});
        load_layer(m, in);
        return m(in[0]);
      };
    case hg::amp::Op::Prelu:
      return [load](const Inputs& in, const Args&) {
        nn::PReLU m(in[1].numel());
        m.to(in[1].dtype());
        load(m, {{"weight", in[1]}});
        return m(in[0]);
      };
    case hg::amp::Op::GroupNorm:
      return [load](const Inputs& in, const Args& a) {
        const bool affine = flag(a, "affine");
        nn::GroupNorm m(integer(a, "num_groups"), in[0].shape()[1], {.eps = number(a, "eps"), .affine = affine});
        m.to(in[0].dtype());
        if (affine) load(m, {{"weight", in[1]}, {"bias", in[2]}});
        return m(in[0]);
      };
    case hg::amp::Op::Interpolate:
      return [](const Inputs& in, const Args& a) {
        hg::InterpolateOptions options{.mode = hg_test::arg(a, "mode", Args::Kind::String).text};
        if (a.find("size")) options.size = hg_test::integers(a, "size");
        if (a.find("scale_factor")) options.scale_factor = number(a, "scale_factor");
        if (a.find("align_corners")) options.align_corners = flag(a, "align_corners");
        return nn::Upsample(options)(in[0]);
      };
    case hg::amp::Op::RmsNorm:
      return [load](const Inputs& in, const Args& a) {
        nn::RMSNorm m(hg_test::integers(a, "normalized_shape"), {.eps = number(a, "eps"), .elementwise_affine = in.size() > 1});
        if (in.size() > 1) {
          m.to(in[1].dtype());
          load(m, {{"weight", in[1]}});
        }
        return m(in[0]);
      };
    case hg::amp::Op::AdaptiveMaxPool2d:
      return [](const Inputs& in, const Args& a) { return nn::AdaptiveMaxPool2d(hg_test::integers(a, "output_size"))(in[0]); };
    default: return std::nullopt;  // (batch_norm, layer_norm, instance_norm: their modules own buffers and shapes of
                                   // their own; tests/test_nn.cpp compares them with the ops)
  }
}

}  // namespace

// An op and its nn module compute the same thing, bit for bit, forward and backward: the module
// is a thin wrapper (PyTorch's nn.ReLU is F.relu), so any difference is a bug in one of them.
TEST_CASE("op_db.nn_module_matches_the_op") {
  int compared = 0;
  for_every_sample([&](const OpEntry& entry, const Sample& sample) {
    if (entry.name != hg::amp::op_name(entry.op)) return;  // the row's own entry ("add", not "add_scalar")
    const std::optional<hg_test::OpCall> module = module_call(entry);
    if (!module) return;
    // nn::Conv2d's and nn::ConvTranspose2d's kernels are square (kernel_size is one number): other
    // shapes have no module.
    const bool conv = entry.op == hg::amp::Op::Conv2d || entry.op == hg::amp::Op::ConvTranspose2d;
    if (conv && sample.inputs[1].shape[2] != sample.inputs[1].shape[3]) return;
    // The module's call in place of the entry's.
    OpEntry through_module = entry;
    through_module.call = *module;
    const Inputs in = make_inputs(sample, hg::f32);
    const Outcome functional = forward_and_backward(entry, sample, in);
    const Outcome wrapped = forward_and_backward(through_module, sample, in);
    CHECK_CLOSE_WITH(wrapped.out, functional.out, kExact);
    REQUIRE(wrapped.grads.size() == functional.grads.size());
    for (size_t k = 0; k < functional.grads.size(); ++k) {
      const int input = sample.grads[k];
      CAPTURE(input);
      // (A module's parameters are its own leaves: gradients reach the module, not the inputs.)
      if (wrapped.grads[k].defined()) CHECK_CLOSE_WITH(wrapped.grads[k], functional.grads[k], kExact);
    }
    ++compared;
  });
  CHECK(compared >= 30);  // every op above with a module, at least once
}
