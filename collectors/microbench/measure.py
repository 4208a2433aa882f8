"""Repeating a benchmark on a shared machine: median and spread, the CPU time other processes took, fits.

Every benchmark run is wrapped in :class:`OtherCpu`, which reads the machine's busy CPU time (``/proc/stat``)
and this process's own CPU time (``os.times``, children included) before and after: the difference is what
other processes used while the benchmark ran, in CPU seconds. :func:`repeat` keeps the median of the repeats
(robust to one disturbed run), their spread (1.4826 x the median absolute deviation, i.e. a standard
deviation for normal noise, in the value's unit), and adds repeats (up to ``extra``) when a run found the
machine busy.
"""

from __future__ import annotations

import contextvars
import ctypes
import math
import os
import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np

BUSY_CORES = 0.25
"""A run is flagged busy when other processes used more than this many cores on average while it ran."""

_CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def usable_cores() -> int:
    """How many cores this process may run on (its affinity mask), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def machine_busy_cpu_s() -> float | None:
    """CPU seconds all processes spent busy since boot (user+nice+system+irq+softirq), or None off Linux."""
    try:
        with open("/proc/stat") as fh:
            fields = fh.readline().split()
    except OSError:
        return None
    user, nice, system, _idle, _iowait, irq, softirq = (int(v) for v in fields[1:8])
    return (user + nice + system + irq + softirq) / _CLK_TCK


def own_cpu_s() -> float:
    """CPU seconds this process and its waited-for children used (user + system)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


class OtherCpu:
    """Context manager: ``other_cpu_s`` (CPU seconds other processes used inside the block) and ``wall_s``.

    Processes the benchmark itself starts and does not wait for (a server subprocess) count as other.
    The resolution is one clock tick (10 ms) per core.
    """

    def __enter__(self) -> OtherCpu:
        self._busy0, self._own0, self._t0 = machine_busy_cpu_s(), own_cpu_s(), time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        self.wall_s = time.perf_counter() - self._t0
        busy1 = machine_busy_cpu_s()
        if self._busy0 is None or busy1 is None:
            self.other_cpu_s = float("nan")
        else:
            self.other_cpu_s = max(0.0, (busy1 - self._busy0) - (own_cpu_s() - self._own0))

    @property
    def other_cores(self) -> float:
        """Average number of cores other processes kept busy during the block."""
        return self.other_cpu_s / self.wall_s if self.wall_s > 0 else float("nan")


@dataclass
class Measurement:
    """Repeated runs of one benchmark: ``value`` is the median, ``spread`` 1.4826 x MAD, both in ``unit``."""

    value: float
    spread: float
    unit: str
    values: list[float]
    other_cpu_s: list[float] = field(default_factory=list)
    busy_runs: int = 0

    @property
    def uncertainty(self) -> float:
        """The spread, floored at 0.1 % of the value (timer resolution and run-to-run jitter)."""
        return max(self.spread, 1e-3 * abs(self.value))

    def as_dict(self) -> dict:
        return {"value": self.value, "spread": self.spread, "unit": self.unit, "values": self.values,
                "other_cpu_s": self.other_cpu_s, "busy_runs": self.busy_runs}


def robust_spread(values: list[float]) -> float:
    """1.4826 x the median absolute deviation (a standard deviation for normal noise)."""
    arr = np.asarray(values, dtype=float)
    return float(1.4826 * np.median(np.abs(arr - np.median(arr)))) if arr.size > 1 else 0.0


_EXTRA: contextvars.ContextVar[int] = contextvars.ContextVar("extra_repeats", default=2)


@contextmanager
def extra_repeats(n: int):
    """Inside the block, :func:`repeat` adds at most ``n`` runs for busy ones (0: flag them only)."""
    token = _EXTRA.set(n)
    try:
        yield
    finally:
        _EXTRA.reset(token)


def repeat(run: Callable[[], float], repeats: int = 3, unit: str = "s", extra: int | None = None,
           busy_cores: float = BUSY_CORES) -> Measurement:
    """Call ``run`` (which returns one measured value in ``unit``) ``repeats`` times, plus up to ``extra``
    more when a run found other processes using more than ``busy_cores`` cores (and more than two clock
    ticks of CPU time, the resolution of the count); median and spread. ``extra`` defaults to 2, or to what
    an enclosing :func:`extra_repeats` says."""
    values, others, busy = [], [], 0
    budget = repeats + (_EXTRA.get() if extra is None else extra)
    while len(values) < repeats or (busy and len(values) < budget and len(values) < repeats + busy):
        with OtherCpu() as oc:
            value = float(run())
        values.append(value)
        others.append(oc.other_cpu_s)
        if oc.other_cores > busy_cores and oc.other_cpu_s > 2.0 / _CLK_TCK:
            busy += 1
    return Measurement(float(np.median(values)), robust_spread(values), unit, values, others, busy)


