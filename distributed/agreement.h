// Settings every rank of a data-parallel job must share. Ranks that disagree train wrong and say
// nothing: with another --seed a rank shards the data by another order (some samples are seen
// twice per epoch, some never), with another learning rate or precision it averages gradients
// of another step, with a --resume that only one rank got the others wait on a collective until
// it times out. require_same_settings compares them once, at start-up, through one collective,
// and throws the same hg::Error on every rank, naming the setting, a rank that differs and both
// values:
//
//   hg::distributed::require_same_settings(*group, {{"--seed", std::to_string(seed)},
//                                                   {"--lr", lr_text},
//                                                   {"model", hg::distributed::structure_of(model)}});
//   // rank 1: "the ranks disagree on --seed: rank 1 has "2", rank 0 has "1" (...)"
//
// A value may be a list, one item per line (a model's parameters): the error then names the
// first item that differs.
#pragma once
#include <string>
#include <vector>

#include "distributed/process_group.h"
#include "nn/module.h"

namespace hg::distributed {

struct Setting {
  std::string name;   // as the user knows it: "--seed", "model"
  std::string value;  // its value as text
};

// Every rank passes the same names in the same order (the values may differ: that is what is
// checked). Costs one all_gather of a few hashes when the ranks agree.
void require_same_settings(ProcessGroup& group, const std::vector<Setting>& settings);

// A module's parameters and buffers, one line each: "name [shape] dtype".
std::string structure_of(const nn::Module& module);

}  // namespace hg::distributed
