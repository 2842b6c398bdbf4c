// PyTorch parity: every op, forward and input gradients, against fixtures written by PyTorch 1.13
// (tests/golden/<family>.safetensors, made by tests/golden/make_golden.py; regenerate with
// `/usr/bin/python3 tests/golden/make_golden.py`). A case holds its inputs, the upstream gradient,
// PyTorch's results in the case dtype, and PyTorch's f64 results from the same rounded inputs (the
// "truth" 16-bit results are measured against). parity.summary prints, per dtype, how many
// op x dtype cases ran and the worst relative errors seen.
#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "amp/op_table.h"
#include "core/json.h"
#include "core/safetensors.h"
#include "op_db.h"

namespace {

using hg::Tensor;
using Args = hg::json::Value;
using Inputs = std::vector<Tensor>;

// ---- op name (as make_golden.py writes it) -> the halfgrad call: tests/op_db.h's entries -------

using hg_test::arg;
using hg_test::integer;
using hg_test::integers;

const std::map<std::string, hg_test::OpCall>& op_table() {
  static const std::map<std::string, hg_test::OpCall> table = [] {
    std::map<std::string, hg_test::OpCall> calls;
    for (const hg_test::OpEntry& entry : hg_test::op_db()) calls.emplace(entry.name, entry.call);
    return calls;
  }();
  return table;
}

// ---- the comparison rule -----------------------------------------------------------------------
//
// f32 / f64, elementwise:  |hg - torch| <= atol + rtol * |torch|,  T(dtype) for ops that round
// each element once; kSummingF32 for f32 ops that sum (see there).
//
// f16 / bf16 (docs/testing.md scenario 3). With torch16 = PyTorch's 16-bit result and ref64 = PyTorch's
// f64 result from the same rounded inputs, an element passes if
//   (a) |hg - torch16| <= atol + rtol * |torch16|           T(dtype) around PyTorch's result, or
//   (b) |hg - ref64|   <= |torch16 - ref64| + atol          no farther from the f64 truth than
//                                                           PyTorch's own 16-bit result is, or,
//       for gradients only,
//   (c) |hg - ref64|   <= |torch16 - ref64| + atol + rtol * max|ref64|
// with (atol, rtol) = T(dtype). (b) is OpInfo's `_ref_test_helper` idea taken elementwise: it
// accepts halfgrad being more accurate than PyTorch (torch 1.13's CPU bf16 matmul, for one, is
// ~3x less accurate than f32 accumulation rounded once) and nothing less accurate.
// NOTE: why (c). A 16-bit gradient is built from 16-bit saved tensors (softmax's output, a
// quotient) and sums of terms as large as the tensor's largest element; half an ulp of such a
// term survives cancellation into a small element, at elements that differ between two correct
// implementations. Elementwise (b) is then a coin toss (seen: softmax backward with saturated
// logits, div's gradient reduced over a broadcast dim). (c) measures the extra error against the
// tensor's scale instead of the element's. parity.summary lists every tensor that needed (b) or
// (c), so a systematic loss of precision still shows up there and in the worst errors.
//
// torch16 comes from PyTorch's own 16-bit CPU kernels or, for each ATen kernel torch 1.13 lacks
// in 16 bits, from that kernel run in f32 and rounded to 16 bits (a case's "path"/"f32_kernels").

// NOTE: matmul, conv, reductions, softmax, losses and norms add K terms in an order set by the
// blocking and vectorisation. halfgrad's and PyTorch's f32 answers both carry ~sqrt(K) * 2^-24
// times the terms' magnitude of error, in different directions, and cancellation makes that
// large relative to a small result; PyTorch's OpInfo overrides these ops' tolerances for the same
// reason. rtol 1e-5 (~80 ulp) allows any summation order and still catches a real bug (a wrong or
// missing term is an O(1) error). The summary reports the worst error as a fraction of T(f32), so
// it shows whether the extra room was needed.
constexpr hg_test::Tolerance kSummingF32{1e-5, 1e-5};

bool family_sums(const std::string& family) {
  return family != "elementwise" && family != "activation" && family != "pool" && family != "embedding" &&
         family != "cat";
}

hg_test::Tolerance tolerance(const std::string& family, hg::DType dtype) {
  return dtype == hg::f32 && family_sums(family) ? kSummingF32 : hg_test::tolerance_for(dtype);
}

// Relative error of x against e, guarded for elements that cancel to ~0:
// max_i |x_i - e_i| / max(|e_i|, 1e-3 * max|e|).
double relative_error(const std::vector<double>& x, const std::vector<double>& e) {
  double scale = 0, worst = 0;
  for (double v : e) scale = std::max(scale, std::fabs(v));
  const double floor = std::max(1e-3 * scale, 1e-300);
  for (size_t i = 0; i < x.size(); ++i) {
    const double err = std::fabs(x[i] - e[i]) / std::max(std::fabs(e[i]), floor);
    worst = std::isnan(err) ? INFINITY : std::max(worst, err);
  }
  return worst;
}

struct Worst {
  double value = 0;
  std::string where;
  void update(double v, const std::string& at) {
    if (v > value || where.empty()) value = v, where = at;
  }
};

struct DTypeStats {
  int cases = 0, tensors = 0;
  std::vector<std::string> failed;
  Worst hg_vs_torch;          // relative error of halfgrad against PyTorch in the same dtype
  Worst hg_vs_f64[2];         // ... of halfgrad against the f64 truth: [0] outputs, [1] gradients
  Worst torch_vs_f64[2];      // ... of PyTorch against the f64 truth (the yardstick for 16 bits)
  Worst t_use;          // max |hg - torch| / (atol + rtol |torch|) with T(dtype): <= 1 is within T
  std::vector<std::string> by_rule_b, by_rule_c;  // 16-bit tensors that needed rule (b) / (c)
};
using Stats = std::map<hg::DType, DTypeStats>;

std::string shape_report(const std::string& where, const Tensor& got, const Tensor& torch) {
  if (!got.defined()) return where + ": halfgrad produced no tensor (gradient not propagated?)";
  if (got.shape() == torch.shape() && got.dtype() == torch.dtype()) return "";
  std::ostringstream os;
  os << where << ": halfgrad gave " << got.dtype() << got.shape() << ", PyTorch " << torch.dtype() << torch.shape();
  return os.str();
}

// Compares one halfgrad tensor with PyTorch's (rules above); returns "" when it passes, else a report.
std::string compare(const Tensor& got, const Tensor& torch, const Tensor& truth, hg_test::Tolerance tol,
                    bool gradient, const std::string& where, DTypeStats& stats) {
  if (std::string report = shape_report(where, got, torch); !report.empty()) return report;
  const std::vector<double> a = got.to_vector<double>(), e = torch.to_vector<double>();
  if (!hg::is_floating(torch.dtype())) return a == e ? "" : where + ": integer results differ";
  const std::vector<double> r = truth.defined() ? truth.to_vector<double>() : e;
  const bool half = hg::is_16bit_floating(torch.dtype());
  const hg_test::Tolerance t = hg_test::tolerance_for(torch.dtype());
  double scale = 0;
  for (double v : r) scale = std::max(scale, std::fabs(v));
  int64_t mismatched = 0, worst_at = -1;
  double worst_ratio = 0;
  bool used_b = false, used_c = false;
  for (size_t i = 0; i < a.size(); ++i) {
    const double diff = std::fabs(a[i] - e[i]), err = std::fabs(a[i] - r[i]), torch_err = std::fabs(e[i] - r[i]);
    stats.t_use.update(std::isnan(diff) ? INFINITY : diff / (t.atol + t.rtol * std::fabs(e[i])), where);
    if (diff <= tol.atol + tol.rtol * std::fabs(e[i])) continue;  // (a)
    if (half && err <= torch_err + tol.atol) {                     // (b)
      used_b = true;
      continue;
    }
    if (half && gradient && err <= torch_err + tol.atol + tol.rtol * scale) {  // (c)
      used_c = true;
      continue;
    }
    ++mismatched;
    const double ratio = std::isnan(diff) ? INFINITY : diff / (tol.atol + tol.rtol * std::fabs(e[i]));
    if (worst_at < 0 || ratio > worst_ratio) worst_ratio = ratio, worst_at = int64_t(i);
  }
  ++stats.tensors;
  stats.hg_vs_torch.update(relative_error(a, e), where);
  stats.hg_vs_f64[gradient].update(relative_error(a, r), where);
  stats.torch_vs_f64[gradient].update(relative_error(e, r), where);
  if (used_c) stats.by_rule_c.push_back(where);
  else if (used_b) stats.by_rule_b.push_back(where);
  if (mismatched == 0) return "";
  const size_t w = size_t(worst_at);
  std::ostringstream os;
  os << where << ": mismatched elements " << mismatched << " / " << a.size() << "; worst at index " << w
     << ": halfgrad " << a[w] << ", PyTorch " << e[w] << ", f64 truth " << r[w] << " (rtol " << tol.rtol << ", atol "
     << tol.atol << (half ? ", or no farther from f64 than PyTorch" : "") << ")";
  return os.str();
}

// ---- running the cases of one fixture file -----------------------------------------------------

struct Fixture {
  std::map<std::string, Tensor> tensors;
  Tensor get(const std::string& name) const {
    const auto it = tensors.find(name);
    HG_CHECK(it != tensors.end(), "parity: fixture has no tensor ", name);
    return it->second;
  }
  Tensor find(const std::string& name) const {
    const auto it = tensors.find(name);
    return it == tensors.end() ? Tensor() : it->second;
  }
};

std::vector<int> int_list(const Args& meta, std::string_view key) {
  std::vector<int> out;
  for (int64_t v : integers(meta, key)) out.push_back(int(v));
  return out;
}

// Runs one case; returns its failures (empty when it passes).
std::vector<std::string> run_case(const std::string& family, const std::string& name, const Args& meta,
                                  const Fixture& fx, DTypeStats& stats) {
  const std::string op = arg(meta, "op", Args::Kind::String).text;
  const auto fn = op_table().find(op);
  HG_CHECK(fn != op_table().end(), "parity: no halfgrad call for op \"", op, "\"");
  const std::vector<int> grads = int_list(meta, "grads"), states = int_list(meta, "states");
  Inputs in;
  for (int64_t i = 0; i < integer(meta, "n_in"); ++i) in.push_back(fx.get(name + ".in" + std::to_string(i)));
  for (int i : grads) in[size_t(i)].requires_grad_(true);

  const Tensor out = fn->second(in, arg(meta, "args", Args::Kind::Object));
  const hg_test::Tolerance tol = tolerance(family, fx.get(name + ".out").dtype());
  std::vector<std::string> failures;
  auto check = [&](const Tensor& got, const std::string& what) {
    const std::string report = compare(got, fx.get(name + "." + what), fx.find(name + "." + what + "_f64"), tol,
                                       what.starts_with("grad"), name + "." + what, stats);
    if (!report.empty()) failures.push_back(report);
  };
  check(out, "out");
  for (int i : states) check(in[size_t(i)].detach(), "state" + std::to_string(i));
  if (!grads.empty()) {
    out.backward(fx.get(name + ".grad_out"));
    for (int i : grads) check(in[size_t(i)].grad(), "grad" + std::to_string(i));
  }
  return failures;
}

struct Outcome {
  std::string name, path;
  std::vector<std::string> failures;
};

std::vector<Outcome> run_family(const std::string& family, Stats& stats) {
  const hg::SafetensorsContents file = hg::load_with_metadata(std::string(HG_TEST_DIR) + "/golden/" + family + ".safetensors");
  const Fixture fx{file.tensors};
  std::vector<Outcome> outcomes;
  for (const auto& [name, text] : file.metadata) {
    if (name.starts_with("_")) continue;  // file-wide notes (_generator, _torch, ...)
    const Args meta = hg::json::parse(text, "parity metadata");
    const hg::DType dtype = fx.get(name + ".out").dtype() == hg::i64 ? fx.get(name + ".in0").dtype()
                                                                      : fx.get(name + ".out").dtype();
    DTypeStats& s = stats[dtype];
    Outcome o{name, arg(meta, "path", Args::Kind::String).text, {}};
    try {
      o.failures = run_case(family, name, meta, fx, s);
    } catch (const std::exception& e) {
      o.failures.push_back(name + " threw: " + e.what());
    }
    ++s.cases;
    if (!o.failures.empty()) s.failed.push_back(name);
    outcomes.push_back(std::move(o));
  }
  return outcomes;
}

void check_family(const std::string& family) {
  Stats stats;
  const std::vector<Outcome> outcomes = run_family(family, stats);
  REQUIRE_MESSAGE(!outcomes.empty(), "no cases in tests/golden/", family, ".safetensors");
  for (const Outcome& o : outcomes) {
    std::string report;
    for (const std::string& f : o.failures) report += f + "\n";
    INFO("case ", o.name, " (16-bit PyTorch path: ", o.path, ")");
    CHECK_MESSAGE(o.failures.empty(), report);
  }
}

const char* const kFamilies[] = {"elementwise", "activation", "reduce",    "linalg", "softmax", "loss",  "conv2d",
                                 "pool",        "norm",       "vision",    "sequence", "embedding", "cat",  "shape",
                                 "indexing",    "statistics"};

std::string join(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

std::string summary(const Stats& stats) {
  int cases = 0, failed = 0;
  for (const auto& [dtype, s] : stats) cases += s.cases, failed += int(s.failed.size());
  std::ostringstream os;
  os.precision(3);
  os << "PyTorch parity: " << cases << " op x dtype cases, " << failed << " failed. Relative error of a tensor = "
     << "max_i |x_i - ref_i| / max(|ref_i|, 1e-3 max|ref|); the worst tensor in parentheses.\n";
  for (const auto& [dtype, s] : stats) {
    os << "  " << dtype << ": " << s.cases << " cases (" << s.tensors << " tensors), " << s.failed.size()
       << " failed. halfgrad vs PyTorch " << dtype << ": rel err " << s.hg_vs_torch.value << " (" << s.hg_vs_torch.where
       << "), max |diff| = " << s.t_use.value << " x T(" << dtype << ") (" << s.t_use.where << ")\n";
    for (int grad = 0; grad < 2 && dtype != hg::f64; ++grad)
      os << "    " << (grad ? "gradients" : "forward outputs") << " vs f64 truth: halfgrad " << s.hg_vs_f64[grad].value
         << " (" << s.hg_vs_f64[grad].where << "), PyTorch " << s.torch_vs_f64[grad].value << " ("
         << s.torch_vs_f64[grad].where << ")\n";
    if (!s.failed.empty()) os << "    failed: " << join(s.failed) << "\n";
    if (!s.by_rule_b.empty()) os << "    passed by rule (b), closer to f64 than PyTorch: " << join(s.by_rule_b) << "\n";
    if (!s.by_rule_c.empty()) os << "    passed by rule (c), gradient scale allowance: " << join(s.by_rule_c) << "\n";
  }
  return os.str();
}

}  // namespace

TEST_CASE("parity.elementwise") { check_family("elementwise"); }
TEST_CASE("parity.activation") { check_family("activation"); }
TEST_CASE("parity.reduce") { check_family("reduce"); }
TEST_CASE("parity.linalg") { check_family("linalg"); }
TEST_CASE("parity.softmax") { check_family("softmax"); }
TEST_CASE("parity.loss") { check_family("loss"); }
TEST_CASE("parity.conv2d") { check_family("conv2d"); }
TEST_CASE("parity.pool") { check_family("pool"); }
TEST_CASE("parity.norm") { check_family("norm"); }
TEST_CASE("parity.vision") { check_family("vision"); }
TEST_CASE("parity.embedding") { check_family("embedding"); }
TEST_CASE("parity.cat") { check_family("cat"); }

// Reruns every family (cheap: the fixtures are small) so that the numbers are complete even when
// CTest runs this case on its own; the per-family cases above carry the CHECKs.
TEST_CASE("parity.summary") {
  Stats stats;
  for (const char* family : kFamilies) {
    try {
      run_family(family, stats);
    } catch (const std::exception& e) {
      MESSAGE("parity.summary: family ", family, " could not run: ", e.what());
    }
  }
  MESSAGE(summary(stats));
}

// The fixtures and the op table name the same ops: every built-in op has a PyTorch case (under its
// table name, or the scalar form "<op>_scalar"), except the ones listed here with the reason.
TEST_CASE("parity.every_op_in_the_op_table_has_a_pytorch_case") {
  const std::map<std::string, std::string> no_case = {
      {"dropout", "its mask comes from halfgrad's Philox stream, not PyTorch's generator"}};
  std::set<std::string> fixture_ops;
  for (const char* family : kFamilies) {
    const hg::SafetensorsContents file =
        hg::load_with_metadata(std::string(HG_TEST_DIR) + "/golden/" + family + ".safetensors");
    for (const auto& [name, text] : file.metadata)
      if (!name.starts_with("_"))
        fixture_ops.insert(arg(hg::json::parse(text, "parity metadata"), "op", Args::Kind::String).text);
  }
  for (const hg::amp::OpInfo& row : hg::amp::kOpTable) {
    const std::string op(row.name);
    CAPTURE(op);
    const bool has_case = fixture_ops.count(op) + fixture_ops.count(op + "_scalar") > 0;
    CHECK_MESSAGE(has_case != (no_case.count(op) == 1), "tests/golden/make_golden.py and the op table disagree");
  }
  // And every fixture op is a halfgrad call the parity table knows (checked when it runs, too).
  for (const std::string& op : fixture_ops) CHECK_MESSAGE(op_table().count(op) == 1, op);
}
