#!/usr/bin/env bash
# Regenerates the six figures of docs/amp.md and docs/results.md's MLP figure from the project's own programs:
#   hg-train --compare   (CNN, f32 vs f16+GradScaler vs bf16: loss and loss scale per step,
#                         gradient histogram, memory, samples/s -- once per CPU level for the speeds)
#   05_f16_underflow     (the toy whose gradients underflow f16: its gradient histogram)
#   09_shadow_check      (per-op error of one CNN step, f16 and bf16, against f32)
#   hg-train --model mlp (5 epochs per precision: docs/results.md's mlp_f32_5_epochs.png)
#   14_master_weights    (the share of updates a 16-bit weight loses; stochastic rounding)
#   15_fp8               (FP8 formats, delayed/current/block scaling, an amax history)
#   16_amp_recipes       (clipping, accumulation, two optimizers, inference, an overflow hunted, memory
#                         end to end: numbers only, no figure)
# then plots them with gnuplot into docs/img/amp_*.png, and writes every number the docs quote from
# these runs into docs/generated/numbers.json (scripts/figure_numbers.py) and from there into the
# pages' marked spans (tests/doc_numbers.py apply; the CTest docs.numbers_match_generated checks
# them). Needs only what scripts/run.sh installs.
#
#   scripts/figures.sh                  # ~5-10 minutes on 2 cores: 1 epoch x 3 precisions + short runs
#   scripts/figures.sh --quick          # a few hundred images per run: checks the pipeline in seconds
#                                       # (plots and numbers stay in the data dir: the docs are not touched)
#   scripts/figures.sh --data-only --quick --build-dir build --data-dir DIR   # what CTest runs (no plots)
set -euo pipefail
cd "$(dirname "$0")/.."

quick=0 data_only=0 build=build data=""
while [[ $# -gt 0 ]]; do
  case $1 in
    --quick) quick=1 ;;
    --data-only) data_only=1 ;;
    --build-dir) build=$2; shift ;;
    --data-dir) data=$2; shift ;;
    *) echo "figures.sh: unknown option $1 (see the header of scripts/figures.sh)" >&2; exit 1 ;;
  esac
  shift
done
data=${data:-$build/figures}
img=docs/img
[[ $quick -eq 1 ]] && img=$data/img  # a quick run's figures are not the docs'
mkdir -p "$data" "$img"
start=$(date +%s)
step() { echo "[figures $(( $(date +%s) - start ))s] $*"; }

if [[ $data_only -eq 0 ]]; then
  source scripts/deps.sh
  hg_install_missing gnuplot-nox
  [[ -f $build/CMakeCache.txt ]] || cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DHG_CUDA=AUTO
  step "building hg-train and lessons 05, 09, 16"
  cmake --build "$build" -j "$(nproc)" --target hg-train 05_f16_underflow 09_shadow_check 14_master_weights 15_fp8 16_amp_recipes
fi
train="$build/examples/hg-train"
# One training thread: the speeds are then comparable between machines and CPU levels, and the
# figures do not depend on what else the machine runs.
common=(--model cnn --threads 1 --epochs 1 --seed 0)
limit=(); short=(--train-limit 6400)
if [[ $quick -eq 1 ]]; then limit=(--train-limit 512); short=(--train-limit 256); fi

step "1/4 CNN, 1 epoch in f32, f16 + GradScaler and bf16 (~20 s each here; a progress bar on a terminal)"
"$train" "${common[@]}" "${limit[@]}" --compare --compare-csv "$data/compare.csv" \
  --log-steps "$data/steps.csv" --gradient-histogram "$data/gradient_histogram.csv"

step "2/4 the f16 run again with --growth-interval 50 (PyTorch's 2000 is never reached in one epoch)"
"$train" "${common[@]}" "${limit[@]}" --precision f16 --growth-interval 50 --log-steps "$data/steps_f16_growth50.csv" \
  | grep "^epoch"

