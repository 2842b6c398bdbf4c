"""PyTorch 2.x's side of bench/models_compare: hg-train's five vision models (bench/py/models.py),
trained with the same recipe -- SGD lr 0.05 momentum 0.9, batch 128, cross-entropy, Fashion-MNIST
normalised with its pixel mean/std, training mode -- and its two text models (gpt: char_gpt_bench's
CharGPT, nn.MultiheadAttention with need_weights=False and is_causal, so F.scaled_dot_product_attention
inside; lstm: embedding 64, nn.LSTM 2 x 256 batch_first dropout 0.1, linear head) on 32 blocks of 64
bytes of the GPL-3 text, next-byte cross-entropy on f32 logits, clip_grad_norm 1.0, AdamW -- in f32
and under torch.autocast("cpu", torch.bfloat16), at each thread count; samples/s (text: tokens/s)
as the best of 2 repeats after 3 warm-up steps, each model and setting in a fresh process. Prints
rows in models_compare's format.

    pip install torch        # a PyTorch 2.x, for this script only (never a build or test dependency)
    python3 bench/py/models_bench.py [--models resnet,mobilenet] [--threads 1,2] [--steps-scale 1]

docs/results.md puts its numbers beside models_compare's (same machine, back to back).
"""
import argparse
import multiprocessing as mp
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

BASE_STEPS = {"mlp": 200, "cnn": 60, "mnist-net": 20, "resnet": 10, "mobilenet": 10, "gpt": 10, "lstm": 10}
MEAN, STD, BATCH = 0.2860, 0.3530, 128
TEXT, TEXT_BATCH, TEXT_BLOCK = "/usr/share/common-licenses/GPL-3", 32, 64


def text_model(name):
    """hg_train::CharGPT (bench/py/char_gpt_bench.py's, the same shapes) or hg_train::CharLSTM."""
    import torch.nn as nn

    if name == "gpt":
        import char_gpt_bench
        return char_gpt_bench.CharGPT()

    class CharLSTM(nn.Module):
        def __init__(self):
            super().__init__()
            self.tokens = nn.Embedding(256, 64)
            self.lstm = nn.LSTM(64, 256, num_layers=2, batch_first=True, dropout=0.1)
            self.head = nn.Linear(256, 256)

        def forward(self, idx):
            return self.head(self.lstm(self.tokens(idx))[0])

    return CharLSTM()


def text_step(name, precision):
    """hg-train --model gpt|lstm's step (without its schedule) on 16 batches of the GPL-3 text."""
    import torch
    import torch.nn.functional as F

    data = torch.tensor(list(open(TEXT, "rb").read()), dtype=torch.long)
    g = torch.Generator().manual_seed(0)
    starts = torch.randint(0, data.numel() - TEXT_BLOCK - 1, (16, TEXT_BATCH), generator=g)
    blocks = [torch.stack([data[s:s + TEXT_BLOCK + 1] for s in row]) for row in starts.tolist()]
    batches = [(b[:, :-1], b[:, 1:]) for b in blocks]
    model = text_model(name)
    model.train()
    lr, weight_decay = (2e-3, 0.1) if name == "gpt" else (6e-3, 0.01)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)

    def step(i):
        x, y = batches[i % len(batches)]
        opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
            logits = model(x)
        loss = F.cross_entropy(logits.float().reshape(-1, 256), y.reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()

    return step, TEXT_BATCH * TEXT_BLOCK


def measure(name, precision, threads, steps, queue):
    import torch
    import torch.nn.functional as F

    import fashion_mnist
    import models

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    if name in ("gpt", "lstm"):
        step, per_step = text_step(name, precision)
        time_steps(step, steps, per_step, queue)
        return
    images, labels = fashion_mnist.load(count=16 * BATCH)
    g = torch.Generator().manual_seed(0)
    order = torch.randperm(images.shape[0], generator=g)
    batches = [((images[order[i:i + BATCH]].float() / 255 - MEAN) / STD, labels[order[i:i + BATCH]])
               for i in range(0, images.shape[0], BATCH)]
    model = models.make_model(name)
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

    def step(i):
        x, y = batches[i % len(batches)]
        opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
            loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()

    time_steps(step, steps, BATCH, queue)


def time_steps(step, steps, per_step, queue):
    """Samples (tokens) per second of `steps` steps after 3 warm-up steps, the best of 2 repeats."""
    for i in range(3):
        step(i)
    best = 0.0
    for _ in range(2):
        start = time.perf_counter()
        for i in range(steps):
            step(i)
        best = max(best, steps * per_step / (time.perf_counter() - start))
    queue.put(best)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="mlp,cnn,mnist-net,resnet,mobilenet,gpt,lstm")
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--precisions", default="f32,bf16")
    parser.add_argument("--steps-scale", type=float, default=1.0)
    args = parser.parse_args()
    import torch
    print(f"models_bench: PyTorch {torch.__version__}, vision batch {BATCH} SGD, text batch {TEXT_BATCH} x "
          f"{TEXT_BLOCK} tokens AdamW, best of 2 repeats; CPU capability {torch.backends.cpu.get_cpu_capability()}")
    ctx = mp.get_context("spawn")
    unit = None
    # A status line on a terminal while each row is measured (a row takes 10-60 s); piped output
    # stays the table.
    terminal = sys.stderr.isatty()
    rows = [(n, p, t) for n in args.models.split(",") for p in args.precisions.split(",")
            for t in map(int, args.threads.split(","))]
    row = 0
    for name in args.models.split(","):
        if unit != ("tokens/s" if name in ("gpt", "lstm") else "samples/s"):
            unit = "tokens/s" if name in ("gpt", "lstm") else "samples/s"
            print(f"\n| model | precision | threads | PyTorch {unit} |\n|---|---|---|---|")
        for precision in args.precisions.split(","):
            for threads in map(int, args.threads.split(",")):
                row += 1
                if terminal:
                    print(f"\r\033[K[{row}/{len(rows)}] {name} {precision} {threads} thread(s)", end="",
                          file=sys.stderr, flush=True)
                queue = ctx.Queue()
                steps = max(1, int(BASE_STEPS[name] * args.steps_scale))
                p = ctx.Process(target=measure, args=(name, precision, threads, steps, queue))
                p.start()
                p.join()
                value = queue.get() if p.exitcode == 0 else float("nan")
                if terminal:
                    print("\r\033[K", end="", file=sys.stderr, flush=True)
                print(f"| {name} | {precision} | {threads} | {value:.0f} |", flush=True)


if __name__ == "__main__":
    main()
