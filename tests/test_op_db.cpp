// Every check of the per-op test database (tests/op_db.h) run on every entry: the op table and the
// database name the same ops, f64 gradcheck, the naive reference in f64 and f32, the output dtype
// under autocast as the op-table row says, and CPU against CUDA. A failure names the entry (`op`).
// The PyTorch golden parity of the same calls is in tests/test_parity.cpp.
#include <algorithm>
#include <cmath>
#include <iostream>
#include <map>
#include <set>
#include <string>

#include "core/safetensors.h"
#include "op_db.h"

namespace {

using hg::Tensor;
using hg::amp::CastPolicy;
using hg::amp::OutputDType;
using hg_test::Args;
using hg_test::Inputs;
using hg_test::OpEntry;

// Every call starts from the same generator state, so that dropout draws the same mask each time
// gradcheck re-runs it, and on both devices.
constexpr uint64_t kCallSeed = 77;

Tensor run(const OpEntry& entry, const Inputs& in, const Args& args) {
  hg::manual_seed(kCallSeed);
  return entry.call(in, args);
}

// The entry's inputs with floating values in `dtype` (drawn in f64, then rounded; indices stay i64).
Inputs make_inputs(const OpEntry& entry, hg::DType dtype, uint64_t seed) {
  hg::manual_seed(seed);
  Inputs in;
  for (const hg_test::InputSpec& spec : entry.inputs) {
    switch (spec.values) {
      case hg_test::Values::Normal: in.push_back(hg::randn(spec.shape, {.dtype = hg::f64}).to(dtype)); break;
      case hg_test::Values::Positive: in.push_back((hg::rand(spec.shape, {.dtype = hg::f64}) + 0.5).to(dtype)); break;
      case hg_test::Values::ClassIndex: in.push_back(hg::randint(0, spec.classes, spec.shape, {.dtype = hg::i64})); break;
    }
  }
  return in;
}

// One seed per entry, so that entries do not all see the same numbers.
uint64_t seed_of(const OpEntry& entry) { return 1000 + uint64_t(&entry - hg_test::op_db().data()); }

std::string dtype_text(hg::DType dtype) { return std::string(hg::dtype_name(dtype)); }

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

// T64 (TESTING.md scenario 2). Inputs are small; random normal values stay away from the kinks of
// abs/relu/clamp and from ties in amax/max_pool2d (a value within eps of a kink would make the
// finite difference meaningless).
TEST_CASE("op_db.gradcheck_f64") {
  for (const OpEntry& entry : hg_test::op_db()) {
    const std::string op = entry.name;
    CAPTURE(op);
    Inputs in = make_inputs(entry, hg::f64, seed_of(entry));
    for (int i : entry.grads) {
      REQUIRE_MESSAGE(hg::is_floating(in[size_t(i)].dtype()), "only floating inputs can be differentiated");
      in[size_t(i)].requires_grad_(true);
    }
    if (entry.grads.empty()) continue;  // argmax: no gradient
    // gradcheck perturbs every input it is given, so it gets the floating ones; indices stay put.
    std::vector<size_t> floating_at;
    Inputs floating;
    for (size_t i = 0; i < in.size(); ++i)
      if (hg::is_floating(in[i].dtype())) floating_at.push_back(i), floating.push_back(in[i]);
    const Args args = entry.args();
    const auto call = [&](const Inputs& x) {
      Inputs all = in;
      for (size_t k = 0; k < x.size(); ++k) all[floating_at[k]] = x[k];
      return run(entry, all, args);
    };
    const auto report = hg::autograd::gradcheck_report(call, floating);
    CHECK_MESSAGE(!report.has_value(), report.value_or(""));
  }
}

// ---- strided inputs give what their contiguous copies give -----------------------------------------

namespace {

// A copy of t whose memory is not row-major: every second element of a larger buffer, from
// element 1 (a step-2, offset view, as a slice x[..., 1::2] makes). 0-d and empty tensors stay.
Tensor strided_copy(const Tensor& t) {
  if (t.dim() == 0 || t.numel() == 0) return t;
  const Tensor base = hg::zeros({2 * t.numel() + 1}, t.options());
  hg::Shape strides = hg::contiguous_strides(t.shape());
  for (int64_t& s : strides) s *= 2;
  Tensor view = hg::as_strided(base, t.shape(), strides, 1);
  view.copy_(t);
  return view.detach();
}

// The call on `in` (the entry's differentiated inputs made leaves), and the gradients of
// sum(out * upstream) for a fixed upstream tensor.
struct Outcome {
  Tensor out;
  Inputs grads;
};
Outcome forward_and_backward(const OpEntry& entry, Inputs in) {
  for (int i : entry.grads) in[size_t(i)].requires_grad_(true);
  Outcome o{run(entry, in, entry.args()), {}};
  if (entry.grads.empty()) return o;
  hg::manual_seed(5);
  o.out.backward(hg::randn(o.out.shape(), {.dtype = o.out.dtype()}));
  for (int i : entry.grads) o.grads.push_back(in[size_t(i)].grad());
  return o;
}

}  // namespace

// TESTING.md scenario 4 for every entry: the same values laid out with strides (every floating
// input a step-2, offset view) give the same output and the same input gradients, in f64.
// Kernels that read strides directly and kernels that copy first must agree.
TEST_CASE("op_db.strided_inputs_match_contiguous") {
  const Tolerance same{1e-12, 1e-12};  // f64: only a different summation order may show
  for (const OpEntry& entry : hg_test::op_db()) {
    const std::string op = entry.name;
    CAPTURE(op);
    const Inputs dense = make_inputs(entry, hg::f64, seed_of(entry));
    Inputs strided;
    for (const Tensor& t : dense) strided.push_back(hg::is_floating(t.dtype()) ? strided_copy(t) : t);
    bool any_strided = false, any_to_stride = false;  // (a test that strides nothing tests nothing)
    for (size_t i = 0; i < dense.size(); ++i) {
      any_strided = any_strided || !strided[i].is_contiguous();
      any_to_stride = any_to_stride || (hg::is_floating(dense[i].dtype()) && dense[i].numel() > 1);
    }
    CHECK(any_strided == any_to_stride);
    const Outcome a = forward_and_backward(entry, dense), b = forward_and_backward(entry, strided);
    CHECK_CLOSE_WITH(b.out, a.out, same);
    REQUIRE(a.grads.size() == b.grads.size());
    for (size_t k = 0; k < a.grads.size(); ++k) {
      const int input = entry.grads[k];
      CAPTURE(input);
      REQUIRE(a.grads[k].defined() == b.grads[k].defined());
      if (a.grads[k].defined()) CHECK_CLOSE_WITH(b.grads[k], a.grads[k], same);
    }
  }
}

// ---- the forward against the naive reference ----------------------------------------------------

namespace {

void check_reference(const OpEntry& entry, hg::DType dtype, Tolerance tolerance) {
  const std::string dtype_name = dtype_text(dtype);
  CAPTURE(dtype_name);
  const Inputs in = make_inputs(entry, dtype, seed_of(entry));
  std::vector<ref::Array> arrays;
  for (const Tensor& t : in) arrays.push_back(ref::of(t));  // exactly the values the op receives
  const Args args = entry.args();
  const Tensor out = run(entry, in, args);
  const bool indices = hg::amp::op_info(entry.op).output == OutputDType::Index;
  CHECK(dtype_text(out.dtype()) == dtype_text(indices ? hg::i64 : dtype));
  CHECK_MATCHES_REF(out, entry.reference(arrays, args), tolerance);
}

}  // namespace

TEST_CASE("op_db.matches_the_naive_reference") {
  for (const OpEntry& entry : hg_test::op_db()) {
    const std::string op = entry.name;
    CAPTURE(op);
    if (!entry.reference) {
      CHECK_MESSAGE(!entry.no_reference_because.empty(), "an entry without a reference must say why");
      continue;
    }
    check_reference(entry, hg::f64, hg_test::tolerance_for(hg::f64));
    check_reference(entry, hg::f32, entry.f32_tolerance);
  }
}

// dropout's stand-in for a reference: each element is dropped or kept and scaled by 1/(1-p), and
// both happen.
TEST_CASE("op_db.dropout_keeps_or_scales") {
  for (const OpEntry& entry : hg_test::op_db()) {
    if (entry.op != hg::amp::Op::Dropout) continue;
    const Args args = entry.args();
    const double keep_scale = 1 / (1 - hg_test::number(args, "p"));
    const Inputs in = make_inputs(entry, hg::f64, seed_of(entry));
    const std::vector<double> x = values(in[0]), y = values(run(entry, in, args));
    REQUIRE(y.size() == x.size());
    int dropped = 0, kept = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      dropped += y[i] == 0.0;
      kept += std::fabs(y[i] - x[i] * keep_scale) <= 1e-12 * std::fabs(x[i] * keep_scale);
    }
    CHECK(dropped + kept == int(x.size()));
    CHECK(dropped > 0);
    CHECK(kept > 0);
  }
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

Inputs mixed_inputs(const OpEntry& entry, Mix mix) {
  Inputs in = make_inputs(entry, mix == Mix::AllF16 ? hg::f16 : hg::f32, seed_of(entry));
  if (mix == Mix::FirstF16)
    for (Tensor& t : in)
      if (hg::is_floating(t.dtype())) {
        t = t.to(hg::f16);
        break;
      }
  return in;
}

}  // namespace