# docs/results.md's figure: the MLP of its section 3, 5 epochs, in each precision (~1 s an epoch here).
mlp_epochs=5; [[ $quick -eq 1 ]] && mlp_epochs=2
for p in f32 f16 bf16; do
  step "2/4 MLP, $mlp_epochs epochs in $p (docs/results.md's figure)"
  "$train" --model mlp --threads 1 --seed 0 --epochs $mlp_epochs "${limit[@]}" --precision $p --out "$data/mlp_$p" \
    | grep "^epoch"
done

# The same comparison at every CPU level up to this machine's (HG_CPU_ISA caps the kernels), on
# a short run each: samples/s only.
native=$(awk -F, 'NR == 2 { print $2 }' "$data/compare.csv")
levels=(generic avx2 avx512 avx512bf16 amx)
[[ $(uname -m) == aarch64 ]] && levels=(generic neon neon-bf16)
for level in "${levels[@]}"; do
  for repeat in 1 2 3; do
    step "3/4 speed at CPU level $level, run $repeat of 3 (${short[*]})"
    HG_CPU_ISA=$level "$train" "${common[@]}" "${short[@]}" --compare --compare-csv "$data/speed_${level}_$repeat.csv" \
      | grep "done:"
  done
  [[ $level == "$native" ]] && break
done

step "4/4 lesson 05 (gradient histogram of the underflowing toy)"
"$build/examples/05_f16_underflow" --csv "$data" > "$data/lesson05.txt"
step "4/4 lesson 09 (shadow check of one CNN step)"
"$build/examples/09_shadow_check" --csv "$data" > "$data/lesson09.txt"
step "4/4 lesson 16 (AMP recipes and memory end to end: it checks its own numbers)"
"$build/examples/16_amp_recipes" --csv "$data" > "$data/lesson16.txt"
step "4/4 lessons 14 and 15 (master weights and stochastic rounding; FP8 recipes: they check their own numbers)"
"$build/examples/14_master_weights" --csv "$data" > "$data/lesson14.txt"
"$build/examples/15_fp8" --csv "$data" > "$data/lesson15.txt"

for f in compare.csv steps_f32.csv steps_f16.csv steps_bf16.csv steps_f16_growth50.csv gradient_histogram_f16.csv \
         lesson05_gradient_histogram.csv shadow_f16.csv shadow_bf16.csv lesson16.csv lesson15.csv lesson15_amax.csv \
         lesson14_stall_line.csv \
         mlp_f32/metrics.csv mlp_f16/metrics.csv mlp_bf16/metrics.csv; do
  [[ -s $data/$f ]] || { echo "figures.sh: $data/$f was not written" >&2; exit 1; }
done
# Every number the docs quote, computed from the files above (the quick CTest runs this too).
python3 scripts/figure_numbers.py "$data" "$data/numbers.json" --build-dir "$build" --seconds $(( $(date +%s) - start ))
if [[ $data_only -eq 1 ]]; then step "data in $data (no plots: --data-only)"; exit 0; fi

# ---- the plots (numbered as docs/amp.md shows them) ---------------------------------------------
# Tables gnuplot reads more easily than the programs' CSVs.
# Shadow errors as relative errors: op, f16 max, f16 mean, bf16 max, bf16 mean (rows that ran).
awk -F, 'NR > 1 && $10 != 0 { n[$1]++; label = $1 (n[$1] > 1 ? "-" n[$1] : "");
  print label, $11 * 2^-10, $12 * 2^-10 }' "$data/shadow_f16.csv" > "$data/shadow_f16.dat"
awk -F, 'NR > 1 && $10 != 0 { print $11 * 2^-7, $12 * 2^-7 }' "$data/shadow_bf16.csv" > "$data/shadow_bf16.dat"
paste -d' ' "$data/shadow_f16.dat" "$data/shadow_bf16.dat" > "$data/shadow.dat"
# Memory in MiB, one row per precision, the run's peak by part: live before a step (the dataset,
# the weights, the optimizer state, the other live tensors: hg-train's batch), then what the step
# adds at its peak (saved for backward, the gradients, the rest: transient buffers). The parts are
# measured (train/memory_parts.h); the last of each group is what its total leaves.
awk -F, 'NR == 1 { for (i = 1; i <= NF; ++i) c[$i] = i; next }
  function v(name) { return $c[name] / 2^20 }
  { live = v("live_before_step_bytes"); parts = v("dataset_bytes") + v("weight_bytes") + v("optimizer_state_bytes")
    print $1, v("dataset_bytes"), v("weight_bytes"), v("optimizer_state_bytes"), live - parts, v("activation_bytes"),
          v("gradient_bytes"), v("peak_bytes") - live - v("activation_bytes") - v("gradient_bytes") }' \
    "$data/compare.csv" > "$data/memory.dat"
