"""Memory bandwidth, STREAM's way: Copy, Scale, Add, Triad, plus a pure read and a pure write, on arrays of
at least 4 x the last-level cache, on 1..cores threads, in numpy and (with a C compiler) compiled form.

Done without the traps measured on numpy: arrays are allocated 64-byte aligned (numpy's large arrays start
16 bytes past a page boundary, which costs Add about 22 %), every kernel writes into its output (``out=``;
``a[:] = b + s*c`` makes temporaries and reaches half of STREAM), and numpy's Triad runs in L2-sized blocks
through one small scratch array so that only a, b and c cross the memory bus. Threads split each array in
64-byte-aligned slices; numpy ufuncs and ctypes calls release the interpreter lock, so the threads really run
at once. Bytes are counted as STREAM counts them (no write-allocate traffic): Copy and Scale 16, Add and Triad
24, read and write 8 bytes per element.

r_m (seconds per byte read) and w_m (seconds per byte written) come from the read and write kernels on one
thread, the view of one worker process.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ddltrace.collectors.microbench import ccompile
from ddltrace.collectors.microbench.machine import llc_bytes
from ddltrace.collectors.microbench.measure import Measurement, repeat

KERNELS = ("copy", "scale", "add", "triad", "read", "write")
BYTES_PER_ELEMENT = {"copy": 16, "scale": 16, "add": 24, "triad": 24, "read": 8, "write": 8}
SCALAR = 3.0
BLOCK = 32768
"""Elements per block of numpy's Triad (256 KiB of float64: stays in L2)."""


def aligned_empty(n: int, align: int = 64) -> np.ndarray:
    """An uninitialised float64 array of ``n`` elements whose data starts on an ``align``-byte boundary."""
    raw = np.empty(n * 8 + align, dtype=np.uint8)
    offset = (-raw.ctypes.data) % align
    return raw[offset:offset + n * 8].view(np.float64)


def array_elements(min_bytes: int | None = None) -> int:
    """Elements per array: 4 x the last-level cache in float64 (STREAM's rule), a multiple of 64."""
    n = (min_bytes or 4 * llc_bytes()) // 8
    return max(64, n - n % 64)


def _slices(n: int, threads: int) -> list[slice]:
    step = -(-n // threads)
    step += (-step) % 8  # 8 float64 = 64 bytes: slices start on cache lines
    return [slice(k, min(n, k + step)) for k in range(0, n, step)]


def _numpy_kernel(name: str, a, b, c, sl: slice):
    if name == "copy":
        return lambda: np.copyto(c[sl], a[sl])
    if name == "scale":
        return lambda: np.multiply(c[sl], SCALAR, out=b[sl])
    if name == "add":
        return lambda: np.add(a[sl], b[sl], out=c[sl])
    if name == "read":
        return lambda: np.add.reduce(a[sl])
    if name == "write":
        return lambda: a[sl].fill(SCALAR)
    scratch = np.empty(BLOCK)

    def triad():
        for start in range(sl.start, sl.stop, BLOCK):
            stop = min(start + BLOCK, sl.stop)
            tmp = scratch[:stop - start]
            np.multiply(c[start:stop], SCALAR, out=tmp)
            np.add(b[start:stop], tmp, out=a[start:stop])

    return triad


def _c_kernel(lib, name: str, a, b, c, sl: slice):
    n, off = sl.stop - sl.start, sl.start * 8
    pa, pb, pc = a.ctypes.data + off, b.ctypes.data + off, c.ctypes.data + off
    return {
        "copy": lambda: lib.stream_copy(pc, pa, n),
        "scale": lambda: lib.stream_scale(pb, pc, SCALAR, n),
        "add": lambda: lib.stream_add(pc, pa, pb, n),
        "triad": lambda: lib.stream_triad(pa, pb, pc, SCALAR, n),
        "read": lambda: lib.stream_sum(pa, n),
        "write": lambda: lib.stream_fill(pa, SCALAR, n),
    }[name]


class StreamArrays:
    """The three 64-byte-aligned arrays a, b, c of ``n`` float64 (STREAM's initial values 1, 2, 0)."""

    def __init__(self, n: int):
        self.n = n
        self.a, self.b, self.c = aligned_empty(n), aligned_empty(n), aligned_empty(n)
        self.a.fill(1.0)
        self.b.fill(2.0)
        self.c.fill(0.0)

    def bandwidth(self, kernel: str, form: str, threads: int, repeats: int, pool: ThreadPoolExecutor,
                  lib=None) -> Measurement:
        """Bytes per second of ``kernel`` in ``form`` ('numpy' or 'c') on ``threads`` threads (median of
        ``repeats``; ``values`` holds every run, so the best is ``max(values)`` as STREAM reports)."""
        parts = [(_c_kernel(lib, kernel, self.a, self.b, self.c, sl) if form == "c"
                  else _numpy_kernel(kernel, self.a, self.b, self.c, sl)) for sl in _slices(self.n, threads)]
        nbytes = BYTES_PER_ELEMENT[kernel] * self.n

        def once() -> float:
            t0 = time.perf_counter()
            futures = [pool.submit(part) for part in parts]
            for fut in futures:
                fut.result()
            return nbytes / (time.perf_counter() - t0)

        once()  # warm-up: page faults, first touch of the slices by their thread
        return repeat(once, repeats=repeats, unit="B/s")


def stream(threads_list: list[int], repeats: int, n: int | None = None, forms: tuple[str, ...] | None = None,
           kernels: tuple[str, ...] = KERNELS, progress=None) -> dict:
    """Bandwidths (B/s) keyed form -> kernel -> threads, with the array size and the forms that ran."""
    lib = ccompile.load_kernels()
    if forms is None:
        forms = ("numpy", "c") if lib is not None else ("numpy",)
    arrays = StreamArrays(n or array_elements())
    results: dict = {"array_bytes": arrays.n * 8, "forms": list(forms), "bandwidth": {}}
    with ThreadPoolExecutor(max_workers=max(threads_list)) as pool:
        for form in forms:
            for kernel in kernels:
                for threads in threads_list:
                    if progress:
                        progress(f"memory {form} {kernel} x{threads}")
                    meas = arrays.bandwidth(kernel, form, threads, repeats, pool, lib)
                    results["bandwidth"].setdefault(form, {}).setdefault(kernel, {})[threads] = meas
    return results
