// operator<< for tensors, in PyTorch's style: values in nested brackets with one shared number
// format, large tensors summarised with "..." (the first and last 3 entries of each dimension
// once there are more than 1000 elements), then shape, dtype and device.
//
//   tensor([[ 0.1000, -2.0000],
//           [ 3.5000,  4.0000]], shape=[2, 2], dtype=f32, device=cpu)
#include <cmath>
#include <cstdio>
#include <ostream>
#include <string>

#include "core/tensor.h"

namespace hg {

namespace {

constexpr int64_t kSummariseAbove = 1000;
constexpr int64_t kEdgeItems = 3;

enum class Style { Integer, WholeFloat, Fixed, Scientific };

struct Format {
  Style style = Style::Fixed;
  size_t width = 1;
  std::string text(double v) const {
    char buffer[64];
    if (std::isnan(v)) return "nan";
    if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
    switch (style) {
      case Style::Integer: std::snprintf(buffer, sizeof buffer, "%lld", static_cast<long long>(v)); break;
      case Style::WholeFloat: std::snprintf(buffer, sizeof buffer, "%.0f.", v); break;
      case Style::Fixed: std::snprintf(buffer, sizeof buffer, "%.4f", v); break;
      case Style::Scientific: std::snprintf(buffer, sizeof buffer, "%.4e", v); break;
    }
    return buffer;
  }
};

// Picks the style from the values that will be shown, like PyTorch's _Formatter.
Format choose_format(const std::vector<double>& shown, bool floating) {
  Format f;
  if (!floating) {
    f.style = Style::Integer;
  } else {
    double max_abs = 0, min_abs = INFINITY;
    bool all_whole = true;
    for (double v : shown) {
      if (!std::isfinite(v)) continue;
      max_abs = std::max(max_abs, std::fabs(v));
      if (v != 0) min_abs = std::min(min_abs, std::fabs(v));
      all_whole = all_whole && v == std::trunc(v);
    }
    if (all_whole && max_abs < 1e8) f.style = Style::WholeFloat;
    else if (max_abs >= 1e8 || (std::isfinite(min_abs) && (min_abs < 1e-4 || max_abs / min_abs > 1e3)))
      f.style = Style::Scientific;
  }
  for (double v : shown) f.width = std::max(f.width, f.text(v).size());
  return f;
}

// Indices of dimension d that are shown.
std::vector<int64_t> shown_indices(int64_t size, bool summarise) {
  std::vector<int64_t> idx;
  for (int64_t i = 0; i < size; ++i) {
    if (summarise && size > 2 * kEdgeItems && i == kEdgeItems) {
      idx.push_back(-1);  // the "..." marker
      i = size - kEdgeItems - 1;
      continue;
    }
    idx.push_back(i);
  }
  return idx;
}

struct Printer {
  const Tensor& values;  // contiguous f64 copy on the CPU
  const double* data;
  bool summarise;
  Format format;

  void collect(int d, int64_t offset, std::vector<double>& out) const {
    if (d == values.dim()) return out.push_back(data[offset]);
    for (int64_t i : shown_indices(values.shape()[d], summarise))
      if (i >= 0) collect(d + 1, offset + i * values.strides()[d], out);
  }

  void print(std::ostream& os, int d, int64_t offset, size_t indent) const {
    if (d == values.dim()) {
      const std::string s = format.text(data[offset]);
      os << std::string(format.width - s.size(), ' ') << s;
      return;
    }
    os << '[';
    bool first = true;
    for (int64_t i : shown_indices(values.shape()[d], summarise)) {
      if (!first) {
        os << ',';
        if (d == values.dim() - 1) os << ' ';
        else os << std::string(size_t(values.dim() - d - 1), '\n') << std::string(indent + 1, ' ');
      }
      first = false;
      if (i < 0) os << "...";
      else print(os, d + 1, offset + i * values.strides()[d], indent + 1);
    }
    os << ']';
  }
};

}  // namespace

std::ostream& operator<<(std::ostream& os, const Tensor& t) {
  if (!t.defined()) return os << "tensor(undefined)";
  const Tensor values = detail::to_cpu_contiguous(t, f64);
  const bool summarise = t.numel() > kSummariseAbove;
  Printer printer{values, values.data_ptr<double>(), summarise, {}};
  std::vector<double> shown;
  printer.collect(0, 0, shown);
  printer.format = choose_format(shown, is_floating(t.dtype()));
  os << "tensor(";
  printer.print(os, 0, 0, 7);
  os << ", shape=" << t.shape() << ", dtype=" << t.dtype() << ", device=" << t.device();
  if (t.requires_grad()) os << ", requires_grad=true";
  return os << ')';
}

}  // namespace hg
