// The per-op test database (PyTorch's OpInfo idea): one OpEntry per op, holding the halfgrad call,
// the inputs and arguments the checks use, a naive f64 reference, the f32 tolerance, and more
// samples of the op (other shapes, broadcasts, argument values). tests/test_op_db.cpp runs every
// check on every sample of every entry:
//   * op_db.every_op_table_row_has_an_entry  each amp::kOpTable row has an entry, and back;
//   * op_db.gradcheck_f64                    backward against central finite differences (T64),
//                                            on the samples small enough for it;
//   * op_db.matches_the_naive_reference      the forward against `reference`, in f64 and in f32;
//   * op_db.strided_inputs_match_contiguous  step-2 offset, transposed and channels-last inputs, in
//                                            every combination, give the same output and
//                                            gradients (f64);
//   * op_db.a_second_call_agrees_and_leaves_its_inputs_alone
//   * op_db.f16_and_bf16_match_f32           the 16-bit output and gradients within one rounding
//                                            of f32's (docs/testing.md scenario 3);
//   * op_db.autocast_output_dtype            under f16/bf16 autocast the output has the dtype the
//                                            op-table row (cast policy, output rule) says;
//   * op_db.precision_report_row_is_the_op_table_row, op_db.shadow_check_sees_every_op_under_its_table_name
//                                            the PrecisionReport and ShadowCheck rows carry the row's
//                                            name, policy and dtypes;
//   * op_db.cpu_matches_cuda                 the forward on the GPU against the CPU (skips without one).
// tests/test_parity.cpp runs the same `call` on the PyTorch golden fixtures, keyed by `name`.
//
// To add an op: add its op-table row (amp/op_table.h) and one entry here (tests/op_db.cpp), plus
// its PyTorch case in tests/golden/make_golden.py. To test an op on another shape or argument,
// add a sample to its entry's more_samples.
#pragma once
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "amp/op_table.h"
#include "core/json.h"
#include "ops_test_helpers.h"

namespace hg_test {

using Inputs = std::vector<hg::Tensor>;
using Args = hg::json::Value;

// ---- reading an op's arguments (a JSON object: a fixture's "args", or a sample's) --------------

const Args& arg(const Args& args, std::string_view key, Args::Kind kind);
double number(const Args& args, std::string_view key);
int64_t integer(const Args& args, std::string_view key);
int64_t integer(const Args& args, std::string_view key, int64_t absent);  // `absent` when the key is missing
bool flag(const Args& args, std::string_view key);
hg::Shape integers(const Args& args, std::string_view key);

// ---- the entries -----------------------------------------------------------------------------------

// What values the harness fills an input with.
enum class Values {
  Normal,      // N(mean, stddev^2)
  Positive,    // uniform in [low, high): log, sqrt, fractional powers, denominators, variances
  ClassIndex,  // integers in [0, classes): targets, embedding indices (never differentiated)
};

struct InputSpec {
  hg::Shape shape;
  Values values = Values::Normal;
  int64_t classes = 0;              // ClassIndex only
  double mean = 0, stddev = 1;      // Normal only
  double low = 0.5, high = 1.5;     // Positive only
  std::vector<double> given = {};   // these values instead of random ones: ties, a repeated or an ignored index
  hg::DType index_dtype = hg::i64;  // ClassIndex only
  bool differentiable = true;       // false: a floating input the op does not differentiate here
                                    // (argmax's, batch_norm's running statistics, a constant operand)
  bool broadcast = false;           // the op broadcasts it against a larger operand: its 16-bit
                                    // gradient adds up rounded copies, more than one rounding
};

// One more way to run the op (PyTorch's sample inputs): another shape, a broadcast, another
// argument. Every check runs on it as on the entry's own inputs and args. A blank field is the entry's.
struct SampleSpec {
  std::vector<InputSpec> inputs = {};
  std::string args = "";                        // all the op's arguments, a JSON object ("{}": none)
  std::optional<Tolerance> f32_tolerance = {};  // GEMMs: their tolerance grows with the inner dimension
};

using OpCall = std::function<hg::Tensor(const Inputs&, const Args&)>;
// The expected output from the inputs (as f64 arrays; indices as their values) and the args.
using Reference = std::function<ref::Array(const std::vector<ref::Array>&, const Args&)>;

struct OpEntry {
  hg::amp::Op op;             // its op-table row
  std::string name;           // the fixture op name ("add_scalar" is a second entry of Op::Add)
  OpCall call;                // THE halfgrad call: golden parity and every check here use it
  std::string default_args;   // JSON object: the args of the entry's own sample
  std::vector<InputSpec> inputs;  // the entry's own sample
  Reference reference;        // independent of halfgrad's kernels; empty only with a reason:
  std::string no_reference_because = {};
  Tolerance f32_tolerance;    // f32 forward vs the reference (and CPU vs CUDA)
  std::string golden_family;  // tests/golden/<family>.safetensors holds its PyTorch cases; "" if none
  std::vector<SampleSpec> more_samples = {};
  // op_db.f16_and_bf16_match_f32 checks the 16-bit gradients as well as the output, unless:
  std::string no_16_bit_backward_because = {};
  // Made of other ops (mse_loss = mean of squared differences): no autograd node of its own, so
  // ShadowCheck compares its parts, not the op.
  bool composed = false;
  // ... or only for some samples (cross_entropy: its fused kernel records a node, its composed
  // path for other reductions and layouts does not).
  std::function<bool(const std::vector<InputSpec>& inputs, const Args& args)> composed_for = {};
  // op_db.f16_and_bf16_match_f32 skips the entry (its reason): a module of several ops rounds to
  // 16 bits after each, more than the one rounding the check allows; its ops are checked there.
  std::string no_16_bit_check_because = {};
};

// What a check runs on: a sample of an entry with its blanks filled in.
struct Sample {
  std::vector<InputSpec> inputs;
  Args args;
  Tolerance f32_tolerance;
  std::vector<int> grads;  // the inputs to differentiate: the floating, differentiable ones
  uint64_t seed;           // where its random values start: one per sample, so they differ
  bool entrys_own;         // the entry's inputs and default_args (every entry's first sample)
  std::string text;        // its input shapes and args, to name it in a failure
};

const std::vector<OpEntry>& op_db();

// The entry's own sample first, then its more_samples.
std::vector<Sample> samples(const OpEntry& entry);

}  // namespace hg_test
