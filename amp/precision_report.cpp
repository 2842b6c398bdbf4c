// PrecisionReport: recording, the text table and the CSV.
#include "amp/precision_report.h"

#include <algorithm>
#include <iomanip>
#include <ostream>
#include <sstream>
#include <utility>

#include "core/error.h"
#include "core/file.h"

namespace hg::amp {

namespace {
thread_local PrecisionReport* t_report = nullptr;

std::string dtype_list(const std::vector<DType>& dtypes, const char* separator) {
  std::string s;
  for (size_t i = 0; i < dtypes.size(); ++i) {
    if (i) s += separator;
    s += dtype_name(dtypes[i]);
  }
  return s.empty() ? "-" : s;
}
}  // namespace

namespace detail {
PrecisionReport* current_report() { return t_report; }
}  // namespace detail

PrecisionReport::PrecisionReport() : previous_(t_report) { t_report = this; }
PrecisionReport::PrecisionReport(NotRecording) : previous_(nullptr), recording_(false) {}
PrecisionReport::~PrecisionReport() {
  if (recording_) t_report = previous_;
}

namespace detail {
PauseReports::PauseReports() : paused_(std::exchange(t_report, nullptr)) {}
PauseReports::~PauseReports() { t_report = paused_; }
}  // namespace detail

void ShadowError::merge(const ShadowError& other) {
  elements += other.elements;
  max_error = std::max(max_error, other.max_error);
  sum_error += other.sum_error;
  overflows += other.overflows;
  flushed_to_zero += other.flushed_to_zero;
  unmeasured += other.unmeasured;
}

void PrecisionReport::add_shadow(const std::string& op, const std::vector<DType>& inputs, DType compute,
                                 const ShadowError& error) {
  for (Row& r : rows_) {
    if (r.op == op && r.inputs == inputs && r.compute == compute) {
      r.has_shadow = true;
      r.shadow.merge(error);
      return;
    }
  }
  HG_FAIL("PrecisionReport::add_shadow: no row for op '", op, "' computing in ", compute);
}

bool PrecisionReport::has_shadow() const {
  return std::any_of(rows_.begin(), rows_.end(), [](const Row& r) { return r.has_shadow; });
}

void PrecisionReport::record(Row row) {
  for (Row& r : rows_) {
    if (r.op == row.op && r.policy == row.policy && r.inputs == row.inputs && r.compute == row.compute &&
        r.output == row.output) {
      r.calls += row.calls;
      r.casts += row.casts;
      r.cast_bytes += row.cast_bytes;
      r.cache_hits += row.cache_hits;
      return;
    }
  }
  rows_.push_back(std::move(row));
}

void PrecisionReport::print(std::ostream& os) const {
  std::ostringstream table;
  table << std::left << std::setw(14) << "op" << std::setw(9) << "policy" << std::setw(20) << "inputs" << std::setw(9)
        << "compute" << std::setw(8) << "output" << std::right << std::setw(7) << "calls" << std::setw(7) << "casts"
        << std::setw(13) << "cast bytes" << std::setw(12) << "cache hits";
  const bool shadow = has_shadow();
  if (shadow) table << std::setw(11) << "max err" << std::setw(10) << "mean err" << std::setw(10) << "overflow"
                    << std::setw(9) << "flushed";
  table << '\n';
  int64_t casts = 0, bytes = 0, hits = 0;
  for (const Row& r : rows_) {
    table << std::left << std::setw(14) << r.op << std::setw(9) << r.policy << std::setw(20) << dtype_list(r.inputs, ",")
          << std::setw(9) << dtype_name(r.compute) << std::setw(8) << dtype_name(r.output) << std::right << std::setw(7)
          << r.calls << std::setw(7) << r.casts << std::setw(13) << r.cast_bytes << std::setw(12) << r.cache_hits;
    if (shadow && r.has_shadow && !r.shadow.measured())
      table << std::setw(11) << "n/a" << std::setw(10) << "n/a" << std::setw(10) << r.shadow.overflows << std::setw(9)
            << r.shadow.flushed_to_zero;
    else if (shadow && r.has_shadow)
      table << std::fixed << std::setprecision(3) << std::setw(11) << r.shadow.max_error << std::setw(10)
            << r.shadow.mean_error() << std::defaultfloat << std::setw(10) << r.shadow.overflows << std::setw(9)
            << r.shadow.flushed_to_zero;
    else if (shadow)
      table << std::setw(11) << "-" << std::setw(10) << "-" << std::setw(10) << "-" << std::setw(9) << "-";
    table << '\n';
    casts += r.casts, bytes += r.cast_bytes, hits += r.cache_hits;
  }
  table << rows_.size() << " distinct op rows; " << casts << " casts allocating " << bytes << " bytes; " << hits
        << " casts saved by the weight-cast cache\n";
  // An FP8 op's errors have their own table (ShadowCheck prints it below this one): say so.
  const bool fp8_rows = std::any_of(rows_.begin(), rows_.end(), [](const Row& r) { return is_float8(r.compute); });
  if (shadow)
    table << "shadow errors: |16-bit - f32 re-run| / max(|f32|, RMS of the f32 output), in epsilons of the autocast dtype ("
          << shadow_epsilon << "); \"-\": no output to compare (composite or non-differentiable op"
          << (fp8_rows ? "; an f8e4m3 row: its errors are in the FP8 ops table below" : "") << "); \"n/a\": every "
          << "f32 output was inf/NaN, nothing to measure against\n";
  os << table.str();
}

void PrecisionReport::write_csv(const std::string& path) const {
  std::ostringstream out;
  const bool shadow = has_shadow();
  out << "op,policy,inputs,compute,output,calls,casts,cast_bytes,cache_hits";
  if (shadow) out << ",shadow_elements,max_error_eps,mean_error_eps,overflows,flushed_to_zero,unmeasured";
  out << '\n';
  for (const Row& r : rows_) {
    out << r.op << ',' << r.policy << ',' << dtype_list(r.inputs, " ") << ',' << dtype_name(r.compute) << ','
        << dtype_name(r.output) << ',' << r.calls << ',' << r.casts << ',' << r.cast_bytes << ',' << r.cache_hits;
    // (max/mean error empty where nothing was measured)
    if (shadow && r.has_shadow && !r.shadow.measured())
      out << ',' << r.shadow.elements << ",,," << r.shadow.overflows << ',' << r.shadow.flushed_to_zero << ','
          << r.shadow.unmeasured;
    else if (shadow && r.has_shadow)
      out << ',' << r.shadow.elements << ',' << r.shadow.max_error << ',' << r.shadow.mean_error() << ','
          << r.shadow.overflows << ',' << r.shadow.flushed_to_zero << ',' << r.shadow.unmeasured;
    else if (shadow)
      out << ",0,,,,,";
    out << '\n';
  }
  write_text_file(path, out.str(), "PrecisionReport::write_csv(\"" + path + "\")");
}

}  // namespace hg::amp