# lesson 16's MLP, the same columns (key,value rows of lesson16.csv; its batch is made in the step)
awk -F, '$1 ~ /^mem\.mlp\.(f32|bf16)\./ { split($1, k, "."); v[k[3] "." k[4]] = $2 }
         END { split("f32 bf16", ps, " ");
               for (i = 1; i <= 2; ++i) { q = ps[i]; parts = v[q ".dataset_mib"] + v[q ".weights_mib"] + v[q ".optimizer_state_mib"]
                 print q, v[q ".dataset_mib"], v[q ".weights_mib"], v[q ".optimizer_state_mib"], v[q ".live_mib"] - parts,
                       v[q ".saved_mib"], v[q ".gradients_mib"], v[q ".step_peak_mib"] - v[q ".saved_mib"] - v[q ".gradients_mib"] } }' \
    "$data/lesson16.csv" > "$data/memory_mlp.dat"
# The key prints the parts no precision changes (f32's row), too thin to see beside the dataset.
memory_key() { awk '$1 == "f32" { printf "weights %.2f, optimizer state %.2f, gradients %.2f MiB", $3, $4, $7 }' "$1"; }
cnn_fixed=$(memory_key "$data/memory.dat")
mlp_fixed=$(memory_key "$data/memory_mlp.dat")
memory_top=$(awk '{ s = 0; for (i = 2; i <= NF; ++i) s += $i; if (s > m) m = s } END { print int(m * 1.08) + 1 }' \
  "$data/memory.dat" "$data/memory_mlp.dat")
for p in f32 f16 bf16; do  # step, loss, the mean of the last 20 steps' losses (one batch is noisy), applied
  awk -F, 'NR > 1 { l[NR % 20] = $3; n++; s = 0; for (k in l) s += l[k]; print $1, $3, s / (n < 20 ? n : 20), $5 }' \
    "$data/steps_$p.csv" > "$data/loss_$p.dat"
done
paste -d' ' "$data/loss_f32.dat" "$data/loss_f16.dat" "$data/loss_bf16.dat" > "$data/loss_all.dat"
# Speed: level, then best / slowest samples/s of the repeats for f32, f16, bf16 (a busy machine only
# ever slows a run down: the best is the speed, the spread is the noise).
: > "$data/speed.dat"
for level in "${levels[@]}"; do
  ls "$data"/speed_"$level"_*.csv > /dev/null 2>&1 || continue
  awk -F, -v level="$level" 'FNR > 1 { if ($5 > hi[$1]) hi[$1] = $5; if (!($1 in lo) || $5 < lo[$1]) lo[$1] = $5 }
    END { print level, hi["f32"], lo["f32"], hi["f16"], lo["f16"], hi["bf16"], lo["bf16"] }' \
    "$data"/speed_"$level"_*.csv >> "$data/speed.dat"
