#!/usr/bin/python3
"""PyTorch-parity fixtures for tests/test_parity.cpp.

For every op case and dtype this writes, into tests/golden/<family>.safetensors:
  <case>.in<i>        the inputs, already rounded to the case dtype (integer inputs as I64)
  <case>.grad_out     the upstream gradient given to out.backward()
  <case>.out          PyTorch's forward result in the case dtype
  <case>.grad<i>      PyTorch's gradient of differentiable input i
  <case>.state<i>     input i after the call, for ops that update an input in place
                      (batch_norm's running_mean / running_var)
  <case>.out_f64, <case>.grad<i>_f64, <case>.state<i>_f64
                      the same computed by PyTorch in float64 from the same (rounded) inputs:
                      the "truth" that 16-bit results are measured against (not stored for
                      f64 cases, where .out already is the f64 answer)
and in __metadata__ one JSON string per case:
  {"op": ..., "dtype": "f32"|"f64"|"f16"|"bf16", "path": "native"|"f32_kernels",
   "f32_kernels": [aten op, ...], "n_in": k, "grads": [i, ...], "states": [i, ...], "args": {...}}
"path" says how PyTorch's 16-bit result was made: "native" = only PyTorch's own 16-bit CPU
kernels ran; "f32_kernels" = torch 1.13's CPU build lacks a 16-bit kernel for the ATen ops listed
in "f32_kernels", so each of those ran in f32 on the same 16-bit inputs and its result was rounded
to the 16-bit dtype (what a GPU kernel computing in f32 returns), kernel by kernel, forward and
backward (see F32Kernels).

tests/golden/optim.safetensors holds torch.optim trajectories for tests/test_optim.cpp (see the
optimizers section below).

torch 1.13 has no safetensors module, so the format is written here with json + struct.
Everything is seeded from the case name, so a rerun on the same machine writes byte-identical files
(conv2d and linalg go through the CPU's BLAS and may differ in the last bits on another CPU:
keep the committed files unless their cases change):

    /usr/bin/python3 tests/golden/make_golden.py        # Debian's python3 has torch
    /usr/bin/python3 tests/golden/make_golden.py vision # only the families named
"""
import contextlib
import json
import math
import os
import struct
import sys
import zlib

import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_map

HERE = os.path.dirname(os.path.abspath(__file__))
DTYPES = {"f32": torch.float32, "f64": torch.float64, "f16": torch.float16, "bf16": torch.bfloat16}
ST_DTYPE = {torch.float32: "F32", torch.float64: "F64", torch.float16: "F16", torch.bfloat16: "BF16",
            torch.int64: "I64", torch.uint8: "U8"}
ALL = ["f32", "f16", "bf16"]
WITH_F64 = ["f32", "f16", "bf16", "f64"]


# ---- safetensors writer ------------------------------------------------------------------------

def tensor_bytes(t):
    t = t.detach().contiguous().cpu()
    if t.dtype == torch.bfloat16:  # numpy has no bf16: reinterpret the bits
        return t.view(torch.int16).numpy().tobytes()
    return t.numpy().tobytes()


