#!/usr/bin/env bash
# CI's fuzzing step (scripts/test.sh calls it): runs each libFuzzer target of tests/fuzz/ for a
# bounded time from the seeds and the committed corpus. The targets come from a clang build with
# -DHG_FUZZ=ON (ASan + UBSan, coverage on the library's own code): the build directory given, or
# build-fuzz/, configured and built here when none is given. Any finding (crash, sanitizer report,
# leak, timeout, out of memory) fails the step and leaves its reproducer in <build>/findings/.
#
#   scripts/ci-fuzz.sh                      # builds build-fuzz/, 30 s per target (5 targets)
#   scripts/ci-fuzz.sh build-sanitize       # the targets of an existing -DHG_FUZZ=ON build
#   HG_FUZZ_SECONDS=600 scripts/ci-fuzz.sh  # longer: see tests/fuzz/README.md
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh
seconds=${HG_FUZZ_SECONDS:-30}
jobs=$(nproc)
start=$(date +%s)
build=${1:-build-fuzz}

if [[ $# -eq 0 ]]; then
  hg_install_missing clang-14 libclang-rt-14-dev libomp-14-dev  # libFuzzer is in libclang-rt
  cmake -S . -B build-fuzz -DCMAKE_CXX_COMPILER=clang++-14 -DCMAKE_C_COMPILER=clang-14 -DCMAKE_BUILD_TYPE=Release \
    -DHG_FUZZ=ON -DHG_CUDA=OFF -DHG_BUILD_TESTS=OFF -DHG_BUILD_EXAMPLES=OFF -DHG_BUILD_BENCH=OFF
  cmake --build build-fuzz -j "$jobs"
  echo "halfgrad: clang build of the library and the fuzz targets done in $(( $(date +%s) - start )) s"
fi
[[ -x $build/tests/fuzz/fuzz_json ]] || { echo "halfgrad: $build has no fuzz targets (configure it with -DHG_FUZZ=ON)"; exit 1; }

rm -rf $build/seeds $build/findings
mkdir -p $build/findings
$build/tests/fuzz/make_fuzz_seeds $build/seeds
export OMP_NUM_THREADS=1
for target in json safetensors idx load_state_dict checkpoint; do
  corpus=$build/corpus/$target  # grows across runs on the same machine
  mkdir -p "$corpus"
  echo "halfgrad: fuzzing $target for $seconds s"
  # -rss_limit_mb: a claimed size must never be allocated before it is checked;
  # -timeout: no input may take seconds (the O(n^2) JSON key check took 30).
  inputs=("$corpus" $build/seeds/$target)
  [[ -d tests/fuzz_corpus/$target ]] && inputs+=(tests/fuzz_corpus/$target)  # the reproducers, if any
  log=$build/fuzz-$target.log
  if ! $build/tests/fuzz/fuzz_$target "${inputs[@]}" \
      -dict=tests/fuzz/halfgrad.dict -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 \
      -artifact_prefix="$build/findings/$target-" -print_final_stats=1 >"$log" 2>&1; then
    tail -n 80 "$log"
    echo "halfgrad: fuzz_$target found a problem; its reproducer is in $build/findings/ (see tests/fuzz/README.md)"
    exit 1
  fi
  grep -E "^stat::number_of_executed_units|^stat::peak_rss_mb|^Done" "$log"
done
echo "halfgrad: fuzzing (${seconds} s per target) passed in $(( $(date +%s) - start )) s"
