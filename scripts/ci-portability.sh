#!/usr/bin/env bash
# CI's portability step (scripts/test.sh calls it after the Release suite): proves the CPU paths
# that the machine running CI does not take by itself.
#
#   1. The CPU suite again at every ISA level below this CPU's own (HG_CPU_ISA caps the level the
#      kernels dispatch to), so the generic and AVX2 paths run even on an AVX-512 machine.
#   2. A portable x86-64 build (-DHG_NATIVE=OFF) whose CPU tests run under `qemu-x86_64 -cpu max`:
#      an emulated CPU with AVX2 + FMA + F16C and no AVX-512. The dispatcher must pick avx2
#      (HG_EXPECT_DETECTED_ISA checks it), and an AVX-512 instruction leaking into code reached
#      at that level dies with SIGILL.
#   3. An aarch64 cross-build (Debian's g++-aarch64-linux-gnu, zlib from the arm64 multiarch
#      packages) whose core, autograd, ops and AMP tests run under qemu-aarch64. It is linked
#      statically: qemu-aarch64 7.2 hangs in pthread_create in dynamically linked programs.
#
# Under emulation each test program runs once (not once per test case, as CTest would: every
# start of an emulated program costs seconds). Excluded there, with the reason:
#   parallel.exceptions_nesting_and_fork  qemu-user aborts when a program with threads forks
#                                         (an assertion in qemu itself, not in the program);
#   *anomaly_mode_names_the_op*           (aarch64) a static binary has no symbol names for the
#                                         stack trace the test reads.
#
# scripts/test.sh configures its Release build (build/) with -DHG_NATIVE=OFF, so step 2 runs that
# build's tests; on a -march=native build/ the step builds build-portable/ first. On a host that is
# itself such a CPU (AVX2 + FMA + F16C, no AVX-512: Zen 3, CI's slowest machine) the emulation
# proves nothing more than the Release suite did natively (there a leaked AVX-512 instruction dies
# with SIGILL on real hardware), so step 2 only checks the detection there, and saves ~5 minutes.
#
#   scripts/ci-portability.sh            # all three steps (~N min on 2 cores, see the closing line)
#   HG_PORTABILITY_STEPS="1 3" scripts/ci-portability.sh
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh
steps=${HG_PORTABILITY_STEPS:-"1 2 3"}
jobs=$(nproc)
start=$(date +%s)
host=$(uname -m)

# The test programs that run under emulation: the CPU kernels, core, autograd, ops and AMP.
emulated_tests=(test_core test_half test_cpu test_autograd test_ops_reference test_op_db test_ops_layouts test_ops_numerics
                test_autocast test_grad_scaler)

# test_op_db runs only its numeric cases under emulation: the reference and 16-bit checks that
# were test_ops_reference's (~40 s each under qemu-x86_64; every op forward and backward). Its
# gradcheck and layout cases (over 5 minutes there) run the same kernels again, and run natively
# at every ISA level in step 1.
emulated_cases() { [[ $1 == test_op_db ]] && echo "op_db.matches_the_naive_reference,op_db.f16_and_bf16_match_f32" || echo "*"; }

# Runs each emulated test program: run_emulated <build dir> <excluded cases> <emulator command...>
run_emulated() {
  local dir=$1 excludes=$2
  shift 2
  for t in "${emulated_tests[@]}"; do
    local t0=$(date +%s) log="$dir/$t.emulated.log"
    if ! "$@" "$dir/tests/$t" --test-case="$(emulated_cases "$t")" --test-case-exclude="$excludes" >"$log" 2>&1; then
      tail -n 60 "$log"
      echo "halfgrad: $t failed under $1 (log: $log)"
      exit 1
    fi
    echo "  $t: $(grep -E '^\[doctest\] test cases' "$log" | sed 's/\[doctest\] //') ($(( $(date +%s) - t0 )) s)"
  done
}

flags=$(grep -m1 -E '^(flags|Features)' /proc/cpuinfo || true)
has() { [[ " $flags " == *" $1 "* ]]; }

# ---- 1. the CPU suite at each lower ISA level ----------------------------------------------------
if [[ " $steps " == *" 1 "* ]]; then
  levels=()
  if [[ $host == x86_64 ]]; then
    if has avx512f && has avx512bw && has avx512vl; then
      levels=(generic avx2)
      has avx512_bf16 && levels+=(avx512)
      has avx512_bf16 && has amx_bf16 && has amx_tile && levels+=(avx512bf16)
    elif has avx2 && has fma && has f16c; then
      levels=(generic)
    fi
  elif [[ $host == aarch64 ]]; then
    levels=(generic)
    has bf16 && levels+=(neon)
  fi
  for level in "${levels[@]}"; do
    t0=$(date +%s)
    # Everything that runs kernels, less the programs that start other processes (install, MPI,
    # the hg-train CLI, the PyTorch reader, the examples and the figure programs: they ran at this
    # CPU's own level in the Release suite) and the file-format and deep-graph tests: those take
    # the longest and run no kernel the rest does not (the op tests and the model parity tests
    # run every kernel at each level). The model parity tests (models.*: 200 training steps of
    # five models, ~40 s of a level's time) run at avx2 and avx512bf16, the levels of the CPUs
    # users have most (Zen 3, Zen 4), besides this CPU's own; at generic and avx512 each kernel of
    # those models runs in the op tests.
    models=""
    [[ $level == generic || $level == avx512 ]] && models="|^models\."
    (cd build && HG_CPU_ISA=$level ctest -j "$jobs" --output-on-failure --timeout 600 \
       -E "^(install|distributed|hg_train_cli|cuda|safetensors|data|example|figures)\.|deep_graph|loads_into_torch$models")
    echo "halfgrad: CPU suite at HG_CPU_ISA=$level passed in $(( $(date +%s) - t0 )) s"
  done