TEST_CASE("op_db.autocast_output_dtype") {
  for (const OpEntry& entry : hg_test::op_db()) {
    const std::string op = entry.name;
    CAPTURE(op);
    const hg::amp::OpInfo& row = hg::amp::op_info(entry.op);
    const Args args = entry.args();
    for (Mix mix : {Mix::AllF32, Mix::AllF16, Mix::FirstF16}) {
      const Inputs in = mixed_inputs(entry, mix);
      std::vector<hg::DType> floating;
      std::string input_dtypes;
      for (const Tensor& t : in) {
        if (hg::is_floating(t.dtype())) floating.push_back(t.dtype());
        input_dtypes += dtype_text(t.dtype()) + " ";
      }
      for (hg::DType low : {hg::f16, hg::bf16}) {
        const std::string autocast = dtype_text(low);
        CAPTURE(input_dtypes);
        CAPTURE(autocast);
        hg::amp::Autocast region(low);
        const Tensor out = run(entry, in, args);
        CHECK(dtype_text(out.dtype()) == dtype_text(promised(row, low, floating).output));
      }
    }
  }
}

namespace {

// The entry that carries an op-table row's own name (not a "<op>_scalar" form).
bool is_the_rows_entry(const OpEntry& entry) { return entry.name == hg::amp::op_name(entry.op); }

// The first report row (PrecisionReport's or ShadowCheck's) named op, or rows.end().
template <class Rows>
auto row_named(const Rows& rows, const std::string& op) {
  return std::find_if(rows.begin(), rows.end(), [&](const auto& r) { return r.op == op; });
}

}  // namespace

