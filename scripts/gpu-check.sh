#!/usr/bin/env bash
# gpu-check.sh: one command for a fresh GPU machine without network (the H200 lent through the
# device tool): configure for sm_90, build, run the GPU tests and the whole suite, then the GPU
# benchmarks of halfgrad (bench/gpu_bench) and PyTorch (bench/gpu_torch_bench.py), and print ONE
# table side by side with the issue's targets. Everything fits in about 8 minutes: each step has a
# timeout taken from one overall budget, and a failing step never stops the table from printing
# what was measured.
#
#   scripts/prepare-carry.sh          # here, once: headers the GPU machine lacks -> .carry/
#   bash scripts/gpu-check.sh         # there (device tool: carry [".carry"], timeout_s 600)
#
# Steps: (a) nvidia-smi and nvcc versions; (b) cuDNN: the toolkit's, else the pip wheel
# nvidia-cudnn-cu13 (CUDNN_INCLUDE_DIR/CUDNN_LIBRARY, LD_LIBRARY_PATH); (c) configure a Release
# build in build-gpu/ (-DHG_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DHG_NATIVE=ON, tests and
# benchmarks on, examples off), using .carry/ for every package the system lacks, and build it;
# (d) ctest -R '^cuda\.' then the rest of the suite; (e) both benchmarks and the joined table;
# (f) logs, CSVs and the table copied to $OUT when it is set.
#
# Knobs (environment): HG_CHECK_BUDGET (seconds for everything, default 465), HG_CHECK_BUILD_DIR
# (default build-gpu), HG_CHECK_TARGETS (build only these targets, e.g. for a dry run on a machine
# without a GPU), HG_CHECK_USE_CARRY=1 (take every package from .carry/), HG_CHECK_SECONDS (timed
# seconds per benchmark measurement, default 1.0), HG_CHECK_BUILD_TIMEOUT (cap per build step, 300).
# Exit status: 0 when every step ran and passed; 1 otherwise. Benchmark targets never fail it.
set -uo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo" || exit 1
t0=$SECONDS
# PyTorch runs with the environment it came with (its libraries' RUNPATHs pick its own CUDA
# wheels; the toolkit folders added below for halfgrad's programs could shadow them).
orig_ld_set=${LD_LIBRARY_PATH+1} orig_ld=${LD_LIBRARY_PATH-}
budget=${HG_CHECK_BUDGET:-465}
build=${HG_CHECK_BUILD_DIR:-build-gpu}
jobs=$(nproc 2>/dev/null || echo 4)
bench_seconds=${HG_CHECK_SECONDS:-1.0}
build_cap=${HG_CHECK_BUILD_TIMEOUT:-300}
[[ $build == /* ]] || build=$repo/$build
logs=$build/gpu-check
mkdir -p "$logs"
rm -f "$logs"/*.log "$logs"/*.csv "$logs"/*.md
transcript=$logs/gpu-check.log
exec > >(tee "$transcript") 2>&1

# Time kept back for the steps after the one running: both benchmarks and the table.
reserve_bench=170

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
cudnn_inc="" cudnn_lib=""
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
  grep -hE '#define CUDNN_(MAJOR|MINOR|PATCHLEVEL) ' "$cudnn_inc"/cudnn_version*.h 2>/dev/null | head -n 3
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
if run_step configure 120 "$reserve_bench" "$logs/configure.log" "${configure_cmd[@]}"; then
  configured=1
  grep -E 'halfgrad:|ZLIB|CUDAToolkit' "$logs/configure.log" | head -n 10
  grep -E '^(Eigen3_DIR|doctest_DIR|CLI11_DIR|ZLIB_LIBRARY[A-Z_]*|ZLIB_INCLUDE_DIR|CUDNN_LIBRARY|CUDNN_INCLUDE_DIR|CMAKE_CUDA_ARCHITECTURES|CMAKE_GENERATOR):' \
    "$build/CMakeCache.txt" | sed 's/^/  /'
else
  echo "configure FAILED (rc $last_rc); last lines:"
  tail -n 30 "$logs/configure.log"
fi

banner "build (-j$jobs)"
built_bench=0 built_all=0
build_targets() {  # build_targets NAME CAP LOG TARGET...
  local name=$1 cap=$2 log=$3
  shift 3
  local targets=()
  local t
  for t in "$@"; do targets+=(--target "$t"); done
  run_step "$name" "$cap" "$reserve_bench" "$log" cmake --build "$build" -j "$jobs" "${targets[@]}"
  local rc=$?
  echo "$name: ${step_results[-1]} in ${step_secs[-1]}s; $(grep -c 'warning:' "$log") warning line(s)"
  ((rc == 0)) || tail -n 40 "$log"
  return $rc
}
if ((configured)); then
  # The benchmark first: if the rest of the build runs out of time, the table still gets numbers.
  build_targets build-gpu_bench "$build_cap" "$logs/build-bench.log" gpu_bench && built_bench=1
  if [[ -n ${HG_CHECK_TARGETS:-} ]]; then
    # shellcheck disable=SC2086
    build_targets build-targets "$build_cap" "$logs/build.log" $HG_CHECK_TARGETS && built_all=1
  else
    build_targets build-all "$build_cap" "$logs/build.log" all && built_all=1
  fi
else
  record build "skipped (configure failed)" 0
fi

# ---- (d) tests ------------------------------------------------------------------------------------
# run_ctest NAME CAP LOG ARGS...: ctest with a per-test timeout; prints the summary lines and the
# failures (the full log stays in LOG).
run_ctest() {
  local name=$1 cap=$2 log=$3
  shift 3
  run_step "$name" "$cap" "$reserve_bench" "$log" ctest --test-dir "$build" --timeout 120 --output-on-failure "$@"
  local rc=$?
  local passed failed
  passed=$(grep -cE 'Test +#[0-9]+: .* Passed' "$log")
  failed=$(grep -cE 'Test +#[0-9]+: .*(\*\*\*|Failed|Not Run|Timeout|Exception)' "$log")
  echo "$name: ${step_results[-1]} in ${step_secs[-1]}s; $passed passed, $failed not passed (counted from the log)"
  grep -E 'tests passed|tests failed|No tests were found|Total Test time' "$log"
  sed -n '/The following tests FAILED/,$p' "$log" | head -n 40
  return $rc
}
if ((built_all)) || ((built_bench)); then
  banner "GPU tests: ctest -R '^cuda\\.'"
  run_ctest tests-cuda 120 "$logs/ctest-cuda.log" -R '^cuda\.' -j "$((jobs < 8 ? jobs : 8))"
  banner "the whole suite (without the cuda. tests just run): ctest -j$jobs"
  OMP_NUM_THREADS=2 run_ctest tests-all 150 "$logs/ctest-all.log" -E '^cuda\.' -j "$jobs"
else
  record tests "skipped (no build)" 0
fi

# ---- (e) benchmarks -------------------------------------------------------------------------------
banner "bench: $build/bench/gpu_bench"
hg_csv=$logs/gpu_bench.csv torch_csv=$logs/torch_bench.csv
if [[ -x $build/bench/gpu_bench ]]; then
  run_step gpu_bench 110 70 "$logs/gpu_bench.log" "$build/bench/gpu_bench" --csv "$hg_csv" --seconds "$bench_seconds"
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
  run_step torch_bench 130 5 "$logs/torch_bench.log" "${torch_env[@]}" "$python" bench/gpu_torch_bench.py \
    --csv "$torch_csv" --seconds "$bench_seconds"
  grep -v -E 'UserWarning|warnings.warn' "$logs/torch_bench.log"
else
  record torch_bench "skipped (no python3)" 0
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

order_prec = {"f32": 0, "tf32": 1, "f16": 2, "bf16": 3, "f16_amp": 4, "bf16_amp": 5}
order_case = {"4096": 0, "8192": 1, "mlp_wide": 2, "cnn": 3}
order_metric = {"tflops": 0, "samples_per_s": 1, "step_peak_mib": 2}
keys = sorted(set(hg) | set(pt), key=lambda k: (k[0] != "gemm", order_case.get(k[1], 9), k[1],
                                                order_metric.get(k[3], 9), order_prec.get(k[2], 9), k[2]))
units = {"tflops": "TFLOP/s", "samples_per_s": "samples/s", "step_peak_mib": "step peak MiB"}
print("| what | case | precision | metric | halfgrad | PyTorch | halfgrad / PyTorch |")
print("|---|---|---|---|---|---|---|")
with open(joined_path, "w") as f:
    f.write("section,case,precision,metric,halfgrad,pytorch,ratio\n")
    for k in keys:
        a, b = hg.get(k, nan), pt.get(k, nan)
        digits = 0 if k[3] == "samples_per_s" else 1
        r = ratio(a, b)
        what = "GEMM n^3" if k[0] == "gemm" else "training"
        print("| %s | %s | %s | %s | %s | %s | %s |" % (what, k[1], k[2], units.get(k[3], k[3]), fmt(a, digits),
                                                        fmt(b, digits), ("%.2fx" % r) if ok(r) else "-"))
        f.write("%s,%s,%s,%s,%s,%s,%s\n" % (k + (a, b, r)))
print("\n(halfgrad / PyTorch: above 1 is faster for TFLOP/s and samples/s; below 1 is less memory for step peak MiB.)")

def check(text, value, target, higher=True, fmt_value="%.2f"):
    if not ok(value):
        verdict, shown = "n/a (not measured)", "-"
    else:
        met = value >= target if higher else value <= target
        verdict, shown = ("met" if met else "NOT met"), fmt_value % value
    print("| %s | %s | %s %s | %s |" % (text, shown, ">=" if higher else "<=", target, verdict))

print("\n| target (H200) | measured | target | verdict |\n|---|---|---|---|")
check("f16 GEMM at 8192^3, TFLOP/s", hg.get(("gemm", "8192", "f16", "tflops"), nan), 600, fmt_value="%.1f")
sps = lambda src, model, p: src.get(("train", model, p, "samples_per_s"), nan)
mem = lambda src, model, p: src.get(("train", model, p, "step_peak_mib"), nan)
check("mlp_wide: f16 AMP step speed / f32 step speed", ratio(sps(hg, "mlp_wide", "f16_amp"), sps(hg, "mlp_wide", "f32")), 2)
check("mlp_wide: f16 AMP step peak / f32 step peak", ratio(mem(hg, "mlp_wide", "f16_amp"), mem(hg, "mlp_wide", "f32")), 0.6,
      higher=False)
check("cnn: f16 AMP step peak / f32 step peak", ratio(mem(hg, "cnn", "f16_amp"), mem(hg, "cnn", "f32")), 0.6, higher=False)
for model in ("mlp_wide", "cnn"):
    for p in ("f16_amp", "bf16_amp"):
        check("%s %s: halfgrad samples/s / PyTorch eager AMP" % (model, p), ratio(sps(hg, model, p), sps(pt, model, p)), 1)
EOF
then
  cat "$table"
else
  echo "(could not join the tables: $(tail -n 3 "$logs/table.err" 2>/dev/null)); the raw CSVs:"
  cat "$hg_csv" "$torch_csv" 2>/dev/null | tee "$table"
fi

# ---- summary + (f) $OUT -----------------------------------------------------------------------------
banner "steps"
status=0
printf '| step | result | seconds |\n|---|---|---|\n'
for i in "${!step_names[@]}"; do
  printf '| %s | %s | %s |\n' "${step_names[$i]}" "${step_results[$i]}" "${step_secs[$i]}"
  [[ ${step_results[$i]} == ok ]] || status=1
done
echo "total: $(elapsed)s of the ${budget}s budget; logs in $logs"
if [[ -n ${OUT:-} && -d ${OUT:-} ]]; then
  # At most 8 files come back from $OUT: the transcript, the table, the three CSVs, the build and test logs.
  for f in "$table" "$joined" "$hg_csv" "$torch_csv" "$logs/build.log" "$logs/ctest-all.log" "$logs/ctest-cuda.log"; do
    [[ -f $f ]] && cp "$f" "$OUT/"
  done
  echo "copied the table, CSVs and logs to \$OUT ($OUT)"
  sync
  cp "$transcript" "$OUT/" 2>/dev/null
fi
exit $status
