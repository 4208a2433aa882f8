"""C_interf(H): the canonical loop on H = 1..cores concurrent processes, each pinned to its own core.

C_interf(H) = (time of one call with H processes running at once) / (time with one process), for a segment
that fits in L2 and one beyond the last-level cache. Processes, not threads: Python threads running small
operations queue on the interpreter lock and would measure the interpreter, not the memory system. Each
worker is ``python -m ddltrace.collectors.microbench.interference`` with its own copy of the data (both
segments built at start); for each segment all start timing together (after a 'go' on their stdin) and report
seconds per call on stdout. Other processes' CPU time is counted while they run. The literal loop runs
when a C compiler is there, else numpy's matrix-vector product on one BLAS thread.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import numpy as np

from ddltrace.collectors.microbench.measure import OtherCpu, robust_spread


def worker(cpu: int, segments: list[int], min_time: float, repeats: int) -> None:
    """Run in a worker process: pin to ``cpu``, build every segment, say 'ready'; then for each segment wait for
    'go' on stdin, time ``repeats`` runs and print one JSON line."""
    from ddltrace.collectors.microbench import ccompile
    from ddltrace.collectors.microbench.measure import per_call_timer

    try:
        os.sched_setaffinity(0, {cpu})
        pinned = True
    except (AttributeError, OSError):
        pinned = False
    lib = ccompile.load_kernels()
    timers = []
    for segment_bytes in segments:
        n = max(8, int(math.sqrt(segment_bytes / 8)))
        w, a, y = np.full((n, n), 1e-3), np.ones(n), np.zeros(n)
        if lib is not None:
            def fn(w=w, a=a, y=y, n=n):
                lib.muladd_loop_f64(w.ctypes.data, a.ctypes.data, y.ctypes.data, n, n)
        else:
            def fn(w=w, a=a, y=y):
                np.dot(w, a, out=y)
        timers.append((per_call_timer(fn, min_time), n * n))
    form = "loop" if lib is not None else "gemv"
    print("ready", flush=True)
    for timer, muladds in timers:
        if sys.stdin.readline().strip() != "go":
            raise SystemExit(1)
        times = [timer() for _ in range(repeats)]
        print(json.dumps({"cpu": cpu, "pinned": pinned, "form": form, "muladds": muladds, "times_s": times}),
              flush=True)


def run_concurrently(h: int, segments: list[int], min_time: float, repeats: int, timeout: float = 120) -> list[dict]:
    """Start ``h`` pinned workers; for each segment release them together and collect their per-call times.
    One dict per segment: the workers' results, other processes' CPU seconds, the wall time."""
    cpus = sorted(os.sched_getaffinity(0))
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    args = [sys.executable, "-m", __name__, str(min_time), str(repeats), ",".join(map(str, segments))]
    procs = [subprocess.Popen([*args, str(cpus[k % len(cpus)])], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True, env=env) for k in range(h)]
    runs = []
    try:
        for proc in procs:
            line = proc.stdout.readline().strip()
            if line != "ready":
                raise RuntimeError(f"interference worker did not start (said {line!r})")
        for _ in segments:
            with OtherCpu() as oc:
                for proc in procs:
                    proc.stdin.write("go\n")
                    proc.stdin.flush()
                results = [json.loads(proc.stdout.readline()) for proc in procs]
            runs.append({"workers": results, "other_cpu_s": oc.other_cpu_s, "wall_s": oc.wall_s})
        for proc in procs:
            proc.stdin.close()
            proc.wait(timeout=timeout)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return runs


def interference_curves(segments: list[int], max_h: int, min_time: float, repeats: int, progress=None) -> list[dict]:
    """C_interf(H) for H = 1..max_h and each segment: ratio of the median per-call time with H workers to that
    with one. One dict per segment: segment_bytes and points (H, ratio, spread, seconds_per_call, ...)."""
    by_h = {}
    for h in range(1, max_h + 1):
        if progress:
            progress(f"C_interf H={h}")
        by_h[h] = run_concurrently(h, segments, min_time, repeats)
    curves = []
    for k, segment_bytes in enumerate(segments):
        points, base = [], None
        for h in range(1, max_h + 1):
            run = by_h[h][k]
            times = [t for w in run["workers"] for t in w["times_s"]]
            median = float(np.median(times))
            base = median if base is None else base
            points.append({"H": h, "ratio": median / base, "spread": robust_spread(times) / base,
                           "seconds_per_call": median, "form": run["workers"][0]["form"],
                           "pinned": all(w["pinned"] for w in run["workers"]), "other_cpu_s": run["other_cpu_s"]})
        curves.append({"segment_bytes": segment_bytes, "points": points})
    return curves


if __name__ == "__main__":
    mt, reps, segs, core = float(sys.argv[1]), int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
    worker(core, [int(x) for x in segs.split(",")], mt, reps)
