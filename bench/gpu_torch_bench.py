#!/usr/bin/env python3
"""gpu_torch_bench: PyTorch eager on one CUDA device, the same measurements as bench/gpu_bench.

  1. GEMM TFLOP/s of torch.matmul at n x n x n, n = 4096 and 8192: f32 (TF32 off), f32 with TF32,
     f16, bf16.
  2. Training samples/s and the step's peak memory of
       mlp_wide: Linear 784->4096, ReLU, Linear 4096->4096, ReLU, Linear 4096->10, batch 4096
       cnn:      Conv 1->16 3x3 p1, ReLU, MaxPool 2, Conv 16->32 3x3 p1, ReLU, MaxPool 2, Flatten,
                 Linear 1568->10 (hg-train's CNN), batch 256
     with SGD (lr 0.01, momentum 0.9; PyTorch's default foreach implementation) and cross-entropy in
       f32       no autocast, TF32 off for matmul and cuDNN (PyTorch's default allows it for cuDNN)
       f16_amp   torch.autocast(float16) + GradScaler (scaler.step reads found_inf on the host:
                 PyTorch eager AMP as documented)
       bf16_amp  torch.autocast(bfloat16), no scaler
     on synthetic data generated on the GPU once.

Step peak = torch.cuda.max_memory_allocated() - memory_allocated() before the step (after
zero_grad(set_to_none=True) and reset_peak_memory_stats), the largest over 3 steps: the same
definition as gpu_bench's.

  python3 bench/gpu_torch_bench.py [--csv FILE] [--seconds S] [--only gemm|train]

Writes the CSV in gpu_bench's long format (framework,section,case,precision,metric,value);
scripts/gpu-check.sh joins the two. Benchmarks never assert: a failing case prints its error and
the rest still run; without torch or a CUDA device the script says so and exits 0.
"""
import argparse
import contextlib
import math
import sys
import time
import warnings

CSV_HEADER = "framework,section,case,precision,metric,value\n"


class Csv:
    def __init__(self, path):
        self.file = open(path, "w") if path else None
        if self.file:
            self.file.write(CSV_HEADER)
            self.file.flush()

    def row(self, section, case, precision, metric, value):
        if not self.file:
            return
        text = "nan" if value is None or not math.isfinite(value) else "%.6g" % value
        self.file.write("pytorch,%s,%s,%s,%s,%s\n" % (section, case, precision, metric, text))
        self.file.flush()  # a run stopped by a timeout keeps what it measured


def short_error(e):
    text = str(e).strip().splitlines()
    text = text[0] if text else type(e).__name__
    return text if len(text) <= 160 else text[:157] + "..."


def set_tf32(torch, enabled):
    """TF32 for matmul and cuDNN; the fp32_precision API where it exists (PyTorch >= 2.9),
    else allow_tf32 (newer versions refuse to mix the two APIs). Never raises: a version whose
    switches differ keeps its defaults, and a warning says so."""
    mode = "tf32" if enabled else "ieee"
    matmul = torch.backends.cuda.matmul
    try:
        # (an unknown name raises AssertionError in older versions' __getattr__: no hasattr)
        if isinstance(getattr(matmul, "fp32_precision"), str):
            matmul.fp32_precision = mode
            torch.backends.cudnn.conv.fp32_precision = mode
            return
    except Exception:  # noqa: BLE001 -- fall back to the older switches
        pass
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            matmul.allow_tf32 = enabled
            torch.backends.cudnn.allow_tf32 = enabled
    except Exception as e:  # noqa: BLE001
        print("gpu_torch_bench: warning: could not set TF32 to %s: %s" % (enabled, short_error(e)), file=sys.stderr)


def sync(torch):
    torch.cuda.synchronize()


def seconds_per_call(torch, fn, budget):
    """Best seconds per call over 3 timed rounds of ~budget/3 s each, after 2 warm-up calls."""
    fn()
    fn()
    sync(torch)
    start = time.perf_counter()
    fn()
    sync(torch)
    once = max(1e-7, time.perf_counter() - start)
    reps = min(2000, max(2, int(budget / 3 / once)))
    best = float("inf")
    for _ in range(3):
        sync(torch)
        start = time.perf_counter()
        for _ in range(reps):
            fn()
        sync(torch)
        best = min(best, (time.perf_counter() - start) / reps)
    return best


def gemm_table(torch, csv, budget):
    print("\n## PyTorch GEMM (torch.matmul, TFLOP/s = 2n^3 / time; best of 3 rounds)\n")
    print("| n x n x n | f32 (TF32 off) | f32 (TF32 on) | f16 | bf16 |\n|---|---|---|---|---|", flush=True)
    variants = [("f32", torch.float32, False), ("tf32", torch.float32, True),
                ("f16", torch.float16, False), ("bf16", torch.bfloat16, False)]
    with torch.no_grad():
        for n in (4096, 8192):
            cells = []
            try:
                torch.manual_seed(0)
                a32 = torch.randn(n, n, device="cuda")
                b32 = torch.randn(n, n, device="cuda")
            except Exception as e:  # noqa: BLE001
                print("gpu_torch_bench: GEMM %d: %s" % (n, short_error(e)), file=sys.stderr)
                print("| %d | error | error | error | error |" % n, flush=True)
                continue
            for name, dtype, tf32 in variants:
                try:
                    set_tf32(torch, tf32)
                    a, b = a32.to(dtype), b32.to(dtype)
                    s = seconds_per_call(torch, lambda: torch.matmul(a, b), budget)
                    tflops = 2.0 * n * n * n / s / 1e12
                    cells.append("%.1f" % tflops)
                    csv.row("gemm", str(n), name, "tflops", tflops)
                except Exception as e:  # noqa: BLE001
                    print("gpu_torch_bench: GEMM %d %s: %s" % (n, name, short_error(e)), file=sys.stderr)
                    cells.append("error")
                    csv.row("gemm", str(n), name, "tflops", None)
                finally:
                    set_tf32(torch, False)
            print("| %d | %s |" % (n, " | ".join(cells)), flush=True)
            del a32, b32
            torch.cuda.empty_cache()


