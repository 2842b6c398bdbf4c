"""Fixtures of tests/test_model_parity.cpp: the vision models of hg-train trained by PyTorch for 200
steps from weights PyTorch drew, on Fashion-MNIST batches both sides can form.

Writes into tests/golden/models/:
  data.safetensors         the first 2048 training images (U8, 2048 x 1 x 28 x 28) and labels (I64)
  <model>.safetensors      the model's initial state dict (PyTorch's init, seed 0) and "losses",
                           PyTorch's f32 loss at each of the 200 steps (F64)

The recipe (the test repeats it): step t trains on images (32 t + k) mod 2048, k < 32, scaled
to [0, 1] and normalised with mean 0.2860, std 0.3530; cross_entropy; SGD lr 0.002 without momentum
(with momentum 0.9 PyTorch's own f32 and f64 runs end 60% apart: see tests/test_model_parity.cpp);
train mode (BatchNorm with batch statistics), dropout off. Run with Debian's python3-torch:

    /usr/bin/python3 tests/golden/make_model_parity.py [--data DIR]
"""
import argparse
import json
import os
import struct
import sys

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "bench", "py"))
import fashion_mnist  # noqa: E402  (bench/py/fashion_mnist.py)
import models  # noqa: E402  (bench/py/models.py: the same layers as examples/train/models.cpp)

MODELS = ["mnist-net", "resnet", "mobilenet"]
IMAGES, BATCH, STEPS = 2048, 32, 200
MEAN, STD, LR, MOMENTUM = 0.2860, 0.3530, 0.002, 0.0
ST_DTYPE = {torch.float32: "F32", torch.float64: "F64", torch.int64: "I64", torch.uint8: "U8"}


def write_safetensors(path, tensors, metadata):
    header, blobs, offset = {"__metadata__": metadata}, [], 0
    for name, t in tensors.items():
        data = t.detach().contiguous().cpu().numpy().tobytes()
        header[name] = {"dtype": ST_DTYPE[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def batch(images, labels, step):
    index = torch.tensor([(BATCH * step + k) % IMAGES for k in range(BATCH)])
    x = (images[index].float() / 255 - MEAN) / STD
    return x, labels[index]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", default=fashion_mnist.DEFAULT_ROOT)
    args = parser.parse_args()
    out_dir = os.path.join(HERE, "models")
    os.makedirs(out_dir, exist_ok=True)
    images, labels = fashion_mnist.load(args.data, train=True, count=IMAGES)
    meta = {"generator": "tests/golden/make_model_parity.py", "torch": torch.__version__}
    write_safetensors(os.path.join(out_dir, "data.safetensors"), {"images": images, "labels": labels}, meta)
    torch.set_num_threads(1)
    for name in MODELS:
        torch.manual_seed(0)
        model = models.make_model(name, dropout=0.0)
        initial = {k: v.clone() for k, v in model.state_dict().items()}
        opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
        losses = []
        model.train()
        for step in range(STEPS):
            x, y = batch(images, labels, step)
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        tensors = dict(initial)
        tensors["losses"] = torch.tensor(losses, dtype=torch.float64)
        path = os.path.join(out_dir, name + ".safetensors")
        write_safetensors(path, tensors, dict(meta, model=name, steps=str(STEPS)))
        print(f"{name:10s} loss {losses[0]:.4f} -> {losses[-1]:.4f}  {os.path.getsize(path) / 1024:.0f} KiB")


if __name__ == "__main__":
    main()
