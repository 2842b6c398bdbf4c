#!/usr/bin/env bash
# The test command: installs what is missing, configures (CUDA when nvcc is found), builds with
# all cores and runs CTest; then builds and runs the CPU suite once more under AddressSanitizer +
# UndefinedBehaviorSanitizer. The exit code is the result.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh
hg_install_missing

jobs=$(nproc)
start=$(date +%s)
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DHG_CUDA=AUTO
cmake --build build -j "$jobs"
(cd build && ctest -j "$jobs" --output-on-failure --timeout 600)
echo "halfgrad: Release suite done in $(( $(date +%s) - start )) s"

# The sanitizer pass: CPU only, tests only (examples and benchmarks are covered by the Release run).
cmake -S . -B build-sanitize -DCMAKE_BUILD_TYPE=RelWithDebInfo -DHG_SANITIZE=ON -DHG_CUDA=OFF \
  -DHG_BUILD_EXAMPLES=OFF -DHG_BUILD_BENCH=OFF
cmake --build build-sanitize -j "$jobs"
(cd build-sanitize && ASAN_OPTIONS=detect_leaks=1 ctest -j "$jobs" --output-on-failure --timeout 900 -E "^install\.")
scripts/ci-fuzz.sh  # the clang build and a bounded fuzzing run of each parser
echo "halfgrad: all tests passed (Release + ASan/UBSan) in $(( $(date +%s) - start )) s"
