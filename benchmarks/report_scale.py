"""Report generation on a 64-rank store of 1M events: wall time and peak memory against the goal.

Goal (issue 9): at most 30 s and 2 GiB on this kind of machine (2 cores). There is no reference tool that
writes this report, so the script prints our figures beside the goal and their ratio. The report runs on one
core: on a loaded machine its wall time exceeds its CPU time, which the script prints too.
Run: ``.venv/bin/python benchmarks/report_scale.py [--ranks 64] [--events 1000000]``.
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from ddltrace.store import TraceStore
from ddltrace.timeline import make_timeline

GOAL_S, GOAL_BYTES = 30.0, 2 * 1024**3


def synthetic_rank(rank: int, ranks: int, events: int, rng: np.random.Generator):
    """An MPI-style rank of ``events`` calls: compute gaps (not recorded) between Send, Recv and Barrier."""
    names = np.array(["MPI_Send", "MPI_Recv", "MPI_Barrier", "MPI_Allreduce"])
    categories = np.array(["comm", "wait", "barrier", "comm"])
    kind = rng.choice(4, size=events, p=[0.4, 0.4, 0.05, 0.15])
    dur = rng.exponential(20_000, size=events).astype(np.int64) + 1_000
    gap = rng.exponential(80_000, size=events).astype(np.int64)
    start = np.cumsum(gap + dur) - dur + rank * 1_000
    peer = np.where(kind < 2, (rank + 1) % ranks, -1)
    return make_timeline(dict(rank=np.full(events, rank, dtype=np.int32), name=names[kind],
                              category=categories[kind], start_ns=start, dur_ns=dur,
                              peer=np.where(peer >= 0, peer, None), bytes=np.full(events, 65_536)))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=64)
    parser.add_argument("--events", type=int, default=1_000_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        store = TraceStore.create(Path(tmp) / "big", run={"command": "synthetic", "world_size": args.ranks})
        rng = np.random.default_rng(1)
        per_rank = args.events // args.ranks
        for rank in range(args.ranks):
            store.add_rank(rank, synthetic_rank(rank, args.ranks, per_rank, rng), save=False)
        store.save_manifest()
        started = time.perf_counter()
        child = subprocess.run([sys.executable, "-m", "ddltrace", "report", str(store.path), "--out",
                                str(Path(tmp) / "rep"), "--quiet"], capture_output=True, text=True)
        wall = time.perf_counter() - started
        if child.returncode != 0:
            print(child.stderr, file=sys.stderr)
            return 1
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        peak, cpu = usage.ru_maxrss * 1024, usage.ru_utime + usage.ru_stime
    print(f"report of {args.ranks} ranks, {per_rank * args.ranks} events")
    print(f"  wall time    ddltrace {wall:.1f} s    goal {GOAL_S:.0f} s    ratio {wall / GOAL_S:.2f} of the goal")
    print(f"  CPU time     ddltrace {cpu:.1f} s (user + sys; what the wall time would be on an idle core)")
    print(f"  peak memory  ddltrace {peak / 2**20:.0f} MiB    goal {GOAL_BYTES / 2**20:.0f} MiB    "
          f"ratio {peak / GOAL_BYTES:.2f} of the goal")
    return 0


if __name__ == "__main__":
    sys.exit(main())