fi

# ---- 2. portable x86-64 build under qemu-x86_64 -cpu max -------------------------------------------
if [[ " $steps " == *" 2 "* && $host == x86_64 ]] && ! has avx512f && has avx2 && has fma && has f16c &&
   grep -q "^HG_NATIVE:BOOL=OFF" build/CMakeCache.txt 2>/dev/null; then
  HG_EXPECT_DETECTED_ISA=avx2 build/tests/test_cpu --test-case=cpu.levels_are_named_ordered_and_capped
  echo "halfgrad: this CPU is an AVX2 CPU without AVX-512 (the one qemu-x86_64 -cpu max emulates): the Release suite" \
       "ran the portable build on it natively, detected as avx2; no emulated run"
elif [[ " $steps " == *" 2 "* && $host == x86_64 ]]; then
  hg_install_missing qemu-user
  portable=build
  if ! grep -q "^HG_NATIVE:BOOL=OFF" build/CMakeCache.txt 2>/dev/null; then
    portable=build-portable
    t0=$(date +%s)
    cmake -S . -B build-portable -DCMAKE_BUILD_TYPE=Release -DHG_NATIVE=OFF -DHG_CUDA=OFF -DHG_DISTRIBUTED=OFF \
      -DHG_BUILD_EXAMPLES=OFF -DHG_BUILD_BENCH=OFF >/dev/null
    cmake --build build-portable -j "$jobs" --target "${emulated_tests[@]}"
    echo "halfgrad: portable (-DHG_NATIVE=OFF) build done in $(( $(date +%s) - t0 )) s"
  fi
  echo "halfgrad: the portable build's tests ($portable/) under qemu-x86_64 -cpu max:"
  t0=$(date +%s)
  # 10^6 random inputs per math function instead of 10^7 (test_cpu's ulp tests): step 1 ran the
  # full count natively at every x86 level; here the point is an instruction above AVX2.
  HG_MATH_TEST_INPUTS=1000000 HG_EXPECT_DETECTED_ISA=avx2 run_emulated $portable parallel.exceptions_nesting_and_fork qemu-x86_64 -cpu max
  echo "halfgrad: portable build passed under qemu-x86_64 -cpu max (avx2 level) in $(( $(date +%s) - t0 )) s"
fi

# ---- 3. aarch64 cross-build under qemu-aarch64 --------------------------------------------------
if [[ " $steps " == *" 3 "* && $host == x86_64 ]]; then
  if ! dpkg --print-foreign-architectures | grep -qx arm64; then
    sudo=""
    [ "$(id -u)" -ne 0 ] && sudo="sudo"
    $sudo dpkg --add-architecture arm64
    $sudo apt-get update -qq
  fi
  hg_install_missing qemu-user g++-aarch64-linux-gnu zlib1g-dev:arm64
  t0=$(date +%s)
  cmake -S . -B build-aarch64 -DCMAKE_TOOLCHAIN_FILE=cmake/toolchains/aarch64-linux-gnu.cmake \
    -DCMAKE_BUILD_TYPE=Release -DHG_CUDA=OFF -DHG_DISTRIBUTED=OFF -DHG_BUILD_SHARED=OFF \
    -DCMAKE_EXE_LINKER_FLAGS=-static -DZLIB_USE_STATIC_LIBS=ON -DHG_BUILD_EXAMPLES=OFF -DHG_BUILD_BENCH=OFF >/dev/null
  cmake --build build-aarch64 -j "$jobs" --target "${emulated_tests[@]}"
  echo "halfgrad: aarch64 cross-build done in $(( $(date +%s) - t0 )) s; its tests under qemu-aarch64:"
  t0=$(date +%s)
  HG_EXPECT_DETECTED_ISA=neon-bf16 run_emulated build-aarch64 "parallel.exceptions_nesting_and_fork,*anomaly_mode_names_the_op*" \
    qemu-aarch64 -L /usr/aarch64-linux-gnu
  echo "halfgrad: aarch64 tests passed under qemu-aarch64 in $(( $(date +%s) - t0 )) s"
fi

echo "halfgrad: portability checks (steps $steps) passed in $(( $(date +%s) - start )) s"
