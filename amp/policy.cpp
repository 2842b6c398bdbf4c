// The run-time policy: one atomic per op-table row (read by every prepare without a lock) and a
// map for the custom ops that joined by name.
#include "amp/policy.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <map>
#include <mutex>
#include <sstream>

#include "amp/op_table.h"
#include "core/error.h"

namespace hg::amp {

namespace {

struct PolicyState {
  std::array<std::atomic<CastPolicy>, kNumOps> builtin;  // starts as the table's defaults
  std::mutex mutex;                                       // guards custom
  std::map<std::string, CastPolicy, std::less<>> custom;
  PolicyState() {
    for (const OpInfo& row : kOpTable) builtin[size_t(row.op)].store(row.policy);
  }
};

PolicyState& state() {
  static PolicyState instance;
  return instance;
}

constexpr std::string_view kSetNote = "set by set_policy";

}  // namespace

std::string_view op_name(Op op) { return op_info(op).name; }

CastPolicy policy(Op op) { return state().builtin[size_t(op)].load(std::memory_order_relaxed); }

std::optional<CastPolicy> find_policy(std::string_view op) {
  if (const std::optional<Op> builtin = find_op(op)) return policy(*builtin);
  PolicyState& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  auto it = s.custom.find(op);
  if (it == s.custom.end()) return std::nullopt;
  return it->second;
}

CastPolicy policy(std::string_view op) {
  const std::optional<CastPolicy> p = find_policy(op);
  HG_CHECK(p.has_value(), "amp::policy: no cast policy for op '", op,
           "'; add one with hg::amp::set_policy(\"", op, "\", CastPolicy::Lower | F32 | Promote | Keep)");
  return *p;
}

void set_policy(std::string_view op, CastPolicy policy) {
  HG_CHECK(!op.empty(), "amp::set_policy: empty op name");
  PolicyState& s = state();
  if (const std::optional<Op> builtin = find_op(op)) {
    HG_CHECK(op_info(*builtin).autocasts, "amp::set_policy: '", op, "' is a view or copy: it never goes through "
             "autocast (there is nothing to cast), so it has no policy to set");
    s.builtin[size_t(*builtin)].store(policy);
    return;
  }
  std::lock_guard<std::mutex> lock(s.mutex);
  s.custom.insert_or_assign(std::string(op), policy);
}

std::vector<PolicyEntry> policy_entries() {
  std::vector<PolicyEntry> entries;
  for (const OpInfo& row : kOpTable) {
    if (!row.autocasts) continue;  // views and copies: no policy
    const CastPolicy now = policy(row.op);
    entries.push_back({std::string(row.name), now, std::string(now == row.policy ? row.why : kSetNote)});
  }
  {
    PolicyState& s = state();
    std::lock_guard<std::mutex> lock(s.mutex);
    for (const auto& [op, p] : s.custom) entries.push_back({op, p, std::string(kSetNote)});
  }
  std::stable_sort(entries.begin(), entries.end(),
                   [](const PolicyEntry& a, const PolicyEntry& b) { return a.policy < b.policy; });
  return entries;
}

std::string policy_table() {
  std::ostringstream os;
  size_t width = 2;
  const std::vector<PolicyEntry> entries = policy_entries();
  for (const PolicyEntry& e : entries) width = std::max(width, e.op.size());
  os << "op" << std::string(width - 2 + 2, ' ') << "policy   why\n";
  for (const PolicyEntry& e : entries) {
    const std::string_view name = policy_name(e.policy);
    os << e.op << std::string(width - e.op.size() + 2, ' ') << name << std::string(9 - name.size(), ' ') << e.note
       << '\n';
  }
  return os.str();
}

}  // namespace hg::amp
