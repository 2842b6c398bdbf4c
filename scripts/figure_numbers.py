#!/usr/bin/env python3
"""Every number the docs quote from scripts/figures.sh's runs, computed from what the runs wrote.

  scripts/figure_numbers.py DATA_DIR OUT.json --build-dir DIR --seconds S

DATA_DIR holds hg-train's CSVs and lessons 05, 09 and 16's output (scripts/figures.sh names each file).
OUT.json gets the commit, the CPU, its level, the build flags, the hash of every measured source
file (tests/doc_numbers.py: which files, and how docs.numbers_match_generated uses them) and one
entry per number: its value, the text the pages print, and what it is. Standard library only.
"""
import csv
import json
import math
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
import doc_numbers  # noqa: E402  (the measured-file list and its hashing live with the check)

PRECISIONS = ("f32", "f16", "bf16")
LEVELS = ("generic", "avx2", "avx512", "avx512bf16", "amx", "neon", "neon-bf16")  # HG_CPU_ISA, lowest first


class Numbers:
    """name -> {value, text, what}; `text` is what apply writes into the pages."""

    def __init__(self):
        self.entries = {}

    def add(self, name, value, fmt, what):
        if isinstance(value, list):
            text = ", ".join(format(v, fmt) for v in value)
        elif fmt == "spaced":  # 802 816: the docs' thousands separator
            text = format(value, ",d").replace(",", "\u202f")
        else:
            text = format(value, fmt)
        self.entries[name] = {"value": value, "text": text, "what": what}

    def block(self, name, text, what, fenced=False):
        text = text.rstrip("\n")
        self.entries[name] = {"text": f"```\n{text}\n```" if fenced else text, "what": what}


def rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(line for line in f if not line.startswith("#")))


def ratio(a, b):
    return round(a / b, 2) if b else float("nan")


# ---- hg-train --compare: loss, accuracy, memory, the loss scale ---------------------------------
def compare_numbers(n, data):
    by = {r["precision"]: r for r in rows(data / "compare.csv")}
    mib = {p: tuple(int(by[p][k]) / 2**20 for k in ("step_peak_bytes", "activation_bytes", "peak_bytes")) for p in by}
    for p, r in by.items():
        n.add(f"cnn.{p}.final_loss", float(r["final_loss"]), ".4f", f"{p}: training loss of the epoch's last step")
        n.add(f"cnn.{p}.test_accuracy", round(100 * float(r["test_accuracy"]), 2), ".2f", f"{p}: test accuracy, %")
        n.add(f"cnn.{p}.skipped", int(r["skipped"]), "d", f"{p}: steps the GradScaler skipped")
        n.add(f"cnn.{p}.step_peak_mib", mib[p][0], ".1f", f"{p}: most one step allocated above what was live, MiB")
        n.add(f"cnn.{p}.saved_mib", mib[p][1], ".1f", f"{p}: held by the graph after the forward, MiB")
        n.add(f"cnn.{p}.step_peak_ratio", ratio(mib[p][0], mib["f32"][0]), ".2f", f"{p}: step peak / f32's")
        n.add(f"cnn.{p}.saved_ratio", ratio(mib[p][1], mib["f32"][1]), ".2f", f"{p}: saved for backward / f32's")
        n.add(f"cnn.{p}.run_peak_mib", mib[p][2], ".1f", f"{p}: the run's peak of all live memory, MiB")
        n.add(f"cnn.{p}.run_peak_ratio", ratio(mib[p][2], mib["f32"][2]), ".2f", f"{p}: run peak / f32's")
    n.block("cnn.memory_table", "\n".join(
        ["| | " + " | ".join(PRECISIONS) + " |", "|---|---|---|---|"] +
        [f"| {label} | " + " | ".join(f"{mib[p][k]:.1f} MiB" + ("" if p == "f32" else f" ({ratio(mib[p][k], mib['f32'][k]):.2f}×)")
                                    for p in PRECISIONS) + " |"
         for k, label in ((0, "step peak"), (1, "saved for backward"), (2, "run peak (all live memory)"))]),
        "figure's table: step peak and saved-for-backward memory per precision")
    return by[PRECISIONS[0]]["isa"]


