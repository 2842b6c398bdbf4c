#!/usr/bin/env python3
"""Reads a safetensors file written by halfgrad with nothing but json + struct, and checks its
values: the format is readable by code that has never heard of halfgrad."""
import json
import struct
import sys


def read(path):
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n].decode("utf-8"))
    data = blob[8 + n:]
    formats = {"F32": "f", "F64": "d", "F16": "e", "I64": "q", "I32": "i", "U8": "B"}
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        raw = data[begin:end]
        if info["dtype"] == "BF16":  # widen bf16 to f32 by appending two zero bytes
            values = [struct.unpack("<f", b"\0\0" + raw[i:i + 2])[0] for i in range(0, len(raw), 2)]
        else:
            code = formats[info["dtype"]]
            values = list(struct.unpack("<%d%s" % (len(raw) // struct.calcsize(code), code), raw))
        out[name] = (info["shape"], values)
    return header.get("__metadata__", {}), out


def main():
    metadata, t = read(sys.argv[1])
    assert metadata == {"written_by": "halfgrad"}, metadata
    assert t["f32"] == ([2, 3], [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]), t["f32"]
    assert t["i64"] == ([2], [7, -8]), t["i64"]
    assert t["bf16"] == ([3], [1.0, 2.0, -3.0]), t["bf16"]
    assert t["f16"] == ([2], [0.5, -65504.0]), t["f16"]
    assert t["scalar"] == ([], [2.5]), t["scalar"]
    print("python reader: all values match")


if __name__ == "__main__":
    main()
