// hg::Checkpoint: the file layout, and loading all parts or none.
#include "core/checkpoint.h"

#include <algorithm>
#include <set>
#include <sstream>

#include "core/copy.h"
#include "core/rng.h"
#include "core/state_dict.h"

namespace hg {

namespace {

// The generator's seed and offset are u64 bit patterns, stored as i64 (every value is valid).
struct RngPart {
  Checkpoint::StateDict state_dict() const {
    const random::GeneratorState s = random::get_state();
    return {{"seed", from_vector(std::vector<int64_t>{int64_t(s.seed)}, {})},
            {"offset", from_vector(std::vector<int64_t>{int64_t(s.offset)}, {})}};
  }
  void load_state_dict(const Checkpoint::StateDict& state) {
    const std::string_view what = "rng";
    state_dict::require_exact_keys(state, {"seed", "offset"}, what);
    const int64_t seed = state_dict::read_int(state, "seed", what, INT64_MIN, INT64_MAX);
    const int64_t offset = state_dict::read_int(state, "offset", what, INT64_MIN, INT64_MAX);
    random::set_state({uint64_t(seed), uint64_t(offset)});
  }
};
RngPart g_rng_part;  // stateless: it reads and writes the global generator

const std::set<std::string> kReservedMetadata = {"format", "format_version", "parts"};

std::vector<std::string> split(const std::string& text, char separator) {
  std::vector<std::string> out;
  std::string item;
  std::istringstream in(text);
  while (std::getline(in, item, separator)) out.push_back(item);
  return out;
}

std::string join(const std::vector<std::string>& items) {
  std::string s;
  for (const std::string& item : items) s += (s.empty() ? "" : ", ") + item;
  return s;
}

Checkpoint::StateDict cloned(const Checkpoint::StateDict& state) {
  Checkpoint::StateDict out;
  for (const auto& [key, t] : state) out[key] = t.defined() ? detail::dense_copy(t) : t;
  return out;
}

// The parts a file holds: from its metadata (version >= 1), or, for hg-train's checkpoints from
// before the format had one (version 0), from the first component of every key.
std::vector<std::string> parts_in_file(const SafetensorsContents& file, int version) {
  if (version == 0) {
    std::set<std::string> parts;
    for (const auto& [key, t] : file.tensors) parts.insert(key.substr(0, key.find('.')));
    return {parts.begin(), parts.end()};
  }
  return split(file.metadata.at("parts"), ',');
}

std::vector<std::string> keys_of(const Checkpoint::StateDict& state) {
  std::vector<std::string> keys;
  for (const auto& [key, _] : state) keys.push_back(key);
  return keys;
}

// Version 2's promise for one part: after loading, it saves the keys it was given, no more, no
// fewer. A key it does not save back was not used (a flipped bit in its name, state of other
// options); a key it saves that the file lacked was filled in with a default.
void check_round_trip(const std::string& part, const std::vector<std::string>& given,
                      const std::vector<std::string>& saved) {
  std::string unused, defaulted;
  for (const std::string& key : given)
    if (!std::binary_search(saved.begin(), saved.end(), key)) unused += (unused.empty() ? "" : ", ") + quoted(key);
  for (const std::string& key : saved)
    if (!std::binary_search(given.begin(), given.end(), key))
      defaulted += (defaulted.empty() ? "" : ", ") + quoted(key);
  HG_CHECK(unused.empty() && defaulted.empty(), part, ":", unused.empty() ? "" : " keys it did not use: ", unused,
           !unused.empty() && !defaulted.empty() ? ";" : "", defaulted.empty() ? "" : " keys it needs that the file lacks: ",
           defaulted);
}

}  // namespace

Checkpoint::Checkpoint() { add("rng", g_rng_part); }

void Checkpoint::add_part(Part part) {
  HG_CHECK(!part.name.empty() && part.name.find_first_of(".,") == std::string::npos, "Checkpoint::add: a part's name "
           "must be non-empty and hold no '.' or ',' (its keys are stored as \"<name>.<key>\"), got \"", part.name, "\"");
  for (const Part& p : parts_)
    HG_CHECK(p.name != part.name, "Checkpoint::add: a part named \"", part.name, "\" is already registered",
             part.name == "rng" ? " (the random generator is always saved as \"rng\")" : "");
  parts_.push_back(std::move(part));
}

namespace {
struct CounterPart {
  int64_t* counter;
  Checkpoint::StateDict state_dict() const { return {{"value", from_vector(std::vector<int64_t>{*counter}, {})}}; }
  void load_state_dict(const Checkpoint::StateDict& state) {
    state_dict::require_exact_keys(state, {"value"}, "counter");
    *counter = state_dict::read_int(state, "value", "counter", INT64_MIN, INT64_MAX);
  }
};
}  // namespace

Checkpoint& Checkpoint::add(std::string name, int64_t& counter) {
  auto part = std::make_shared<CounterPart>(CounterPart{&counter});
  add_part({std::move(name), [part] { return part->state_dict(); }, [part](const StateDict& s) { part->load_state_dict(s); }});
  return *this;
}

Checkpoint& Checkpoint::set_metadata(const std::string& key, const std::string& value) {
  HG_CHECK(!kReservedMetadata.count(key), "Checkpoint::set_metadata: \"", key,
           "\" is reserved (format, format_version and parts describe the file itself)");
  metadata_[key] = value;
  return *this;
}

Checkpoint& Checkpoint::require_metadata(const std::string& key, const std::string& value) {
  set_metadata(key, value);
  if (std::find(required_.begin(), required_.end(), key) == required_.end()) required_.push_back(key);
  return *this;
}

std::vector<std::string> Checkpoint::part_names() const {
  std::vector<std::string> names;
  for (const Part& p : parts_) names.push_back(p.name);
  return names;
}

Checkpoint::StateDict Checkpoint::state_dict() const {
  StateDict all;
  for (const Part& p : parts_) state_dict::add_prefixed(all, p.name + ".", p.save());
  return all;
}

void Checkpoint::save(const std::string& path) const {
  const StateDict all = state_dict();
  std::string parts;
  for (const Part& p : parts_) parts += (parts.empty() ? "" : ",") + p.name;
  Metadata metadata = metadata_;
  metadata["format"] = kFormatName;
  metadata["format_version"] = std::to_string(kFormatVersion);
  metadata["parts"] = parts;
  hg::save(path, all, metadata);
}

int Checkpoint::format_version(const SafetensorsContents& file, const std::string& source) {
  const auto format = file.metadata.find("format");
  if (format == file.metadata.end()) return 0;
  HG_CHECK(format->second == kFormatName, "Checkpoint::load: ", source, " has format ", quoted(format->second), ", not \"",
           kFormatName, "\"");
  const auto v = file.metadata.find("format_version");
  HG_CHECK(v != file.metadata.end() && file.metadata.count("parts"), "Checkpoint::load: ", source,
           " names the format but not its format_version and parts: the file was edited or is damaged");
  for (int known = 1; known <= kFormatVersion; ++known)
    if (v->second == std::to_string(known)) return known;
  HG_FAIL("Checkpoint::load: ", source, " has format_version ", quoted(v->second), "; this build of halfgrad reads versions "
          "up to ", kFormatVersion);
}

void Checkpoint::load(const std::string& path) { load(load_with_metadata(path), path); }

void Checkpoint::load(const SafetensorsContents& file, const std::string& path) {
  const int version = format_version(file, path);
  const std::vector<std::string> in_file = parts_in_file(file, version);
  const std::vector<std::string> registered = part_names();
  for (const std::string& key : required_) {
    const auto found = file.metadata.find(key);
    HG_CHECK(found == file.metadata.end() || found->second == metadata_.at(key), "Checkpoint::load: ", path,
             " was written with ", key, " ", quoted(found->second), ", not ", metadata_.at(key));
  }

  std::vector<std::string> missing, unexpected, mismatched, strays;
  for (const std::string& name : in_file)
    if (std::find(registered.begin(), registered.end(), name) == registered.end()) unexpected.push_back(quoted(name));
  // A key under no part the file lists would be ignored: it is lost state (a flipped bit in
  // "optimizer.") or foreign data.
  for (const auto& [key, _] : file.tensors) {
    const std::string part = key.substr(0, key.find('.'));
    if (key.find('.') == std::string::npos || std::find(in_file.begin(), in_file.end(), part) == in_file.end())
      strays.push_back(quoted(key));
  }
  // A diverged run's state (inf/NaN weights or moments) would resume into a run that trains NaN
  // and exits 0: refused, naming each tensor.
  std::vector<std::string> nonfinite;
  for (const auto& [key, t] : file.tensors)
    if (const int64_t bad = state_dict::nonfinite_count(t); bad > 0)
      nonfinite.push_back(quoted(key) + " (" + std::to_string(bad) + " of " + std::to_string(t.numel()) + ")");
  // Every part is tried, so that one error lists everything wrong; the parts that did load are
  // then put back as they were: a failed load changes nothing.
  std::vector<std::pair<const Part*, StateDict>> loaded_before;
  for (const Part& p : parts_) {
    const bool present = std::find(in_file.begin(), in_file.end(), p.name) != in_file.end();
    if (!present && version > 0) {
      missing.push_back(p.name);
      continue;
    }
    StateDict before = cloned(p.save());
    try {
      // Version 0 stored a disabled GradScaler as no keys at all: an absent part is an empty one.
      const StateDict given = state_dict::entries_under(file.tensors, p.name + ".");
      p.load(given);
      loaded_before.emplace_back(&p, std::move(before));
      if (version >= 2) check_round_trip(p.name, keys_of(given), keys_of(p.save()));
    } catch (const Error& e) {
      mismatched.push_back(p.name + " (" + e.what() + ")");
    }
  }
  if (missing.empty() && unexpected.empty() && mismatched.empty() && strays.empty() && nonfinite.empty()) {
    loaded_metadata_ = file.metadata;
    return;
  }
  for (auto& [part, before] : loaded_before) part->load(before);
  std::string problems;
  // One line (hg-train prints errors as one line): the kinds of problem separated by "; ".
  if (!missing.empty()) problems += "; missing (registered here, not in the file): " + join(missing);
  if (!unexpected.empty()) problems += "; unexpected (in the file, not registered here): " + join(unexpected);
  if (!strays.empty()) problems += "; keys under no part the file lists: " + join(strays);
  if (!mismatched.empty()) problems += "; mismatched: " + join(mismatched);
  if (!nonfinite.empty())
    problems += "; inf/NaN values (the run had diverged: resume from an earlier checkpoint) in: " + join(nonfinite);
  HG_FAIL("Checkpoint::load: ", path, " does not match the parts registered here (", join(registered),
          "), nothing was loaded", problems);
}

}  // namespace hg
