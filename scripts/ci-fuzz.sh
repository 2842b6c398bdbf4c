#!/usr/bin/env bash
# CI's clang + fuzzing step (scripts/test.sh calls it): builds the library with clang 14 and
# the libFuzzer targets of tests/fuzz/ (ASan + UBSan, coverage on the library's own code) --
# that is the project's one clang build -- then runs each target for a bounded time from the
# seeds and the committed corpus. Any finding (crash, sanitizer report, leak, timeout, out of
# memory) fails the step and leaves its reproducer in build-fuzz/findings/.
#
#   scripts/ci-fuzz.sh                      # 30 s per target (4 targets)
#   HG_FUZZ_SECONDS=600 scripts/ci-fuzz.sh  # longer: see tests/fuzz/README.md
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh
hg_install_missing clang-14 libclang-rt-14-dev libomp-14-dev  # libFuzzer is in libclang-rt
seconds=${HG_FUZZ_SECONDS:-30}
jobs=$(nproc)
start=$(date +%s)

cmake -S . -B build-fuzz -DCMAKE_CXX_COMPILER=clang++-14 -DCMAKE_C_COMPILER=clang-14 -DCMAKE_BUILD_TYPE=Release \
  -DHG_FUZZ=ON -DHG_CUDA=OFF -DHG_BUILD_TESTS=OFF -DHG_BUILD_EXAMPLES=OFF -DHG_BUILD_BENCH=OFF
cmake --build build-fuzz -j "$jobs"
echo "halfgrad: clang build of the library and the fuzz targets done in $(( $(date +%s) - start )) s"

rm -rf build-fuzz/seeds build-fuzz/findings
mkdir -p build-fuzz/findings
build-fuzz/tests/fuzz/make_fuzz_seeds build-fuzz/seeds
export OMP_NUM_THREADS=1
for target in json safetensors idx load_state_dict; do
  corpus=build-fuzz/corpus/$target  # grows across runs on the same machine
  mkdir -p "$corpus"
  echo "halfgrad: fuzzing $target for $seconds s"
  # -rss_limit_mb: a claimed size must never be allocated before it is checked;
  # -timeout: no input may take seconds (the O(n^2) JSON key check took 30).
  inputs=("$corpus" build-fuzz/seeds/$target)
  [[ -d tests/fuzz_corpus/$target ]] && inputs+=(tests/fuzz_corpus/$target)  # the reproducers, if any
  log=build-fuzz/fuzz-$target.log
  if ! build-fuzz/tests/fuzz/fuzz_$target "${inputs[@]}" \
      -dict=tests/fuzz/halfgrad.dict -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 \
      -artifact_prefix="build-fuzz/findings/$target-" -print_final_stats=1 >"$log" 2>&1; then
    tail -n 80 "$log"
    echo "halfgrad: fuzz_$target found a problem; its reproducer is in build-fuzz/findings/ (see tests/fuzz/README.md)"
    exit 1
  fi
  grep -E "^stat::number_of_executed_units|^stat::peak_rss_mb|^Done" "$log"
done
echo "halfgrad: clang build + fuzzing (${seconds} s per target) passed in $(( $(date +%s) - start )) s"
