#!/usr/bin/env bash
# The test command: installs what is missing, configures (CUDA when nvcc is found), builds with
# all cores and runs CTest; proves the other CPU paths (scripts/ci-portability.sh: the suite at
# each lower ISA level, this build under an emulated AVX2-only CPU, an aarch64 build under
# emulation); then builds with clang under AddressSanitizer + UndefinedBehaviorSanitizer, runs the
# CPU suite there and fuzzes the parsers. The exit code is the result.
#
# The Release build is the portable one (-DHG_NATIVE=OFF: baseline x86-64 / aarch64 plus the SIMD
# kernels picked at run time), as a binary package would be; the sanitizer build is -march=native.
# 35-39 minutes on 2 cores of Sapphire Rapids or Zen 4 from a clean clone, 49 on Zen 3 (docs/results.md
# sections 8, 18, 19 and 30 have each stage's time); CI must stay under 45.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh
hg_install_missing

jobs=$(nproc)
start=$(date +%s)
# Without a GPU the CUDA code is compiled and linked for sm_90 alone (the H100/H200 that
# scripts/gpu-check.sh runs on): one architecture proves it builds, in half of nvcc's time.
# With one, the default list (80 90: cmake/HalfgradCuda.cmake; -U drops a cached sm_90 alone), so
# the GPU tests find their kernels.
cuda_archs=(-UCMAKE_CUDA_ARCHITECTURES)
nvidia-smi -L >/dev/null 2>&1 || cuda_archs=(-DCMAKE_CUDA_ARCHITECTURES=90)
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DHG_CUDA=AUTO -DHG_NATIVE=OFF "${cuda_archs[@]}"
cmake --build build -j "$jobs"
(cd build && ctest -j "$jobs" --output-on-failure --timeout 600)
echo "halfgrad: Release suite done in $(( $(date +%s) - start )) s"
scripts/ci-portability.sh

# The sanitizer pass: one clang build (the project's clang build) with ASan + UBSan of the
# library, the CPU tests and the libFuzzer targets; the suite runs under the sanitizers, then each
# parser is fuzzed for a bounded time from the same build (scripts/ci-fuzz.sh). -O1 with line
# tables only: the sanitizers need no more, and it compiles in about half the time of -O2 -g (a
# gcc RelWithDebInfo sanitizer build plus a separate clang fuzz build took 25 of CI's minutes).
hg_install_missing clang-14 libclang-rt-14-dev libomp-14-dev  # libFuzzer is in libclang-rt
t0=$(date +%s)
cmake -S . -B build-sanitize -DCMAKE_CXX_COMPILER=clang++-14 -DCMAKE_C_COMPILER=clang-14 \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -gline-tables-only -DNDEBUG" \
  -DHG_SANITIZE=ON -DHG_FUZZ=ON -DHG_CUDA=OFF -DHG_NATIVE=ON -DHG_BUILD_EXAMPLES=OFF -DHG_BUILD_BENCH=OFF
cmake --build build-sanitize -j "$jobs"
echo "halfgrad: clang ASan + UBSan build done in $(( $(date +%s) - t0 )) s"
(cd build-sanitize && ASAN_OPTIONS=detect_leaks=1 ctest -j "$jobs" --output-on-failure --timeout 900 -E "^install\.")
HG_FUZZ_SECONDS=12 scripts/ci-fuzz.sh build-sanitize  # a bounded fuzzing run of each parser (12 s each: CI's time)
echo "halfgrad: all tests passed (Release + ASan/UBSan) in $(( $(date +%s) - start )) s"
