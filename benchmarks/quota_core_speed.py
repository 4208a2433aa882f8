"""Does a core run slower per CPU second inside a CFS quota? (issue 17, item 2; docs/MODELS.md)

Times a numpy sigmoid over 10,000 doubles (calibrate's C_act loop) in windows of ``--window`` seconds of the
thread's own CPU time, ``--windows`` per process, in processes alternately outside and inside a quota of half a
core (``collectors.cpu_quota``, removed at exit), ``--rounds`` of each; ``--pin CPU`` runs both on one core and
``--filler`` adds a SCHED_IDLE busy loop on it (it runs only while the measured process is throttled). Prints per
side the median nanoseconds of CPU per value, its 10th and 90th percentiles, and the share of windows slower than
1.2x the outside median.

Run (root, cgroup v1): ``.venv/bin/python benchmarks/quota_core_speed.py [--period 0.01] [--pin 1] [--filler]``
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

import numpy as np


def measure(window: float, windows: int) -> list[float]:
    """Nanoseconds of this thread's CPU per sigmoid value, one per window."""
    x = np.random.default_rng(0).standard_normal(10000)
    out = np.empty_like(x)

    def sigmoid():
        np.negative(x, out=out)
        np.exp(out, out=out)
        np.add(out, 1.0, out=out)
        np.reciprocal(out, out=out)

    for _ in range(200):
        sigmoid()
    result = []
    for _ in range(windows):
        c0, calls = time.thread_time(), 0
        while time.thread_time() - c0 < window:
            for _ in range(20):
                sigmoid()
            calls += 20
        result.append(1e9 * (time.thread_time() - c0) / (calls * x.size))
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--window", type=float, default=0.05, help="CPU seconds per window (default 0.05)")
    parser.add_argument("--windows", type=int, default=20, help="windows per process (default 20)")
    parser.add_argument("--rounds", type=int, default=3, help="processes per side (default 3)")
    parser.add_argument("--period", type=float, default=0.010, help="the quota's period, s (default 0.010)")
    parser.add_argument("--pin", type=int, help="run everything on this core (taskset)")
    parser.add_argument("--filler", action="store_true", help="a SCHED_IDLE busy loop on the pinned core")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.window, args.windows)))
        return 0
    from ddltrace.collectors.cpu_quota import CpuQuota

    pin = ["taskset", "-c", str(args.pin)] if args.pin is not None else []
    child = [*pin, sys.executable, __file__, "--child", "--window", str(args.window), "--windows", str(args.windows)]
    filler = None
    if args.filler:
        filler = subprocess.Popen(["chrt", "-i", "0", *pin, sys.executable, "-c", "while True: pass"])
    values: dict[str, list[float]] = {"outside": [], "inside": []}
    try:
        with CpuQuota(0.5, args.period) as quota:
            for _ in range(args.rounds):
                for side, cmd in (("outside", child), ("inside", quota.wrap(child))):
                    done = subprocess.run(cmd, capture_output=True, text=True, check=True)
                    values[side] += json.loads(done.stdout)
    finally:
        if filler is not None:
            filler.kill()
            filler.wait()
    reference = float(np.median(values["outside"]))
    for side, ns in values.items():
        ns = np.asarray(ns)
        print(f"{side:8s} ({len(ns)} windows of {1e3 * args.window:g} ms CPU, quota period {1e3 * args.period:g} ms): "
              f"median {np.median(ns):.2f} ns CPU per value (p10 {np.percentile(ns, 10):.2f}, p90 "
              f"{np.percentile(ns, 90):.2f}); {100 * np.mean(ns > 1.2 * reference):.0f} % of windows over 1.2x the "
              "outside median")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
