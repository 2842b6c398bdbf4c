// What lessons 15 and 16 do with --csv DIR: each keeps every number it checks in a map, by key,
// and writes the map to DIR/<its file>.csv, which scripts/figures.sh puts into docs/amp.md.
#pragma once
#include <fstream>
#include <iomanip>
#include <iostream>
#include <map>
#include <string>

// The DIR of `--csv DIR` on the command line; empty without it.
inline std::string csv_dir_argument(int argc, char** argv) {
  std::string dir;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::string(argv[i]) == "--csv") dir = argv[i + 1];
  return dir;
}

// Writes `numbers` to dir/file as key,value lines, with every digit a double needs (17).
inline void write_numbers_csv(const std::map<std::string, double>& numbers, const std::string& dir,
                              const std::string& file) {
  const std::string path = dir + "/" + file;
  std::ofstream csv(path);
  csv << "key,value\n" << std::setprecision(17);
  for (const auto& [key, value] : numbers) csv << key << ',' << value << '\n';
  std::cout << "\n(wrote " << path << ")\n";
}
