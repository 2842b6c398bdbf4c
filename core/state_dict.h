// Reading a state dict back (a checkpoint: model, optimizer, GradScaler, loader positions). A
// checkpoint is a file, and a file may be corrupt or hostile, so every value is read through
// these checks: the key must be there, hold one element of the expected kind, and (for counters)
// lie in a range where the code that uses it cannot overflow. Each caller then applies the same
// rules its constructor applies to the same option.
//
//   const int64_t step = state_dict::read_int(state, "step", "SGD.load_state_dict", 0, kMaxSteps);
#pragma once
#include <map>
#include <string>
#include <string_view>

#include "core/tensor.h"

namespace hg::state_dict {

using StateDict = std::map<std::string, Tensor>;

// The tensor under `key`; an hg::Error starting with `what` when it is missing.
const Tensor& entry(const StateDict& state, const std::string& key, std::string_view what);
// One element of an integer dtype, in [min, max].
int64_t read_int(const StateDict& state, const std::string& key, std::string_view what, int64_t min, int64_t max);
// One element of a floating dtype (the caller validates the value like its constructor does).
double read_double(const StateDict& state, const std::string& key, std::string_view what);

// Several state dicts in one file (a training checkpoint): each under its own prefix,
//   add_prefixed(all, "optimizer.", opt.state_dict());  opt.load_state_dict(entries_under(all, "optimizer."));
void add_prefixed(StateDict& into, const std::string& prefix, const StateDict& from);
StateDict entries_under(const StateDict& all, const std::string& prefix);

// A short text (an optimizer's kind) stored as a u8 tensor of its bytes, and read back.
Tensor from_text(std::string_view text);
std::string read_text(const StateDict& state, const std::string& key, std::string_view what);

}  // namespace hg::state_dict