def scale_numbers(n, data):
    steps = {p: rows(data / f"steps_{p}.csv") for p in PRECISIONS}
    n.add("cnn.steps", len(steps["f32"]), "d", "steps of the epoch (batch 128)")
    f16 = steps["f16"]
    skipped = [int(r["step"]) for r in f16 if r["applied"] == "0"]
    log2 = [round(math.log2(float(r["scale"]))) for r in f16]
    n.add("cnn.f16.skipped_steps", skipped, "d", "f16, growth interval 2000: the steps that overflowed")
    n.add("cnn.f16.first_scale_log2", log2[0], "d", "f16: log2 of the first step's loss scale")
    n.add("cnn.f16.last_scale_log2", log2[-1], "d", "f16: log2 of the last step's loss scale")
    n.add("cnn.f16.clean_steps_after_last_skip", len(f16) - (skipped[-1] if skipped else 0), "d",
          "f16: applied steps after the last skipped one (all of them when none was skipped)")
    g50 = rows(data / "steps_f16_growth50.csv")
    late = [round(math.log2(float(r["scale"]))) for r in g50[len(g50) // 2:]]
    n.add("g50.skipped_steps", [int(r["step"]) for r in g50 if r["applied"] == "0"], "d",
          "f16, growth interval 50: the steps that overflowed")
    n.add("g50.late_scale_log2_min", min(late), "d", "growth interval 50: smallest log2 scale in the epoch's second half")
    n.add("g50.late_scale_log2_max", max(late), "d", "growth interval 50: largest log2 scale in the epoch's second half")


# ---- gradient histograms: shares by f16 zone ------------------------------------------------------
def histogram(path):
    """(zeros, {exponent: before}, {exponent: after}) of an amp::GradientHistogram CSV."""
    first = Path(path).read_text().splitlines()[0]
    zeros = int(re.search(r"zeros before/after: (\d+)", first).group(1))
    table = rows(path)
    return (zeros, {int(r["exponent"]): int(r["before"]) for r in table},
            {int(r["exponent"]): int(r["after"]) for r in table})


def share(bins, lo=-10**9, hi=10**9):
    """% of the nonzero values whose exponent e has lo <= e < hi."""
    total = sum(bins.values())
    return 100.0 * sum(c for e, c in bins.items() if lo <= e < hi) / total if total else 0.0


def histogram_numbers(n, data):
    for p in PRECISIONS:
        zeros, before, _ = histogram(data / f"gradient_histogram_{p}.csv")
        n.add(f"hist.{p}.zero_share", 100.0 * zeros / (zeros + sum(before.values())), ".1f",
              f"{p}: % of all gradient values (every parameter, every step) exactly 0")
    zeros, before, after = histogram(data / "gradient_histogram_f16.csv")
    n.add("hist.f16.values_millions", (zeros + sum(before.values())) / 1e6, ".1f", "f16: gradient values binned, millions")
    n.add("hist.f16.after_below_m24", share(after, hi=-24), ".2f", "f16, unscaled: % of nonzero values below 2^-24")
    # GradientHistogram::fp8_flushed_fraction's rule: a power-of-two scale fitted to the top bin
    # (2^floor(log2 largest) / 2^(top + 1)) and values below half the smallest subnormal flush.
    top = max(e for e, c in after.items() if c > 0)
    for fmt, log2_largest, half_subnormal in (("e4m3", 8, -10), ("e5m2", 15, -17)):
        n.add(f"hist.f16.{fmt}_flushed_pct", share(after, hi=half_subnormal - (log2_largest - top - 1)), ".2g",
              f"CNN gradients: % of nonzero values {fmt} flushes with a per-tensor scale fitted to the largest")
    n.add("hist.f16.after_below_m14", share(after, hi=-14), ".1f", "f16, unscaled: % of nonzero values below 2^-14")
    n.add("hist.f16.before_below_m24", share(before, hi=-24), ".3f", "f16, scaled: % of nonzero values below 2^-24")
    n.add("hist.f16.before_subnormal", share(before, -24, -14), ".1f", "f16, scaled: % in f16's subnormal range")
    n.add("hist.f16.after_mode", max(after, key=after.get), "d", "f16, unscaled: the most populated exponent bin")
    n.add("hist.f16.before_max_exponent", max(e for e, c in before.items() if c), "d", "f16, scaled: the largest bin")
    _, before, after = histogram(data / "lesson05_gradient_histogram.csv")
    n.add("toy.after_below_m24", share(after, hi=-24), ".0f", "lesson 05, unscaled: % of nonzero values below 2^-24")
    n.add("toy.before_below_m24", share(before, hi=-24), ".0f", "lesson 05, x 2^16: % of nonzero values below 2^-24")
    n.add("toy.before_subnormal", share(before, -24, -14), ".0f", "lesson 05, x 2^16: % in f16's subnormal range")


# ---- lesson 05: the toy's losses and its dynamic scale ----------------------------------------------
def lesson05_numbers(n, data):
    text = (data / "lesson05.txt").read_text()
    for key, label in (("f32", "f32"), ("f16_unscaled", "f16, no scaling"), ("f16_scaled", r"f16, scale \d+")):
        m = re.search(rf"^\s+{label}\s+(\S+)\s+(\S+)\s+(\d+) of (\d+)", text, re.M)
        n.add(f"toy.{key}.loss_start", float(m.group(1)), ".3g", f"lesson 05, {key}: loss at step 0")
        n.add(f"toy.{key}.loss_end", float(m.group(2)), ".3g", f"lesson 05, {key}: loss after 100 steps")
        n.add(f"toy.{key}.zero_gradients", int(m.group(3)), "d", f"lesson 05, {key}: gradient elements that were 0")
    n.add("toy.gradient_elements", int(m.group(4)), "d", "lesson 05: gradient elements over the 100 steps")
    table = re.findall(r"^\s+(\d+)\s+2\^(\d+)\s+(yes|no)\s+(SKIP|yes)\s", text, re.M)
    n.block("toy.dynamic_scale", sawtooth([(int(s), int(e), a == "SKIP") for s, e, _, a in table]),
            "lesson 05 part 3: the steps where the dynamic scale changed", fenced=True)


def sawtooth(table, columns=13):
    """The first skipped steps and then each step where the scale moved, as three aligned rows."""
    first_ok = next(i for i, (_, _, skip) in enumerate(table) if not skip)
    picked = [r for i, r in enumerate(table) if i <= first_ok or r[1] != table[i - 1][1]][:columns]
    cells, last = [], None
    for step, exponent, skip in picked:
        if last is not None and step > last + 1:
            cells.append(("...", "", ""))
        cells.append((str(step), f"2^{exponent}", "skip" if skip else "ok"))
        last = step
    lines = [f"{label:5}" + "".join(f" {c[k]:>4}" for c in cells) for k, label in enumerate(("step", "scale", ""))]
    return "\n".join(line.rstrip() for line in lines)


# ---- lesson 09: the shadow check's tables and the whole-step comparison ------------------------------
def section(text, tag):
    """The lines of lesson 09's part `tag` ("1a", "2b", ...) up to the next blank line."""
    m = re.search(rf"^{tag}\. .*?(?=\n\n|\Z)", text, re.M | re.S)
    return m.group(0).splitlines()


def step_rows(lines):
    """parameter -> norm error in epsilons, from a 2a/2b/3b table."""
    return {m.group(1): float(m.group(2)) for l in lines
            if (m := re.match(r"(\S+)\s+\[[\d, ]*\]\s+([\d.]+)\s", l))}


def lesson09_numbers(n, data):
    text = (data / "lesson09.txt").read_text()
    tables = ["\n".join(l for l in section(text, tag) if not l.startswith(("shadow errors", "cost:"))
                        and "distinct op rows" not in l) for tag in ("1a", "1b")]
    n.block("shadow.tables", "\n\n".join(tables), "lesson 09 parts 1a and 1b: the per-op shadow tables", fenced=True)
    times = [float(t) for pair in re.findall(r"took ([\d.]+) ms, its f32 shadow re-run ([\d.]+) ms", text) for t in pair]
    n.add("shadow.ms_min", math.floor(min(times)), "d", "lesson 09: fastest of the four timed forwards, ms")
    n.add("shadow.ms_max", math.ceil(max(times)), "d", "lesson 09: slowest of the four timed forwards, ms")
    gemm = {p: [r for r in rows(data / f"shadow_{p}.csv") if r["op"] in ("conv2d", "linear")] for p in ("f16", "bf16")}
    means = [float(r["mean_error_eps"]) for p in gemm for r in gemm[p]]
    maxima = [float(r["max_error_eps"]) for p in gemm for r in gemm[p]]
    n.add("shadow.gemm_mean_min", min(means), ".2f", "conv2d/linear rows, both formats: smallest mean error, eps")
    n.add("shadow.gemm_mean_max", max(means), ".2f", "conv2d/linear rows, both formats: largest mean error, eps")
    n.add("shadow.gemm_max_min", min(maxima), ".1f", "conv2d/linear rows, both formats: smallest max error, eps")
    n.add("shadow.gemm_max_max", max(maxima), ".1f", "conv2d/linear rows, both formats: largest max error, eps")
    for p in gemm:
        n.add(f"shadow.{p}.conv1_flushed", int(gemm[p][0]["flushed_to_zero"]), "d", f"{p}: first conv2d outputs flushed to 0")
    n.add("shadow.conv1_outputs", int(gemm["f16"][0]["shadow_elements"]), "spaced", "the first conv2d's output elements")
    step = {tag: step_rows(section(text, tag)) for tag in ("2a", "2b", "3b")}
    eps = {"2a": 2**-10, "2b": 2**-7, "3b": 2**-7}
    names = {"0.weight": "conv1 weight [16,1,3,3]", "3.weight": "conv2 weight [32,16,3,3]",
             "7.weight": "linear weight [10,1568]", "7.bias": "linear bias [10]"}
    n.block("step.table", "\n".join(
        ["| parameter | f16 × 65536: norm error | bf16: norm error | as a relative error (f16 / bf16) |", "|---|---|---|---|"] +
        [f"| {label} | {step['2a'][k]:.3g} ε | {step['2b'][k]:.3g} ε | "
         f"{100 * step['2a'][k] * eps['2a']:.2g}% / {100 * step['2b'][k] * eps['2b']:.2g}% |" for k, label in names.items()]),
        "lesson 09 parts 2a/2b: each parameter's gradient error against f32")
    conv = [100 * step[t][k] * eps[t] for t in ("2a", "2b") for k in ("0.weight", "3.weight")]
    n.add("step.conv_rel_min", min(conv), ".1f", "conv weights, both formats: smallest relative gradient error, %")
    n.add("step.conv_rel_max", max(conv), ".1f", "conv weights, both formats: largest relative gradient error, %")
    for key, param in (("weight", "7.weight"), ("bias", "7.bias")):
        n.add(f"step.linear_{key}.bf16", step["2b"][param], ".2f", f"bf16: linear {key} gradient error, eps")
        n.add(f"step.linear_{key}.bf16_linear_f32", step["3b"][param], ".2f",
              f"bf16 with linear moved to f32: linear {key} gradient error, eps")
    cast = {tag: int(re.search(r"^linear\s+\S+\s+\S+\s+\S+\s+\S+\s+\d+\s+\d+\s+(\d+)", "\n".join(section(text, tag)), re.M).group(1))
            for tag in ("1b", "3a")}
    n.add("step.linear_cast_bytes", cast["1b"], "spaced", "bf16: bytes the linear op's casts allocated")
    n.add("step.linear_cast_bytes_f32", cast["3a"], "spaced", "linear moved to f32: bytes its casts allocated")


# ---- lesson 16: AMP recipes, debugging, memory end to end ---------------------------------------------
# Its --csv file holds key,value for every number it checks; the pages print them in these formats
# (first match wins). "d": an integer.
LESSON16_FORMATS = [
    (r"clip\.(scaled_norm|ratio)$", ".0f"), (r"clip\.applied_wrong$", ".3g"), (r"clip\.true_norm$", ".3f"),
    (r"clip\.", ".2f"),
    (r"accum\.micro_batches$", "d"), (r"accum\.undivided_ratio$", ".2f"), (r"accum\.", ".2g"),
    (r"two\.difference$", ".2g"), (r"two\.", "d"),
    (r"infer\.(memory_growth_bytes|test_samples)$", "d"), (r"infer\..*max_logit_difference$", ".2g"),
    (r"infer\..*peak_mib$", ".1f"), (r"infer\.", ".2f"),
    (r"hunt\.fixed_(first_)?loss$", ".3g"), (r"hunt\.", "d"),
    (r"nan\.", "d"),
    (r"mem\..*ratio$", ".2f"), (r"mem\.(budget_mib|largest_batch\..*)$", "d"), (r"mem\.", ".1f"),
]


def lesson16_numbers(n, data):
    for r in rows(data / "lesson16.csv"):
        key, value = r["key"], float(r["value"])
        fmt = next(f for pattern, f in LESSON16_FORMATS if re.match(pattern, key))
        n.add(f"l16.{key}", round(value) if fmt == "d" else value, fmt, f"lesson 16: {key}")


# ---- lesson 15: FP8 (its lesson15.csv: key,value) ------------------------------------------------
LESSON15_FORMATS = [
    (r".*_pct$", ".1f"), (r".*accuracy$", ".2f"), (r".*_log2_last$", "d"), (r".*scale.*", "g"),
    (r".*loss$", ".4f"), (r".*", ".3g"),
]


def lesson15_numbers(n, data):
    for r in rows(data / "lesson15.csv"):
        key, value = r["key"], float(r["value"])
        fmt = next(f for pattern, f in LESSON15_FORMATS if re.match(pattern, key))
        n.add(f"l15.{key}", round(value) if fmt == "d" else value, fmt, f"lesson 15: {key}")


# ---- speed at every CPU level ------------------------------------------------------------------------
def speed_numbers(n, data):
    runs = {}  # (level, precision) -> samples/s of each repeat
    for path in sorted(data.glob("speed_*_*.csv")):
        for r in rows(path):
            runs.setdefault((r["isa"], r["precision"]), []).append(float(r["samples_per_s"]))
    levels = [l for l in LEVELS if (l, "f32") in runs]
    best = {k: max(v) for k, v in runs.items()}
    for level in levels:
        for p in PRECISIONS:
            n.add(f"speed.{level}.{p}", round(best[level, p]), "d", f"{level}, {p}: samples/s, best of {len(runs[level, p])}")
            n.add(f"speed.{level}.{p}_ratio", ratio(best[level, p], best[level, "f32"]), ".2f", f"{level}: {p} / f32")
    n.block("speed.table", "\n".join(
        ["| CPU level | f32 | f16 + GradScaler | bf16 |", "|---|---|---|---|"] +
        [f"| {l} | {best[l, 'f32']:.0f} | " + " | ".join(f"{best[l, p]:.0f} ({ratio(best[l, p], best[l, 'f32']):.2f}×)"
                                                      for p in PRECISIONS[1:]) + " |" for l in levels]),
        "figure's table: best samples/s per level and precision")
    # The highest level run is this machine's own: pages quote it under a name that every machine
    # produces (an avx512bf16 key would be missing wherever the CPU has no AVX512-BF16).
    native = levels[-1]
    n.add("speed.native.level", native, "s", "the highest CPU level run: this machine's")
    n.add("speed.native.bf16_ratio", ratio(best[native, "bf16"], best[native, "f32"]), ".2f",
          f"{native} (this machine's level): bf16 / f32")
    simd = [ratio(best[l, p], best[l, "f32"]) for l in levels if l != "generic" for p in PRECISIONS[1:]]
    n.add("speed.simd_ratio_min", min(simd), ".2f", "above generic: the smallest 16-bit / f32 ratio")
    n.add("speed.simd_ratio_max", max(simd), ".2f", "above generic: the largest 16-bit / f32 ratio")
    n.add("speed.repeat_spread_pct", max(100 * (max(v) / min(v) - 1) for v in runs.values()), ".0f",
          "the largest spread between repeats of one run, % of the slowest")
    n.add("speed.repeats", min(len(v) for v in runs.values()), "d", "repeats of each speed run")
    return levels


# ---- the stamp -------------------------------------------------------------------------------------
def build_flags(build_dir):
    cache = {}
    for line in (build_dir / "CMakeCache.txt").read_text().splitlines():
        m = re.match(r"([A-Za-z_0-9]+):[A-Z]+=(.*)", line)
        if m:
            cache[m.group(1)] = m.group(2)
    kind = cache.get("CMAKE_BUILD_TYPE", "")
    compiler = subprocess.run([cache.get("CMAKE_CXX_COMPILER", "c++"), "--version"], capture_output=True,
                              text=True).stdout.splitlines()[:1]
    return {"build_type": kind, "compiler": compiler[0] if compiler else "",
            "cxx_flags": " ".join(filter(None, (cache.get("CMAKE_CXX_FLAGS"), cache.get(f"CMAKE_CXX_FLAGS_{kind.upper()}")))),
            **{k: cache[k] for k in ("HG_NATIVE", "HG_CUDA", "HG_DISTRIBUTED") if k in cache}}


def git(*args):
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True).stdout.strip()


def main(argv):
    data, out = Path(argv[0]), Path(argv[1])
    opts = dict(zip(argv[2::2], argv[3::2]))
    n = Numbers()
    level = compare_numbers(n, data)
    scale_numbers(n, data)
    histogram_numbers(n, data)
    lesson05_numbers(n, data)
    lesson09_numbers(n, data)
    lesson16_numbers(n, data)
    lesson15_numbers(n, data)
    speed_numbers(n, data)
    seconds = int(opts.get("--seconds", 0))
    n.add("run.minutes", max(1, round(seconds / 60)), "d", "scripts/figures.sh's runs, minutes")
    cpu = next((l.split(":", 1)[1].strip() for l in Path("/proc/cpuinfo").read_text().splitlines()
                if l.startswith("model name")), "unknown CPU") if Path("/proc/cpuinfo").exists() else "unknown CPU"
    n.entries["machine.cpu"] = {"value": cpu, "text": cpu, "what": "the CPU (/proc/cpuinfo)"}
    n.entries["machine.cpu_level"] = {"value": level, "text": level, "what": "the CPU level hg-train ran at"}
    measured = dict(doc_numbers.MEASURED, files=doc_numbers.measured_files(ROOT, doc_numbers.MEASURED))
    # Measured files that differ from the commit: the numbers are of the working tree, not of `commit`.
    dirty = git("diff", "--name-only", "HEAD", "--", *measured["files"]).split() + \
        git("ls-files", "--others", "--exclude-standard", "--", *measured["files"]).split()
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({
        "about": "Generated by scripts/figures.sh (scripts/figure_numbers.py); do not edit. Pages quote an entry as "
                 "<!--n:KEY-->text<!--/n-->; tests/doc_numbers.py apply rewrites those spans from here and the CTest "
                 "docs.numbers_match_generated fails when a quote is off by more than its last printed digit's "
                 "rounding, or when a file of measured.files has changed since (its hash without comments).",
        "commit": git("rev-parse", "--short", "HEAD"), "uncommitted_measured_files": dirty,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "cpu": cpu, "cpu_level": level,
        "threads": 1, "build": build_flags(Path(opts["--build-dir"])), "seconds": seconds,
        "numbers": n.entries, "measured": measured}, indent=1, ensure_ascii=False) + "\n")
    print(f"figure_numbers: {len(n.entries)} numbers in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]) if len(sys.argv) >= 3 else __doc__)
