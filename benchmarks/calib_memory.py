"""ddltrace's memory probe against STREAM, same array size and thread count, measured in one run.

Reference: STREAM's own stream.c (https://www.cs.virginia.edu/stream/FTP/Code/stream.c) when $STREAM_C names
it; otherwise a STREAM-equivalent program written below (STREAM 5.10's four kernels, OpenMP ``parallel for``,
static arrays, best of NTIMES excluding the first, STREAM's byte counts), compiled here with
``cc -O3 -march=native -fopenmp``. Both ddltrace forms (compiled kernel, numpy) report the best of the same
number of runs, as STREAM does. The ratio printed is ddltrace / reference (target for Triad: >= 0.9).

    .venv/bin/python benchmarks/calib_memory.py [--threads T] [--elements N] [--rounds R]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from ddltrace.collectors.microbench import ccompile, memory
from ddltrace.collectors.microbench.machine import describe
from ddltrace.collectors.microbench.measure import OtherCpu, usable_cores

EQUIVALENT = r"""
#include <stdio.h>
#include <float.h>
#include <time.h>
#ifndef STREAM_ARRAY_SIZE
#define STREAM_ARRAY_SIZE 10000000
#endif
#ifndef NTIMES
#define NTIMES 10
#endif
static double a[STREAM_ARRAY_SIZE], b[STREAM_ARRAY_SIZE], c[STREAM_ARRAY_SIZE];
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
int main(void) {
    static const char *label[4] = {"Copy:      ", "Scale:     ", "Add:       ", "Triad:     "};
    double bytes[4] = {16.0 * STREAM_ARRAY_SIZE, 16.0 * STREAM_ARRAY_SIZE, 24.0 * STREAM_ARRAY_SIZE,
                       24.0 * STREAM_ARRAY_SIZE};
    double mintime[4] = {FLT_MAX, FLT_MAX, FLT_MAX, FLT_MAX}, t[4], scalar = 3.0;
    long j;
#pragma omp parallel for
    for (j = 0; j < STREAM_ARRAY_SIZE; j++) { a[j] = 1.0; b[j] = 2.0; c[j] = 0.0; }
    for (int k = 0; k < NTIMES; k++) {
        t[0] = now();
#pragma omp parallel for
        for (j = 0; j < STREAM_ARRAY_SIZE; j++) c[j] = a[j];
        t[0] = now() - t[0]; t[1] = now();
#pragma omp parallel for
        for (j = 0; j < STREAM_ARRAY_SIZE; j++) b[j] = scalar * c[j];
        t[1] = now() - t[1]; t[2] = now();
#pragma omp parallel for
        for (j = 0; j < STREAM_ARRAY_SIZE; j++) c[j] = a[j] + b[j];
        t[2] = now() - t[2]; t[3] = now();
#pragma omp parallel for
        for (j = 0; j < STREAM_ARRAY_SIZE; j++) a[j] = b[j] + scalar * c[j];
        t[3] = now() - t[3];
        if (k > 0) for (int i = 0; i < 4; i++) if (t[i] < mintime[i]) mintime[i] = t[i];
    }
    printf("Function    Best Rate MB/s\n");
    for (int i = 0; i < 4; i++) printf("%s%12.1f\n", label[i], 1.0e-6 * bytes[i] / mintime[i]);
    return a[7] > 0 ? 0 : 1;
}
"""
KERNELS = ("copy", "scale", "add", "triad")


def build_reference(elements: int, ntimes: int, workdir: Path) -> tuple[Path, str]:
    source = os.environ.get("STREAM_C")
    name = "STREAM stream.c" if source else "STREAM-equivalent C"
    if not source:
        source = workdir / "stream_equivalent.c"
        source.write_text(EQUIVALENT)
    binary = workdir / "stream"
    cc = ccompile.compiler()
    flags = ["-O3", "-march=native", "-fopenmp", f"-DSTREAM_ARRAY_SIZE={elements}", f"-DNTIMES={ntimes}"]
    if elements * 24 > 2**31:
        flags.append("-mcmodel=medium")
    subprocess.run([cc, *flags, str(source), "-o", str(binary)], check=True)
    return binary, f"{name} ({cc} {' '.join(flags)})"


def run_reference(binary: Path, threads: int) -> dict[str, float]:
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    out = subprocess.run([str(binary)], capture_output=True, text=True, env=env, check=True).stdout
    rates = {}
    for kernel in KERNELS:
        m = re.search(rf"^{kernel.capitalize()}:\s+([\d.]+)", out, re.MULTILINE)
        rates[kernel] = float(m.group(1)) * 1e6
    return rates


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=usable_cores())
    parser.add_argument("--elements", type=int, default=memory.array_elements())
    parser.add_argument("--ntimes", type=int, default=10, help="runs per kernel, the first not counted")
    parser.add_argument("--rounds", type=int, default=2, help="alternate reference and ddltrace this many times")
    args = parser.parse_args()
    if ccompile.load_kernels() is None:
        print(f"skipped: {ccompile.last_note()}")
        return 0
    lib = ccompile.load_kernels()
    m = describe()
    print(f"machine: {m['cpu_model']}, {m['usable_cores']} cores, LLC {m['cache_bytes'].get('L3', 0) / 2**20:.0f} MiB; "
          f"arrays of {args.elements} float64 ({args.elements * 8 / 2**20:.0f} MiB), {args.threads} thread(s)")
    best_ref = dict.fromkeys(KERNELS, 0.0)
    best_ours = {form: dict.fromkeys(KERNELS, 0.0) for form in ("c", "numpy")}
    other = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        binary, ref_name = build_reference(args.elements, args.ntimes, Path(tmp))
        arrays = memory.StreamArrays(args.elements)
        with ThreadPoolExecutor(args.threads) as pool, OtherCpu() as oc:
            for _ in range(args.rounds):
                for k, v in run_reference(binary, args.threads).items():
                    best_ref[k] = max(best_ref[k], v)
                for form in ("c", "numpy"):
                    for kernel in KERNELS:
                        meas = arrays.bandwidth(kernel, form, args.threads, args.ntimes - 1, pool, lib)
                        best_ours[form][kernel] = max(best_ours[form][kernel], max(meas.values))
        other = oc.other_cpu_s / oc.wall_s
    print(f"reference: {ref_name}")
    print(f"{'kernel':8} {'ddltrace C':>12} {'ddltrace numpy':>15} {'reference':>12} {'C / ref':>8} "
          f"{'numpy / ref':>12}")
    for kernel in KERNELS:
        ref = best_ref[kernel]
        c, n = best_ours["c"][kernel], best_ours["numpy"][kernel]
        print(f"{kernel:8} {c / 1e9:9.2f} GB/s {n / 1e9:12.2f} GB/s {ref / 1e9:9.2f} GB/s {c / ref:8.3f} "
              f"{n / ref:12.3f}")
    print(f"other processes kept {other:.2f} cores busy on average during the run (noisy machine if > 0.25)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
