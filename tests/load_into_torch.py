#!/usr/bin/python3
"""Run by tests/test_nn.cpp (nn.serialize.hg_train_mlp_loads_into_torch) with one directory:

  <dir>/mlp.safetensors   hg::nn::save of hg-train's MLP (Flatten, Linear 784->256, ReLU,
                          Linear 256->128, ReLU, Linear 128->10)
  <dir>/io.safetensors    an input "x" and halfgrad's output "y" for it

Loads the model into the same torch.nn.Sequential with load_state_dict(strict=True) and checks
torch's forward pass against "y". Then the other direction: writes a torch-initialised model
(<dir>/torch_mlp.safetensors) and its output on a fresh input (<dir>/torch_io.safetensors) for the
C++ side to load. Exits non-zero on any mismatch.

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


def main():
    directory = sys.argv[1]
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
