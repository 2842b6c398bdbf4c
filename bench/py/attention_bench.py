"""PyTorch 2.x's side of bench/attention_bench: causal self-attention forward + backward with
torch.nn.functional.scaled_dot_product_attention (its fused CPU kernel) and with the naive
softmax(q k^T * scale + mask) v, batch 1, same heads / head dim / lengths, f32 and bf16; the median
ms per step. Prints rows in attention_bench's format (without its memory columns).

    pip install torch        # a PyTorch 2.x, for this script only (never a build or test dependency)
    python3 bench/py/attention_bench.py [--threads 1] [--heads 4] [--dim 32] [--lengths 256,1024,4096]
"""
import argparse
import math
import statistics
import time

import torch
import torch.nn.functional as F


def naive(q, k, v):
    T = q.shape[-2]
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    s = s.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
    return torch.softmax(s, -1) @ v


def fused(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def time_ms(attention, heads, T, D, dtype):
    torch.manual_seed(1)
    q, k, v = (torch.randn(1, heads, T, D).to(dtype).requires_grad_() for _ in range(3))
    grad = torch.randn(1, heads, T, D).to(dtype)

    def step():
        for t in (q, k, v):
            t.grad = None
        attention(q, k, v).backward(grad)

    step()
    start = time.perf_counter()
    step()
    once = time.perf_counter() - start
    samples = []
    for _ in range(max(3, min(200, int((2.0 if T >= 4096 else 0.5) / max(once, 1e-6))))):
        start = time.perf_counter()
        step()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples) * 1e3


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--dim", type=int, default=32)
    p.add_argument("--lengths", default="256,1024,4096")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    print(f"attention_bench.py: PyTorch {torch.__version__}, causal self-attention forward + backward, batch 1, "
          f"{a.heads} heads, head dim {a.dim}, {a.threads} thread(s)\n")
    print("| T | dtype | fused ms | naive ms | naive / fused |")
    print("|---|---|---|---|---|")
    for T in (int(t) for t in a.lengths.split(",")):
        for name, dtype in (("f32", torch.float32), ("bf16", torch.bfloat16)):
            f = time_ms(fused, a.heads, T, a.dim, dtype)
            n = time_ms(naive, a.heads, T, a.dim, dtype)
            print(f"| {T} | {name} | {f:.2f} | {n:.2f} | {n / f:.2f}x |", flush=True)


if __name__ == "__main__":
    main()
