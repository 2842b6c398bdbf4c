#!/usr/bin/python3
"""Run by tests/test_nn.cpp with a directory and a model name (mlp, the default, or blocks):

  <dir>/<model>.safetensors   hg::nn::save of the model: "mlp" is hg-train's MLP (Flatten,
                              Linear 784->256, ReLU, Linear 256->128, ReLU, Linear 128->10) from
                              nn.serialize.hg_train_mlp_loads_into_torch; "blocks" is Blocks below
                              (a torch.nn.ModuleList of residual blocks, a ModuleDict of heads, an
                              Identity) from nn.containers.module_list_model_loads_into_torch
  <dir>/io.safetensors        an input "x" and halfgrad's output "y" for it (eval mode)

Loads the model into the same torch module with load_state_dict(strict=True) and checks torch's
forward pass against "y". Then the other direction: writes a torch-initialised model
(<dir>/torch_<model>.safetensors, BatchNorm statistics moved off their defaults by a few training
steps) and its output on a fresh input (<dir>/torch_io.safetensors) for the C++ side to load.
Exits non-zero on any mismatch.

torch 1.13 has no safetensors module, so the format is read and written here with json + struct.
"""
import json
import os
import struct
import sys

import torch

DTYPES = {"F32": torch.float32, "F64": torch.float64, "F16": torch.float16, "BF16": torch.bfloat16,
          "I64": torch.int64, "I32": torch.int32, "U8": torch.uint8}


def read_safetensors(path):
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n].decode("utf-8"))
    data = bytearray(blob[8 + n:])
    metadata = header.pop("__metadata__", {})
    tensors = {}
    for name, info in header.items():
        begin, end = info["data_offsets"]
        dtype = DTYPES[info["dtype"]]
        raw = data[begin:end]
        t = torch.frombuffer(raw, dtype=dtype) if raw else torch.empty(0, dtype=dtype)
        tensors[name] = t.reshape(info["shape"]).clone()
    return metadata, tensors


def write_safetensors(path, tensors, metadata):
    names = {v: k for k, v in DTYPES.items()}
    header, blobs, offset = {"__metadata__": metadata}, [], 0
    for name, t in tensors.items():
        b = t.detach().contiguous().numpy().tobytes()
        header[name] = {"dtype": names[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(b)]}
        blobs.append(b)
        offset += len(b)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def mlp():
    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 256), torch.nn.ReLU(),
                               torch.nn.Linear(256, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))


class Block(torch.nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.conv = torch.nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.norm = torch.nn.BatchNorm2d(channels)

    def forward(self, x):
        return x + torch.relu(self.norm(self.conv(x)))


class Blocks(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = torch.nn.Conv2d(1, 4, 3, padding=1)
        self.blocks = torch.nn.ModuleList([Block(4) for _ in range(2)])
        self.heads = torch.nn.ModuleDict({"digit": torch.nn.Linear(4, 10), "parity": torch.nn.Linear(4, 2)})
        self.shortcut = torch.nn.Identity()

    def forward(self, x):
        x = self.stem(x)
        for block in self.blocks:
            x = block(x)
        x = self.shortcut(x).mean((2, 3))
        return torch.cat([self.heads["digit"](x), self.heads["parity"](x)], 1)


def blocks_main(directory):
    metadata, state = read_safetensors(os.path.join(directory, "blocks.safetensors"))
    assert metadata.get("format") == "pt", metadata
    model = Blocks().eval()
    assert sorted(state) == sorted(model.state_dict()), (sorted(state), sorted(model.state_dict()))
    model.load_state_dict(state, strict=True)
    _, io = read_safetensors(os.path.join(directory, "io.safetensors"))
    with torch.no_grad():
        y = model(io["x"])
    torch.testing.assert_close(y, io["y"], rtol=1e-5, atol=1e-5)
    print(f"load_into_torch: halfgrad's ModuleList model loads into torch (strict); forward max |diff| = "
          f"{(y - io['y']).abs().max().item():.3g}")

    torch.manual_seed(4321)
    theirs = Blocks()
    with torch.no_grad():
        for _ in range(3):  # training-mode passes move the running statistics
            theirs(torch.randn(8, 1, 6, 6))
    theirs.eval()
    x = torch.randn(3, 1, 6, 6)
    with torch.no_grad():
        y = theirs(x)
    write_safetensors(os.path.join(directory, "torch_blocks.safetensors"), theirs.state_dict(), {"format": "pt"})
    write_safetensors(os.path.join(directory, "torch_io.safetensors"), {"x": x, "y": y}, {})


def main():
    directory = sys.argv[1]
    if len(sys.argv) > 2 and sys.argv[2] == "blocks":
        return blocks_main(directory)
    metadata, state = read_safetensors(os.path.join(directory, "mlp.safetensors"))
    assert metadata.get("format") == "pt", metadata
    expected_names = ["1.weight", "1.bias", "3.weight", "3.bias", "5.weight", "5.bias"]
    assert sorted(state) == sorted(expected_names), sorted(state)

    model = mlp()
    model.load_state_dict(state, strict=True)  # raises on a missing/unexpected key or a shape mismatch
    _, io = read_safetensors(os.path.join(directory, "io.safetensors"))
    assert io["x"].shape == (5, 1, 28, 28), io["x"].shape
    with torch.no_grad():
        y = model(io["x"])
    # f32 sums in a different order than halfgrad's GEMM: allow a few ulp of the terms.
    torch.testing.assert_close(y, io["y"], rtol=1e-5, atol=1e-5)
    print(f"load_into_torch: halfgrad's MLP loads into torch (strict); forward max |diff| = "
          f"{(y - io['y']).abs().max().item():.3g}")

    torch.manual_seed(1234)
    theirs = mlp()
    x = torch.rand(4, 1, 28, 28)
    with torch.no_grad():
        y = theirs(x)
    write_safetensors(os.path.join(directory, "torch_mlp.safetensors"), theirs.state_dict(), {"format": "pt"})
    write_safetensors(os.path.join(directory, "torch_io.safetensors"), {"x": x, "y": y}, {})


if __name__ == "__main__":
    main()
