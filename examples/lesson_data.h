// Where the lessons that train on Fashion-MNIST find it: $HG_DATA, or the directory of the Debian
// package dataset-fashion-mnist. When it is missing, the lesson prints how to get it and skips.
#pragma once
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <optional>
#include <string>

#include "halfgrad.h"

inline std::optional<std::string> fashion_mnist_root() {
  const char* env = std::getenv("HG_DATA");
  const std::string root = (env && *env) ? env : hg::data::kFashionMnistRoot;
  if (std::filesystem::exists(root)) return root;
  std::cout << "NOTE: Fashion-MNIST not found at " << root << ". Install the Debian package dataset-fashion-mnist "
            << "(apt-get install dataset-fashion-mnist) or set HG_DATA to a directory holding the four IDX files. "
            << "Skipping this lesson.\n";
  return std::nullopt;
}
