// hg::Checkpoint: everything a training run needs to continue bitwise, in one safetensors file.
// Register the run's stateful objects once, then save or load them with one call:
//
//   hg::Checkpoint checkpoint;
//   checkpoint.add("model", model).add("optimizer", opt).add("scaler", scaler)
//             .add("scheduler", sched).add("loader", loader).add("step", step);   // step: an int64_t
//   checkpoint.save("run/checkpoint.safetensors");   // atomic: temp file + fsync + rename
//   checkpoint.load("run/checkpoint.safetensors");   // all of it, or (on any error) none of it
//
// Any object with state_dict() and load_state_dict(const std::map<std::string, Tensor>&) can be a
// part (modules, optimizers, GradScaler, LR schedulers, DataLoader, your own); each part's keys
// are stored under "<name>.". The global random generator is always saved as the part "rng", so
// dropout masks continue where they left off. The file's metadata names the format, its version
// and the parts; a file whose parts do not match the registered ones is refused with one error
// that lists every missing, unexpected and mismatched part.
//
// The objects are held by reference: they must outlive the Checkpoint (like an optimizer's
// parameters). The class lives in core and knows no module or optimizer type: it only calls
// their state_dict()/load_state_dict(), so it sits below every layer it can save.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/safetensors.h"
#include "core/tensor.h"

namespace hg {

class Checkpoint {
 public:
  using StateDict = std::map<std::string, Tensor>;
  // Written into every file's metadata ("format_version"); load() reads versions 0 (hg-train's
  // files from before this class: no metadata, parts found from the key prefixes) to this one.
  // Version 2 promises that every key belongs to a part and that each part saves back exactly
  // the keys it loaded (nothing in the file unused, nothing the part needs missing); versions 0
  // and 1 are checked by the parts' own load_state_dict only. In every version a floating tensor
  // holding inf or NaN is refused (a diverged run's state).
  static constexpr int kFormatVersion = 2;
  static constexpr const char* kFormatName = "halfgrad-checkpoint";

  Checkpoint();

  // A part: any object with state_dict() and load_state_dict(). A part that can be disabled
  // (is_enabled(), as the GradScaler of an f32 or bf16 run) saves no entries while disabled, and
  // a disabled part refuses a file that holds the state of an enabled one.
  template <class T>
  Checkpoint& add(std::string name, T& part);
  // A counter of your own loop (epoch, step): saved as a 0-d i64.
  Checkpoint& add(std::string name, int64_t& counter);
  // Extra text saved in the file's metadata (the reserved keys format, format_version and parts
  // cannot be set).
  Checkpoint& set_metadata(const std::string& key, const std::string& value);
  // set_metadata, and load() refuses a file whose metadata gives `key` another value, before it
  // loads anything (hg-train: a checkpoint of --model cnn does not resume an mlp run).
  Checkpoint& require_metadata(const std::string& key, const std::string& value);

  void save(const std::string& path) const;
  void load(const std::string& path);
  // What save() writes, in memory: every part's state under "<part>." (an in-memory snapshot).
  StateDict state_dict() const;
  // The same from contents already read (e.g. an older file a program has upgraded in memory);
  // `source` names it in errors.
  void load(const SafetensorsContents& file, const std::string& source);
  // The format version of a file's contents (0: no format metadata); an hg::Error for a file of
  // another format or a newer version.
  static int format_version(const SafetensorsContents& file, const std::string& source);

  std::vector<std::string> part_names() const;    // in registration order, "rng" first
  const Metadata& loaded_metadata() const { return loaded_metadata_; }  // of the last load()

 private:
  struct Part {
    std::string name;
    std::function<StateDict()> save;
    std::function<void(const StateDict&)> load;
  };
  void add_part(Part part);

  std::vector<Part> parts_;
  Metadata metadata_;
  std::vector<std::string> required_;  // keys of metadata_ that load() checks
  Metadata loaded_metadata_;
};

template <class T>
Checkpoint& Checkpoint::add(std::string name, T& part) {
  Part p{std::move(name), [&part] { return StateDict(part.state_dict()); }, {}};
  if constexpr (requires { part.is_enabled(); }) {
    p.load = [&part, part_name = p.name](const StateDict& state) {
      if (part.is_enabled()) return part.load_state_dict(state);
      HG_CHECK(state.empty(), "the file holds the state of an enabled \"", part_name,
               "\", but the one registered here is disabled (e.g. a GradScaler of an f32/bf16 run loading an f16 "
               "checkpoint)");
    };
  } else {
    p.load = [&part](const StateDict& state) { part.load_state_dict(state); };
  }
  add_part(std::move(p));
  return *this;
}

}  // namespace hg
