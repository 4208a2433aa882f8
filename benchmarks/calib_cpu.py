"""C_muladd against the core's peak multiply-add rate (vector width x FMA units x clock), per dtype.

The clock comes from the dependent add chain (hardware counters are unavailable on most VMs); the nominal clock
from /proc/cpuinfo is printed beside it. The GEMM form is numpy's BLAS on one thread with square matrices of
--n; the ratio printed is the GEMM rate over the peak (about 0.8 is what a good BLAS reaches). The literal loop
and the matrix-vector form are printed for scale: they are bound by the add chain and by memory, not by the FMA
units.

    .venv/bin/python benchmarks/calib_cpu.py [--n 2048]
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from ddltrace.collectors.microbench import ccompile, feedforward, machine
from ddltrace.collectors.microbench.measure import OtherCpu, blas_threads, per_call_timer, repeat


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2048, help="GEMM matrix order")
    args = parser.parse_args()
    desc = machine.describe()
    with OtherCpu() as oc:
        clock, note = machine.core_clock(runs=100)
        if clock is None:
            print(f"skipped: {note}")
            return 0
        print(f"machine: {desc['cpu_model']}, {desc['vector_bits']}-bit vectors, FMA {desc['fma']}; clock from the "
              f"add chain {clock.value / 1e9:.3f} GHz ± {clock.uncertainty / 1e9:.3f} (nominal "
              f"{(desc['nominal_clock_hz'] or float('nan')) / 1e9:.3f} GHz)")
        print(f"{'dtype':6} {'GEMM':>16} {'peak':>16} {'GEMM / peak':>12} {'gemv (L2)':>14} {'loop (L2)':>14}")
        lib = ccompile.load_kernels()
        for dtype, t in (("f64", np.float64), ("f32", np.float32)):
            peak = machine.peak_muladd_per_s(clock.value, np.dtype(t).itemsize)
            a, b = np.ones((args.n, args.n), dtype=t), np.ones((args.n, args.n), dtype=t)
            out = np.empty_like(a)
            with blas_threads(1):
                gemm = repeat(per_call_timer(lambda a=a, b=b, out=out: np.matmul(a, b, out=out), 0.5), repeats=3)
                seg = 256 * 1024
                gemv = feedforward.muladd_curves([seg], 0.05, 3)[f"C_muladd_gemv_{dtype}"][0].value
            loop = float("nan")
            if lib is not None:
                work, ops, _ = feedforward._muladd_runner("loop", dtype, seg, lib)
                loop = repeat(per_call_timer(work, 0.05), repeats=3).value / ops
            rate = args.n**3 / gemm.value
            print(f"{dtype:6} {rate / 1e9:9.2f} Gmuladd/s {peak / 1e9:9.2f} Gmuladd/s {rate / peak:12.3f} "
                  f"{gemv * 1e12:9.0f} ps/op {loop * 1e12:9.0f} ps/op")
    print(f"other processes kept {oc.other_cpu_s / oc.wall_s:.2f} cores busy on average (noisy machine if > 0.25)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
