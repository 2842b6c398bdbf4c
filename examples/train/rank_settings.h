// What every rank of a distributed hg-train run must share, as the settings that
// hg::distributed::require_same_settings compares at start-up (docs/distributed.md lists them):
// the options that shape the training, the model's structure, digests of the data, and the
// checkpoint a run resumes from.
#pragma once
#include <string>
#include <vector>

#include "halfgrad.h"
#include "train/trainer.h"

namespace hg_train {

std::vector<hg::distributed::Setting> rank_settings(const TrainConfig& config, const hg::data::MNIST& train,
                                                    const hg::data::MNIST& test, const std::string& resume);

}  // namespace hg_train
