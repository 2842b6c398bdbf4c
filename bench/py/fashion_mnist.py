"""Reads Fashion-MNIST's gzipped IDX files (the format: docs/api.md, data::MNIST) into tensors."""
import gzip
import os
import struct

import torch

DEFAULT_ROOT = os.environ.get("HG_DATA", "/usr/share/datasets/fashion-mnist")


def read_idx(path, count=None):
    """The first `count` items (all when None) of an IDX file as a uint8 tensor."""
    with gzip.open(path, "rb") as f:
        magic = struct.unpack(">I", f.read(4))[0]
        dims = struct.unpack(">" + "I" * (magic & 0xFF), f.read(4 * (magic & 0xFF)))
        count = dims[0] if count is None else min(count, dims[0])
        per_item = 1
        for d in dims[1:]:
            per_item *= d
        data = f.read(count * per_item)
    return torch.frombuffer(bytearray(data), dtype=torch.uint8).reshape(count, *dims[1:])


def load(root=DEFAULT_ROOT, train=True, count=None):
    """(images uint8 [N, 1, 28, 28], labels int64 [N])."""
    prefix = "train" if train else "t10k"
    images = read_idx(os.path.join(root, f"{prefix}-images-idx3-ubyte.gz"), count)
    labels = read_idx(os.path.join(root, f"{prefix}-labels-idx1-ubyte.gz"), count)
    return images.reshape(-1, 1, 28, 28), labels.long()
