// Checked reads from a state dict (see state_dict.h).
#include "core/state_dict.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/copy.h"
#include "core/visit.h"

namespace hg::state_dict {

const Tensor& entry(const StateDict& state, const std::string& key, std::string_view what) {
  const auto it = state.find(key);
  HG_CHECK(it != state.end() && it->second.defined(), what, ": missing key \"", key, "\"");
  return it->second;
}

void require_exact_keys(const StateDict& state, const std::vector<std::string>& keys, std::string_view what) {
  std::string missing, unexpected;
  for (const std::string& key : keys)
    if (!state.count(key)) missing += (missing.empty() ? "" : ", ") + quoted(key);
  for (const auto& [key, _] : state)
    if (std::find(keys.begin(), keys.end(), key) == keys.end())
      unexpected += (unexpected.empty() ? "" : ", ") + quoted(key);
  HG_CHECK(missing.empty() && unexpected.empty(), what, ":", missing.empty() ? "" : " missing key(s) ", missing,
           !missing.empty() && !unexpected.empty() ? ";" : "", unexpected.empty() ? "" : " unexpected key(s) ",
           unexpected, unexpected.empty() ? "" : " (state this object would not use)");
}

void require_exact_keys(const StateDict& state, std::initializer_list<std::string_view> keys, std::string_view what) {
  std::vector<std::string> names;
  for (std::string_view key : keys) names.emplace_back(key);
  require_exact_keys(state, names, what);
}

namespace {
const Tensor& scalar_entry(const StateDict& state, const std::string& key, std::string_view what, bool floating) {
  const Tensor& t = entry(state, key, what);
  HG_CHECK(t.numel() == 1 && is_floating(t.dtype()) == floating, what, ": \"", key, "\" must hold one ",
           floating ? "floating-point" : "integer", " value, got shape ", t.shape(), " ", t.dtype());
  return t;
}
}  // namespace

int64_t read_int(const StateDict& state, const std::string& key, std::string_view what, int64_t min, int64_t max) {
  const int64_t v = scalar_entry(state, key, what, false).item<int64_t>();
  HG_CHECK(v >= min && v <= max, what, ": \"", key, "\" is ", v, ", outside [", min, ", ", max, "]");
  return v;
}

double read_double(const StateDict& state, const std::string& key, std::string_view what) {
  return scalar_entry(state, key, what, true).item<double>();
}

void add_prefixed(StateDict& into, const std::string& prefix, const StateDict& from) {
  for (const auto& [key, t] : from) into[prefix + key] = t;
}

StateDict entries_under(const StateDict& all, const std::string& prefix) {
  StateDict out;
  for (auto it = all.lower_bound(prefix); it != all.end() && it->first.starts_with(prefix); ++it)
    out[it->first.substr(prefix.size())] = it->second;
  return out;
}

int64_t nonfinite_count(const Tensor& t) {
  if (!t.defined() || !is_floating(t.dtype()) || t.numel() == 0) return 0;
  Tensor dense = detail::dense(t);
  if (!dense.device().is_cpu()) {  // copy_into crosses devices (Tensor::to is autograd's, a layer up)
    const Tensor host = empty(dense.shape(), {.dtype = dense.dtype()});
    detail::copy_into(host, dense);
    dense = host;
  }
  return visit_floating(dense.dtype(), "nonfinite_count", [&]<class T> {
    const T* p = dense.data_ptr<T>();
    int64_t count = 0;
    for (int64_t i = 0; i < dense.numel(); ++i) count += !std::isfinite(double(Acc<T>(p[i])));
    return count;
  });
}

Tensor from_text(std::string_view text) {
  Tensor t = empty({int64_t(text.size())}, {.dtype = u8});
  if (!text.empty()) std::memcpy(t.raw_data(), text.data(), text.size());
  return t;
}

std::string read_text(const StateDict& state, const std::string& key, std::string_view what) {
  const Tensor& t = entry(state, key, what);
  HG_CHECK(t.dtype() == u8 && t.dim() == 1 && t.numel() <= 256, what, ": \"", key,
           "\" must be a short text (a 1-D u8 tensor), got shape ", t.shape(), " ", t.dtype());
  const std::vector<uint8_t> bytes = t.to_vector<uint8_t>();
  return std::string(bytes.begin(), bytes.end());
}

}  // namespace hg::state_dict
