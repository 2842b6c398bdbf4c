#!/usr/bin/env bash
# The test command: installs what is missing, configures (CUDA when nvcc is found), builds with
# all cores and runs CTest; proves the other CPU paths (scripts/ci-portability.sh: the suite at
# each lower ISA level, this build under an emulated AVX2-only CPU, an aarch64 build under
# emulation); then builds and runs the CPU suite once more under AddressSanitizer +
# UndefinedBehaviorSanitizer, and builds with clang to fuzz the parsers. The exit code is the result.
#
# The Release build is the portable one (-DHG_NATIVE=OFF: baseline x86-64 / aarch64 plus the SIMD
# kernels picked at run time), as a binary package would be; the sanitizer build is -march=native.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh
hg_install_missing

jobs=$(nproc)
start=$(date +%s)
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DHG_CUDA=AUTO -DHG_NATIVE=OFF
cmake --build build -j "$jobs"
(cd build && ctest -j "$jobs" --output-on-failure --timeout 600)
echo "halfgrad: Release suite done in $(( $(date +%s) - start )) s"
scripts/ci-portability.sh

# The sanitizer pass: CPU only, tests only (examples and benchmarks are covered by the Release run).
cmake -S . -B build-sanitize -DCMAKE_BUILD_TYPE=RelWithDebInfo -DHG_SANITIZE=ON -DHG_CUDA=OFF -DHG_NATIVE=ON \
  -DHG_BUILD_EXAMPLES=OFF -DHG_BUILD_BENCH=OFF
cmake --build build-sanitize -j "$jobs"
(cd build-sanitize && ASAN_OPTIONS=detect_leaks=1 ctest -j "$jobs" --output-on-failure --timeout 900 -E "^install\.")
scripts/ci-fuzz.sh  # the clang build and a bounded fuzzing run of each parser
echo "halfgrad: all tests passed (Release + ASan/UBSan) in $(( $(date +%s) - start )) s"
