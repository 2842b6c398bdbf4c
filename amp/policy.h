// The autocast cast policy: a table from op name to what autocast does with the op's floating
// inputs. It is data, printable and extendable:
//
//   hg::amp::set_policy("mish", hg::amp::CastPolicy::F32);   // a custom op joins the table
//   std::cout << hg::amp::policy_table();
//
// Defaults follow PyTorch's CUDA autocast lists (../docs/amp.md has the table with reasons).
#pragma once
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace hg::amp {

enum class CastPolicy {
  Lower,    // cast floating inputs to the autocast dtype (f16/bf16): GEMM-like ops
  F32,      // cast floating inputs to f32: ops whose range or accuracy 16 bits cannot hold
  Promote,  // cast floating inputs to the widest floating input dtype
  Keep,     // run in whatever dtype the inputs have
};

std::string_view policy_name(CastPolicy policy);

// The policy of `op`; an hg::Error for an op the table does not know.
CastPolicy policy(std::string_view op);
std::optional<CastPolicy> find_policy(std::string_view op);
// Adds `op` or changes its policy (for all threads).
void set_policy(std::string_view op, CastPolicy policy);

struct PolicyEntry {
  std::string op;
  CastPolicy policy;
  std::string note;  // why, in a few words
};
std::vector<PolicyEntry> policy_entries();  // sorted by policy, then name
std::string policy_table();                  // the entries as an aligned text table

}  // namespace hg::amp
