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
// (PyTorch has no such tool: pytorch#130847 asks where autocast's decisions can be seen.)
#pragma once
#include <iosfwd>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace hg::amp {

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
  };

  PrecisionReport();   // starts recording on this thread
  ~PrecisionReport();  // stops (an enclosing report, if any, resumes)
  PrecisionReport(const PrecisionReport&) = delete;
  PrecisionReport& operator=(const PrecisionReport&) = delete;

  const std::vector<Row>& rows() const { return rows_; }
  void print(std::ostream& os) const;
  void write_csv(const std::string& path) const;

  // Called by amp::prepare (amp/autocast.cpp).
  void record(Row row);

 private:
  std::vector<Row> rows_;
  PrecisionReport* previous_;
};

namespace detail {
PrecisionReport* current_report();
}

}  // namespace hg::amp
