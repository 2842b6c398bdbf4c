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
#include <vector>
#include <initializer_list>

#include "core/tensor.h"

namespace hg::state_dict {

using StateDict = std::map<std::string, Tensor>;

// The tensor under `key`; an hg::Error starting with `what` when it is missing.
const Tensor& entry(const StateDict& state, const std::string& key, std::string_view what);
// The state dict holds exactly these keys: a missing one, or one this reader would not use (a
// typo, a flipped bit, state of another kind of object), is an hg::Error naming them all. A
// checkpoint resumes bitwise only if every value it holds is used and every value needed is there.
void require_exact_keys(const StateDict& state, std::initializer_list<std::string_view> keys, std::string_view what);
// The same check for keys computed at run time (unexpected: those in `state` but not in `keys`).
void require_exact_keys(const StateDict& state, const std::vector<std::string>& keys, std::string_view what);
// One element of an integer dtype, in [min, max].
int64_t read_int(const StateDict& state, const std::string& key, std::string_view what, int64_t min, int64_t max);
// One element of a floating dtype (the caller validates the value like its constructor does).
double read_double(const StateDict& state, const std::string& key, std::string_view what);

// Several state dicts in one file (a training checkpoint): each under its own prefix,
//   add_prefixed(all, "optimizer.", opt.state_dict());  opt.load_state_dict(entries_under(all, "optimizer."));
void add_prefixed(StateDict& into, const std::string& prefix, const StateDict& from);
StateDict entries_under(const StateDict& all, const std::string& prefix);

// How many elements of a floating tensor are inf or NaN (0 for integer tensors). Loaders refuse
// state that holds them: a run resumed from a diverged checkpoint would train NaN in silence.
int64_t nonfinite_count(const Tensor& t);

// A short text (an optimizer's kind) stored as a u8 tensor of its bytes, and read back.
Tensor from_text(std::string_view text);
std::string read_text(const StateDict& state, const std::string& key, std::string_view what);

}  // namespace hg::state_dict