// PrecisionReport's row of each op carries the op-table row's name and policy, and the dtypes it
// promises -- ops name themselves by enum, so the report cannot drift from the table.
TEST_CASE("op_db.precision_report_row_is_the_op_table_row") {
  for (const OpEntry& entry : hg_test::op_db()) {
    if (!is_the_rows_entry(entry)) continue;
    const std::string op = entry.name;
    CAPTURE(op);
    const hg::amp::OpInfo& row = hg::amp::op_info(entry.op);
    for (Mix mix : {Mix::AllF32, Mix::AllF16, Mix::FirstF16}) {
      const Inputs in = mixed_inputs(entry, mix);
      std::vector<hg::DType> floating;
      for (const Tensor& t : in)
        if (hg::is_floating(t.dtype())) floating.push_back(t.dtype());
      for (hg::DType low : {hg::f16, hg::bf16}) {
        const std::string autocast = dtype_text(low), first_input = dtype_text(floating[0]);
        CAPTURE(autocast);
        CAPTURE(first_input);
        hg::amp::PrecisionReport report;
        {
          hg::amp::Autocast region(low);
          run(entry, in, entry.args());
        }
        const auto it = row_named(report.rows(), op);
        REQUIRE_MESSAGE(it != report.rows().end(), "no PrecisionReport row named '", op, "'");
        const Promise promise = promised(row, low, floating);
        CHECK(it->policy == hg::amp::policy_name(row.policy));
        CHECK(it->compute == promise.computed);
        CHECK(it->output == promise.output);
      }
    }
  }
}

// ShadowCheck pairs an op's inputs (amp::prepare) with its output (autograd::record) by name: both
// come from the op's table row, so every op that records an output gets its shadow error.
TEST_CASE("op_db.shadow_check_sees_every_op_under_its_table_name") {
  for (const OpEntry& entry : hg_test::op_db()) {
    if (!is_the_rows_entry(entry)) continue;
    const std::string op = entry.name;
    CAPTURE(op);
    const Inputs in = mixed_inputs(entry, Mix::AllF32);
    hg::amp::ShadowCheck check(hg::bf16);
    check.run([&] { return run(entry, in, entry.args()); });
    const auto& rows = check.report().rows();
    const auto it = row_named(rows, op);
    REQUIRE(it != rows.end());
    // No output node of their own, so nothing to compare: argmax (not differentiable) and
    // mse_loss (composed of sub, pow and mean, each compared in its own row).
    const bool records_an_output = entry.op != hg::amp::Op::Argmax && entry.op != hg::amp::Op::MseLoss;
    CHECK(it->has_shadow == records_an_output);
  }
}

// ---- CPU against CUDA ---------------------------------------------------------------------------

// The f32 forward on the GPU against the CPU's, within twice the entry's tolerance (each side is
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
  for (const OpEntry& entry : hg_test::op_db()) {
    const std::string op = entry.name;
    CAPTURE(op);
    const Inputs cpu_in = make_inputs(entry, hg::f32, seed_of(entry));
    Inputs cuda_in;
    for (const Tensor& t : cpu_in) cuda_in.push_back(t.to(hg::Device::cuda()));
    const Args args = entry.args();
    const Tensor on_cpu = run(entry, cpu_in, args), on_cuda = run(entry, cuda_in, args);
    CHECK(on_cuda.device().is_cuda());
    const Tolerance t = entry.f32_tolerance;
    CHECK_CLOSE_WITH(on_cuda.to(hg::Device::cpu()), on_cpu, (Tolerance{2 * t.rtol, 2 * t.atol}));
  }
}
