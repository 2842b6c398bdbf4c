// PrecisionReport: what autocast did, op by op. Inside its scope, every op that goes through the
// cast policy records: its name, the policy that fired, the input dtypes, the dtype it computed
// in, the output dtype, how many inputs were cast and the bytes those casts allocated, and how
// many casts the weight-cast cache saved. Identical rows are merged and counted.
//
//   hg::amp::PrecisionReport report;
//   { hg::amp::Autocast ac(hg::f16); loss = hg::cross_entropy(model(x), y); }
//   report.print(std::cout);
//   report.write_csv("precision.csv");
//
// amp::ShadowCheck (amp_tools/shadow_check.h) fills the report's shadow columns: per op row, how far the
// 16-bit outputs were from an f32 re-run of the same op.
//
// (PyTorch has no such tool: pytorch#130847 asks where autocast's decisions can be seen.)
#pragma once
#include <iosfwd>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace hg::amp {

// How far an op's outputs were from its f32 re-run (amp::ShadowCheck), over every call of a row.
// Errors are relative -- |low - f32| / max(|f32|, RMS of the f32 output), so that elements near 0
// are measured against the output's typical size -- and counted in units of the low dtype's
// epsilon (the spacing above 1: 2^-10 for f16, 2^-7 for bf16): 0.5 is one correct rounding.
struct ShadowError {
  int64_t elements = 0;         // output elements compared
  double max_error = 0;         // in epsilons
  double sum_error = 0;         // in epsilons, summed over elements (mean = sum / elements)
  int64_t overflows = 0;        // inf in the 16-bit output where the f32 output is finite
  int64_t flushed_to_zero = 0;  // 0 in the 16-bit output where the f32 output is not (underflow,
                                // or a fused ReLU whose input changed sign)
  int64_t unmeasured = 0;       // elements whose f32 output is inf/NaN: nothing to measure against
  // Whether any element was compared: a row whose f32 outputs were all inf/NaN has no error to
  // show (printed "n/a", not an error of 0).
  bool measured() const { return elements > 0; }
  double mean_error() const { return elements ? sum_error / double(elements) : 0.0; }
  void merge(const ShadowError& other);
};

class PrecisionReport {
 public:
  struct Row {
    std::string op;
    std::string policy;             // Lower / F32 / Promote / Keep, or "off" outside autocast
    std::vector<DType> inputs;      // dtypes of the floating inputs as they arrived
    DType compute = f32;            // the dtype the op ran in
    DType output = f32;
    int64_t calls = 0;
    int64_t casts = 0;              // inputs converted (cache hits excluded)
    int64_t cast_bytes = 0;         // bytes those conversions allocated
    int64_t cache_hits = 0;         // casts served by the weight-cast cache
    bool has_shadow = false;        // ShadowCheck compared this row's outputs
    ShadowError shadow;
  };

  PrecisionReport();   // starts recording on this thread
  // A report that does not record (amp::ShadowCheck keeps the rows of its runs in one).
  struct NotRecording {};
  explicit PrecisionReport(NotRecording);
  ~PrecisionReport();  // stops (an enclosing report, if any, resumes)
  PrecisionReport(const PrecisionReport&) = delete;
  PrecisionReport& operator=(const PrecisionReport&) = delete;

  const std::vector<Row>& rows() const { return rows_; }
  void print(std::ostream& os) const;
  void write_csv(const std::string& path) const;

  // Called by amp::prepare (amp/autocast.cpp).
  void record(Row row);
  // Called by amp::ShadowCheck: adds one call's comparison to the row of (op, inputs, compute).
  void add_shadow(const std::string& op, const std::vector<DType>& inputs, DType compute, const ShadowError& error);
  bool has_shadow() const;
  double shadow_epsilon = 0;  // the epsilon the shadow errors are counted in (set by ShadowCheck)

 private:
  std::vector<Row> rows_;
  PrecisionReport* previous_;
  bool recording_ = true;
};

namespace detail {
PrecisionReport* current_report();
// While alive, no report records on this thread (ShadowCheck's f32 re-run is not the user's).
class PauseReports {
 public:
  PauseReports();
  ~PauseReports();
  PauseReports(const PauseReports&) = delete;
  PauseReports& operator=(const PauseReports&) = delete;

 private:
  PrecisionReport* paused_;
};
}  // namespace detail

}  // namespace hg::amp
