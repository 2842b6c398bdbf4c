"""PyTorch 2.x's side of bench/models_compare: hg-train's five models (bench/py/models.py), trained
with the same recipe -- SGD lr 0.05 momentum 0.9, batch 128, cross-entropy, Fashion-MNIST
normalised with its pixel mean/std, training mode -- in f32 and under torch.autocast("cpu",
torch.bfloat16), at each thread count; samples/s as the best of 2 repeats after 3 warm-up steps,
each model and setting in a fresh process. Prints rows in models_compare's format.

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

BASE_STEPS = {"mlp": 200, "cnn": 60, "mnist-net": 20, "resnet": 10, "mobilenet": 10}
MEAN, STD, BATCH = 0.2860, 0.3530, 128


def measure(name, precision, threads, steps, queue):
    import torch
    import torch.nn.functional as F

    import fashion_mnist
    import models

    torch.set_num_threads(threads)
    torch.manual_seed(0)
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

    for i in range(3):
        step(i)
    best = 0.0
    for _ in range(2):
        start = time.perf_counter()
        for i in range(steps):
            step(i)
        best = max(best, steps * BATCH / (time.perf_counter() - start))
    queue.put(best)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="mlp,cnn,mnist-net,resnet,mobilenet")
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--precisions", default="f32,bf16")
    parser.add_argument("--steps-scale", type=float, default=1.0)
    args = parser.parse_args()
    import torch
    print(f"models_bench: PyTorch {torch.__version__}, batch {BATCH}, SGD, best of 2 repeats; "
          f"CPU capability {torch.backends.cpu.get_cpu_capability()}\n")
    print("| model | precision | threads | PyTorch samples/s |\n|---|---|---|---|")
    ctx = mp.get_context("spawn")
    for name in args.models.split(","):
        for precision in args.precisions.split(","):
            for threads in map(int, args.threads.split(",")):
                queue = ctx.Queue()
                steps = max(1, int(BASE_STEPS[name] * args.steps_scale))
                p = ctx.Process(target=measure, args=(name, precision, threads, steps, queue))
                p.start()
                p.join()
                value = queue.get() if p.exitcode == 0 else float("nan")
                print(f"| {name} | {precision} | {threads} | {value:.0f} |", flush=True)


if __name__ == "__main__":
    main()