done
# The gradient histograms' shares per f16 zone (% of nonzero values): below 2^-24 (f16: 0),
# subnormal, normal, 2^16 and up (f16: inf) -- before and after unscaling.
zones() {
  awk -F, 'NR > 2 { t += $2; u += $3; z = ($1 < -24 ? 1 : $1 < -14 ? 2 : $1 < 16 ? 3 : 4); b[z] += $2; a[z] += $3 }
    END { for (z = 1; z <= 4; z++) printf "%.3g%% / %.3g%%%s", 100 * b[z] / t, 100 * a[z] / u, (z < 4 ? "|" : "\n") }' "$1"
}
IFS='|' read -r toy_zero toy_sub toy_normal toy_inf < <(zones "$data/lesson05_gradient_histogram.csv")
IFS='|' read -r cnn_zero cnn_sub cnn_normal cnn_inf < <(zones "$data/gradient_histogram_f16.csv")
cpu=$(grep -m1 "model name" /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//' || echo "this CPU")

step "plotting into $img/"
gnuplot <<EOF
set terminal pngcairo size 900,480 noenhanced font ",10"
set datafile separator " "
set grid ytics

# Figure 1. per-op shadow error, one panel per format, each with its correctly-rounded line
set output "$img/amp_shadow_error.png"
set terminal pngcairo size 1000,480 noenhanced font ",10"
set multiplot layout 1,2 title "One CNN forward (batch 64, 09_shadow_check): each op's error against its f32 re-run"
set style data histograms; set style histogram clustered gap 1; set style fill solid 0.8 border -1
set ylabel "relative error |low - f32| / max(|f32|, RMS)"; set logscale y; set format y "%.0e"
set yrange [1e-5:0.1]; set key top right; set xtics rotate by -30
set title "f16 autocast (eps = 2^-10)"
set arrow 1 from graph 0, first 2**-11 to graph 1, first 2**-11 nohead dt 2 lw 2 lc rgb "black" front
set label 1 "eps/2: one correct rounding" at graph 0.02, first 2**-11 * 1.4 front
plot "$data/shadow.dat" using 2:xtic(1) lc rgb "#f4a3a3" title "max", "" using 3 lc rgb "#d62728" title "mean", \
     "" using 0:(2e-5):((\$2 == 0) ? "exact: 0" : "") with labels notitle
set title "bf16 autocast (eps = 2^-7)"
set arrow 1 from graph 0, first 2**-8 to graph 1, first 2**-8 nohead dt 2 lw 2 lc rgb "black" front
set label 1 "eps/2: one correct rounding" at graph 0.02, first 2**-8 * 1.4 front
plot "$data/shadow.dat" using 4:xtic(1) lc rgb "#a6dba0" title "max", "" using 5 lc rgb "#2ca02c" title "mean", \
     "" using 0:(2e-5):((\$4 == 0) ? "exact: 0" : "") with labels notitle
unset multiplot
unset arrow 1; unset label 1; unset logscale y; set format y "%g"; set yrange [*:*]; set xtics norotate
set style data lines

# Figure 2. gradient histograms, log scale so the tails show, with each zone's share printed
set datafile separator ","
stats "$data/lesson05_gradient_histogram.csv" every ::2 using 2 nooutput; t05 = STATS_sum  # (before the ranges:
stats "$data/gradient_histogram_f16.csv" every ::2 using 2 nooutput; tcnn = STATS_sum     #  stats obeys them)
set output "$img/amp_gradient_histogram.png"
set terminal pngcairo size 1000,760 noenhanced font ",10"
set multiplot layout 2,1
set style fill transparent solid 0.6 noborder
set xlabel "base-2 exponent e of |gradient| (bin: 2^e <= |g| < 2^(e+1))"; set ylabel "share of nonzero values (log)"
set xrange [-50:20]; set logscale y; set yrange [1e-7:3]; set format y "%.0e"
set object 1 rect from -50, graph 0 to -24, graph 1 fc rgb "#f4cccc" fs solid 0.5 noborder behind
set object 2 rect from -24, graph 0 to -14, graph 1 fc rgb "#fce5cd" fs solid 0.5 noborder behind
set object 3 rect from 16, graph 0 to 20, graph 1 fc rgb "#f4cccc" fs solid 0.5 noborder behind
set key at graph 0.99, graph 0.55 right
set label 1 "f16: 0\nscaled / true:\n$toy_zero" at -49, graph 0.9; set label 2 "f16 subnormal\n\n$toy_sub" at -23.5, graph 0.9
set label 3 "f16 normal (bf16: all of it)\n\n$toy_normal" at -13, graph 0.9; set label 4 "f16 inf\n\n$toy_inf" at 16.3, graph 0.9
set title "Lesson 05's toy (gradients ~1e-8), 100 steps at scale 2^16: before unscaling (scaled) vs after (true values)"
plot "$data/lesson05_gradient_histogram.csv" every ::2 using 1:(\$2 > 0 ? \$2/t05 : 1/0) with boxes lc rgb "#d62728" title "before unscaling (x 2^16)", \
     "" every ::2 using 1:(\$3 > 0 ? \$3/t05 : 1/0) with boxes lc rgb "#1f77b4" title "after unscaling (what the optimizer uses)"
set label 1 "f16: 0\nscaled / true:\n$cnn_zero"; set label 2 "f16 subnormal\n\n$cnn_sub"
set label 3 "f16 normal (bf16: all of it)\n\n$cnn_normal"; set label 4 "f16 inf\n\n$cnn_inf"
set title "CNN, 1 epoch under f16 autocast with a GradScaler: every parameter gradient of every step"
plot "$data/gradient_histogram_f16.csv" every ::2 using 1:(\$2 > 0 ? \$2/tcnn : 1/0) with boxes lc rgb "#d62728" title "before unscaling (x scale)", \
     "" every ::2 using 1:(\$3 > 0 ? \$3/tcnn : 1/0) with boxes lc rgb "#1f77b4" title "after unscaling"
unset multiplot
unset object 1; unset object 2; unset object 3; unset label 1; unset label 2; unset label 3; unset label 4
unset logscale y; set format y "%g"; set yrange [*:*]; set xrange [*:*]; set key default
set terminal pngcairo size 900,480 noenhanced font ",10"

# Figure 3. the loss scale (the two runs share their first steps: the second is dashed on top)
set output "$img/amp_scale.png"
set title "Loss scale of the f16 runs per step: x0.5 and skip on overflow, x2 after growth_interval clean steps"
set xlabel "step"; set ylabel "log2(loss scale)"; set ytics 1 nomirror; set key outside below; set offsets 0, 0, 1, 0.5
set y2label "log2(largest scaled gradient)"; set y2tics 2; set y2range [*:17]
set arrow 4 from graph 0, second log(65504)/log(2) to graph 1, second log(65504)/log(2) nohead dt 3 lc rgb "#555555"
plot "$data/steps_f16.csv" every ::1 using 1:(\$6 > 0 ? log(\$6)/log(2) : 1/0) axes x1y2 with points pt 7 ps 0.3 lc rgb "#f4a582" title "largest scaled gradient, default run (right; dotted: f16's 65504)", \
     "$data/steps_f16.csv" every ::1 using 1:(log(\$4)/log(2)) with steps lw 4 lc rgb "#d62728" title "growth_interval 2000 (default)", \
     "$data/steps_f16_growth50.csv" every ::1 using 1:(log(\$4)/log(2)) with steps lw 2 dt 2 lc rgb "#9467bd" title "growth_interval 50", \
     "$data/steps_f16.csv" every ::1 using 1:(\$5 == 0 ? log(\$4)/log(2) : 1/0) with points pt 7 ps 1.5 lc rgb "black" title "skipped step", \
     "$data/steps_f16_growth50.csv" every ::1 using 1:(\$5 == 0 ? log(\$4)/log(2) : 1/0) with points pt 7 ps 1.5 lc rgb "black" notitle
set ytics autofreq mirror; set key default; set offsets 0, 0, 0, 0; unset y2tics; set y2label ""; set y2range [*:*]
unset arrow 4

# Figure 4. loss per step, f32 dashed on top; below, each 16-bit run's difference from f32
set datafile separator " "
set output "$img/amp_loss.png"
set terminal pngcairo size 900,640 noenhanced font ",10"
set multiplot layout 2,1 margins 0.1, 0.97, 0.09, 0.93 spacing 0, 0.11
set title "CNN on Fashion-MNIST, 1 epoch, batch 128: training loss (hg-train --compare --log-steps)"
set xlabel ""; set ylabel "loss (thick: mean of last 20 steps)"; set logscale y
plot "$data/loss_f16.dat" using 1:2 with lines lw 1 lc rgb "#f4c2c2" title "f16, each step's batch", \
     "$data/loss_f16.dat" using 1:3 with lines lw 3 lc rgb "#d62728" title "f16 + GradScaler", \
     "$data/loss_bf16.dat" using 1:3 with lines lw 3 lc rgb "#2ca02c" title "bf16", \
     "$data/loss_f32.dat" using 1:3 with lines lw 2 dt 2 lc rgb "black" title "f32 (dashed, on top)", \
     "$data/loss_f16.dat" using 1:(\$4 == 0 ? \$2 : 1/0) with points pt 7 ps 1.5 lc rgb "black" title "f16 step skipped (inf/NaN gradient)"
unset logscale y
set title "difference from f32 (means of the last 20 steps)"; set xlabel "step"; set ylabel "loss - f32's loss"
plot 0 with lines lc rgb "black" dt 2 notitle, \
     "$data/loss_all.dat" using 1:(\$7 - \$3) with lines lw 2 lc rgb "#d62728" title "f16 - f32", \
     "" using 1:(\$11 - \$3) with lines lw 2 lc rgb "#2ca02c" title "bf16 - f32"
unset multiplot
set terminal pngcairo size 900,480 noenhanced font ",10"

# Figure 5. memory: the run's peak by part, stacked -- the CNN, and lesson 16's MLP counter-example
set output "$img/amp_memory.png"
set terminal pngcairo size 1000,600 noenhanced font ",10"
set multiplot layout 1,2 margins 0.07, 0.98, 0.27, 0.85 spacing 0.07, 0 title "The run's peak memory by part: the 16-bit saving applies to the activations, not to what is live before a step"
set style data histograms; set style histogram rowstacked; set style fill solid 0.85 border -1; set boxwidth 0.6
set xlabel "precision"; set ylabel "MiB"; set yrange [0:$memory_top]
set key at screen 0.5, screen 0.15 center top vertical maxrows 4 Left reverse samplen 2 width 2
set title "CNN, batch 128 (hg-train --compare)\n$cnn_fixed"
plot "$data/memory.dat" using 2:xtic(1) lc rgb "#bbbbbb" title "dataset (u8 images, i64 labels)", \
     "" using 3 lc rgb "#08519c" title "weights (f32)", \
     "" using 4 lc rgb "#6baed6" title "optimizer state (momentum, f32)", \
     "" using 5 lc rgb "#e7e1ef" title "other live tensors (hg-train: the batch)", \
     "" using 6 lc rgb "#ff7f0e" title "step: saved for backward (activations)", \
     "" using 7 lc rgb "#d62728" title "step: gradients (f32)", \
     "" using 8 lc rgb "#fdd0a2" title "step: the rest (transient buffers)"
set title "MLP, batch 128 (lesson 16): tiny activations, no saving\n$mlp_fixed"; unset key
plot "$data/memory_mlp.dat" using 2:xtic(1) lc rgb "#bbbbbb", "" using 3 lc rgb "#08519c", "" using 4 lc rgb "#6baed6", \
     "" using 5 lc rgb "#e7e1ef", "" using 6 lc rgb "#ff7f0e", "" using 7 lc rgb "#d62728", "" using 8 lc rgb "#fdd0a2"
unset multiplot
set key default; set boxwidth; set yrange [*:*]; set lmargin; set rmargin; set tmargin; set bmargin
set terminal pngcairo size 900,480 noenhanced font ",10"

# Figure 6. speed: samples/s with the repeats' spread, and each precision's ratio to f32
set output "$img/amp_speed.png"
set terminal pngcairo size 900,640 noenhanced font ",10"
set multiplot layout 2,1 margins 0.1, 0.97, 0.1, 0.92 spacing 0, 0.1
set title "CNN training speed, one thread, per precision and CPU level -- $cpu"
set style histogram errorbars gap 2 lw 1; set style fill solid 0.8 border -1
set xlabel ""; set ylabel "samples/s (bar: best; whisker: slowest)"; set key below; set yrange [0:*]
plot "$data/speed.dat" using 2:3:2:xtic(1) lc rgb "#1f77b4" title "f32", "" using 4:5:4 lc rgb "#d62728" title "f16 + GradScaler", \
     "" using 6:7:6 lc rgb "#2ca02c" title "bf16"
set title ""; set style histogram clustered gap 2; set xlabel "CPU level (HG_CPU_ISA, best of the repeats)"
set ylabel "x f32"; unset key; set yrange [0:*]
set arrow 1 from graph 0, first 1 to graph 1, first 1 nohead dt 2 lw 2 lc rgb "#1f77b4" front
plot "$data/speed.dat" using (\$4/\$2):xtic(1) lc rgb "#d62728", "" using (\$6/\$2) lc rgb "#2ca02c", \
     "" using (\$0 - 0.17):(\$4/\$2):(sprintf("%.2f", \$4/\$2)) with labels offset 0,0.7 notitle, \
     "" using (\$0 + 0.17):(\$6/\$2):(sprintf("%.2f", \$6/\$2)) with labels offset 0,0.7 notitle
unset multiplot

# docs/results.md's figure: the MLP's 5 epochs in each precision (hg-train --out's metrics.csv)
set output "$img/mlp_f32_5_epochs.png"
set terminal pngcairo size 1000,460 noenhanced font ",10"
set datafile separator ","; set lmargin; set rmargin; set tmargin; set bmargin
set multiplot layout 1,2 title "MLP 784-256-128-10 on Fashion-MNIST, seed 0, one thread (hg-train --model mlp --epochs $mlp_epochs --out): f32, f16 + GradScaler, bf16"
set style data linespoints; set xlabel "epoch"; set xtics 1; unset arrow 1; set key default; set key inside top right
set title "training loss, mean over the epoch (axis from 0)"; set ylabel "loss"; set yrange [0:*]
plot "$data/mlp_f32/metrics.csv" every ::1 using 1:2 lw 2 dt 2 pt 7 lc rgb "black" title "f32", \
     "$data/mlp_f16/metrics.csv" every ::1 using 1:2 lw 2 pt 5 lc rgb "#d62728" title "f16 + GradScaler", \
     "$data/mlp_bf16/metrics.csv" every ::1 using 1:2 lw 2 pt 9 lc rgb "#2ca02c" title "bf16"
set title "test accuracy (NOTE: the axis does not start at 0)"; set ylabel "test accuracy, %"; set yrange [*:*]
set key inside bottom right
plot "$data/mlp_f32/metrics.csv" every ::1 using 1:(100*\$3) lw 2 dt 2 pt 7 lc rgb "black" title "f32", \
     "$data/mlp_f16/metrics.csv" every ::1 using 1:(100*\$3) lw 2 pt 5 lc rgb "#d62728" title "f16 + GradScaler", \
     "$data/mlp_bf16/metrics.csv" every ::1 using 1:(100*\$3) lw 2 pt 9 lc rgb "#2ca02c" title "bf16"
unset multiplot

# Figure 7. the formats' ranges on one exponent line, over the CNN's true gradients (log y)
set output "$img/amp_fp8_range.png"
set terminal pngcairo size 1000,640 noenhanced font ",10"
set multiplot layout 2,1 title "What each format holds, unscaled (light: subnormals), above the CNN's gradients under f16 autocast (after unscaling)"
set lmargin 10; set xrange [-50:20]; set xtics 5; set xlabel ""; unset key; set ylabel ""; set yrange [0.4:5.6]; set title ""
set ytics ("E5M2" 1, "E4M3" 2, "f16" 3, "bf16" 4, "f32" 5); set style fill solid 0.8 noborder
# row, subnormals from, normals from, overflow from (base-2 exponents; the separator is still ",")
\$ranges << EOD
1,-16,-14,16
2,-9,-6,9
3,-24,-14,16
4,-133,-126,128
5,-149,-126,128
EOD
plot \$ranges using (0.5*(\$2+\$3)):1:(0.5*(\$3-\$2)):(0.3) with boxxyerror lc rgb "#9ecae1", \
     \$ranges using (0.5*(\$3+\$4)):1:(0.5*(\$4-\$3)):(0.3) with boxxyerror lc rgb "#08519c"
set ytics autofreq; set yrange [1e-7:3]; set logscale y; set format y "%.0e"
set xlabel "base-2 exponent e of |value| (bin: 2^e <= |g| < 2^(e+1))"; set ylabel "share of nonzero gradients (log)"
set title "CNN, 1 epoch under f16 autocast: every parameter gradient of every step, after unscaling"
set style fill transparent solid 0.6 noborder
plot "$data/gradient_histogram_f16.csv" every ::2 using 1:(\$3 > 0 ? \$3/tcnn : 1/0) with boxes lc rgb "#1f77b4" title "CNN gradients"
unset multiplot
unset logscale y; set format y "%g"; set yrange [*:*]; set xrange [*:*]; set ytics autofreq; set xtics autofreq
set key default; set lmargin

# Figure 8. delayed scaling: the amax history of lesson 15's MLP (first layer) and the scales it gives
set output "$img/amp_fp8_amax.png"
set terminal pngcairo size 1000,480 noenhanced font ",10"
set title "Lesson 15: delayed scaling of the first Linear while the MLP trains (the scale of step t comes from the amax of steps before t)"
set xlabel "step"; set ylabel "amax (log)"; set y2label "log2(scale)"; set logscale y; set format y "%.0e"
set ytics nomirror; set y2tics; set key outside below
plot "$data/lesson15_amax.csv" every ::1 using 1:2 with lines lw 2 lc rgb "#1f77b4" title "activation amax", \
     "" every ::1 using 1:4 with lines lw 2 lc rgb "#d62728" title "gradient amax", \
     "" every ::1 using 1:(log(\$3)/log(2)) axes x1y2 with steps lw 2 dt 2 lc rgb "#1f77b4" title "activation scale (E4M3)", \
     "" every ::1 using 1:(log(\$5)/log(2)) axes x1y2 with steps lw 2 dt 2 lc rgb "#d62728" title "gradient scale (E5M2)"
unset logscale y; set format y "%g"; unset y2tics; set y2label ""; set ytics mirror; set key default

# Figure 9. lesson 14: the share of updates round-to-nearest loses, against update / weight
set output "$img/amp_master_weights.png"
set title "Lesson 14: the share of SGD updates a 16-bit weight loses, by update / weight (dashed: the stall lines 2^-11 f16, 2^-8 bf16)"
set xlabel "update / weight (log2)"; set ylabel "share of updates lost"; set yrange [0:1.05]; set key outside below
set arrow 2 from -11, graph 0 to -11, graph 1 nohead dt 2 lw 2 lc rgb "#d62728"
set arrow 3 from -8, graph 0 to -8, graph 1 nohead dt 2 lw 2 lc rgb "#2ca02c"
plot "$data/lesson14_stall_line.csv" every ::1 using (log(\$1)/log(2)):2 with linespoints lw 2 pt 5 lc rgb "#d62728" title "f16, round to nearest", \
     "" every ::1 using (log(\$1)/log(2)):3 with linespoints lw 2 pt 4 dt 3 lc rgb "#d62728" title "f16, stochastic", \
     "" every ::1 using (log(\$1)/log(2)):4 with linespoints lw 2 pt 9 lc rgb "#2ca02c" title "bf16, round to nearest", \
     "" every ::1 using (log(\$1)/log(2)):5 with linespoints lw 2 pt 8 dt 3 lc rgb "#2ca02c" title "bf16, stochastic"
unset arrow 2; unset arrow 3
EOF
if [[ $quick -eq 0 ]]; then  # the docs take their numbers from this run
  mkdir -p docs/generated
  cp "$data/numbers.json" docs/generated/numbers.json
  python3 tests/doc_numbers.py apply .
fi
step "done: $(ls $img/amp_*.png $img/mlp_*.png | tr '\n' ' ')"
