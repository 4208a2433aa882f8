"""How the kernel runs a busy process under a CFS quota: two cgroups (cgroup v1 cpu controller), each with the
same quota and period, a busy loop in each; each loop timestamps itself with CLOCK_MONOTONIC and a gap of more
than 0.3 ms ends a stretch. Prints, per cgroup, where in the period each stretch began and how long it ran
(docs/MODELS.md, "Are the ranks' periods aligned?").

    .venv/bin/python scripts/quota_stretches.py [--period-us 10000] [--quota-us 5000] [--seconds 0.3]

Needs root and /sys/fs/cgroup/cpu; the cgroups are removed at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

CPU = Path("/sys/fs/cgroup/cpu")

#: The busy loop: joins the cgroup given, then records (start, end) of each stretch it ran, seconds.
LOOP = r"""
import json, os, sys, time
open(sys.argv[1], "w").write(str(os.getpid()))
clock = time.CLOCK_MONOTONIC
end = time.clock_gettime(clock) + float(sys.argv[2])
stretches, start, last = [], None, None
while True:
    t = time.clock_gettime(clock)
    if last is not None and t - last > 3e-4:
        stretches.append((start, last))
        start = None
    if start is None:
        start = t
    last = t
    if t > end:
        break
stretches.append((start, last))
print(json.dumps(stretches))
"""


def stretches(period_us: int = 10000, quota_us: int = 5000, seconds: float = 0.3) -> list[list[tuple[float, float]]]:
    """Per cgroup, the (start, end) seconds (CLOCK_MONOTONIC) of each stretch its busy loop ran, the first and last
    left out (the loop's own start and end cut them). The loops are killed and the cgroups removed on any exit."""
    groups = [CPU / f"ddlt_stretches_{os.getpid()}_{i}" for i in range(2)]
    loops: list[subprocess.Popen] = []
    try:
        for group in groups:
            group.mkdir()
            (group / "cpu.cfs_period_us").write_text(str(period_us))
            (group / "cpu.cfs_quota_us").write_text(str(quota_us))
        for i, group in enumerate(groups):
            time.sleep(0.0037 * (i + 1))  # the two start at different points of a period
            loops.append(subprocess.Popen([sys.executable, "-c", LOOP, str(group / "tasks"), str(seconds)],
                                          stdout=subprocess.PIPE, text=True))
        return [[tuple(x) for x in json.loads(loop.communicate()[0])[2:-1]] for loop in loops]
    finally:
        for loop in loops:
            if loop.poll() is None:
                loop.kill()
                loop.wait()
        for group in groups:
            if group.is_dir():
                group.rmdir()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--period-us", type=int, default=10000)
    parser.add_argument("--quota-us", type=int, default=5000)
    parser.add_argument("--seconds", type=float, default=0.3)
    args = parser.parse_args()
    if not CPU.is_dir() or os.geteuid() != 0:
        print(f"quota_stretches: needs root and the cgroup v1 cpu controller at {CPU}", file=sys.stderr)
        return 2
    period = args.period_us / 1e6
    try:
        measured = stretches(args.period_us, args.quota_us, args.seconds)
    except KeyboardInterrupt:
        print("quota_stretches: interrupted (the loops are stopped and the cgroups removed)", file=sys.stderr)
        return 130
    for i, runs in enumerate(measured):
        starts = ", ".join(f"{start % period * 1e3:.2f}" for start, _ in runs)
        lengths = [(end - start) * 1e3 for start, end in runs]
        print(f"cgroup {i}: {len(runs)} stretches of {min(lengths):.2f} to {max(lengths):.2f} ms (mean "
              f"{sum(lengths) / len(lengths):.2f} ms); each stretch's start within the period (ms): {starts}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
