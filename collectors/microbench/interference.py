"""C_interf(H): the canonical loop on H = 1..cores concurrent processes, each pinned to its own core.

C_interf(H) = (time of one call with H processes running at once) / (time with one process), for a segment
that fits in L2 and one beyond the last-level cache. Processes, not threads: Python threads running small
operations queue on the interpreter lock and would measure the interpreter, not the memory system. Each
worker is ``python -m ddltrace.collectors.microbench.interference`` with its own copy of the data (both
segments built at start); for each segment all start timing together (after a 'go' on their stdin) and
report seconds per call and their own CPU seconds on stdout. The CPU time other processes used while they
ran is the machine's busy time minus the workers' own and this process's (the workers are this benchmark, not
other load). The literal loop runs
when a C compiler is there, else numpy's matrix-vector product on one BLAS thread.

Each ratio's uncertainty is propagated from both of its times: relative spread of the H-process per-call times
and of the 1-process ones, added in quadrature (the 1-process time divides every ratio).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time

import numpy as np

from ddltrace.collectors.microbench.measure import BUSY_CORES, OtherCpu, robust_spread


def worker(cpu: int, segments: list[int], min_time: float, repeats: int) -> None:
    """Run in a worker process: pin to ``cpu``, build every segment, say 'ready'; then for each segment wait for
    'go' on stdin, time ``repeats`` runs and print one JSON line. Ctrl-C is left to the calibration that started
    it (a terminal's goes to the whole process group), which ends its workers: one traceback per worker said
    nothing more."""
    import signal

    from ddltrace.collectors.microbench import ccompile
    from ddltrace.collectors.microbench.measure import per_call_timer

    signal.signal(signal.SIGINT, signal.SIG_IGN)

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
        cpu0 = time.process_time()
        times = [timer() for _ in range(repeats)]
        print(json.dumps({"cpu": cpu, "pinned": pinned, "form": form, "muladds": muladds, "times_s": times,
                          "cpu_s": time.process_time() - cpu0}), flush=True)


def run_concurrently(h: int, segments: list[int], min_time: float, repeats: int, timeout: float = 120) -> list[dict]:
    """Start ``h`` pinned workers; for each segment release them together and collect their per-call times.
    One dict per segment: the workers' results (each with its own CPU seconds, ``cpu_s``), the CPU seconds
    other processes used meanwhile (the machine's busy time less the workers' and this process's), the wall
    time."""
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
            other = max(0.0, oc.other_cpu_s - sum(w["cpu_s"] for w in results))
            runs.append({"workers": results, "other_cpu_s": other, "wall_s": oc.wall_s})
        for proc in procs:
            proc.stdin.close()
            proc.wait(timeout=timeout)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return runs


def ratio_point(times_h: list[float], times_1: list[float]) -> tuple[float, float]:
    """C_interf(H) from the per-call times with H processes and with one: (median / median, its spread). The
    spread is the ratio times the two relative spreads (1.4826 x MAD over the median) added in quadrature; given
    the 1-process times themselves (H = 1), 1 exactly, spread 0: the ratio is 1 by definition."""
    if times_h is times_1:
        return 1.0, 0.0
    m_h, m_1 = float(np.median(times_h)), float(np.median(times_1))
    ratio = m_h / m_1
    return ratio, ratio * math.hypot(robust_spread(times_h) / m_h, robust_spread(times_1) / m_1)


def interference_curves(segments: list[int], max_h: int, min_time: float, repeats: int, progress=None) -> list[dict]:
    """C_interf(H) for H = 1..max_h and each segment: ratio of the median per-call time with H workers to that
    with one (:func:`ratio_point`). One dict per segment: segment_bytes (of the float64 n x n weight matrix the
    workers timed, n the whole square root of the size asked for in values) and points (H, ratio, spread,
    seconds_per_call, other_cpu_s, busy: other processes used more than ``BUSY_CORES`` cores meanwhile, ...)."""
    by_h = {}
    for h in range(1, max_h + 1):
        if progress:
            progress(f"C_interf H={h}")
        by_h[h] = run_concurrently(h, segments, min_time, repeats)
    curves = []
    for k in range(len(segments)):
        points = []
        base = [t for w in by_h[1][k]["workers"] for t in w["times_s"]]
        for h in range(1, max_h + 1):
            run = by_h[h][k]
            times = base if h == 1 else [t for w in run["workers"] for t in w["times_s"]]
            ratio, spread = ratio_point(times, base)
            points.append({"H": h, "ratio": ratio, "spread": spread, "seconds_per_call": float(np.median(times)),
                           "form": run["workers"][0]["form"], "pinned": all(w["pinned"] for w in run["workers"]),
                           "other_cpu_s": run["other_cpu_s"],
                           "busy": run["other_cpu_s"] > BUSY_CORES * run["wall_s"]})
        curves.append({"segment_bytes": 8 * by_h[1][k]["workers"][0]["muladds"], "points": points})
    return curves


if __name__ == "__main__":
    mt, reps, segs, core = float(sys.argv[1]), int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
    worker(core, [int(x) for x in segs.split(",")], mt, reps)