def write_safetensors(path, tensors, metadata):
    assert sys.byteorder == "little"
    header = {"__metadata__": metadata}
    blobs, offset = [], 0
    for name, t in tensors.items():
        data = tensor_bytes(t)
        assert len(data) == t.numel() * t.element_size()
        header[name] = {"dtype": ST_DTYPE[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)
    with open(path + ".tmp", "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)
    os.replace(path + ".tmp", path)


# ---- inputs ------------------------------------------------------------------------------------

def randn(g, shape, scale=1.0):
    return torch.randn(shape, generator=g, dtype=torch.float64) * scale


def uniform(g, shape, lo, hi):
    return lo + (hi - lo) * torch.rand(shape, generator=g, dtype=torch.float64)


def signed(g, shape, lo, hi):
    """Random sign times a magnitude in [lo, hi]: keeps values away from 0 (relu/abs kink, div)."""
    sign = torch.where(torch.rand(shape, generator=g) < 0.5, -1.0, 1.0).double()
    return sign * uniform(g, shape, lo, hi)


def away_from(x, kinks, margin):
    """Moves every value closer than `margin` to a kink to at least `margin` away."""
    for k in kinks:
        d = x - k
        s = torch.where(d >= 0, 1.0, -1.0).double()
        x = torch.where(d.abs() < margin, k + s * (margin + d.abs()), x)
    return x


def distinct(g, shape):
    """Distinct values, exact in f16 and bf16 (8 significant bits), so no max has a tie after
    rounding: +-(1 + k/128) * 2^e for k < 128, e in -2..1."""
    n = math.prod(shape)
    mags = ((1 + torch.arange(128, dtype=torch.float64) / 128)[None, :]
            * (2.0 ** torch.arange(-2, 2, dtype=torch.float64))[:, None]).flatten()
    vals = torch.cat([mags, -mags])
    assert n <= vals.numel()
    return vals[torch.randperm(vals.numel(), generator=g)[:n]].reshape(shape)


def targets(g, n, classes, ignore=None, n_ignored=0):
    t = torch.randint(0, classes, (n,), generator=g, dtype=torch.int64)
    if ignore is not None:
        if 0 <= ignore < classes:
            t[t == ignore] = (ignore + 1) % classes  # only the chosen slots are ignored
        t[torch.randperm(n, generator=g)[:n_ignored]] = ignore
    return t


# ---- 16-bit kernels PyTorch's CPU build lacks ----------------------------------------------------

class F32Kernels(TorchDispatchMode):
    """Runs every ATen kernel (forward and backward) natively; a kernel that torch 1.13's CPU build
    lacks for the 16-bit dtype (it raises) instead runs in f32 on the widened 16-bit tensors and its
    results are rounded back to 16 bits. That is what a GPU kernel computing in f32 and storing 16
    bits returns, kernel by kernel, so e.g. tanh's backward sees the 16-bit saved output, as on a GPU.
    In-place updates (batch_norm's running stats) are copied back into the 16-bit tensors."""

    def __init__(self, dtype):
        super().__init__()
        self.dtype = dtype
        self.upcast = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        try:
            return func(*args, **kwargs)
        except (RuntimeError, NotImplementedError):
            pass
        self.upcast.add(str(func.overloadpacket.__name__))
        originals, widened = [], []

        def up(t):
            if isinstance(t, torch.Tensor) and t.dtype == self.dtype:
                originals.append(t)
                widened.append(t.float())
                return widened[-1]
            return torch.float32 if t is self.dtype else t  # dtype arguments (softmax backward)

        result = func(*tree_map(up, args), **tree_map(up, kwargs))
        for orig, wide in zip(originals, widened):
            if not torch.equal(wide.to(self.dtype), orig):
                orig.copy_(wide)  # the kernel updated this input in place
        return tree_map(lambda t: t.to(self.dtype) if isinstance(t, torch.Tensor) and t.dtype == torch.float32
                        else t, result)


# ---- running one case --------------------------------------------------------------------------

class Family:
    def __init__(self, name):
        self.name = name
        self.tensors = {}
        self.metadata = {"_family": name, "_generator": "tests/golden/make_golden.py",
                         "_torch": torch.__version__}
        self.paths = {}

    def case(self, name, op, dtypes, make_inputs, fn, grads=(), states=(), args=None):
        """make_inputs(g) -> list of f64 / i64 tensors; fn(inputs) -> output tensor."""
        for dname in dtypes:
            self._one(f"{name}_{dname}", op, dname, make_inputs, fn, list(grads), list(states), args or {})

    def _one(self, case, op, dname, make_inputs, fn, grads, states, args):
        dt = DTYPES[dname]
        g = torch.Generator().manual_seed(zlib.crc32(case.encode()))
        inputs = [x.to(dt) if x.is_floating_point() else x for x in make_inputs(g)]
        out_shape = fn([widen(x, torch.float64).clone() for x in inputs]).shape
        grad_out = randn(g, out_shape).to(dt) if grads else None

        def run(compute, mode=None):
            ins = [widen(x, compute).clone() for x in inputs]
            for i in grads:
                ins[i].requires_grad_(True)
            with mode or contextlib.nullcontext():
                out = fn(ins)
                if grads:
                    out.backward(grad_out.to(compute))
            return out.detach(), [ins[i].grad for i in grads], [ins[i].detach() for i in states]

        mode = F32Kernels(dt) if dt in (torch.float16, torch.bfloat16) else None
        out, gs, sts = run(dt, mode)
        assert out.dtype == dt or not out.is_floating_point(), (case, out.dtype)
        path = "f32_kernels" if mode and mode.upcast else "native"
        self.paths.setdefault(path, []).append(case)

        t = self.tensors
        for i, x in enumerate(inputs):
            t[f"{case}.in{i}"] = x
        if grads:
            t[f"{case}.grad_out"] = grad_out
        t[f"{case}.out"] = out
        for i, x in zip(grads, gs):
            t[f"{case}.grad{i}"] = x
        for i, x in zip(states, sts):
            t[f"{case}.state{i}"] = x
        if dt != torch.float64:
            out64, gs64, sts64 = run(torch.float64)
            if out64.is_floating_point():
                t[f"{case}.out_f64"] = out64
            for i, x in zip(grads, gs64):
                t[f"{case}.grad{i}_f64"] = x
            for i, x in zip(states, sts64):
                t[f"{case}.state{i}_f64"] = x
        self.metadata[case] = json.dumps({"op": op, "dtype": dname, "path": path, "n_in": len(inputs),
                                          "grads": grads, "states": states, "args": args,
                                          "f32_kernels": sorted(mode.upcast) if mode else []},
                                         separators=(",", ":"))

    def write(self):
        path = os.path.join(HERE, f"{self.name}.safetensors")
        write_safetensors(path, self.tensors, self.metadata)
        size = os.path.getsize(path)
        n = sum(1 for k in self.metadata if not k.startswith("_"))
        print(f"{self.name:12s} {n:4d} cases {size / 1024:8.1f} KiB   with f32 kernels: "
              f"{len(self.paths.get('f32_kernels', []))}")
        return size


def widen(x, dtype):
    return x.to(dtype) if x.is_floating_point() else x


# ---- the cases ---------------------------------------------------------------------------------

def elementwise():
    f = Family("elementwise")
    same = lambda g: [randn(g, (3, 23)), randn(g, (3, 23))]
    bcast = lambda g: [randn(g, (2, 1, 37)), randn(g, (3, 37))]
    den_same = lambda g: [randn(g, (3, 23)), signed(g, (3, 23), 0.5, 2.0)]
    den_bcast = lambda g: [randn(g, (2, 1, 37)), signed(g, (3, 37), 0.5, 2.0)]
    for op, fn in [("add", torch.add), ("sub", torch.sub), ("mul", torch.mul), ("div", torch.div)]:
        wide = WITH_F64 if op in ("add", "div") else ALL
        f.case(f"{op}_same", op, wide, den_same if op == "div" else same, lambda x, fn=fn: fn(x[0], x[1]), [0, 1])
        f.case(f"{op}_bcast", op, WITH_F64 if op == "mul" else ALL, den_bcast if op == "div" else bcast,
               lambda x, fn=fn: fn(x[0], x[1]), [0, 1])
    f.case("mul_0d_bcast", "mul", ALL, lambda g: [randn(g, (5, 7)), randn(g, ())], lambda x: x[0] * x[1], [0, 1])
    f.case("add_1elem", "add", ALL, lambda g: [randn(g, (1,)), randn(g, (1,))], lambda x: x[0] + x[1], [0, 1])
    for op, s, fn in [("add_scalar", 2.5, torch.add), ("sub_scalar", 0.3, torch.sub),
                      ("mul_scalar", 0.3, torch.mul), ("div_scalar", 3.0, torch.div)]:
        f.case(op, op, ALL, lambda g: [randn(g, (67,))], lambda x, s=s, fn=fn: fn(x[0], s), [0], args={"scalar": s})
    f.case("neg", "neg", ALL, lambda g: [randn(g, (67,))], lambda x: -x[0], [0])
    f.case("exp", "exp", WITH_F64, lambda g: [uniform(g, (67,), -4, 4)], lambda x: torch.exp(x[0]), [0])
    f.case("exp_0d", "exp", ALL, lambda g: [randn(g, ())], lambda x: torch.exp(x[0]), [0])
    f.case("log", "log", ALL, lambda g: [uniform(g, (67,), 0.05, 8)], lambda x: torch.log(x[0]), [0])
    f.case("sqrt", "sqrt", ALL, lambda g: [uniform(g, (67,), 0.05, 8)], lambda x: torch.sqrt(x[0]), [0])
    for name, e, make, wide in [("pow2", 2.0, lambda g: [randn(g, (67,), 1.5)], WITH_F64),
                                ("pow3", 3.0, lambda g: [randn(g, (67,))], ALL),
                                ("pow_half", 0.5, lambda g: [uniform(g, (67,), 0.05, 8)], ALL),
                                ("pow_m1_5", -1.5, lambda g: [uniform(g, (67,), 0.25, 4)], ALL)]:
        f.case(name, "pow", wide, make, lambda x, e=e: torch.pow(x[0], e), [0], args={"exponent": e})
    f.case("abs", "abs", ALL, lambda g: [signed(g, (67,), 0.05, 3)], lambda x: torch.abs(x[0]), [0])
    f.case("clamp", "clamp", ALL, lambda g: [away_from(uniform(g, (67,), -2, 2), [-0.5, 0.8], 0.03)],
           lambda x: torch.clamp(x[0], -0.5, 0.8), [0], args={"min": -0.5, "max": 0.8})
    math_functions(f)
    return f


def math_functions(f):
    """ops/math.h: reciprocal ... round, maximum/minimum, pow and clamp with tensor operands."""
    positive = lambda g: [uniform(g, (67,), 0.2, 4)]
    for op, fn in [("reciprocal", torch.reciprocal), ("rsqrt", torch.rsqrt), ("log1p", torch.log1p)]:
        f.case(op, op, ALL, positive, lambda x, fn=fn: fn(x[0]), [0])
    for op, fn in [("expm1", torch.expm1), ("erf", torch.erf), ("sin", torch.sin), ("cos", torch.cos)]:
        f.case(op, op, WITH_F64 if op == "erf" else ALL, lambda g: [randn(g, (67,), 1.5)], lambda x, fn=fn: fn(x[0]), [0])
    # Away from the jumps, where a 16-bit rounding of the input would move the answer.
    for op, fn in [("sign", torch.sign), ("floor", torch.floor), ("ceil", torch.ceil), ("round", torch.round)]:
        kinks = [k / 2 for k in range(-8, 9)] if op == "round" else list(range(-4, 5))
        f.case(op, op, ALL, lambda g, kinks=kinks: [away_from(randn(g, (67,), 1.5), kinks, 0.05)],
               lambda x, fn=fn: fn(x[0]), [0])
    for op, fn in [("maximum", torch.maximum), ("minimum", torch.minimum)]:
        f.case(f"{op}_bcast", op, ALL, lambda g: [randn(g, (2, 1, 37)), randn(g, (3, 37))],
               lambda x, fn=fn: fn(x[0], x[1]), [0, 1])
    f.case("pow_tensor", "pow_tensor", WITH_F64, lambda g: [uniform(g, (3, 1, 5), 0.2, 3), randn(g, (4, 5))],
           lambda x: torch.pow(x[0], x[1]), [0, 1])
    f.case("clamp_tensor", "clamp_tensor", ALL,
           lambda g: [randn(g, (3, 7)), randn(g, (7,), 0.3) - 0.5, randn(g, (3, 1), 0.3) + 0.5],
           lambda x: torch.clamp(x[0], x[1], x[2]), [0, 1, 2])


def activation():
    f = Family("activation")
    x = lambda g: [randn(g, (3, 37), 2.0)]
    f.case("relu", "relu", ALL, lambda g: [signed(g, (3, 37), 0.05, 4)], lambda x: torch.relu(x[0]), [0])
    for name, slope in [("leaky_relu", 0.01), ("leaky_relu_0_2", 0.2)]:
        f.case(name, "leaky_relu", WITH_F64, lambda g: [signed(g, (3, 37), 0.05, 4)],
               lambda x, s=slope: F.leaky_relu(x[0], s), [0], args={"negative_slope": slope})
    f.case("gelu", "gelu", WITH_F64, x, lambda x: F.gelu(x[0]), [0])
    f.case("silu", "silu", WITH_F64, x, lambda x: F.silu(x[0]), [0])
    f.case("sigmoid", "sigmoid", ALL, x, lambda x: torch.sigmoid(x[0]), [0])
    f.case("tanh", "tanh", ALL, x, lambda x: torch.tanh(x[0]), [0])
    softplus_family(f)
    vision_activations(f)
    return f


def vision_activations(f):
    """The piecewise and exponential activations over [-8, 8], kept 0.05 away from their kinks
    (a 16-bit input rounded onto a kink would test which one-sided slope each side picks)."""
    def wide(kinks):
        return lambda g: [away_from(uniform(g, (3, 37), -8, 8), kinks, 0.05)]
    for name, op, kinks, fn, args in [
            ("relu6", "relu6", [0, 6], lambda x: F.relu6(x[0]), {}),
            ("hardtanh", "hardtanh", [-1, 1], lambda x: F.hardtanh(x[0]), {"min_val": -1, "max_val": 1}),
            ("hardtanh_m2_0_5", "hardtanh", [-2, 0.5], lambda x: F.hardtanh(x[0], -2, 0.5),
             {"min_val": -2, "max_val": 0.5}),
            ("hardsigmoid", "hardsigmoid", [-3, 3], lambda x: F.hardsigmoid(x[0]), {}),
            ("hardswish", "hardswish", [-3, 3], lambda x: F.hardswish(x[0]), {}),
            ("elu", "elu", [0], lambda x: F.elu(x[0]), {"alpha": 1}),
            ("elu_alpha_0_3", "elu", [0], lambda x: F.elu(x[0], 0.3), {"alpha": 0.3}),
            ("selu", "selu", [0], lambda x: F.selu(x[0]), {}),
            ("celu_alpha_2_5", "celu", [0], lambda x: F.celu(x[0], 2.5), {"alpha": 2.5}),
            ("mish", "mish", [], lambda x: F.mish(x[0]), {}),
            ("softsign", "softsign", [], lambda x: F.softsign(x[0]), {}),
            ("logsigmoid", "logsigmoid", [], lambda x: F.logsigmoid(x[0]), {}),
            ("gelu_tanh", "gelu", [], lambda x: F.gelu(x[0], approximate="tanh"), {"approximate": "tanh"})]:
        f.case(name, op, WITH_F64, wide(kinks), fn, [0], args=args)


def softplus_family(f):
    """softplus on both sides of its threshold (beta x > threshold is x itself)."""
    for name, beta, threshold, scale in [("softplus", 1.0, 20.0, 4.0), ("softplus_beta2_threshold2", 2.0, 2.0, 3.0)]:
        f.case(name, "softplus", WITH_F64, lambda g, s=scale: [randn(g, (3, 37), s)],
               lambda x, b=beta, t=threshold: F.softplus(x[0], b, t), [0], args={"beta": beta, "threshold": threshold})


def reduce():
    f = Family("reduce")
    f.case("sum_all", "sum", ALL, lambda g: [randn(g, (7, 37))], lambda x: x[0].sum(), [0])
    f.case("sum_dim1", "sum", WITH_F64, lambda g: [randn(g, (5, 37, 3))], lambda x: x[0].sum([1]), [0],
           args={"dims": [1], "keepdim": False})
    f.case("sum_dims02_keep", "sum", ALL, lambda g: [randn(g, (3, 5, 33))],
           lambda x: x[0].sum([0, 2], keepdim=True), [0], args={"dims": [0, 2], "keepdim": True})
    f.case("mean_all", "mean", WITH_F64, lambda g: [randn(g, (67,))], lambda x: x[0].mean(), [0])
    f.case("mean_last", "mean", ALL, lambda g: [randn(g, (6, 37))], lambda x: x[0].mean([-1]), [0],
           args={"dims": [-1], "keepdim": False})
    f.case("mean_dims01_keep", "mean", ALL, lambda g: [randn(g, (3, 5, 7))],
           lambda x: x[0].mean([0, 1], keepdim=True), [0], args={"dims": [0, 1], "keepdim": True})
    f.case("amax_dim1", "amax", ALL, lambda g: [distinct(g, (5, 37, 3))], lambda x: x[0].amax(1), [0],
           args={"dim": 1, "keepdim": False})
    f.case("amax_last_keep", "amax", ALL, lambda g: [distinct(g, (6, 37))], lambda x: x[0].amax(-1, keepdim=True),
           [0], args={"dim": -1, "keepdim": True})
    f.case("argmax_dim1", "argmax", ALL, lambda g: [distinct(g, (5, 37, 3))], lambda x: x[0].argmax(1),
           args={"dim": 1})
    f.case("argmax_dim0", "argmax", ALL, lambda g: [distinct(g, (7, 13))], lambda x: x[0].argmax(0),
           args={"dim": 0})
    return f


def linalg():
    f = Family("linalg")
    mm = lambda x: torch.matmul(x[0], x[1])
    f.case("mm_small", "matmul", ALL, lambda g: [randn(g, (5, 3)), randn(g, (3, 7))], mm, [0, 1])
    f.case("mm", "matmul", WITH_F64, lambda g: [randn(g, (9, 33)), randn(g, (33, 11))], mm, [0, 1])
    f.case("bmm", "matmul", WITH_F64, lambda g: [randn(g, (2, 5, 35)), randn(g, (2, 35, 6))], mm, [0, 1])
    f.case("bmm_2d", "matmul", ALL, lambda g: [randn(g, (2, 7, 37)), randn(g, (37, 5))], mm, [0, 1])
    f.case("linear_bias", "linear", WITH_F64, lambda g: [randn(g, (2, 3, 33)), randn(g, (9, 33), 0.2),
                                                         randn(g, (9,))],
           lambda x: F.linear(x[0], x[1], x[2]), [0, 1, 2])
    f.case("linear_nobias", "linear", ALL, lambda g: [randn(g, (11, 20)), randn(g, (9, 20), 0.2)],
           lambda x: F.linear(x[0], x[1]), [0, 1])
    return f


def softmax():
    f = Family("softmax")
    f.case("softmax_last", "softmax", WITH_F64, lambda g: [randn(g, (6, 37), 2.0)],
           lambda x: torch.softmax(x[0], -1), [0], args={"dim": -1})
    f.case("softmax_dim0", "softmax", ALL, lambda g: [randn(g, (5, 9), 2.0)],
           lambda x: torch.softmax(x[0], 0), [0], args={"dim": 0})
    f.case("softmax_large", "softmax", ALL, lambda g: [randn(g, (4, 37), 30.0)],
           lambda x: torch.softmax(x[0], -1), [0], args={"dim": -1})
    f.case("log_softmax_last", "log_softmax", WITH_F64, lambda g: [randn(g, (6, 37), 2.0)],
           lambda x: torch.log_softmax(x[0], -1), [0], args={"dim": -1})
    f.case("log_softmax_mid", "log_softmax", ALL, lambda g: [randn(g, (2, 5, 7), 2.0)],
           lambda x: torch.log_softmax(x[0], 1), [0], args={"dim": 1})
    return f


def loss():
    f = Family("loss")

    def ce(name, dtypes, ls, ignore, n_ignored):
        args = {"label_smoothing": ls, "ignore_index": ignore}
        f.case(name, "cross_entropy", dtypes,
               lambda g: [randn(g, (13, 37), 2.0), targets(g, 13, 37, ignore, n_ignored)],
               lambda x: F.cross_entropy(x[0], x[1], label_smoothing=ls, ignore_index=ignore), [0], args=args)

    ce("ce", ALL, 0.0, -100, 0)
    ce("ce_smooth", WITH_F64, 0.1, -100, 0)
    ce("ce_ignore", ALL, 0.0, -100, 3)
    ce("ce_ignore2_smooth", ALL, 0.2, 2, 4)
    f.case("mse", "mse_loss", WITH_F64, lambda g: [randn(g, (7, 19)), randn(g, (7, 19))],
           lambda x: F.mse_loss(x[0], x[1]), [0, 1])
    f.case("mse_none", "mse_loss", ALL, lambda g: [randn(g, (7, 19)), randn(g, (7, 19))],
           lambda x: F.mse_loss(x[0], x[1], reduction="none"), [0, 1], args={"reduction": "none"})
    # The composed cross_entropy: (N, C, d) logits, a class weight, other reductions.
    ce_args = {"label_smoothing": 0.0, "ignore_index": -100}
    f.case("ce_3d_none", "cross_entropy", WITH_F64,
           lambda g: [randn(g, (4, 7, 5), 2.0), torch.randint(0, 7, (4, 5), generator=g)],
           lambda x: F.cross_entropy(x[0], x[1], reduction="none"), [0], args=dict(ce_args, reduction="none"))
    f.case("ce_weight", "cross_entropy", ALL,
           lambda g: [randn(g, (13, 7), 2.0), targets(g, 13, 7, -100, 2), uniform(g, (7,), 0.5, 2.0)],
           lambda x: F.cross_entropy(x[0], x[1], weight=x[2]), [0], args=dict(ce_args, reduction="mean"))
    f.case("ce_smooth_sum", "cross_entropy", ALL,
           lambda g: [randn(g, (13, 7), 2.0), targets(g, 13, 7, -100, 3)],
           lambda x: F.cross_entropy(x[0], x[1], label_smoothing=0.1, reduction="sum"), [0],
           args={"label_smoothing": 0.1, "ignore_index": -100, "reduction": "sum"})
    logp = lambda g: [torch.log_softmax(randn(g, (9, 6), 2.0), 1)]
    f.case("nll", "nll_loss", WITH_F64, lambda g: logp(g) + [targets(g, 9, 6, -100, 2)],
           lambda x: F.nll_loss(x[0], x[1]), [0])
    f.case("nll_weight_sum", "nll_loss", ALL, lambda g: logp(g) + [targets(g, 9, 6, -100, 0), uniform(g, (6,), 0.5, 2.0)],
           lambda x: F.nll_loss(x[0], x[1], weight=x[2], reduction="sum"), [0], args={"reduction": "sum"})
    pair = lambda g: [randn(g, (5, 11), 2.0), randn(g, (5, 11), 2.0)]
    for reduction in ["mean", "none"]:
        f.case(f"l1_{reduction}", "l1_loss", WITH_F64, pair, lambda x, r=reduction: F.l1_loss(x[0], x[1], reduction=r),
               [0, 1], args={"reduction": reduction})
        f.case(f"smooth_l1_{reduction}", "smooth_l1_loss", WITH_F64, pair,
               lambda x, r=reduction: F.smooth_l1_loss(x[0], x[1], reduction=r, beta=0.5), [0, 1],
               args={"reduction": reduction, "beta": 0.5})
        f.case(f"huber_{reduction}", "huber_loss", WITH_F64, pair,
               lambda x, r=reduction: F.huber_loss(x[0], x[1], reduction=r, delta=2.0), [0, 1],
               args={"reduction": reduction, "delta": 2.0})
    probs = lambda g: [uniform(g, (5, 11), 0.02, 0.98), uniform(g, (5, 11), 0.0, 1.0)]
    f.case("bce", "binary_cross_entropy", WITH_F64, probs, lambda x: F.binary_cross_entropy(x[0], x[1]), [0, 1])
    f.case("bce_weight_none", "binary_cross_entropy", ALL, lambda g: probs(g) + [uniform(g, (11,), 0.5, 2.0)],
           lambda x: F.binary_cross_entropy(x[0], x[1], weight=x[2], reduction="none"), [0, 1], args={"reduction": "none"})
    logits = lambda g: [randn(g, (5, 11), 3.0), uniform(g, (5, 11), 0.0, 1.0)]
    f.case("bce_logits", "binary_cross_entropy_with_logits", WITH_F64, logits,
           lambda x: F.binary_cross_entropy_with_logits(x[0], x[1]), [0, 1])
    f.case("bce_logits_pos_weight_sum", "binary_cross_entropy_with_logits", ALL,
           lambda g: logits(g) + [uniform(g, (11,), 0.5, 3.0)],
           lambda x: F.binary_cross_entropy_with_logits(x[0], x[1], pos_weight=x[2], reduction="sum"), [0, 1],
           args={"reduction": "sum"})
    kl = lambda g: [torch.log_softmax(randn(g, (6, 8)), 1), torch.softmax(randn(g, (6, 8)), 1)]
    f.case("kl_batchmean", "kl_div", WITH_F64, kl, lambda x: F.kl_div(x[0], x[1], reduction="batchmean"), [0, 1],
           args={"reduction": "batchmean"})
    f.case("kl_none", "kl_div", ALL, kl, lambda x: F.kl_div(x[0], x[1], reduction="none"), [0, 1],
           args={"reduction": "none"})
    return f


def conv():
    f = Family("conv2d")

    def c(name, dtypes, x, w, bias, stride, padding, dilation=1, groups=1):
        def make(g):
            ins = [randn(g, x), randn(g, w, 1 / math.sqrt(w[1] * w[2] * w[3]))]
            return ins + [randn(g, (w[0],))] if bias else ins
        args = {"stride": stride, "padding": padding}
        if dilation != 1 or groups != 1:  # (the older cases' args stay as they were)
            args.update(dilation=dilation, groups=groups)
        f.case(name, "conv2d", dtypes, make,
               lambda t: F.conv2d(t[0], t[1], t[2] if bias else None, stride=stride, padding=padding,
                                  dilation=dilation, groups=groups),
               [0, 1, 2] if bias else [0, 1], args=args)

    c("conv_s1p0", ALL, (2, 3, 7, 9), (4, 3, 3, 3), True, 1, 0)
    c("conv_s2p1", WITH_F64, (1, 5, 10, 7), (6, 5, 3, 3), True, 2, 1)
    c("conv_nobias_p2", ALL, (1, 4, 7, 7), (3, 4, 5, 5), False, 1, 2)
    c("conv_1x1_c37", ALL, (1, 37, 3, 3), (13, 37, 1, 1), True, 1, 0)
    # MobileNet's depthwise 3x3 (stride 1 and 2), groups of 2 with dilation 2.
    c("conv_depthwise_s1", ALL, (2, 8, 9, 9), (8, 1, 3, 3), True, 1, 1, groups=8)
    c("conv_depthwise_s2", ALL, (1, 6, 8, 8), (6, 1, 3, 3), False, 2, 1, groups=6)
    c("conv_groups2_dilation2", ALL, (1, 4, 9, 9), (6, 2, 3, 3), True, 1, 2, dilation=2, groups=2)
    return f


def pool():
    f = Family("pool")
    for name, op, shape, k, s in [("maxpool_k2s2", "max_pool2d", (2, 3, 8, 9), 2, 2),
                                  ("maxpool_k3s2", "max_pool2d", (1, 4, 11, 11), 3, 2),
                                  ("avgpool_k2s2", "avg_pool2d", (2, 3, 8, 9), 2, 2),
                                  ("avgpool_k3s1", "avg_pool2d", (1, 2, 7, 9), 3, 1)]:
        fn = F.max_pool2d if op == "max_pool2d" else F.avg_pool2d
        make = (lambda g, shape=shape: [distinct(g, shape)]) if op == "max_pool2d" else \
               (lambda g, shape=shape: [randn(g, shape)])
        f.case(name, op, ALL, make, lambda x, fn=fn, k=k, s=s: fn(x[0], k, s), [0],
               args={"kernel": k, "stride": s})
    # Padding (a ResNet stem's 3x3/2 pad 1), ceil_mode's partial last window, count_include_pad off.
    for name, op, shape, k, s, p, ceil, include in [
            ("maxpool_k3s2p1", "max_pool2d", (2, 3, 8, 8), 3, 2, 1, False, True),
            ("maxpool_k3s2p1_ceil", "max_pool2d", (1, 2, 7, 6), 3, 2, 1, True, True),
            ("avgpool_k3s2p1", "avg_pool2d", (2, 3, 8, 8), 3, 2, 1, False, True),
            ("avgpool_k3s2p1_exclude_pad", "avg_pool2d", (2, 3, 8, 8), 3, 2, 1, False, False),
            ("avgpool_k3s2p1_ceil_exclude_pad", "avg_pool2d", (1, 2, 7, 6), 3, 2, 1, True, False),
            ("avgpool_k2s2_ceil", "avg_pool2d", (1, 2, 5, 7), 2, 2, 0, True, True)]:
        if op == "max_pool2d":
            f.case(name, op, ALL, lambda g, shape=shape: [distinct(g, shape)],
                   lambda x, k=k, s=s, p=p, ceil=ceil: F.max_pool2d(x[0], k, s, p, ceil_mode=ceil), [0],
                   args={"kernel": k, "stride": s, "padding": p, "ceil_mode": ceil})
        else:
            f.case(name, op, ALL, lambda g, shape=shape: [randn(g, shape)],
                   lambda x, k=k, s=s, p=p, ceil=ceil, include=include:
                   F.avg_pool2d(x[0], k, s, p, ceil_mode=ceil, count_include_pad=include), [0],
                   args={"kernel": k, "stride": s, "padding": p, "ceil_mode": ceil, "count_include_pad": include})
    for name, shape, size in [("adaptive_avg_6x6_to_3x3", (1, 2, 6, 6), (3, 3)),
                              ("adaptive_avg_5x9_to_3x4", (2, 3, 5, 9), (3, 4)),
                              ("adaptive_avg_global", (2, 4, 7, 7), (1, 1)),
                              ("adaptive_avg_3x3_to_5x4", (1, 2, 3, 3), (5, 4))]:
        f.case(name, "adaptive_avg_pool2d", ALL, lambda g, shape=shape: [randn(g, shape)],
               lambda x, size=size: F.adaptive_avg_pool2d(x[0], size), [0], args={"output_size": list(size)})
    return f


def stats_norm_case(f, name, op, dtypes, shape, stats, affine, call, updates_stats, args):
    """A case of batch_norm or instance_norm: inputs x, (running_mean, running_var)?, (weight,
    bias)?; call(x, rm, rv, w, b) runs the op; updates_stats: it writes the running statistics."""
    c = shape[1]

    def make(g):
        ins = [randn(g, shape, 1.5) + 0.5]
        if stats:
            ins += [randn(g, (c,), 0.5), uniform(g, (c,), 0.5, 2.0)]
        if affine:
            ins += [1 + randn(g, (c,), 0.3), randn(g, (c,), 0.3)]
        return ins

    def fn(x):
        rm, rv = (x[1], x[2]) if stats else (None, None)
        w, b = (x[-2], x[-1]) if affine else (None, None)
        return call(x[0], rm, rv, w, b)

    n = 1 + 2 * stats + 2 * affine
    grads = [0] + ([n - 2, n - 1] if affine else [])
    f.case(name, op, dtypes, make, fn, grads, states=[1, 2] if stats and updates_stats else [],
           args=dict(args, stats=stats, affine=affine))


def norm():
    f = Family("norm")

    def bn(name, dtypes, shape, training, momentum, eps, stats=True, affine=True):
        stats_norm_case(f, name, "batch_norm", dtypes, shape, stats, affine,
                        lambda x, rm, rv, w, b: F.batch_norm(x, rm, rv, w, b, training=training, momentum=momentum,
                                                             eps=eps),
                        training, {"training": training, "momentum": momentum, "eps": eps})

    bn("bn_train4d", WITH_F64, (4, 3, 5, 7), True, 0.1, 1e-5)
    bn("bn_eval4d", ALL, (4, 3, 5, 7), False, 0.1, 1e-5)
    bn("bn_train2d", ALL, (8, 37), True, 0.3, 1e-3)
    bn("bn_train_noaffine", ALL, (6, 5, 3, 3), True, 0.1, 1e-5, affine=False)
    bn("bn_train_nostats", ALL, (5, 4, 3, 2), True, 0.1, 1e-5, stats=False)

    def ln(name, dtypes, shape, normalized, eps, affine=True):
        def make(g):
            ins = [randn(g, shape, 1.5) + 0.5]
            return ins + [1 + randn(g, normalized, 0.3), randn(g, normalized, 0.3)] if affine else ins
        f.case(name, "layer_norm", dtypes, make,
               lambda x: F.layer_norm(x[0], normalized, *(x[1:] if affine else []), eps=eps),
               [0, 1, 2] if affine else [0], args={"normalized_shape": list(normalized), "eps": eps, "affine": affine})

    ln("ln_last", WITH_F64, (2, 3, 37), (37,), 1e-5)
    ln("ln_last2", ALL, (3, 5, 11), (5, 11), 1e-5)
    ln("ln_noaffine", ALL, (6, 37), (37,), 1e-3, affine=False)
    return f


def vision():
    """conv1d, conv_transpose2d, prelu, group_norm, instance_norm, interpolate, adaptive_max_pool2d."""
    f = Family("vision")

    def conv1d(name, dtypes, x, w, bias, stride, padding, dilation=1, groups=1):
        def make(g):
            ins = [randn(g, x), randn(g, w, 1 / math.sqrt(w[1] * w[2]))]
            return ins + [randn(g, (w[0],))] if bias else ins
        f.case(name, "conv1d", dtypes, make,
               lambda t: F.conv1d(t[0], t[1], t[2] if bias else None, stride=stride, padding=padding,
                                  dilation=dilation, groups=groups),
               [0, 1, 2] if bias else [0, 1],
               args={"stride": stride, "padding": padding, "dilation": dilation, "groups": groups})

    conv1d("conv1d_s1p1", WITH_F64, (2, 3, 11), (4, 3, 3), True, 1, 1)
    conv1d("conv1d_s2_dilation2_groups2", ALL, (1, 4, 13), (6, 2, 3), False, 2, 2, dilation=2, groups=2)

    def convt(name, dtypes, x, w, bias, stride, padding, output_padding=0, groups=1, dilation=1):
        def make(g):
            ins = [randn(g, x), randn(g, w, 1 / math.sqrt(w[0] // groups * w[2] * w[3]))]
            return ins + [randn(g, (w[1] * groups,))] if bias else ins
        def fn(t):
            # NOTE: torch 1.13's CPU bf16 conv_transpose2d (oneDNN) returns a wrong shape with groups
            # ([1, 4, 2, 2] for [1, 4, 8, 6]): bf16 runs in f32 and rounds once, as a GPU kernel does.
            low = t[0].dtype == torch.bfloat16
            u = [a.float() if low else a for a in t]
            out = F.conv_transpose2d(u[0], u[1], u[2] if bias else None, stride=stride, padding=padding,
                                     output_padding=output_padding, groups=groups, dilation=dilation)
            return out.to(t[0].dtype)
        f.case(name, "conv_transpose2d", dtypes, make, fn,
               [0, 1, 2] if bias else [0, 1],
               args={"stride": stride, "padding": padding, "output_padding": output_padding, "groups": groups,
                     "dilation": dilation})

    convt("convt_k4s2p1", WITH_F64, (2, 4, 5, 5), (4, 3, 4, 4), True, 2, 1)
    convt("convt_outpad_groups2", ALL, (1, 4, 4, 3), (4, 2, 3, 3), True, 2, 1, output_padding=1, groups=2)
    convt("convt_dilation2", ALL, (1, 3, 5, 5), (3, 2, 3, 3), False, 1, 2, dilation=2)

    f.case("prelu_channels", "prelu", WITH_F64, lambda g: [randn(g, (2, 5, 4, 3)), uniform(g, (5,), 0.05, 0.5)],
           lambda x: F.prelu(x[0], x[1]), [0, 1])
    f.case("prelu_single", "prelu", ALL, lambda g: [randn(g, (3, 7)), uniform(g, (1,), 0.05, 0.5)],
           lambda x: F.prelu(x[0], x[1]), [0, 1])

    def gn(name, dtypes, shape, groups, eps, affine=True):
        c = shape[1]

        def make(g):
            ins = [randn(g, shape, 1.5) + 0.5]
            return ins + [1 + randn(g, (c,), 0.3), randn(g, (c,), 0.3)] if affine else ins
        f.case(name, "group_norm", dtypes, make,
               lambda x: F.group_norm(x[0], groups, *(x[1:] if affine else []), eps=eps),
               [0, 1, 2] if affine else [0], args={"num_groups": groups, "eps": eps, "affine": affine})

    gn("gn_4d", WITH_F64, (2, 6, 5, 4), 3, 1e-5)
    gn("gn_3d_noaffine", ALL, (3, 8, 7), 2, 1e-5, affine=False)
    gn("gn_one_group", ALL, (2, 4, 3, 3), 1, 1e-3)

    def inorm(name, dtypes, shape, use_input_stats, stats, affine, momentum=0.1, eps=1e-5):
        stats_norm_case(f, name, "instance_norm", dtypes, shape, stats, affine,
                        lambda x, rm, rv, w, b: F.instance_norm(x, rm, rv, w, b, use_input_stats=use_input_stats,
                                                                momentum=momentum, eps=eps),
                        use_input_stats, {"use_input_stats": use_input_stats, "momentum": momentum, "eps": eps})

    inorm("in_affine", WITH_F64, (2, 3, 5, 4), True, False, True)
    inorm("in_running_stats", ALL, (3, 4, 4, 4), True, True, False, momentum=0.2)
    inorm("in_eval", ALL, (2, 3, 4, 4), False, True, True)

    def interp(name, dtypes, shape, mode, size=None, scale=None, align=None):
        args = {"mode": mode}
        kwargs = {"mode": mode}
        if size is not None:
            args["size"], kwargs["size"] = list(size), size
        if scale is not None:
            args["scale_factor"], kwargs["scale_factor"] = scale, scale
        if align is not None:
            args["align_corners"], kwargs["align_corners"] = align, align
        f.case(name, "interpolate", dtypes, lambda g: [randn(g, shape)],
               lambda x: F.interpolate(x[0], **kwargs), [0], args=args)

    interp("nearest_size_up", WITH_F64, (2, 3, 4, 5), "nearest", size=(9, 7))
    interp("nearest_size_down", ALL, (1, 2, 9, 8), "nearest", size=(4, 5))
    interp("nearest_scale2", ALL, (2, 2, 4, 3), "nearest", scale=2.0)
    interp("bilinear_size", WITH_F64, (1, 3, 5, 4), "bilinear", size=(8, 9))
    interp("bilinear_align", ALL, (1, 2, 4, 4), "bilinear", size=(7, 5), align=True)
    interp("bilinear_down", ALL, (2, 2, 9, 7), "bilinear", size=(4, 3))
    interp("bilinear_scale1.5", ALL, (1, 2, 4, 6), "bilinear", scale=1.5)

    for name, shape, size in [("adaptive_max_6x6_to_3x3", (1, 2, 6, 6), (3, 3)),
                              ("adaptive_max_5x9_to_3x4", (2, 3, 5, 9), (3, 4)),
                              ("adaptive_max_global", (2, 4, 7, 7), (1, 1))]:
        f.case(name, "adaptive_max_pool2d", ALL, lambda g, shape=shape: [distinct(g, shape)],
               lambda x, size=size: F.adaptive_max_pool2d(x[0], size), [0], args={"output_size": list(size)})
    return f


def embedding():
    f = Family("embedding")
    f.case("emb_2d", "embedding", ALL,
           lambda g: [torch.randint(0, 11, (3, 5), generator=g), randn(g, (11, 37))],
           lambda x: F.embedding(x[0], x[1]), [1])
    f.case("emb_1d_repeats", "embedding", ALL,  # 19 lookups into 5 rows: gradients accumulate
           lambda g: [torch.randint(0, 5, (19,), generator=g), randn(g, (5, 33))],
           lambda x: F.embedding(x[0], x[1]), [1])
    return f


def cat():
    f = Family("cat")
    for name, shapes, dim, dtypes in [("cat_dim1", [(2, 5, 3), (2, 7, 3), (2, 1, 3)], 1, ALL),
                                      ("cat_dim0", [(3, 37), (1, 37)], 0, WITH_F64),
                                      ("cat_last", [(4, 3), (4, 17), (4, 40)], -1, ALL)]:
        f.case(name, "cat", dtypes, lambda g, shapes=shapes: [randn(g, s) for s in shapes],
               lambda x, dim=dim: torch.cat(x, dim), list(range(len(shapes))), args={"dim": dim})
    return f


def shape():
    """Views and copies: they move values (and gradients back), nothing else."""
    f = Family("shape")
    f.case("view_2d", "view", ALL, lambda g: [randn(g, (4, 6))], lambda x: x[0].reshape(3, 8), [0],
           args={"shape": [3, 8]})
    f.case("permute_3d", "permute", ALL, lambda g: [randn(g, (2, 3, 5))], lambda x: x[0].permute(2, 0, 1), [0],
           args={"dims": [2, 0, 1]})
    f.case("expand_broadcast", "expand", ALL, lambda g: [randn(g, (3, 1))], lambda x: x[0].expand(2, 3, 4), [0],
           args={"shape": [2, 3, 4]})
    f.case("narrow_middle", "narrow", ALL, lambda g: [randn(g, (4, 7))], lambda x: x[0].narrow(1, 2, 3), [0],
           args={"dim": 1, "start": 2, "length": 3})
    f.case("clone_2d", "clone", WITH_F64, lambda g: [randn(g, (3, 5))], lambda x: x[0].clone(), [0], args={})
    f.case("where_broadcast", "where", ALL,
           lambda g: [torch.randint(0, 2, (3, 1), generator=g), randn(g, (3, 4)), randn(g, (4,))],
           lambda x: torch.where(x[0] != 0, x[1], x[2]), [1, 2], args={})
    return f



def indexing():
    """ops/indexing.h: index_select, gather, scatter_add (repeated indices add up), flip, roll,
    repeat, pad in its three modes."""
    f = Family("indexing")
    idx = lambda values: torch.tensor(values, dtype=torch.int64)
    f.case("index_select_rows", "index_select", WITH_F64, lambda g: [randn(g, (4, 5)), idx([3, 0, 3, 1, 0])],
           lambda x: torch.index_select(x[0], 0, x[1]), [0], args={"dim": 0})
    f.case("index_select_last", "index_select", ALL, lambda g: [randn(g, (2, 3, 4)), idx([3, 3, 0, 1, 2, 3])],
           lambda x: torch.index_select(x[0], -1, x[1]), [0], args={"dim": -1})
    f.case("gather_dim1", "gather", WITH_F64,
           lambda g: [randn(g, (3, 5)), idx([[4, 0, 4, 2], [1, 1, 3, 0], [2, 2, 2, 4]])],
           lambda x: torch.gather(x[0], 1, x[1]), [0], args={"dim": 1})
    f.case("gather_dim0", "gather", ALL, lambda g: [randn(g, (4, 3)), idx([[3, 0, 1], [0, 3, 2]])],
           lambda x: torch.gather(x[0], 0, x[1]), [0], args={"dim": 0})
    f.case("scatter_add_dim1", "scatter_add", WITH_F64,
           lambda g: [randn(g, (3, 5)), idx([[4, 0, 4, 2], [1, 1, 3, 0], [2, 2, 2, 4]]), randn(g, (3, 4))],
           lambda x: torch.scatter_add(x[0], 1, x[1], x[2]), [0, 2], args={"dim": 1})
    f.case("scatter_add_larger_src", "scatter_add", ALL,
           lambda g: [randn(g, (4, 3)), idx([[3, 0, 1], [0, 3, 2]]), randn(g, (3, 4))],
           lambda x: torch.scatter_add(x[0], 0, x[1], x[2]), [0], args={"dim": 0})  # 1.13 fails src's grad here
    f.case("flip_two_dims", "flip", ALL, lambda g: [randn(g, (3, 4, 5))], lambda x: torch.flip(x[0], [0, 2]), [0],
           args={"dims": [0, 2]})
    f.case("roll_negative", "roll", ALL, lambda g: [randn(g, (4, 3))], lambda x: torch.roll(x[0], -7, 0), [0],
           args={"shift": -7, "dim": 0})
    f.case("repeat_new_dim", "repeat", ALL, lambda g: [randn(g, (2, 3))], lambda x: x[0].repeat(2, 1, 3), [0],
           args={"repeats": [2, 1, 3]})
    for name, pads, mode, value, shape in [("pad_constant", [2, 1, 1, 0], "constant", -1.0, (2, 3, 5)),
                                           ("pad_crop", [-1, 2], "constant", 0.0, (2, 3, 5)),
                                           ("pad_reflect", [2, 4], "reflect", 0.0, (2, 3, 5)),
                                           ("pad_reflect_2d", [1, 2, 2, 1], "reflect", 0.0, (1, 2, 4, 3)),
                                           ("pad_replicate", [1, 0, 2, 2], "replicate", 0.0, (1, 2, 3, 3))]:
        fn = (lambda x, pads=pads, value=value: F.pad(x[0], pads, mode="constant", value=value)) if mode == "constant" \
            else (lambda x, pads=pads, mode=mode: F.pad(x[0], pads, mode=mode))
        f.case(name, "pad", ALL, lambda g, shape=shape: [randn(g, shape)], fn, [0],
               args={"pads": pads, "mode": mode, "value": value})
    return f


def statistics():
    """ops/sort.h and ops/statistics.h: sort/topk/max/min values (gathered: exact), the composed
    reductions (16-bit inputs computed in f32 by both, rounded once)."""
    f = Family("statistics")
    f.case("sort_last", "sort", ALL, lambda g: [randn(g, (3, 6))], lambda x: torch.sort(x[0], -1)[0], [0],
           args={"dim": -1, "descending": False})
    f.case("sort_desc_dim0", "sort", ALL, lambda g: [randn(g, (4, 3, 2))], lambda x: torch.sort(x[0], 0, True)[0], [0],
           args={"dim": 0, "descending": True})
    f.case("topk_3", "topk", ALL, lambda g: [randn(g, (4, 6))], lambda x: torch.topk(x[0], 3, -1)[0], [0],
           args={"k": 3, "dim": -1, "largest": True})
    f.case("topk_smallest", "topk", ALL, lambda g: [randn(g, (5, 3))], lambda x: torch.topk(x[0], 2, 0, False)[0], [0],
           args={"k": 2, "dim": 0, "largest": False})
    f.case("max_dim", "max", ALL, lambda g: [randn(g, (3, 4, 2))], lambda x: torch.max(x[0], 1)[0], [0],
           args={"dim": 1, "keepdim": False})
    f.case("min_keepdim", "min", ALL, lambda g: [randn(g, (3, 4))], lambda x: torch.min(x[0], -1, True)[0], [0],
           args={"dim": -1, "keepdim": True})
    f.case("amin_dim0", "amin", ALL, lambda g: [randn(g, (4, 3))], lambda x: torch.amin(x[0], 0), [0],
           args={"dim": 0, "keepdim": False})
    f.case("argmin_rows", "argmin", ALL, lambda g: [randn(g, (3, 5))], lambda x: torch.argmin(x[0], 1), [],
           args={"dim": 1})
    f.case("var_rows", "var", WITH_F64, lambda g: [randn(g, (3, 5))], lambda x: torch.var(x[0], 1), [0],
           args={"dims": [1], "correction": 1, "keepdim": False})
    f.case("var_two_dims", "var", ALL, lambda g: [randn(g, (2, 3, 4))],
           lambda x: torch.var(x[0], [0, 2], unbiased=False, keepdim=True), [0],
           args={"dims": [0, 2], "correction": 0, "keepdim": True})
    f.case("std_rows", "std", ALL, lambda g: [randn(g, (4, 6))], lambda x: torch.std(x[0], -1, keepdim=True), [0],
           args={"dims": [-1], "correction": 1, "keepdim": True})
    f.case("prod_rows", "prod", WITH_F64, lambda g: [uniform(g, (3, 5), 0.5, 1.5)], lambda x: torch.prod(x[0], 1), [0],
           args={"dim": 1, "keepdim": False})
    f.case("prod_with_zero", "prod", ALL, lambda g: [torch.tensor([[0.5, 0, 2, -1.5], [1.25, -0.75, 2, 0.5]],
                                                                  dtype=torch.float64)],
           lambda x: torch.prod(x[0], 1, keepdim=True), [0], args={"dim": 1, "keepdim": True})
    f.case("logsumexp_rows", "logsumexp", WITH_F64, lambda g: [randn(g, (3, 5), 4)],
           lambda x: torch.logsumexp(x[0], 1), [0], args={"dims": [1], "keepdim": False})
    f.case("norm_2", "norm", WITH_F64, lambda g: [randn(g, (3, 5))], lambda x: torch.norm(x[0]), [0],
           args={"p": 2, "dims": [], "keepdim": False})
    f.case("norm_1_rows", "norm", ALL, lambda g: [signed(g, (3, 4), 0.1, 2)],
           lambda x: torch.norm(x[0], 1, [1], keepdim=True), [0], args={"p": 1, "dims": [1], "keepdim": True})
    f.case("norm_3_cols", "norm", ALL, lambda g: [randn(g, (3, 4))], lambda x: torch.norm(x[0], 3, [0]), [0],
           args={"p": 3, "dims": [0], "keepdim": False})
    f.case("cumsum_rows", "cumsum", WITH_F64, lambda g: [randn(g, (3, 7))], lambda x: torch.cumsum(x[0], 1), [0],
           args={"dim": 1})
    f.case("cumsum_long", "cumsum", ALL, lambda g: [randn(g, (33,))], lambda x: torch.cumsum(x[0], 0), [0],
           args={"dim": 0})
    return f

def sequence():
    """The sequence-model ops: matmul of any rank, attention masks, split/chunk."""
    f = Family("sequence")
    mm = lambda x: torch.matmul(x[0], x[1])
    f.case("matmul_4d", "matmul", WITH_F64, lambda g: [randn(g, (2, 3, 5, 17)), randn(g, (2, 3, 17, 4))], mm, [0, 1])
    f.case("matmul_4d_broadcast", "matmul", ALL, lambda g: [randn(g, (2, 1, 4, 9)), randn(g, (3, 9, 5))], mm, [0, 1])
    f.case("matmul_vector", "matmul", ALL, lambda g: [randn(g, (2, 3, 6)), randn(g, (6,))], mm, [0, 1])
    mask = lambda g, shape: torch.randint(0, 2, shape, generator=g).to(torch.uint8)
    f.case("masked_fill_causal", "masked_fill", WITH_F64, lambda g: [randn(g, (2, 3, 4, 4)), mask(g, (4, 4))],
           lambda x: x[0].masked_fill(x[1] != 0, -2.5), [0], args={"value": -2.5})
    f.case("masked_fill_padding", "masked_fill", ALL, lambda g: [randn(g, (2, 2, 3, 5)), mask(g, (2, 1, 1, 5))],
           lambda x: x[0].masked_fill(x[1] != 0, 1e4), [0], args={"value": 1e4})
    f.case("tril", "tril", WITH_F64, lambda g: [randn(g, (2, 4, 5))], lambda x: torch.tril(x[0]), [0],
           args={"diagonal": 0})
    f.case("tril_diagonal", "tril", ALL, lambda g: [randn(g, (5, 3))], lambda x: torch.tril(x[0], -1), [0],
           args={"diagonal": -1})
    f.case("triu", "triu", WITH_F64, lambda g: [randn(g, (2, 4, 5))], lambda x: torch.triu(x[0], 1), [0],
           args={"diagonal": 1})
    # softmax(q k^T * scale + mask) v written out (torch 1.13 has no F.scaled_dot_product_attention).
    # 16-bit runs in f32 and rounds once, as a fused kernel (PyTorch 2's flash attention on the CPU
    # included) accumulates in f32; the gradients are rounded once on the way back.
    def sdpa(name, dtypes, b, L, S, E, Ev, causal=False, scale=None, mask=None):
        def make(g):
            ins = [randn(g, b + (L, E)), randn(g, b + (S, E)), randn(g, b + (S, Ev))]
            if mask == "bool":  # random, plus one key per row so that no row is fully masked
                m = torch.randint(0, 2, (L, S), generator=g)
                m[torch.arange(L), torch.arange(L) % S] = 1
                ins.append(m.to(torch.uint8))
            elif mask is not None:
                ins.append(randn(g, mask))
            return ins
        def fn(t):
            u = [a.float() if a.dtype in (torch.float16, torch.bfloat16) else a for a in t]
            s = u[0] @ u[1].transpose(-1, -2) * (scale if scale is not None else 1 / math.sqrt(E))
            if causal:
                s = s.masked_fill(~torch.ones(L, S, dtype=torch.bool).tril(), float("-inf"))
            if mask == "bool":
                s = s.masked_fill(u[3] == 0, float("-inf"))
            elif mask is not None:
                s = s + u[3]
            return (torch.softmax(s, -1) @ u[2]).to(t[0].dtype)
        args = {"is_causal": causal}
        if scale is not None:
            args["scale"] = scale
        if mask is not None:
            args["mask"] = "bool" if mask == "bool" else "float"
        f.case(name, "scaled_dot_product_attention", dtypes, make, fn, [0, 1, 2], args=args)

    sdpa("sdpa_4d", WITH_F64, (2, 2), 5, 6, 4, 3)
    sdpa("sdpa_causal_blocks", ALL, (1,), 66, 70, 4, 3, causal=True)
    sdpa("sdpa_scale", ALL, (2,), 3, 9, 2, 2, scale=0.3)
    sdpa("sdpa_bool_mask", WITH_F64, (2, 3), 5, 6, 4, 4, mask="bool")
    sdpa("sdpa_float_mask", ALL, (2, 2), 3, 70, 4, 4, mask=(2, 1, 3, 70))
    # nn.MultiheadAttention (batch_first, self-attention) with the case's weights; f32 and f64 only:
    # in 16 bits torch 1.13's module rounds at other places than halfgrad's fused attention.
    def mha(name, dtypes, b, t, e, heads, causal=False, need_weights=False):
        def make(g):
            return [randn(g, (b, t, e)), randn(g, (3 * e, e), 0.3), randn(g, (3 * e,), 0.1), randn(g, (e, e), 0.3),
                    randn(g, (e,), 0.1)]
        def fn(x):
            m = torch.nn.MultiheadAttention(e, heads, batch_first=True).to(x[0].dtype)
            del m.in_proj_weight, m.in_proj_bias, m.out_proj.weight, m.out_proj.bias
            m.in_proj_weight, m.in_proj_bias, m.out_proj.weight, m.out_proj.bias = x[1], x[2], x[3], x[4]
            mask = torch.ones(t, t, dtype=torch.bool).triu(1) if causal else None
            return m(x[0], x[0], x[0], need_weights=need_weights, attn_mask=mask)[0]
        args = {"num_heads": heads}
        if causal:
            args["is_causal"] = True
        if need_weights:
            args["need_weights"] = True
        f.case(name, "scaled_dot_product_attention_multihead", dtypes, make, fn, [0, 1, 2, 3, 4], args=args)

    mha("multihead", ["f32", "f64"], 2, 5, 8, 2)
    mha("multihead_causal", ["f32", "f64"], 1, 7, 12, 3, causal=True)
    mha("multihead_weights", ["f32"], 2, 4, 8, 4, need_weights=True)
    # rms_norm written out (torch 1.13 has no F.rms_norm): 16-bit in f32 with the weight, rounded once
    # (PyTorch 2's composite rounds once more before the weight; halfgrad's documented difference).
    def rms(name, dtypes, shape, normalized, eps, weight=True):
        def make(g):
            ins = [randn(g, shape, 2.0)]
            return ins + [uniform(g, normalized, 0.5, 1.5)] if weight else ins
        def fn(t):
            u = [a.float() if a.dtype in (torch.float16, torch.bfloat16) else a for a in t]
            dims = tuple(range(-len(normalized), 0))
            out = u[0] * torch.rsqrt(u[0].pow(2).mean(dims, keepdim=True) + eps)
            return (out * u[1] if weight else out).to(t[0].dtype)
        f.case(name, "rms_norm", dtypes, make, fn, [0, 1] if weight else [0],
               args={"normalized_shape": list(normalized), "eps": eps})

    rms("rms_norm", WITH_F64, (3, 5, 8), (8,), 1e-6)
    rms("rms_norm_2d_shape", ALL, (2, 3, 4, 5), (4, 5), 1e-5)
    rms("rms_norm_no_weight", ALL, (4, 7), (7,), 0.1, weight=False)
    # split / chunk: the pieces concatenated in reverse order (as tests/op_db.cpp's entries).
    rev_cat = lambda pieces, dim: torch.cat(list(reversed(pieces)), dim)
    f.case("split", "narrow_split", ALL, lambda g: [randn(g, (3, 5, 2))],
           lambda x: rev_cat(torch.split(x[0], 2, 1), 1), [0], args={"size": 2, "dim": 1})
    f.case("split_sizes", "narrow_split", ALL, lambda g: [randn(g, (2, 6))],
           lambda x: rev_cat(torch.split(x[0], [1, 0, 3, 2], 1), 1), [0], args={"sizes": [1, 0, 3, 2], "dim": 1})
    f.case("chunk", "narrow_chunk", ALL, lambda g: [randn(g, (2, 3, 12))],
           lambda x: rev_cat(torch.chunk(x[0], 3, -1), -1), [0], args={"chunks": 3, "dim": -1})
    return f


# ---- optimizers (tests/test_optim.cpp) -----------------------------------------------------------
#
# tests/golden/optim.safetensors: fixed f32 parameters ("init.p<i>"), ten fixed gradients per
# parameter ("grads.p<i>", stacked: (10, *shape), one per step), and for every optimizer case the
# parameters after each of the ten torch.optim steps ("<case>.p<i>", (10, *shape)). __metadata__
# holds one JSON string per case: {"optimizer": "sgd"|"adam"|"adamw", <its options>}.

OPTIM_SHAPES = [(4, 9), (13,)]
OPTIM_STEPS = 10
OPTIM_CASES = [
    ("sgd", "sgd", {"lr": 0.1}),
    ("sgd_momentum", "sgd", {"lr": 0.1, "momentum": 0.9}),
    ("sgd_dampening", "sgd", {"lr": 0.1, "momentum": 0.9, "dampening": 0.3}),
    ("sgd_nesterov", "sgd", {"lr": 0.1, "momentum": 0.9, "nesterov": True}),
    ("sgd_weight_decay", "sgd", {"lr": 0.1, "weight_decay": 0.05}),
    ("sgd_momentum_weight_decay_nesterov", "sgd", {"lr": 0.05, "momentum": 0.5, "weight_decay": 0.1,
                                                   "nesterov": True}),
    ("adam", "adam", {"lr": 0.01}),
    ("adam_weight_decay", "adam", {"lr": 0.01, "weight_decay": 0.1}),
    ("adam_betas_eps", "adam", {"lr": 0.02, "beta1": 0.8, "beta2": 0.99, "eps": 1e-3}),
    ("adamw", "adamw", {"lr": 0.01, "weight_decay": 0.1}),
    ("rmsprop", "rmsprop", {"lr": 0.01}),
    ("rmsprop_centered_momentum_weight_decay", "rmsprop",
     {"lr": 0.01, "alpha": 0.9, "eps": 1e-6, "weight_decay": 0.05, "momentum": 0.8, "centered": True}),
    ("rmsprop_centered", "rmsprop", {"lr": 0.005, "centered": True}),
    ("adagrad", "adagrad", {"lr": 0.1}),
    ("adagrad_decay_initial_weight_decay", "adagrad",
     {"lr": 0.1, "lr_decay": 0.05, "initial_accumulator_value": 0.5, "weight_decay": 0.02, "eps": 1e-8}),
    ("adadelta", "adadelta", {"lr": 1.0}),
    ("adadelta_rho_eps_weight_decay", "adadelta", {"lr": 0.5, "rho": 0.8, "eps": 1e-4, "weight_decay": 0.1}),
]


def make_optimizer(kind, params, o):
    if kind == "rmsprop":
        return torch.optim.RMSprop(params, lr=o["lr"], alpha=o.get("alpha", 0.99), eps=o.get("eps", 1e-8),
                                   weight_decay=o.get("weight_decay", 0), momentum=o.get("momentum", 0),
                                   centered=o.get("centered", False))
    if kind == "adagrad":
        return torch.optim.Adagrad(params, lr=o["lr"], lr_decay=o.get("lr_decay", 0),
                                   weight_decay=o.get("weight_decay", 0),
                                   initial_accumulator_value=o.get("initial_accumulator_value", 0), eps=o.get("eps", 1e-10))
    if kind == "adadelta":
        return torch.optim.Adadelta(params, lr=o["lr"], rho=o.get("rho", 0.9), eps=o.get("eps", 1e-6),
                                    weight_decay=o.get("weight_decay", 0))
    if kind == "sgd":
        return torch.optim.SGD(params, lr=o["lr"], momentum=o.get("momentum", 0), dampening=o.get("dampening", 0),
                               weight_decay=o.get("weight_decay", 0), nesterov=o.get("nesterov", False))
    cls = torch.optim.Adam if kind == "adam" else torch.optim.AdamW
    return cls(params, lr=o["lr"], betas=(o.get("beta1", 0.9), o.get("beta2", 0.999)), eps=o.get("eps", 1e-8),
               weight_decay=o.get("weight_decay", 0 if kind == "adam" else 1e-2))


def optimizers():
    g = torch.Generator().manual_seed(zlib.crc32(b"optim"))
    init = [randn(g, s).float() for s in OPTIM_SHAPES]
    grads = [randn(g, (OPTIM_STEPS,) + s).float() for s in OPTIM_SHAPES]
    tensors = {}
    for i, (p, gr) in enumerate(zip(init, grads)):
        tensors[f"init.p{i}"] = p
        tensors[f"grads.p{i}"] = gr
    metadata = {"_family": "optim", "_generator": "tests/golden/make_golden.py", "_torch": torch.__version__,
                "_steps": str(OPTIM_STEPS)}
    for name, kind, options in OPTIM_CASES:
        params = [p.clone().requires_grad_(True) for p in init]
        opt = make_optimizer(kind, params, options)
        history = [[] for _ in params]
        for step in range(OPTIM_STEPS):
            for p, gr, h in zip(params, grads, history):
                p.grad = gr[step].clone()
            opt.step()
            for p, h in zip(params, history):
                h.append(p.detach().clone())
        for i, h in enumerate(history):
            tensors[f"{name}.p{i}"] = torch.stack(h)
        metadata[name] = json.dumps(dict(optimizer=kind, **options), separators=(",", ":"))
    path = os.path.join(HERE, "optim.safetensors")
    write_safetensors(path, tensors, metadata)
    size = os.path.getsize(path)
    print(f"{'optim':12s} {len(OPTIM_CASES):4d} cases {size / 1024:8.1f} KiB")
    return size


# ---- learning-rate schedulers (tests/test_optim.cpp) ---------------------------------------------
#
# tests/golden/schedulers.safetensors: for each case, the lr after construction and after each of
# 100 steps ("<case>.lr", 101 values; "<case>.momentum" too for OneCycleLR), an SGD(lr=0.1,
# momentum=0.9) on one parameter driving it. __metadata__: the case's scheduler and options.

SCHEDULER_STEPS = 100
PLATEAU_METRICS = [1.0 / (1 + k) if k < 20 else 0.05 + 0.01 * math.sin(k) for k in range(SCHEDULER_STEPS)]


def warmup_lambda(warmup):
    return lambda t: min(1.0, (t + 1) / warmup)


SCHEDULER_CASES = [
    ("step", {"scheduler": "step", "step_size": 7, "gamma": 0.5}),
    ("multistep", {"scheduler": "multistep", "milestones": [10, 25, 60], "gamma": 0.3}),
    ("exponential", {"scheduler": "exponential", "gamma": 0.97}),
    ("cosine", {"scheduler": "cosine", "t_max": 30, "eta_min": 0.001}),
    ("lambda", {"scheduler": "lambda"}),  # 0.95^t * (1 + t % 3)
    ("onecycle", {"scheduler": "onecycle", "max_lr": 0.5, "total_steps": 101}),
    ("onecycle_linear_three_phase", {"scheduler": "onecycle", "max_lr": 0.4, "total_steps": 120, "pct_start": 0.25,
                                     "anneal_strategy": "linear", "three_phase": True, "div_factor": 10,
                                     "final_div_factor": 100}),
    ("sequential_warmup_cosine", {"scheduler": "sequential", "warmup": 10, "t_max": 90}),
    ("plateau", {"scheduler": "plateau", "mode": "min", "factor": 0.5, "patience": 3, "threshold": 0.01,
                 "cooldown": 2}),
]


def make_scheduler(opt, o):
    kind = o["scheduler"]
    lr = torch.optim.lr_scheduler
    if kind == "step":
        return lr.StepLR(opt, o["step_size"], o["gamma"])
    if kind == "multistep":
        return lr.MultiStepLR(opt, o["milestones"], o["gamma"])
    if kind == "exponential":
        return lr.ExponentialLR(opt, o["gamma"])
    if kind == "cosine":
        return lr.CosineAnnealingLR(opt, o["t_max"], o["eta_min"])
    if kind == "lambda":
        return lr.LambdaLR(opt, lambda t: 0.95 ** t * (1 + t % 3))
    if kind == "onecycle":
        return lr.OneCycleLR(opt, o["max_lr"], total_steps=o["total_steps"], pct_start=o.get("pct_start", 0.3),
                             anneal_strategy=o.get("anneal_strategy", "cos"), three_phase=o.get("three_phase", False),
                             div_factor=o.get("div_factor", 25), final_div_factor=o.get("final_div_factor", 1e4))
    if kind == "sequential":
        warm = lr.LambdaLR(opt, warmup_lambda(o["warmup"]))
        cos = lr.CosineAnnealingLR(opt, o["t_max"])
        return lr.SequentialLR(opt, [warm, cos], milestones=[o["warmup"]])
    if kind == "plateau":
        return lr.ReduceLROnPlateau(opt, mode=o["mode"], factor=o["factor"], patience=o["patience"],
                                    threshold=o["threshold"], cooldown=o["cooldown"])
    raise ValueError(kind)


def schedulers():
    tensors, metadata = {}, {"_family": "schedulers", "_generator": "tests/golden/make_golden.py",
                             "_torch": torch.__version__, "_steps": str(SCHEDULER_STEPS)}
    for name, o in SCHEDULER_CASES:
        p = torch.zeros(2, requires_grad=True)
        opt = torch.optim.SGD([p], lr=0.1, momentum=0.9)
        sched = make_scheduler(opt, o)
        lrs, momenta = [opt.param_groups[0]["lr"]], [opt.param_groups[0]["momentum"]]
        for k in range(SCHEDULER_STEPS):
            p.grad = torch.ones(2)
            opt.step()
            if o["scheduler"] == "plateau":
                sched.step(PLATEAU_METRICS[k])
            else:
                sched.step()
            lrs.append(opt.param_groups[0]["lr"])
            momenta.append(opt.param_groups[0]["momentum"])
        tensors[f"{name}.lr"] = torch.tensor(lrs, dtype=torch.float64)
        tensors[f"{name}.momentum"] = torch.tensor(momenta, dtype=torch.float64)
        metadata[name] = json.dumps(o, separators=(",", ":"))
    tensors["plateau_metrics"] = torch.tensor(PLATEAU_METRICS, dtype=torch.float64)
    path = os.path.join(HERE, "schedulers.safetensors")
    write_safetensors(path, tensors, metadata)
    size = os.path.getsize(path)
    print(f"{'schedulers':12s} {len(SCHEDULER_CASES):4d} cases {size / 1024:8.1f} KiB")
    return size


# ---- nn.TransformerEncoderLayer (tests/test_nn.cpp) -----------------------------------------------
#
# tests/golden/encoder_layer.safetensors: per case, the layer's parameters under PyTorch's names
# ("<case>.<name>"), an input "<case>.x" [2, 5, 8] and the output "<case>.out" in eval mode (dropout
# off), batch_first; __metadata__ holds each case's options. f32.

ENCODER_CASES = [
    ("post_norm_relu", {"activation": "relu", "norm_first": False, "causal": False}),
    ("pre_norm_gelu_causal", {"activation": "gelu", "norm_first": True, "causal": True}),
]


def encoder_layer():
    tensors = {}
    metadata = {"_family": "encoder_layer", "_generator": "tests/golden/make_golden.py", "_torch": torch.__version__}
    for name, o in ENCODER_CASES:
        torch.manual_seed(zlib.crc32(name.encode()))
        m = torch.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.1, activation=o["activation"], batch_first=True,
                                             norm_first=o["norm_first"]).eval()
        with torch.no_grad():
            for p in m.parameters():  # away from PyTorch's init (biases 0, norms 1): every term matters
                p.add_(torch.randn(p.shape) * 0.1)
        x = torch.randn(2, 5, 8)
        mask = torch.ones(5, 5, dtype=torch.bool).triu(1) if o["causal"] else None
        with torch.no_grad():
            out = m(x, src_mask=mask)
        for k, v in m.state_dict().items():
            tensors[f"{name}.{k}"] = v.detach().clone()
        tensors[f"{name}.x"] = x
        tensors[f"{name}.out"] = out
        metadata[name] = json.dumps(o, separators=(",", ":"))
    path = os.path.join(HERE, "encoder_layer.safetensors")
    write_safetensors(path, tensors, metadata)
    size = os.path.getsize(path)
    print(f"{'encoder':12s} {len(ENCODER_CASES):4d} cases {size / 1024:8.1f} KiB")
    return size


# ---- nn.LSTM / GRU / LSTMCell / GRUCell (tests/test_rnn.cpp) -----------------------------------------
#
# tests/golden/rnn.safetensors: per case and dtype ("<case>.<f32|f64>."), the module's state dict
# under PyTorch's names, the input "x" (and "h0", "c0" where given), the outputs ("out", "h_n",
# "c_n"; the cells' "h", "c"), and the gradients "grad.<name>" of a scalar loss -- sum(out^2) +
# sum(h_n) + sum(c_n^2) (cells: sum(h^2) + sum(c)) -- w.r.t. the input, the given states and every
# parameter. The f64 module is the f32 one converted. __metadata__ holds each case's options.

RNN_CASES = [
    ("lstm_one_layer", {"kind": "LSTM", "layers": 1, "batch_first": False, "bidirectional": False, "state": False}),
    ("lstm_two_layers_bidirectional_batch_first",
     {"kind": "LSTM", "layers": 2, "batch_first": True, "bidirectional": True, "state": False}),
    ("lstm_with_state", {"kind": "LSTM", "layers": 2, "batch_first": False, "bidirectional": False, "state": True}),
    ("gru_one_layer", {"kind": "GRU", "layers": 1, "batch_first": False, "bidirectional": False, "state": False}),
    ("gru_two_layers_bidirectional_batch_first",
     {"kind": "GRU", "layers": 2, "batch_first": True, "bidirectional": True, "state": False}),
    ("gru_with_state", {"kind": "GRU", "layers": 2, "batch_first": False, "bidirectional": False, "state": True}),
    ("lstm_cell", {"kind": "LSTMCell", "state": True}),
    ("gru_cell", {"kind": "GRUCell", "state": True}),
]
RNN_INPUT, RNN_HIDDEN, RNN_T, RNN_B = 3, 4, 5, 2


def rnn_case(name, o, dtype):
    torch.manual_seed(zlib.crc32(name.encode()))
    kind, cell = o["kind"], o["kind"].endswith("Cell")
    if cell:
        m = getattr(torch.nn, kind)(RNN_INPUT, RNN_HIDDEN)
        x = torch.randn(RNN_B, RNN_INPUT)
    else:
        m = getattr(torch.nn, kind)(RNN_INPUT, RNN_HIDDEN, num_layers=o["layers"], batch_first=o["batch_first"],
                                    bidirectional=o["bidirectional"])
        x = torch.randn(RNN_B, RNN_T, RNN_INPUT) if o["batch_first"] else torch.randn(RNN_T, RNN_B, RNN_INPUT)
    layers = 1 if cell else o["layers"] * (2 if o["bidirectional"] else 1)
    state_shape = (RNN_B, RNN_HIDDEN) if cell else (layers, RNN_B, RNN_HIDDEN)
    states = [torch.randn(state_shape) for _ in range(2 if kind.startswith("LSTM") else 1)] if o["state"] else []
    m = m.to(dtype)
    x = x.to(dtype).requires_grad_()
    states = [s.to(dtype).requires_grad_() for s in states]
    arg = (tuple(states) if kind.startswith("LSTM") else states[0]) if states else None
    if cell:
        result = m(x, arg)
        outputs = {"h": result[0], "c": result[1]} if kind == "LSTMCell" else {"h": result}
        loss = (outputs["h"] ** 2).sum() + (outputs["c"].sum() if "c" in outputs else 0)
    else:
        out, hidden = m(x, arg)
        outputs = {"out": out, "h_n": hidden[0], "c_n": hidden[1]} if kind == "LSTM" else {"out": out, "h_n": hidden}
        loss = (out ** 2).sum() + outputs["h_n"].sum() + ((outputs["c_n"] ** 2).sum() if "c_n" in outputs else 0)
    loss.backward()
    prefix = f"{name}.{'f32' if dtype == torch.float32 else 'f64'}."
    tensors = {prefix + k: v.detach().clone() for k, v in m.state_dict().items()}
    tensors[prefix + "x"] = x.detach().clone()
    for s_name, s in zip(["h0", "c0"], states):
        tensors[prefix + s_name] = s.detach().clone()
        tensors[prefix + "grad." + s_name] = s.grad.clone()
    for k, v in outputs.items():
        tensors[prefix + k] = v.detach().clone()
    tensors[prefix + "grad.x"] = x.grad.clone()
    for k, p in m.named_parameters():
        tensors[prefix + "grad." + k] = p.grad.clone()
    return tensors


def rnn():
    tensors = {}
    metadata = {"_family": "rnn", "_generator": "tests/golden/make_golden.py", "_torch": torch.__version__}
    for name, o in RNN_CASES:
        for dtype in (torch.float32, torch.float64):
            tensors.update(rnn_case(name, o, dtype))
        metadata[name] = json.dumps(o, separators=(",", ":"))
    path = os.path.join(HERE, "rnn.safetensors")
    write_safetensors(path, tensors, metadata)
    size = os.path.getsize(path)
    print(f"{'rnn':12s} {len(RNN_CASES):4d} cases {size / 1024:8.1f} KiB")
    return size


def main():
    torch.set_num_threads(1)  # summation order, hence every bit, independent of the machine
    total = 0
    families = [elementwise, activation, reduce, linalg, softmax, loss, conv, pool, norm, vision, sequence, embedding,
                cat, shape, indexing, statistics]
    only = set(sys.argv[1:])  # e.g. "vision": just those families (the others' files stay as committed)
    for make in families:
        if not only or make.__name__ in only:
            total += make().write()
    if not only or "optimizers" in only:
        total += optimizers()
    if not only or "schedulers" in only:
        total += schedulers()
    if not only or "encoder_layer" in only:
        total += encoder_layer()
    if not only or "rnn" in only:
        total += rnn()
    print(f"total {total / 1024:.1f} KiB")


if __name__ == "__main__":
    main()
