#!/usr/bin/env python3
"""Fits the erf polynomials of kernels/cpu/vector_math_body.inc (least squares on Chebyshev nodes
against double-precision erf, coefficients rounded to float) and prints each piece's worst error in
ulps when evaluated in float32 as the kernel does. Needs numpy (Debian python3-numpy).

    python3 scripts/fit_erf.py
"""
import numpy as np, math
erf = np.vectorize(math.erf); erfc = np.vectorize(math.erfc)
def cheb(lo, hi, n=6000):
    k = np.arange(n); t = np.cos(np.pi*(k+0.5)/n); return lo + (hi-lo)*(t+1)/2
def lsq(x, y, var, deg, w):
    V = np.vander(var, deg+1, increasing=True); c, *_ = np.linalg.lstsq(V*w[:,None], y*w, rcond=None); return c.astype(np.float32)
def horner32(c, v):
    p = np.full_like(v, c[-1], dtype=np.float32)
    for a in c[-2::-1]: p = (p*v + np.float32(a)).astype(np.float32)
    return p
def ulp(a, b):
    ia = a.view(np.int32).astype(np.int64); ib = b.view(np.int32).astype(np.int64)
    ia = np.where(ia<0, -2**31-ia, ia); ib = np.where(ib<0, -2**31-ib, ib); return np.abs(ia-ib)
# [0,1]: first x * P(x^2) -- 3 ulp; the kernel uses x + x * R(x^2), fitted at the end
x = cheb(1e-6, 1.0); c1 = lsq(x, erf(x)/x, x*x, 6, np.ones_like(x))
# [1,2]: erf = P(x - 1.5)
x = cheb(1.0, 2.0); c2 = lsq(x, erf(x), x-1.5, 11, 1/erf(x))
# [2,4]: erfc = P(x - 3)  absolute
x = cheb(2.0, 4.0); c3 = lsq(x, erfc(x), x-3.0, 13, np.ones_like(x))
for name, c in (("c1",c1),("c2",c2),("c3",c3)): print(name, [repr(float(v)) for v in c])
xs = np.random.default_rng(1).uniform(0, 4.5, 2_000_000).astype(np.float32)
xs = np.concatenate([xs, np.random.default_rng(2).uniform(0, 1e-3, 200000).astype(np.float32)])
ref = np.array([math.erf(float(v)) for v in xs], dtype=np.float32)
out = np.empty_like(xs)
m1 = xs < 1; m2 = (xs >= 1) & (xs < 2); m3 = (xs >= 2) & (xs < 4); m4 = xs >= 4
v = xs[m1]; out[m1] = (v * horner32(c1, (v*v).astype(np.float32))).astype(np.float32)
v = xs[m2]; out[m2] = horner32(c2, (v - np.float32(1.5)).astype(np.float32))
v = xs[m3]; out[m3] = (np.float32(1) - horner32(c3, (v - np.float32(3)).astype(np.float32))).astype(np.float32)
out[m4] = 1.0
u = ulp(out, ref)
for name, m in (("[0,1)",m1),("[1,2)",m2),("[2,4)",m3),("4+",m4)): print(name, u[m].max(), np.mean(u[m]>0))
print("--- x + x*R(x^2)")
x = cheb(1e-6, 1.0); r = lsq(x, erf(x)/x - 1.0, x*x, 7, np.ones_like(x))
print("r", [repr(float(v)) for v in r])
v = xs[m1]; out[m1] = (v + (v * horner32(r, (v*v).astype(np.float32))).astype(np.float32)).astype(np.float32)
u = ulp(out, ref); print("[0,1)", u[m1].max(), np.mean(u[m1]>0))
