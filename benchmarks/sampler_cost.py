"""CPU cost of the system sampler (psutil) at 10 Hz, in % of one core.

A child process runs only the sampler on a job tree of ``--procs`` sleeping processes for ``--seconds``;
its CPU time (user + system, from getrusage) over the wall time is the cost. Reference: the issue's
target (dstat-class), <= 1 % of one core.

    .venv/bin/python benchmarks/sampler_cost.py [--hz 10] [--seconds 10] [--procs 4]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

CHILD = r"""
import json, resource, subprocess, sys, time
from ddltrace.collectors.system_sampler import SystemSampler
hz, seconds, procs = float(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
tree = subprocess.Popen([sys.executable, "-c",
    "import subprocess, sys, time\n"
    f"kids = [subprocess.Popen(['sleep', '{seconds + 5}']) for _ in range({procs})]\n"
    f"time.sleep({seconds + 5})"])
time.sleep(0.5)
r0 = resource.getrusage(resource.RUSAGE_SELF); t0 = time.monotonic()
sampler = SystemSampler(hz, tree.pid).start()
time.sleep(seconds)
rows = sampler.stop()
r1 = resource.getrusage(resource.RUSAGE_SELF); t1 = time.monotonic()
tree.kill()
cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
samples = sum(1 for k, n, _, _ in rows if n == "cpu_percent" and k == -1)
print(json.dumps({"cpu_s": cpu, "wall_s": t1 - t0, "samples": samples, "rows": len(rows)}))
"""


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hz", type=float, default=10.0)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--procs", type=int, default=4, help="sleeping processes in the sampled job tree")
    args = ap.parse_args(argv)
    out = subprocess.run([sys.executable, "-c", CHILD, str(args.hz), str(args.seconds), str(args.procs)],
                         capture_output=True, text=True, check=True).stdout
    got = json.loads(out.strip().splitlines()[-1])
    percent = got["cpu_s"] / got["wall_s"] * 100
    per_sample_us = got["cpu_s"] / max(got["samples"], 1) * 1e6
    print(f"system sampler at {args.hz:g} Hz on a tree of {args.procs + 1} processes: {percent:.2f} % of one core "
          f"({per_sample_us:.0f} us CPU per sample, {got['samples']} samples, {got['rows']} values in "
          f"{got['wall_s']:.1f} s); reference (target, dstat-class) 1 %; ratio {percent / 1:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