def per_call_timer(fn: Callable[[], object], min_time: float,
                   cpu_per_call: list[float] | None = None) -> Callable[[], float]:
    """A timer for :func:`repeat`: calls ``fn`` once (warm-up), then sizes a run from the calling thread's CPU
    time of further calls (at least a tenth of ``min_time`` of it), so that each run of the returned function
    lasts about ``min_time`` seconds of this thread's CPU time, and returns wall seconds per call; with
    ``cpu_per_call``, each run also appends its CPU seconds per call there.

    Sizing from CPU time, not wall time: under a CPU quota a call's wall time includes however long the quota
    throttled it, so a run sized from one throttled call lasted a fraction of a period and ran unthrottled
    (a run of a few milliseconds fits in one period's quota), whatever the quota."""
    fn()
    used, calls, c0 = 0.0, 0, time.thread_time()
    while used < min_time / 10 or calls == 0:
        fn()
        calls += 1
        used = time.thread_time() - c0
    reps = max(1, int(math.ceil(min_time / max(used / calls, 1e-9))))

    def timed() -> float:
        t0, c0 = time.perf_counter(), time.thread_time()
        for _ in range(reps):
            fn()
        wall, cpu = time.perf_counter() - t0, time.thread_time() - c0
        if cpu_per_call is not None:
            cpu_per_call.append(cpu / reps)
        return wall / reps

    return timed


@dataclass
class LinearFit:
    """t = intercept + slope * x from (weighted) least squares, with the standard errors of both (one standard
    uncertainty: what a profile constant's ``uncertainty`` is, and what the models draw from) and Student's t
    factor that makes them 95 % confidence half-widths (``*_ci``; with few points it is large: 4.30 for 4)."""

    intercept: float
    slope: float
    intercept_se: float
    slope_se: float
    points: int
    t95: float = math.inf

    @property
    def intercept_ci(self) -> float:
        """The intercept's 95 % confidence half-width."""
        return self.t95 * self.intercept_se

    @property
    def slope_ci(self) -> float:
        """The slope's 95 % confidence half-width."""
        return self.t95 * self.slope_se


def linear_fit(x, y, relative: bool = False) -> LinearFit:
    """Fit y = a + b x. ``relative=True`` weights each point by 1/y (errors proportional to the value, as for
    timings over sizes spanning decades), so small sizes set the intercept and large ones the slope."""
    from scipy import stats

    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    w = 1.0 / y if relative else np.ones_like(y)
    a = np.column_stack([np.ones_like(x), x]) * w[:, None]
    coef, *_ = np.linalg.lstsq(a, y * w, rcond=None)
    dof = len(x) - 2
    if dof <= 0:
        return LinearFit(float(coef[0]), float(coef[1]), float("inf"), float("inf"), len(x))
    resid = y * w - a @ coef
    sigma2 = float(resid @ resid) / dof
    cov = sigma2 * np.linalg.inv(a.T @ a)
    return LinearFit(float(coef[0]), float(coef[1]), math.sqrt(cov[0, 0]), math.sqrt(cov[1, 1]), len(x),
                     float(stats.t.ppf(0.975, dof)))


_BLAS_SETTERS = ("scipy_openblas_set_num_threads64_", "scipy_openblas_set_num_threads", "openblas_set_num_threads64_",
                 "openblas_set_num_threads", "MKL_Set_Num_Threads", "bli_thread_set_num_threads")
_BLAS_GETTERS = ("scipy_openblas_get_num_threads64_", "scipy_openblas_get_num_threads", "openblas_get_num_threads64_",
                 "openblas_get_num_threads", "MKL_Get_Max_Threads", "bli_thread_get_num_threads")


def _blas_library() -> tuple[Callable | None, Callable | None]:
    """numpy's loaded BLAS library's thread setter and getter (from /proc/self/maps), or (None, None)."""
    try:
        with open("/proc/self/maps") as fh:
            paths = {line.split()[-1] for line in fh if "blas" in line.lower() or "mkl" in line.lower()}
    except OSError:
        return None, None
    for path in sorted(paths):
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for setter, getter in zip(_BLAS_SETTERS, _BLAS_GETTERS, strict=True):
            if hasattr(lib, setter) and hasattr(lib, getter):
                return getattr(lib, setter), getattr(lib, getter)
    return None, None


@contextmanager
def blas_threads(n: int):
    """Run numpy's BLAS on ``n`` threads inside the block (OpenBLAS, MKL or BLIS); yields whether it could."""
    import numpy  # noqa: F401  (the BLAS library is loaded with numpy)

    setter, getter = _blas_library()
    if setter is None:
        yield False
        return
    before = int(getter())
    setter(ctypes.c_int(n))
    try:
        yield True
    finally:
        setter(ctypes.c_int(before))
