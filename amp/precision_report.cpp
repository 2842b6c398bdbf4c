// PrecisionReport: recording, the text table and the CSV.
#include "amp/precision_report.h"

#include <fstream>
#include <iomanip>
#include <ostream>
#include <sstream>

#include "core/error.h"

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
PrecisionReport::~PrecisionReport() { t_report = previous_; }

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
        << std::setw(13) << "cast bytes" << std::setw(12) << "cache hits" << '\n';
  int64_t casts = 0, bytes = 0, hits = 0;
  for (const Row& r : rows_) {
    table << std::left << std::setw(14) << r.op << std::setw(9) << r.policy << std::setw(20) << dtype_list(r.inputs, ",")
          << std::setw(9) << dtype_name(r.compute) << std::setw(8) << dtype_name(r.output) << std::right << std::setw(7)
          << r.calls << std::setw(7) << r.casts << std::setw(13) << r.cast_bytes << std::setw(12) << r.cache_hits << '\n';
    casts += r.casts, bytes += r.cast_bytes, hits += r.cache_hits;
  }
  table << rows_.size() << " distinct op rows; " << casts << " casts allocating " << bytes << " bytes; " << hits
        << " casts saved by the weight-cast cache\n";
  os << table.str();
}

void PrecisionReport::write_csv(const std::string& path) const {
  std::ofstream out(path);
  HG_CHECK(out.good(), "PrecisionReport::write_csv: cannot write \"", path, "\"");
  out << "op,policy,inputs,compute,output,calls,casts,cast_bytes,cache_hits\n";
  for (const Row& r : rows_)
    out << r.op << ',' << r.policy << ',' << dtype_list(r.inputs, " ") << ',' << dtype_name(r.compute) << ','
        << dtype_name(r.output) << ',' << r.calls << ',' << r.casts << ',' << r.cast_bytes << ',' << r.cache_hits << '\n';
  HG_CHECK(out.good(), "PrecisionReport::write_csv: write to \"", path, "\" failed");
}

}  // namespace hg::amp
