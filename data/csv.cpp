// read_csv (see csv.h).
#include "data/csv.h"

#include <charconv>
#include <cmath>
#include <string_view>
#include <vector>

#include "core/file.h"

namespace hg::data {

namespace {

constexpr uint64_t kMaxCsvBytes = uint64_t(1) << 32;  // 4 GiB: far beyond a table of numbers held in memory

std::vector<std::string_view> split_fields(std::string_view line, char delimiter) {
  std::vector<std::string_view> fields;
  size_t start = 0;
  while (true) {
    const size_t end = line.find(delimiter, start);
    fields.push_back(line.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start));
    if (end == std::string_view::npos) return fields;
    start = end + 1;
  }
}

std::string_view trimmed(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

}  // namespace

TensorDataset read_csv(const std::string& path, CsvOptions options) {
  const std::string what = "read_csv(\"" + path + "\")";
  HG_CHECK(options.target_dtype == i64 || options.target_dtype == f32 || options.target_dtype == f64, what,
           ": target_dtype must be i64 (classes), f32 or f64, got ", options.target_dtype);
  const File file = File::open_regular(path, what);
  const uint64_t size = file.size();
  HG_CHECK(size <= kMaxCsvBytes, what, ": ", size, " bytes is more than read_csv holds (", kMaxCsvBytes, ")");
  std::string text(size, '\0');
  if (size > 0) file.read_exact(text.data(), size, 0);

  std::vector<float> x;
  std::vector<double> y;
  int64_t columns = -1, target = 0, rows = 0, number = 0;
  bool header_pending = options.header;
  for (size_t start = 0; start < text.size();) {
    const size_t end = std::min(text.find('\n', start), text.size());
    const std::string_view line = trimmed(std::string_view(text).substr(start, end - start));
    start = end + 1;
    ++number;
    if (line.empty()) continue;
    const std::vector<std::string_view> fields = split_fields(line, options.delimiter);
    if (columns < 0) {
      columns = int64_t(fields.size());
      HG_CHECK(columns >= 2, what, ": line ", number, " has ", columns, " column(s); a dataset needs at least one input "
               "column and the target (delimiter '", options.delimiter, "')");
      target = options.target_column < 0 ? columns + options.target_column : options.target_column;
      HG_CHECK(target >= 0 && target < columns, what, ": target_column ", options.target_column, " is outside the ",
               columns, " columns");
    }
    if (header_pending) {
      header_pending = false;
      continue;
    }
    HG_CHECK(int64_t(fields.size()) == columns, what, ": line ", number, " has ", fields.size(), " fields, the first "
             "row has ", columns);
    for (int64_t c = 0; c < columns; ++c) {
      const std::string_view field = trimmed(fields[size_t(c)]);
      double value = 0;
      const auto [ptr, error] = std::from_chars(field.data(), field.data() + field.size(), value);
      HG_CHECK(!field.empty() && error == std::errc() && ptr == field.data() + field.size() && std::isfinite(value),
               what, ": line ", number, ", column ", c, ": ", field.empty() ? std::string("an empty field") : quoted(field),
               " is not a finite number");
      if (c != target) {
        x.push_back(float(value));
      } else {
        HG_CHECK(options.target_dtype != i64 || (value == std::floor(value) && std::fabs(value) < 9.0e15), what,
                 ": line ", number, ", column ", c, ": the target ", value, " is not a whole number (a class index); "
                 "use .target_dtype = hg::f32 for a regression target");
        y.push_back(value);
      }
    }
    ++rows;
  }
  HG_CHECK(rows > 0, what, ": no rows of data", options.header ? " after the header" : "");
  Tensor xs = from_vector(x, {rows, columns - 1});
  Tensor ys = options.target_dtype == i64 ? from_vector(std::vector<int64_t>(y.begin(), y.end()), {rows})
                                          : from_vector(y, {rows}, {.dtype = options.target_dtype});
  return TensorDataset(xs, ys);
}

}  // namespace hg::data
