// The default cast policy table and its lookup.
#include "amp/policy.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <sstream>

#include "core/error.h"

namespace hg::amp {

namespace {

struct Rule {
  CastPolicy policy;
  std::string note;
};

std::map<std::string, Rule, std::less<>> default_rules() {
  const std::string gemm = "GEMM: tensor cores / f32-accumulated 16-bit GEMM";
  const std::string range = "needs f32 range or accuracy";
  const std::string kept = "runs in the dtype it receives (PyTorch's default)";
  std::map<std::string, Rule, std::less<>> rules = {
      {"matmul", {CastPolicy::Lower, gemm}},
      {"linear", {CastPolicy::Lower, gemm}},
      {"conv2d", {CastPolicy::Lower, gemm}},
      {"linear_relu", {CastPolicy::Lower, gemm}},
      {"conv2d_relu", {CastPolicy::Lower, gemm}},
      {"exp", {CastPolicy::F32, range}},
      {"log", {CastPolicy::F32, range}},
      {"pow", {CastPolicy::F32, range}},
      {"sqrt", {CastPolicy::F32, range}},
      {"softmax", {CastPolicy::F32, "exp and a sum over a row"}},
      {"log_softmax", {CastPolicy::F32, "exp and a sum over a row"}},
      {"cross_entropy", {CastPolicy::F32, "loss: log-sum-exp and a mean"}},
      {"mse_loss", {CastPolicy::F32, "loss: squares and a mean"}},
      {"sum", {CastPolicy::F32, "long sums lose 16-bit precision"}},
      {"mean", {CastPolicy::F32, "long sums lose 16-bit precision"}},
      {"layer_norm", {CastPolicy::F32, "statistics over a row"}},
      {"cat", {CastPolicy::Promote, "several inputs: meet in the widest dtype"}},
      // NOTE: batch_norm keeps the activation dtype (so activations stay 16-bit), but its batch
      // statistics, running stats and affine math are always computed in f32 inside the kernel.
      {"batch_norm", {CastPolicy::Keep, "statistics computed in f32 inside; output keeps input dtype"}},
  };
  for (const char* op : {"add", "sub", "mul", "div", "neg", "abs", "clamp", "relu", "gelu", "silu", "sigmoid",
                         "tanh", "amax", "argmax", "max_pool2d", "avg_pool2d", "dropout", "embedding"})
    rules.emplace(op, Rule{CastPolicy::Keep, kept});
  return rules;
}

struct PolicyTable {
  std::mutex mutex;
  std::map<std::string, Rule, std::less<>> rules = default_rules();
};

PolicyTable& table() {
  static PolicyTable instance;
  return instance;
}

}  // namespace

std::string_view policy_name(CastPolicy policy) {
  switch (policy) {
    case CastPolicy::Lower: return "Lower";
    case CastPolicy::F32: return "F32";
    case CastPolicy::Promote: return "Promote";
    case CastPolicy::Keep: return "Keep";
  }
  return "?";
}

std::optional<CastPolicy> find_policy(std::string_view op) {
  PolicyTable& t = table();
  std::lock_guard<std::mutex> lock(t.mutex);
  auto it = t.rules.find(op);
  if (it == t.rules.end()) return std::nullopt;
  return it->second.policy;
}

CastPolicy policy(std::string_view op) {
  const std::optional<CastPolicy> p = find_policy(op);
  HG_CHECK(p.has_value(), "amp::policy: no cast policy for op '", op,
           "'; add one with hg::amp::set_policy(\"", op, "\", CastPolicy::Lower | F32 | Promote | Keep)");
  return *p;
}

void set_policy(std::string_view op, CastPolicy policy) {
  HG_CHECK(!op.empty(), "amp::set_policy: empty op name");
  PolicyTable& t = table();
  std::lock_guard<std::mutex> lock(t.mutex);
  auto it = t.rules.find(op);
  if (it == t.rules.end()) t.rules.emplace(std::string(op), Rule{policy, "set by set_policy"});
  else it->second = Rule{policy, "set by set_policy"};
}

std::vector<PolicyEntry> policy_entries() {
  std::vector<PolicyEntry> entries;
  {
    PolicyTable& t = table();
    std::lock_guard<std::mutex> lock(t.mutex);
    for (const auto& [op, rule] : t.rules) entries.push_back({op, rule.policy, rule.note});
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
