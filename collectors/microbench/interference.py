"""C_interf(H): the canonical loop on H = 1..cores concurrent processes, each pinned to its own core.

C_interf(H) = (time of one call with H processes running at once) / (time with one process), for a segment
that fits in L2 and one beyond the last-level cache. Processes, not threads: Python threads running small
operations queue on the interpreter lock and would measure the interpreter, not the memory system. Each
worker is ``python -m ddltrace.collectors.microbench.interference`` with its own copy of the data; all start
timing together (after a 'go' on their stdin) and report seconds per call on stdout. The literal loop runs
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


def worker(cpu: int, segment_bytes: int, min_time: float, repeats: int) -> dict:
    """Run in a worker process: pin to ``cpu``, build the segment, wait for 'go', time ``repeats`` runs."""
    from ddltrace.collectors.microbench import ccompile
    from ddltrace.collectors.microbench.measure import per_call_timer

    try:
        os.sched_setaffinity(0, {cpu})
        pinned = True
    except (AttributeError, OSError):
        pinned = False
    n = max(8, int(math.sqrt(segment_bytes / 8)))
    w, a, y = np.full((n, n), 1e-3), np.ones(n), np.zeros(n)
    lib = ccompile.load_kernels()
    if lib is not None:
        form = "loop"
        fn = lambda: lib.muladd_loop_f64(w.ctypes.data, a.ctypes.data, y.ctypes.data, n, n)  # noqa: E731
    else:
        form = "gemv"
        fn = lambda: np.dot(w, a, out=y)  # noqa: E731
    timer = per_call_timer(fn, min_time)
    print("ready", flush=True)
    if sys.stdin.readline().strip() != "go":
        raise SystemExit(1)
    times = [timer() for _ in range(repeats)]
    return {"cpu": cpu, "pinned": pinned, "form": form, "muladds": n * n, "times_s": times}


def run_concurrently(h: int, segment_bytes: int, min_time: float, repeats: int, timeout: float = 120) -> dict:
    """Start ``h`` pinned workers, release them together, collect their per-call times."""
    cpus = sorted(os.sched_getaffinity(0))
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    args = [sys.executable, "-m", __name__, str(segment_bytes), str(min_time), str(repeats)]
    procs = [subprocess.Popen([*args, str(cpus[k % len(cpus)])], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True, env=env) for k in range(h)]
    try:
        for proc in procs:
            line = proc.stdout.readline().strip()
            if line != "ready":
                raise RuntimeError(f"interference worker did not start (said {line!r})")
        with OtherCpu() as oc:
            for proc in procs:
                proc.stdin.write("go\n")
                proc.stdin.flush()
            results = [json.loads(proc.communicate(timeout=timeout)[0]) for proc in procs]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    # The workers are waited for inside the block, so their CPU time counts as this process's own (their
    # setup before 'go' too, which makes other_cpu_s a lower bound here).
    return {"workers": results, "other_cpu_s": oc.other_cpu_s, "wall_s": oc.wall_s}


def interference_curve(segment_bytes: int, max_h: int, min_time: float, repeats: int, progress=None) -> dict:
    """C_interf(H) for H = 1..max_h: ratio of the median per-call time with H workers to that with one."""
    points, base = [], None
    for h in range(1, max_h + 1):
        if progress:
            progress(f"C_interf H={h}")
        run = run_concurrently(h, segment_bytes, min_time, repeats)
        times = [t for w in run["workers"] for t in w["times_s"]]
        median = float(np.median(times))
        if base is None:
            base = median
        points.append({"H": h, "ratio": median / base, "spread": robust_spread(times) / base,
                       "seconds_per_call": median, "form": run["workers"][0]["form"],
                       "pinned": all(w["pinned"] for w in run["workers"]), "wall_s": run["wall_s"]})
    return {"segment_bytes": segment_bytes, "points": points}


if __name__ == "__main__":
    size, mt, reps, core = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    print(json.dumps(worker(core, size, mt, reps)), flush=True)
