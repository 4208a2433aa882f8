"""C_muladd, C_act and C_err: the canonical feed-forward computation (Yan et al., Figure 5) timed as curves
over segment sizes that cross L1, L2, the last-level cache and memory, for float32 and float64.

Forms of C_muladd (seconds per multiply-add), each kept under its own name:
- ``loop``: the literal loop ``y_i += w_ij * a_j`` compiled with the system C compiler (a chain of dependent
  adds per output neuron, as the paper's code is);
- ``gemv``: numpy's BLAS matrix-vector product, one sample (``np.dot(W, a, out=y)``);
- ``gemm``: numpy's BLAS matrix-matrix product for a batch of samples (what DNN code runs).
C_act (seconds per neuron): a_i = f(y_i) for sigmoid and tanh; C_err (seconds per neuron): the error term
through the derivative, d_i = s_i * f'(a_i) (sigmoid: a(1-a), tanh: 1-a^2); each as the compiled ``loop``
and the ``numpy`` form (scipy.special.expit, np.tanh, in-place ufuncs). numpy's BLAS runs on one thread
here: these are per-core constants (C_interf(H) says what sharing the machine costs).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ddltrace.collectors.microbench import ccompile
from ddltrace.collectors.microbench.machine import cache_sizes, llc_bytes
from ddltrace.collectors.microbench.measure import blas_threads, per_call_timer, repeat, robust_spread

DTYPES = {"f32": np.float32, "f64": np.float64}
BATCH = 64
"""Samples per batch in the ``gemm`` form."""


def segment_sizes(quick: bool, neurons: bool = False) -> list[int]:
    """Segment sizes in bytes. Quick: one inside each level (L1/2, L2/2, LLC/2) and 2 x LLC; for the activations
    (compute-bound, ~10 ns per neuron) L1/2 and L2/2 only. Full: powers of 4 from 4 KiB to 4 x LLC (activations:
    up to the LLC)."""
    caches, llc = cache_sizes(), llc_bytes()
    if quick:
        l1, l2 = caches.get("L1", 32 * 1024) // 2, caches.get("L2", 512 * 1024) // 2
        return sorted({l1, l2} if neurons else {l1, l2, llc // 2, 2 * llc})
    sizes, s = [], 4096
    while s <= (llc if neurons else 4 * llc):
        sizes.append(s)
        s *= 4
    return sizes


@dataclass
class Point:
    """One point of a curve: ``segment_bytes`` of data, ``value`` wall seconds per operation (median of the runs),
    ``spread``; ``cpu_value``, ``cpu_spread``: the same in the calling thread's CPU seconds per operation (median of
    the runs' own CPU time: the core's speed, whatever share of it the runs had); ``cpu_share``: the thread's CPU
    time over the wall time of its runs (one thread: the share of a core it had, below 1 under a CPU quota or beside
    other work)."""

    segment_bytes: int
    value: float
    spread: float
    other_cpu_s: float
    busy_runs: int
    cpu_share: float = math.nan
    cpu_value: float = math.nan
    cpu_spread: float = math.nan


def _ptr(arr: np.ndarray) -> int:
    return arr.ctypes.data


def _muladd_runner(form: str, dtype: str, segment_bytes: int, lib):
    """(callable doing the work, multiply-adds per call, the weight segment's bytes) for one form at one segment
    size: an n x n weight matrix, n the whole square root of the size in values (its bytes are what a point's x
    says, a little under the size asked for when that is not a square)."""
    t = DTYPES[dtype]
    n = max(8, int(math.sqrt(segment_bytes / np.dtype(t).itemsize)))
    w = np.full((n, n), 1e-3, dtype=t)
    if form == "gemm":
        a, y = np.ones((n, BATCH), dtype=t), np.zeros((n, BATCH), dtype=t)
        return (lambda: np.matmul(w, a, out=y)), n * n * BATCH, w.nbytes
    a, y = np.ones(n, dtype=t), np.zeros(n, dtype=t)
    if form == "gemv":
        return (lambda: np.dot(w, a, out=y)), n * n, w.nbytes
    fn = getattr(lib, f"muladd_loop_{dtype}")
    return (lambda: fn(_ptr(w), _ptr(a), _ptr(y), n, n)), n * n, w.nbytes


def _neuron_runner(kind: str, func: str, form: str, dtype: str, segment_bytes: int, lib):
    """(callable, neurons per call, bytes of one neuron array) for C_act (kind 'act') or C_err (kind 'err') of
    ``func``."""
    from scipy.special import expit

    t = DTYPES[dtype]
    n = max(64, segment_bytes // np.dtype(t).itemsize)
    y = np.linspace(-4, 4, n, dtype=t)
    out, s = np.empty(n, dtype=t), np.full(n, 0.5, dtype=t)
    a = expit(y).astype(t) if func == "sigmoid" else np.tanh(y)
    if form == "loop":
        fn = getattr(lib, f"{kind}_{func}_{dtype}")
        if kind == "act":
            return (lambda: fn(_ptr(y), _ptr(out), n)), n, y.nbytes
        return (lambda: fn(_ptr(a), _ptr(s), _ptr(out), n)), n, y.nbytes
    if kind == "act":
        ufunc = expit if func == "sigmoid" else np.tanh
        return (lambda: ufunc(y, out=out)), n, y.nbytes

    def err():
        if func == "sigmoid":  # d = s * a * (1 - a)
            np.subtract(1, a, out=out)
            np.multiply(out, a, out=out)
        else:  # d = s * (1 - a^2)
            np.multiply(a, a, out=out)
            np.subtract(1, out, out=out)
        np.multiply(out, s, out=out)

    return err, n, y.nbytes


def _curve(make, sizes: list[int], min_time: float, repeats: int) -> list[Point]:
    points = []
    for size in sizes:
        work, ops, nbytes = make(size)
        cpu: list[float] = []  # each run's CPU seconds per call: its own, not its wall time x the point's share
        meas = repeat(per_call_timer(work, min_time, cpu), repeats=repeats)
        share = sum(cpu) / max(sum(meas.values), 1e-12)
        points.append(Point(nbytes, meas.value / ops, meas.spread / ops, float(np.nansum(meas.other_cpu_s)),
                            meas.busy_runs, share, float(np.median(cpu)) / ops, robust_spread(cpu) / ops))
    return points


def muladd_curves(sizes: list[int], min_time: float, repeats: int, progress=None) -> dict[str, list[Point]]:
    """C_muladd curves keyed 'C_muladd_{loop,gemv,gemm}_{f32,f64}' (the loop only with a C compiler)."""
    lib = ccompile.load_kernels()
    forms = ["gemv", "gemm"] + (["loop"] if lib is not None else [])
    curves = {}
    with blas_threads(1):
        for form in forms:
            for dtype in DTYPES:
                name = f"C_muladd_{form}_{dtype}"
                if progress:
                    progress(name)
                curves[name] = _curve(lambda size, f=form, d=dtype: _muladd_runner(f, d, size, lib),
                                      sizes, min_time, repeats)
    return curves


def neuron_curves(sizes: list[int], min_time: float, repeats: int, progress=None) -> dict[str, list[Point]]:
    """C_act and C_err curves keyed 'C_{act,err}_{sigmoid,tanh}_{loop,numpy}_{f32,f64}'."""
    lib = ccompile.load_kernels()
    forms = ["numpy"] + (["loop"] if lib is not None else [])
    curves = {}
    for kind in ("act", "err"):
        for func in ("sigmoid", "tanh"):
            for form in forms:
                for dtype in DTYPES:
                    name = f"C_{kind}_{func}_{form}_{dtype}"
                    if progress:
                        progress(name)
                    curves[name] = _curve(
                        lambda size, k=kind, fu=func, fo=form, d=dtype: _neuron_runner(k, fu, fo, d, size, lib),
                        sizes, min_time, repeats)
    return curves


def in_cache_point(points: list[Point]) -> Point:
    """The point whose segment sits in L2 (closest to L2/2): the constant's in-cache value."""
    target = cache_sizes().get("L2", 512 * 1024) // 2
    return min(points, key=lambda p: abs(math.log(p.segment_bytes / target)))


def out_of_cache_point(points: list[Point]) -> Point:
    """The largest segment (beyond the last-level cache): the constant's from-memory value."""
    return max(points, key=lambda p: p.segment_bytes)
