// The per-op test database (PyTorch's OpInfo idea): one OpEntry per op, holding the halfgrad call,
// the inputs and arguments the checks use, a naive f64 reference, the inputs to differentiate and
// the f32 tolerance. tests/test_op_db.cpp runs every check on every entry:
//   * op_db.every_op_table_row_has_an_entry  each amp::kOpTable row has an entry, and back;
//   * op_db.gradcheck_f64                    backward against central finite differences (T64);
//   * op_db.matches_the_naive_reference      the forward against `reference`, in f64 and in f32;
//   * op_db.strided_inputs_match_contiguous  step-2, offset views of the inputs give the same
//                                            output and gradients (f64);
//   * op_db.autocast_output_dtype            under f16/bf16 autocast the output has the dtype the
//                                            op-table row (cast policy, output rule) says;
//   * op_db.precision_report_row_is_the_op_table_row, op_db.shadow_check_sees_every_op_under_its_table_name
//                                            the PrecisionReport and ShadowCheck rows carry the row's
//                                            name, policy and dtypes;
//   * op_db.cpu_matches_cuda                 the forward on the GPU against the CPU (skips without one).
// tests/test_parity.cpp runs the same `call` on the PyTorch golden fixtures, keyed by `name`.
//
// To add an op: add its op-table row (amp/op_table.h) and one entry here (tests/op_db.cpp), plus
// its PyTorch case in tests/golden/make_golden.py.
#pragma once
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "amp/op_table.h"
#include "core/json.h"
#include "ops_test_helpers.h"

namespace hg_test {

using Inputs = std::vector<hg::Tensor>;
using Args = hg::json::Value;

// ---- reading an op's arguments (a JSON object: a fixture's "args", or an entry's default_args) ---

const Args& arg(const Args& args, std::string_view key, Args::Kind kind);
double number(const Args& args, std::string_view key);
int64_t integer(const Args& args, std::string_view key);
bool flag(const Args& args, std::string_view key);
hg::Shape integers(const Args& args, std::string_view key);

// ---- the entries -----------------------------------------------------------------------------------

// What values the harness fills an input with.
enum class Values {
  Normal,      // N(0, 1)
  Positive,    // uniform in [0.5, 1.5): log, sqrt, fractional powers, denominators, variances
  ClassIndex,  // i64 in [0, classes): targets, embedding indices (never differentiated)
};

struct InputSpec {
  hg::Shape shape;
  Values values = Values::Normal;
  int64_t classes = 0;  // ClassIndex only
};

using OpCall = std::function<hg::Tensor(const Inputs&, const Args&)>;
// The expected output from the inputs (as f64 arrays; indices as their values) and the args.
using Reference = std::function<ref::Array(const std::vector<ref::Array>&, const Args&)>;

struct OpEntry {
  hg::amp::Op op;             // its op-table row
  std::string name;           // the fixture op name ("add_scalar" is a second entry of Op::Add)
  OpCall call;                // THE halfgrad call: golden parity and every check here use it
  std::string default_args;   // JSON object, the args of the checks here
  std::vector<InputSpec> inputs;
  Reference reference;        // independent of halfgrad's kernels; empty only with a reason:
  std::string no_reference_because = {};
  std::vector<int> grads;     // the inputs gradcheck differentiates (never an integer one)
  Tolerance f32_tolerance;    // f32 forward vs the reference (and CPU vs CUDA)
  std::string golden_family;  // tests/golden/<family>.safetensors holds its PyTorch cases; "" if none

  Args args() const { return hg::json::parse(default_args, name); }
};

const std::vector<OpEntry>& op_db();

}  // namespace hg_test
