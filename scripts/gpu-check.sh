#!/usr/bin/env bash
# gpu-check.sh: one command for a fresh GPU machine without network (the H200 lent through the
# device tool): configure for sm_90, build, run the GPU tests, the GPU benchmarks of halfgrad
# (bench/gpu_bench) and PyTorch (bench/gpu_torch_bench.py), compute-sanitizer's memcheck and
# racecheck over the CUDA suite, then the rest of the suite, and print ONE table of the targets
# beside the measured values. Everything fits one 600-second device call: each step has a timeout
# taken from one overall budget (540 s by default), the steps run in order of importance, and a
# failing step never stops the table from printing what was measured.
#
#   scripts/prepare-carry.sh          # here, once: headers the GPU machine lacks -> .carry/
#   bash scripts/gpu-check.sh         # there (device tool: carry [".carry"], timeout_s 600)
#
# Steps: (a) nvidia-smi and nvcc versions; (b) cuDNN: the toolkit's, else the pip wheel
# nvidia-cudnn-cu13 (CUDNN_INCLUDE_DIR/CUDNN_LIBRARY, LD_LIBRARY_PATH), with its header version
# and the version the library itself reports (cudnnGetVersion); (c) configure a Release build in
# build-gpu/ (-DHG_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DHG_NATIVE=ON, tests and benchmarks on,
# examples off), using .carry/ for every package the system lacks, and build gpu_bench, then
# test_cuda, test_fp8_cuda, test_attention_cuda and test_op_db; (d) ctest -R '^(cuda\.|op_db\.cpu_matches_cuda)' -- only when the
# library and those tests built completely, so
# no test runs against a stale or missing binary; (e) both benchmarks; (f) compute-sanitizer
# --tool memcheck over the CUDA suite (without the cuda.large.* sizes) and --tool racecheck over
# the cases whose kernels use shared memory -- each skipped with a message when compute-sanitizer
# is missing or reports the device unsupported; (g) with the time left, build everything else and
# run the rest of the suite (only after that build completed); (h) the tables; (i) every
# log, CSV, sanitizer report and table packed into ONE archive, $OUT/gpu-check.tar.gz, beside the
# table and the transcript (a run that may return only a few files still brings everything back).
#
# Knobs (environment): HG_CHECK_BUDGET (seconds for everything, default 540), HG_CHECK_BUILD_DIR
# (default build-gpu), HG_CHECK_TARGETS (build only these targets, e.g. for a dry run on a machine
# without a GPU; tests then do not run), HG_CHECK_USE_CARRY=1 (take every package from .carry/),
# HG_CHECK_SECONDS (timed seconds per benchmark measurement, default 1.0), HG_CHECK_BUILD_TIMEOUT
# (cap per build step, 300), HG_CHECK_SANITIZERS=0 (skip the sanitizer runs).
# Exit status: 0 when every step ran and passed; 1 otherwise. Benchmark targets never fail it.
set -uo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo" || exit 1
t0=$SECONDS
# PyTorch runs with the environment it came with (its libraries' RUNPATHs pick its own CUDA
# wheels; the toolkit folders added below for halfgrad's programs could shadow them).
orig_ld_set=${LD_LIBRARY_PATH+1} orig_ld=${LD_LIBRARY_PATH-}
budget=${HG_CHECK_BUDGET:-540}
build=${HG_CHECK_BUILD_DIR:-build-gpu}
jobs=$(nproc 2>/dev/null || echo 4)
bench_seconds=${HG_CHECK_SECONDS:-1.0}
build_cap=${HG_CHECK_BUILD_TIMEOUT:-300}
[[ $build == /* ]] || build=$repo/$build
logs=$build/gpu-check
mkdir -p "$logs"
rm -f "$logs"/*.log "$logs"/*.csv "$logs"/*.md "$logs"/*.txt
transcript=$logs/gpu-check.log
exec > >(tee "$transcript") 2>&1

# Time kept back for the steps after the one running. The build keeps enough for the GPU tests
# and both benchmarks; the GPU tests keep enough for the benchmarks; the sanitizers come after.
reserve_after_build=200
reserve_after_tests=90

elapsed() { echo $((SECONDS - t0)); }
banner() { printf '\n==== [%3ss] %s\n' "$(elapsed)" "$*"; }

declare -a step_names=() step_results=() step_secs=()
record() { step_names+=("$1"); step_results+=("$2"); step_secs+=("$3"); }

# run_step NAME CAP RESERVE LOG CMD...: runs CMD with a timeout of min(CAP, what the budget has left
# after RESERVE), its output into LOG; records ok / FAILED (rc) / TIMEOUT / skipped.
last_rc=0
run_step() {
  local name=$1 cap=$2 reserve=$3 log=$4
  shift 4
  local left=$((budget - $(elapsed) - reserve))
  local limit=$((cap < left ? cap : left))
  if ((limit < 5)); then
    echo "skipped: $name (budget spent: $(elapsed)s of ${budget}s)"
    record "$name" "skipped (no time left)" 0
    last_rc=125
    return 125
  fi
  local start=$SECONDS
  timeout -k 10 "$limit" "$@" >"$log" 2>&1
  last_rc=$?
  local took=$((SECONDS - start))
  if ((last_rc == 0)); then record "$name" ok "$took"
  elif ((last_rc == 124 || last_rc == 137)); then record "$name" "TIMEOUT after ${limit}s" "$took"
  else record "$name" "FAILED (rc $last_rc)" "$took"
  fi
  return $last_rc
}

# ---- (a) the machine ------------------------------------------------------------------------------
banner "machine"
echo "host: $(uname -srm), $jobs cores, repo $repo, budget ${budget}s"
if command -v nvidia-smi >/dev/null; then
  timeout 30 nvidia-smi || echo "nvidia-smi failed (rc $?)"
  timeout 30 nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>/dev/null
else
  echo "nvidia-smi: not found"
fi
# The toolkit's own nvcc first (a wrapper script elsewhere on PATH would hide the toolkit's root).
nvcc=""
for candidate in "${CUDA_HOME:-}/bin/nvcc" "${CUDA_PATH:-}/bin/nvcc" /usr/local/cuda/bin/nvcc "$(command -v nvcc || true)"; do
  if [[ $candidate == /* && -x $candidate ]]; then nvcc=$candidate; break; fi
done
if [[ -n $nvcc ]]; then echo "nvcc: $nvcc"; "$nvcc" --version | tail -n 2; else echo "nvcc: NOT FOUND"; fi
cuda_root=""
[[ -n $nvcc ]] && cuda_root=$(cd "$(dirname "$(readlink -f "$nvcc")")/.." && pwd)
echo "cmake: $(command -v cmake) $(cmake --version | head -n 1)"
python=$(command -v python3 || true)
echo "python3: ${python:-NOT FOUND}"
gxx=$(command -v g++ || command -v c++ || true)
[[ -n $gxx ]] && echo "c++: $gxx $("$gxx" --version | head -n 1)"

# ---- (b) cuDNN ------------------------------------------------------------------------------------
banner "cuDNN"
cudnn_inc="" cudnn_lib="" cudnn_versions="not found"
first_lib() {  # first_lib DIR...: the first libcudnn.so(.N...) in the folders
  local d f
  for d in "$@"; do
    for f in "$d"/libcudnn.so "$d"/libcudnn.so.[0-9]*; do
      [[ -e $f ]] && { echo "$f"; return 0; }
    done
  done
  return 1
}
for root in "$cuda_root" /usr/local/cuda /usr; do
  [[ -n $root ]] || continue
  for inc in "$root/include" "$root/include/x86_64-linux-gnu"; do
    [[ -f $inc/cudnn.h ]] || continue
    if lib=$(first_lib "$root/lib64" "$root/lib" "$root/lib/x86_64-linux-gnu"); then
      cudnn_inc=$inc cudnn_lib=$lib
      break 2
    fi
  done
done
if [[ -n $cudnn_inc ]]; then
  echo "cuDNN from the system/toolkit: $cudnn_inc/cudnn.h, $cudnn_lib"
elif [[ -n $python ]]; then
  wheel=$(timeout 60 "$python" - <<'EOF' 2>/dev/null
import os
try:
    import nvidia.cudnn as m
    paths = list(getattr(m, "__path__", []))
    if not paths and getattr(m, "__file__", None):
        paths = [os.path.dirname(m.__file__)]
    print(paths[0] if paths else "")
except Exception:
    print("")
EOF
  )
  if [[ -n $wheel ]] && lib=$(first_lib "$wheel/lib"); then
    cudnn_lib=$lib
    if [[ -f $wheel/include/cudnn.h ]]; then cudnn_inc=$wheel/include
    elif [[ -f $repo/.carry/cudnn/include/cudnn.h ]]; then cudnn_inc=$repo/.carry/cudnn/include
    fi
    echo "cuDNN from the pip wheel: $wheel (headers: ${cudnn_inc:-none})"
  fi
fi
if [[ -z $cudnn_inc ]]; then
  # Last resort: a libcudnn.so* under /usr or /opt, with cudnn.h in ../include (or carried headers).
  cudnn_lib=""
  while read -r lib; do
    inc=$(cd "$(dirname "$lib")/../include" 2>/dev/null && pwd)
    [[ -n $inc && -f $inc/cudnn.h ]] || inc=$repo/.carry/cudnn/include
    if [[ -f $inc/cudnn.h ]]; then
      cudnn_inc=$inc cudnn_lib=$lib
      echo "cuDNN found by search: $cudnn_inc, $cudnn_lib"
      break
    fi
  done < <(timeout 40 find /usr /opt -name 'libcudnn.so*' 2>/dev/null | sort)
fi
cudnn_args=()
if [[ -n $cudnn_inc && -n $cudnn_lib ]]; then
  cudnn_lib=$(readlink -f "$cudnn_lib")
  cudnn_args=(-DCUDNN_INCLUDE_DIR="$cudnn_inc" -DCUDNN_LIBRARY="$cudnn_lib")
  cudnn_libdir=$(dirname "$cudnn_lib")
  export LD_LIBRARY_PATH="$cudnn_libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  header_version=$(grep -hE '#define CUDNN_(MAJOR|MINOR|PATCHLEVEL) ' "$cudnn_inc"/cudnn_version.h 2>/dev/null |
    awk '{printf "%s%s", sep, $3; sep="."}')
  echo "cuDNN header version (cudnn_version.h): ${header_version:-unknown}"
  # The version the library itself reports: the header and the .so can come from different places.
  runtime_version=""
  if [[ -n $python ]]; then
    runtime_version=$(timeout 30 "$python" - "$cudnn_lib" <<'PYEOF' 2>/dev/null
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])
lib.cudnnGetVersion.restype = ctypes.c_size_t
v = lib.cudnnGetVersion()
print("%d.%d.%d (cudnnGetVersion() = %d)" % (v // 10000, v % 10000 // 100, v % 100, v))
PYEOF
    )
  fi
  echo "cuDNN runtime version (libcudnn): ${runtime_version:-unknown (no python3, or the library did not load)}"
  cudnn_versions="header ${header_version:-?}, runtime ${runtime_version%% *}"
else
  echo "cuDNN: NOT FOUND (configure will stop with halfgrad's cuDNN message)"
fi
# The toolkit's libraries (cuBLASLt, cudart) for the tests and benchmarks, in case ld.so.conf lacks them.
for d in "$cuda_root/lib64" "$cuda_root/lib"; do
  [[ -n $cuda_root && -d $d ]] && export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$d"
done
echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"

# ---- (c) configure + build ------------------------------------------------------------------------
banner "configure $build"
carry=$repo/.carry
dep_args=()
use_all=${HG_CHECK_USE_CARRY:-0}
has_any() { local f; for f in "$@"; do [[ -e $f ]] && return 0; done; return 1; }
carry_for() {  # carry_for NAME SYSTEM_FILES... -- CMAKE_ARGS...: the args when the system lacks NAME
  local name=$1; shift
  local sys=()
  while [[ $1 != -- ]]; do sys+=("$1"); shift; done
  shift
  if [[ $use_all != 1 ]] && has_any "${sys[@]}"; then
    echo "  $name: system"
  elif [[ -d $carry ]]; then
    echo "  $name: .carry/"
    dep_args+=("$@")
  else
    echo "  $name: MISSING on this system and no .carry/ (run scripts/prepare-carry.sh where it is installed, carry .carry)"
  fi
}
echo "dependencies:"
carry_for Eigen3 /usr/share/eigen3/cmake/Eigen3Config.cmake /usr/lib/cmake/eigen3/Eigen3Config.cmake \
  /usr/local/share/eigen3/cmake/Eigen3Config.cmake -- -DEigen3_DIR="$carry/share/eigen3/cmake"
carry_for doctest /usr/lib/cmake/doctest/doctestConfig.cmake /usr/local/lib/cmake/doctest/doctestConfig.cmake \
  /usr/lib/x86_64-linux-gnu/cmake/doctest/doctestConfig.cmake -- -Ddoctest_DIR="$carry/lib/cmake/doctest"
carry_for CLI11 /usr/share/cmake/CLI11/CLI11Config.cmake /usr/lib/cmake/CLI11/CLI11Config.cmake \
  /usr/local/share/cmake/CLI11/CLI11Config.cmake -- -DCLI11_DIR="$carry/share/cmake/CLI11"
zlib_sys=()
[[ -f /usr/include/zlib.h ]] && zlib_sys=(/usr/lib/x86_64-linux-gnu/libz.so /usr/lib/x86_64-linux-gnu/libz.a /usr/lib/libz.so /usr/lib64/libz.so)
zlib_args=(-DZLIB_ROOT="$carry")
[[ -f $carry/lib/libz.a ]] && zlib_args+=(-DZLIB_USE_STATIC_LIBS=ON)
carry_for ZLIB "${zlib_sys[@]}" -- "${zlib_args[@]}"

gen_args=()
if [[ ! -f $build/CMakeCache.txt ]] && command -v ninja >/dev/null; then gen_args=(-G Ninja); fi
cuda_args=(-DHG_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90)
[[ -n $nvcc ]] && cuda_args+=(-DCMAKE_CUDA_COMPILER="$nvcc")
configure_cmd=(cmake -S "$repo" -B "$build" "${gen_args[@]}" -DCMAKE_BUILD_TYPE=Release "${cuda_args[@]}" -DHG_NATIVE=ON
  -DHG_BUILD_EXAMPLES=OFF -DHG_BUILD_BENCH=ON -DHG_BUILD_TESTS=ON "${cudnn_args[@]}" "${dep_args[@]}")
echo "${configure_cmd[*]}"
configured=0
if run_step configure 120 "$reserve_after_build" "$logs/configure.log" "${configure_cmd[@]}"; then
  configured=1
  grep -E 'halfgrad:|ZLIB|CUDAToolkit' "$logs/configure.log" | head -n 10
  grep -E '^(Eigen3_DIR|doctest_DIR|CLI11_DIR|ZLIB_LIBRARY[A-Z_]*|ZLIB_INCLUDE_DIR|CUDNN_LIBRARY|CUDNN_INCLUDE_DIR|CMAKE_CUDA_ARCHITECTURES|CMAKE_GENERATOR):' \
    "$build/CMakeCache.txt" | sed 's/^/  /'
else
  echo "configure FAILED (rc $last_rc); last lines:"
  tail -n 30 "$logs/configure.log"
fi

banner "build (-j$jobs)"
built_bench=0 built_cuda_tests=0 built_all=0
build_targets() {  # build_targets NAME CAP LOG TARGET...
  local name=$1 cap=$2 log=$3
  shift 3
  local targets=()
  local t
  for t in "$@"; do targets+=(--target "$t"); done
  run_step "$name" "$cap" "$reserve_after_build" "$log" cmake --build "$build" -j "$jobs" "${targets[@]}"
  local rc=$?
  echo "$name: ${step_results[-1]} in ${step_secs[-1]}s; $(grep -ci 'warning' "$log") warning line(s)"
  ((rc == 0)) || tail -n 40 "$log"
  return $rc
}
# What the GPU steps need is built first: the benchmark (so the table gets numbers even if time
# runs out), then test_cuda. The other targets (the CPU test programs) are built in step (g),
# before the rest of the suite runs.
if ((configured)); then
  build_targets build-gpu_bench "$build_cap" "$logs/build-bench.log" gpu_bench && built_bench=1
  if [[ -n ${HG_CHECK_TARGETS:-} ]]; then
    # shellcheck disable=SC2086
    build_targets build-targets "$build_cap" "$logs/build.log" $HG_CHECK_TARGETS
  else
    build_targets build-test_cuda "$build_cap" "$logs/build-test_cuda.log" test_cuda test_fp8_cuda test_attention_cuda test_op_db &&
      built_cuda_tests=1
  fi
else
  record build "skipped (configure failed)" 0
fi

# ---- (d) GPU tests: only after a complete build ------------------------------------------------------
# run_ctest NAME CAP RESERVE LOG ARGS...: ctest with a per-test timeout; prints the summary lines
# and the failures (the full log stays in LOG).
run_ctest() {
  local name=$1 cap=$2 reserve=$3 log=$4
  shift 4
  run_step "$name" "$cap" "$reserve" "$log" ctest --test-dir "$build" --timeout 120 --output-on-failure "$@"
  local rc=$?
  local passed failed
  passed=$(grep -cE 'Test +#[0-9]+: .* Passed' "$log")
  failed=$(grep -cE 'Test +#[0-9]+: .*(\*\*\*|Failed|Not Run|Timeout|Exception)' "$log")
  echo "$name: ${step_results[-1]} in ${step_secs[-1]}s; $passed passed, $failed not passed (counted from the log)"
  grep -E 'tests passed|tests failed|No tests were found|Total Test time' "$log"
  sed -n '/The following tests FAILED/,$p' "$log" | head -n 40
  return $rc
}
cuda_passed="-" cuda_failed="-"
if ((built_cuda_tests)); then
  banner "GPU tests: ctest -R '^(cuda\\.|op_db\\.cpu_matches_cuda)'"
  run_ctest tests-cuda 150 "$reserve_after_tests" "$logs/ctest-cuda.log" -R '^(cuda\.|op_db\.cpu_matches_cuda)' \
    -j "$((jobs < 8 ? jobs : 8))"
  cuda_passed=$(grep -cE 'Test +#[0-9]+: .* Passed' "$logs/ctest-cuda.log")
  cuda_failed=$(grep -cE 'Test +#[0-9]+: .*(\*\*\*|Failed|Not Run|Timeout|Exception)' "$logs/ctest-cuda.log")
else
  echo "GPU tests: not run (the library or test_cuda did not build, or HG_CHECK_TARGETS limited the build: a test never runs against a stale binary)"
  record tests-cuda "skipped (incomplete build)" 0
fi

# ---- (e) benchmarks -------------------------------------------------------------------------------
banner "bench: $build/bench/gpu_bench"
hg_csv=$logs/gpu_bench.csv torch_csv=$logs/torch_bench.csv
if [[ -x $build/bench/gpu_bench ]] && ((built_bench)); then
  run_step gpu_bench 90 60 "$logs/gpu_bench.log" "$build/bench/gpu_bench" --csv "$hg_csv" --seconds "$bench_seconds"
  cat "$logs/gpu_bench.log"
else
  echo "gpu_bench was not built"
  record gpu_bench "skipped (not built)" 0
fi
banner "bench: python3 bench/gpu_torch_bench.py"
if [[ -n $python ]]; then
  torch_env=(env)  # (env's options before its assignments)
  if [[ -n $orig_ld_set ]]; then torch_env+=(LD_LIBRARY_PATH="$orig_ld"); else torch_env+=(-u LD_LIBRARY_PATH); fi
  torch_env+=(PYTHONUNBUFFERED=1)
  run_step torch_bench 110 5 "$logs/torch_bench.log" "${torch_env[@]}" "$python" bench/gpu_torch_bench.py \
    --csv "$torch_csv" --seconds "$bench_seconds"
  grep -v -E 'UserWarning|warnings.warn' "$logs/torch_bench.log"
else
  record torch_bench "skipped (no python3)" 0
fi

# ---- (f) compute-sanitizer ------------------------------------------------------------------------------
# memcheck: the whole CUDA suite but the cuda.large.* sizes (minutes at the sanitizer's speed);
# racecheck (shared-memory hazards, much slower still): the cases whose kernels share memory
# (reductions, softmax, norms, cross_entropy, the AMP loop). Each writes its own report; the
# summary line ("ERROR SUMMARY" / "RACECHECK SUMMARY") goes into the table.
sanitizer=""
for candidate in "${cuda_root:+$cuda_root/bin/compute-sanitizer}" "$(command -v compute-sanitizer || true)" \
  "${cuda_root:+$cuda_root/compute-sanitizer/compute-sanitizer}"; do
  if [[ -n $candidate && -x $candidate ]]; then sanitizer=$candidate; break; fi
done
memcheck_summary="not run" racecheck_summary="not run"
# run_sanitizer TOOL CAP RESERVE DOCTEST_FILTER...: sets ${TOOL}_summary.
run_sanitizer() {
  local tool=$1 cap=$2 reserve=$3
  shift 3
  local report=$logs/sanitizer-$tool.txt out=$logs/sanitizer-$tool-output.log
  # (--report-api-errors no: the suite provokes API errors on purpose -- a 4 TiB cudaMalloc in the
  # out-of-memory test -- and every API error is an hg::Error anyway, which fails its test.)
  local -a args=(--tool "$tool" --report-api-errors no --print-limit 50 --error-exitcode 86 --log-file "$report")
  [[ $tool == memcheck ]] && args+=(--leak-check no)
  banner "compute-sanitizer --tool $tool"
  run_step "sanitizer-$tool" "$cap" "$reserve" "$out" "$sanitizer" "${args[@]}" "$build/tests/test_cuda" "$@"
  local rc=$? summary
  # (Only the sanitizer's own lines, "========= ...": a test's output could say "not supported".)
  local unsupported='^========= .*(not supported|unsupported|no supported)'
  if grep -qiE "$unsupported" "$report" 2>/dev/null; then
    summary="skipped: compute-sanitizer reports the device unsupported ($(grep -hiE "$unsupported" "$report" | head -n 1))"
    step_results[-1]="skipped (device unsupported)"
  elif [[ $tool == racecheck ]]; then
    summary=$(grep -h 'RACECHECK SUMMARY' "$report" 2>/dev/null | tail -n 1)
  else
    summary=$(grep -h 'ERROR SUMMARY' "$report" 2>/dev/null | tail -n 1)
  fi
  [[ -n $summary ]] || summary="no summary (rc $rc; see sanitizer-$tool.txt)"
  ((rc == 124 || rc == 137)) && summary="$summary (TIMEOUT: the report covers the cases that finished)"
  echo "$tool: ${summary#========= }"
  grep -E '^========= (Invalid|Program hit|Race|Error|Saved host backtrace)' "$report" 2>/dev/null | head -n 20
  tail -n 3 "$out"
  printf -v "${tool}_summary" '%s' "${summary#========= }"
}
if [[ ${HG_CHECK_SANITIZERS:-1} == 0 ]]; then
  echo "sanitizers: skipped (HG_CHECK_SANITIZERS=0)"
elif [[ -z $sanitizer ]]; then
  echo "sanitizers: skipped, compute-sanitizer is not installed (looked in the toolkit and on PATH)"
  memcheck_summary="skipped: compute-sanitizer not installed" racecheck_summary=$memcheck_summary
elif ! ((built_cuda_tests)); then
  echo "sanitizers: skipped (incomplete build)"
  memcheck_summary="skipped: incomplete build" racecheck_summary=$memcheck_summary
else
  echo "compute-sanitizer: $sanitizer ($("$sanitizer" --version 2>/dev/null | grep -iE 'version' | head -n 1))"
  run_sanitizer memcheck 180 60 --test-case-exclude='cuda.large.*'
  if [[ $memcheck_summary == skipped:* ]]; then
    racecheck_summary="skipped: device unsupported (see memcheck)"
  else
    # (cuda.nan_and_inf_inputs_match_cpu runs the sliced reductions and their combining kernel.)
    run_sanitizer racecheck 90 20 --test-case='cuda.reductions_match_cpu,cuda.nan_and_inf_inputs_match_cpu,cuda.softmax_and_log_softmax_match_cpu,cuda.layer_norm_matches_cpu,cuda.batch_norm_*,cuda.cross_entropy_and_mse_loss_match_cpu,cuda.scenario21_*'
  fi
fi

# ---- (g) the other targets and the rest of the suite, with the time left --------------------------------
if ((built_cuda_tests)); then
  banner "build everything else (-j$jobs)"
  reserve_after_build=45  # the rest of the suite's share
  build_targets build-all "$build_cap" "$logs/build.log" all && built_all=1
  if ((built_all)); then
    banner "the rest of the suite (CPU tests; the cuda. tests ran above): ctest -j$jobs"
    OMP_NUM_THREADS=2 run_ctest tests-rest 120 10 "$logs/ctest-rest.log" -E '^(cuda\.|op_db\.cpu_matches_cuda)' -j "$jobs"
  else
    echo "the rest of the suite: not run (the build did not complete)"
  fi
fi

# ---- the joined table -----------------------------------------------------------------------------
banner "halfgrad vs PyTorch eager on $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)"
table=$logs/gpu-check-table.md
joined=$logs/gpu-check-joined.csv
if [[ -n $python ]] && "$python" - "$hg_csv" "$torch_csv" "$joined" >"$table" 2>"$logs/table.err" <<'EOF'
import csv, math, sys

hg_path, torch_path, joined_path = sys.argv[1:4]

def load(path):
    out = {}
    try:
        with open(path) as f:
            for row in csv.DictReader(f):
                try:
                    value = float(row["value"])
                except (KeyError, ValueError):
                    value = float("nan")
                out[(row["section"], row["case"], row["precision"], row["metric"])] = value
    except OSError:
        pass
    return out

hg, pt = load(hg_path), load(torch_path)
nan = float("nan")
ok = lambda v: v is not None and not math.isnan(v)
def fmt(v, digits=1):
    return "%.*f" % (digits, v) if ok(v) else "-"
def ratio(a, b):
    return a / b if ok(a) and ok(b) and b != 0 else nan

order_prec = {"f32": 0, "tf32": 1, "f16": 2, "bf16": 3, "fp8": 4, "fp8_linear": 5, "f16_amp": 6, "bf16_amp": 7}
order_case = {"4096": 0, "8192": 1, "mlp_wide": 2, "cnn": 3}
order_metric = {"tflops": 0, "samples_per_s": 1, "step_peak_mib": 2, "reserved_mib": 3, "syncs_per_step": 4}
keys = sorted(set(hg) | set(pt), key=lambda k: (k[0] != "gemm", order_case.get(k[1], 9), k[1],
                                                order_metric.get(k[3], 9), order_prec.get(k[2], 9), k[2]))
units = {"tflops": "TFLOP/s", "samples_per_s": "samples/s", "step_peak_mib": "step peak MiB",
         "reserved_mib": "reserved MiB", "syncs_per_step": "host syncs/step", "forward_ms": "forward ms",
         "forward_backward_ms": "forward + backward ms"}
print("| what | case | precision | metric | halfgrad | PyTorch | halfgrad / PyTorch |")
print("|---|---|---|---|---|---|---|")
with open(joined_path, "w") as f:
    f.write("section,case,precision,metric,halfgrad,pytorch,ratio\n")
    for k in keys:
        a, b = hg.get(k, nan), pt.get(k, nan)
        digits = 0 if k[3] == "samples_per_s" else 2 if k[3] == "syncs_per_step" else 3 if k[3].endswith("_ms") else 1
        r = ratio(a, b)
        what = {"gemm": "GEMM n^3", "attention": "fused attention"}.get(k[0], "training")
        print("| %s | %s | %s | %s | %s | %s | %s |" % (what, k[1], k[2], units.get(k[3], k[3]), fmt(a, digits),
                                                        fmt(b, digits), ("%.2fx" % r) if ok(r) else "-"))
        f.write("%s,%s,%s,%s,%s,%s,%s\n" % (k + (a, b, r)))
print("\n(halfgrad / PyTorch: above 1 is faster for TFLOP/s and samples/s; below 1 is less memory for step peak MiB and "
      "reserved MiB.)")

def check(text, value, target, higher=True, fmt_value="%.2f"):
    if not ok(value):
        verdict, shown = "n/a (not measured)", "-"
    else:
        met = value >= target if higher else value <= target
        verdict, shown = ("met" if met else "NOT met"), fmt_value % value
    print("| %s | %s | %s %s | %s |" % (text, shown, ">=" if higher else "<=", target, verdict))

print("\n| target (H200) | measured | target | verdict |\n|---|---|---|---|")
check("f16 GEMM at 8192^3, TFLOP/s", hg.get(("gemm", "8192", "f16", "tflops"), nan), 600, fmt_value="%.1f")
gemm = lambda n, p: hg.get(("gemm", n, p, "tflops"), nan)
check("FP8 GEMM (cuBLASLt, E4M3) / bf16 GEMM at 4096^3", ratio(gemm("4096", "fp8"), gemm("4096", "bf16")), 1.5)
check("FP8 GEMM (cuBLASLt, E4M3) / bf16 GEMM at 8192^3", ratio(gemm("8192", "fp8"), gemm("8192", "bf16")), 1.5)
sps = lambda src, model, p: src.get(("train", model, p, "samples_per_s"), nan)
mem = lambda src, model, p: src.get(("train", model, p, "step_peak_mib"), nan)
check("mlp_wide: f16 AMP step speed / f32 step speed", ratio(sps(hg, "mlp_wide", "f16_amp"), sps(hg, "mlp_wide", "f32")), 2)
check("mlp_wide: f16 AMP step peak / f32 step peak", ratio(mem(hg, "mlp_wide", "f16_amp"), mem(hg, "mlp_wide", "f32")), 0.6,
      higher=False)
check("cnn: f16 AMP step peak / f32 step peak", ratio(mem(hg, "cnn", "f16_amp"), mem(hg, "cnn", "f32")), 0.6, higher=False)
for model in ("mlp_wide", "cnn"):
    for p in ("f16_amp", "bf16_amp"):
        check("%s %s: halfgrad samples/s / PyTorch eager AMP" % (model, p), ratio(sps(hg, model, p), sps(pt, model, p)), 1)
for model in ("mlp_wide", "cnn"):
    check("%s f16_amp: host syncs per step (step_async)" % model, hg.get(("train", model, "f16_amp", "syncs_per_step"), nan),
          0, higher=False)
EOF
then
  cat "$table"
else
  echo "(could not join the tables: $(tail -n 3 "$logs/table.err" 2>/dev/null)); the raw CSVs:"
  cat "$hg_csv" "$torch_csv" 2>/dev/null | tee "$table"
fi

# The checks that are not speeds, beside their targets.
build_warnings=$(cat "$logs"/build*.log 2>/dev/null | grep -ci 'warning')
verdict() { [[ $1 == "$2" ]] && echo met || echo "NOT met"; }
{
  printf '\n| check | measured | target | verdict |\n|---|---|---|---|\n'
  printf '| cuDNN versions | %s | header = runtime | %s |\n' "$cudnn_versions" \
    "$([[ $cudnn_versions == "header ${header_version:-x}, runtime ${header_version:-y}" ]] && echo met || echo check)"
  printf '| build warning lines | %s | 0 | %s |\n' "$build_warnings" "$(verdict "$build_warnings" 0)"
  printf '| cuda.* tests not passed (of %s passed) | %s | 0 | %s |\n' "$cuda_passed" "$cuda_failed" "$(verdict "$cuda_failed" 0)"
  printf '| compute-sanitizer memcheck | %s | 0 errors | %s |\n' "$memcheck_summary" \
    "$([[ $memcheck_summary == "ERROR SUMMARY: 0 errors" ]] && echo met || echo "see report")"
  printf '| compute-sanitizer racecheck | %s | 0 hazards | %s |\n' "$racecheck_summary" \
    "$([[ $racecheck_summary == "RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)" ]] && echo met || echo "see report")"
} | tee -a "$table"

# ---- summary + (i) one archive in $OUT ---------------------------------------------------------------
banner "steps"
status=0
printf '| step | result | seconds |\n|---|---|---|\n'
for i in "${!step_names[@]}"; do
  printf '| %s | %s | %s |\n' "${step_names[$i]}" "${step_results[$i]}" "${step_secs[$i]}"
  [[ ${step_results[$i]} == ok || ${step_results[$i]} == "skipped (device unsupported)" ]] || status=1
done
echo "total: $(elapsed)s of the ${budget}s budget; logs in $logs"
if [[ -n ${OUT:-} && -d ${OUT:-} ]]; then
  # At most 8 files come back from $OUT, so everything (logs, CSVs, sanitizer reports, tables, the
  # transcript so far) travels in one archive; the table and the transcript also come as themselves.
  sync
  # (tar may say the transcript changed while it read it: the archive is good all the same.)
  tar -czf "$OUT/gpu-check.tar.gz" -C "$(dirname "$logs")" "$(basename "$logs")" 2>/dev/null
  [[ -s $OUT/gpu-check.tar.gz ]] || echo "could not pack $logs into \$OUT/gpu-check.tar.gz"
  for f in "$table" "$joined"; do
    [[ -f $f ]] && cp "$f" "$OUT/"
  done
  echo "packed $logs into \$OUT/gpu-check.tar.gz ($(du -h "$OUT/gpu-check.tar.gz" 2>/dev/null | cut -f1)); table and transcript beside it"
  sync
  cp "$transcript" "$OUT/" 2>/dev/null
fi
exit $status