def make_models(torch):
    nn = torch.nn
    return [
        ("mlp_wide", 4096, (784,),
         lambda: nn.Sequential(nn.Linear(784, 4096), nn.ReLU(), nn.Linear(4096, 4096), nn.ReLU(), nn.Linear(4096, 10))),
        ("cnn", 256, (1, 28, 28),
         lambda: nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                               nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                               nn.Flatten(), nn.Linear(32 * 7 * 7, 10))),
    ]


def make_scaler(torch, enabled):
    amp = getattr(torch, "amp", None)
    if amp is not None and hasattr(amp, "GradScaler"):
        return amp.GradScaler("cuda", enabled=enabled)
    return torch.cuda.amp.GradScaler(enabled=enabled)


def train_one(torch, name, batch, input_shape, make, precision, budget):
    set_tf32(torch, False)
    torch.manual_seed(0)
    model = make().cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    use_autocast = precision != "f32"
    dtype = torch.bfloat16 if precision == "bf16_amp" else torch.float16
    scaler = make_scaler(torch, precision == "f16_amp")
    x = torch.randn((batch,) + tuple(input_shape), device="cuda")
    y = torch.randint(0, 10, (batch,), device="cuda")
    loss_fn = torch.nn.functional.cross_entropy

    def region():  # f32: no autocast context at all
        return torch.autocast("cuda", dtype=dtype) if use_autocast else contextlib.nullcontext()

    def body():
        with region():
            loss = loss_fn(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()

    def step():
        opt.zero_grad(set_to_none=True)
        body()

    for _ in range(5):  # warm-up: momentum buffers, cuBLAS/cuDNN handles, caching allocator
        step()
    sync(torch)
    start = time.perf_counter()
    for _ in range(3):
        step()
    sync(torch)
    once = max(1e-6, (time.perf_counter() - start) / 3)
    steps = min(5000, max(5, int(budget / 2 / once)))
    best = float("inf")
    for _ in range(2):
        sync(torch)
        start = time.perf_counter()
        for _ in range(steps):
            step()
        sync(torch)
        best = min(best, (time.perf_counter() - start) / steps)

    peak = 0
    for _ in range(3):
        opt.zero_grad(set_to_none=True)
        sync(torch)
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        body()
        sync(torch)
        peak = max(peak, torch.cuda.max_memory_allocated() - before)
    # What the caching allocator holds at the end of the case (emptied between cases), like
    # gpu_bench's hg::memory::reserved.
    reserved = torch.cuda.memory_reserved()
    return batch / best, 1e3 * best, peak / (1024.0 * 1024.0), reserved / (1024.0 * 1024.0)


def train_table(torch, csv, budget):
    print("\n## PyTorch eager training (SGD momentum 0.9, cross-entropy, synthetic data on the GPU; best of 2 rounds)\n")
    print("| model | batch | precision | samples/s | step ms | x f32 speed | step peak MiB | x f32 peak | reserved MiB |\n"
          "|---|---|---|---|---|---|---|---|---|", flush=True)
    nan = float("nan")
    for name, batch, shape, make in make_models(torch):
        base = (nan, nan, nan, nan)
        for precision in ("f32", "f16_amp", "bf16_amp"):
            result = (nan, nan, nan, nan)
            try:
                result = train_one(torch, name, batch, shape, make, precision, budget)
            except Exception as e:  # noqa: BLE001
                print("gpu_torch_bench: train %s %s: %s" % (name, precision, short_error(e)), file=sys.stderr)
            if precision == "f32":
                base = result
            sps, ms, mib, reserved = result
            csv.row("train", name, precision, "samples_per_s", sps)
            csv.row("train", name, precision, "step_peak_mib", mib)
            csv.row("train", name, precision, "reserved_mib", reserved)
            speed = sps / base[0] if base[0] == base[0] and base[0] else nan
            mem = mib / base[2] if base[2] == base[2] and base[2] else nan
            print("| %s | %d | %s | %.0f | %.3f | %.2fx | %.1f | %.2fx | %.1f |"
                  % (name, batch, precision, sps, ms, speed, mib, mem, reserved), flush=True)
            torch.cuda.empty_cache()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--csv", help="write the results as CSV to this file")
    parser.add_argument("--seconds", type=float, default=1.0, help="seconds of timed work per measurement")
    parser.add_argument("--only", choices=("gemm", "train"), help="run one section")
    args = parser.parse_args()
    csv = Csv(args.csv)  # the header is written even without a device, so readers find a valid file
    try:
        import torch
    except Exception as e:  # noqa: BLE001
        print("gpu_torch_bench: PyTorch is not importable (%s); nothing to measure" % short_error(e))
        return 0
    if not torch.cuda.is_available():
        print("gpu_torch_bench: no CUDA device for PyTorch %s; nothing to measure" % torch.__version__)
        return 0
    budget = max(0.05, args.seconds)
    print("gpu_torch_bench: PyTorch %s, CUDA %s, cuDNN %s, device %s" % (
        torch.__version__, torch.version.cuda, torch.backends.cudnn.version(), torch.cuda.get_device_name(0)), flush=True)
    if args.only in (None, "gemm"):
        gemm_table(torch, csv, budget / 2)
    if args.only in (None, "train"):
        train_table(torch, csv, budget)
    return 0


if __name__ == "__main__":
    sys.exit(main())
