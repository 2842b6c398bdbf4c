// The autocast cast policy at run time: the op table's defaults (amp/op_table.h), the
// overrides set_policy made to them, and the custom ops that joined by name. It is data,
// printable and extendable:
//
//   hg::amp::set_policy("mish", hg::amp::CastPolicy::F32);    // a custom op joins the table
//   hg::amp::set_policy("linear", hg::amp::CastPolicy::F32);  // overrides a built-in row
//   std::cout << hg::amp::policy_table();
//
// Defaults follow PyTorch's CUDA autocast lists (../docs/amp.md has the table with reasons).
#pragma once
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "amp/cast_policy.h"

namespace hg::amp {

enum class Op : uint8_t;  // the built-in ops: amp/op.h, their rows amp/op_table.h

// The policy of a built-in op now (its table row unless set_policy overrode it).
CastPolicy policy(Op op);
// The policy of the op called `op`, built-in or custom; an hg::Error for a name nobody set.
CastPolicy policy(std::string_view op);
std::optional<CastPolicy> find_policy(std::string_view op);
// Overrides a built-in op's policy, or adds or changes a custom op's (for all threads).
void set_policy(std::string_view op, CastPolicy policy);

struct PolicyEntry {
  std::string op;
  CastPolicy policy;
  std::string note;  // why, in a few words
};
// Sorted by policy; within one, the built-in ops in table order, then the custom ops by name.
std::vector<PolicyEntry> policy_entries();
std::string policy_table();  // the entries as an aligned text table

}  // namespace hg::amp
