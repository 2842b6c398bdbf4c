#!/usr/bin/env python3
"""FP8 conversion fixtures for tests/test_float8.cpp, from ml_dtypes (Google's reference
implementation of the OCP FP8 formats, independent of halfgrad's core/float8.cpp).

Writes tests/golden/float8.safetensors (json + struct, as make_golden.py) with, for
<f> in e4m3 (ml_dtypes.float8_e4m3fn) and e5m2 (ml_dtypes.float8_e5m2):
  <f>.values          F32[256]   the value of every code (NaN where the code is a NaN)
  <f>.from_f16        U8[65536]  the code of every f16 bit pattern 0..65535, rounded to nearest even
  <f>.from_bf16       U8[65536]  the same for every bf16 bit pattern
  <f>.from_f16_saturate, <f>.from_bf16_saturate
                      the same with overflow saturating to +-largest (inf included, NaN stays NaN):
                      ml_dtypes has no saturating cast, so the source is clipped to [-largest,
                      largest] first, which rounds the same way
  <f>.from_random_f32 U8[2^20]   the codes of 2^20 pseudo-random f32 values (below; saturation
                                 is checked on the exhaustive 16-bit sets, which overflow too)
  <f>.midpoints       F64[254]   the f64 midpoint between each pair of adjacent positive finite codes
  <f>.from_midpoints  U8[254]    their codes: every one is a tie, so this checks ties-to-even

The random f32 values are not stored: test_float8.cpp makes the same ones from the same formula.
Value i (i = 0 .. 2^20 - 1) comes from z = splitmix64(i):
  * when z % 16 == 0, the f32 with bit pattern z >> 32 (any float: NaN, inf, huge, subnormal);
  * else sign = z >> 63, exponent field = 103 + (z >> 32) % 42 (2^-24 .. 2^17, both formats'
    ranges with their underflow and overflow), mantissa = z & 0x7fffff.

With --check-torch FILE it instead loads FILE (a safetensors written by halfgrad with F8_E4M3 /
F8_E5M2 tensors named e4m3 / e5m2 holding the 256 codes in order) with torch's
safetensors loader and checks that torch reads every code as ml_dtypes decodes it. The test
writes such a file as build-dev/tests/float8_for_torch.safetensors.

    /work/venv-torch/bin/python tests/golden/make_float8.py       # needs numpy, ml_dtypes (pip)
    /work/venv-torch/bin/python tests/golden/make_float8.py --check-torch FILE  # + torch, safetensors
"""
import json
import os
import struct
import sys

import ml_dtypes
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
FORMATS = {"e4m3": (ml_dtypes.float8_e4m3fn, 448.0), "e5m2": (ml_dtypes.float8_e5m2, 57344.0)}
RANDOM_COUNT = 1 << 20


def splitmix64(i):
    mask = np.uint64(0xFFFFFFFFFFFFFFFF)
    z = (i.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15) + np.uint64(0x9E3779B97F4A7C15)) & mask
    z = ((z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)) & mask
    z = ((z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)) & mask
    return z ^ (z >> np.uint64(31))


def random_f32():
    z = splitmix64(np.arange(RANDOM_COUNT, dtype=np.uint64))
    raw = (z >> np.uint64(32)).astype(np.uint32)
    sign = (z >> np.uint64(63)).astype(np.uint32) << np.uint32(31)
    exponent = (np.uint32(103) + raw % np.uint32(42)) << np.uint32(23)
    mantissa = (z & np.uint64(0x7FFFFF)).astype(np.uint32)
    bits = np.where(z % np.uint64(16) == 0, raw, sign | exponent | mantissa)
    return bits.astype(np.uint32).view(np.float32)


def codes(values, fp8, largest, saturate):
    if saturate:  # clip keeps NaN; +-inf becomes +-largest
        values = np.clip(values, -largest, largest)
    with np.errstate(over="ignore", invalid="ignore"):
        return values.astype(fp8).view(np.uint8)


def write_safetensors(path, tensors):
    kinds = {np.dtype(np.float32): "F32", np.dtype(np.float64): "F64", np.dtype(np.uint8): "U8"}
    header, blobs, offset = {}, [], 0
    for name, array in tensors.items():
        data = np.ascontiguousarray(array).tobytes()
        header[name] = {"dtype": kinds[array.dtype], "shape": list(array.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def make():
    all16 = np.arange(65536, dtype=np.uint32).astype(np.uint16)
    f16 = all16.view(np.float16).astype(np.float32)  # exact widening
    bf16 = (all16.astype(np.uint32) << np.uint32(16)).view(np.float32)
    rand = random_f32()
    tensors = {}
    for name, (fp8, largest) in FORMATS.items():
        all_codes = np.arange(256, dtype=np.uint8)
        values = all_codes.view(fp8).astype(np.float32)
        tensors[name + ".values"] = values
        for source_name, source in (("f16", f16), ("bf16", bf16)):
            tensors["%s.from_%s" % (name, source_name)] = codes(source, fp8, largest, False)
            tensors["%s.from_%s_saturate" % (name, source_name)] = codes(source, fp8, largest, True)
        tensors[name + ".from_random_f32"] = codes(rand, fp8, largest, False)
        finite = np.sort(values[np.isfinite(values) & (values >= 0) & ~np.signbit(values)].astype(np.float64))
        midpoints = (finite[:-1] + finite[1:]) / 2
        tensors[name + ".midpoints"] = midpoints
        tensors[name + ".from_midpoints"] = codes(midpoints, fp8, largest, False)
    path = os.path.join(HERE, "float8.safetensors")
    write_safetensors(path, tensors)
    print("wrote", path)


def check_torch(path):
    import torch
    from safetensors.torch import load_file

    loaded = load_file(path)
    for name, (fp8, _) in FORMATS.items():
        t = loaded[name]
        expected_dtype = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}[name]
        assert t.dtype == expected_dtype, (name, t.dtype)
        got = t.float().numpy()
        want = np.arange(256, dtype=np.uint8).view(fp8).astype(np.float32)
        same = (got == want) | (np.isnan(got) & np.isnan(want))
        assert same.all(), (name, np.nonzero(~same))
        print("torch %s reads %s: all 256 codes as ml_dtypes decodes them" % (torch.__version__, name))


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--check-torch":
        check_torch(sys.argv[2])
    else:
        make()
