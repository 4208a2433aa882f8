"""``ddltrace analyze`` on a local Dask cluster of 1 and then 2 worker processes against the local path: the
speed-up from the second worker and the Dask path's overhead at one worker (issue 16).

The store (synthetic MPI ranks in a ring, analyses/synthetic_ring.py) is written once, outside the timing. Then
each way is timed end to end, as a user runs it: a fresh ``ddltrace analyze --json`` process, from its start to its
exit (interpreter, imports, connecting to the scheduler, the ranks' tasks, the cross-rank steps, the JSON):

- local, in this process's child: ``--jobs 1`` (the ranks one after the other in the analyze process) and
  ``--jobs 2`` (two forked processes);
- Dask: ``--scheduler`` on a cluster of ``dask scheduler`` and 1, then 2, ``dask worker`` processes (one thread
  each; started before the timing, as an existing cluster is: the start is printed apart).

Each way runs ``--repeat`` times, interleaved; the medians are printed, with the CPU seconds (user + sys) of the
analyze process and of the workers, and the machine's load average (a shared machine: wall time above CPU time
is time spent waiting for a core). Every run's JSON must equal the first's, or the script fails. A fresh
cluster's first run, which imports ddltrace in each worker, is printed apart and left out of the medians.

Then, in this process (imports done, no interpreter start): ``analyze_store`` with ``map``, with two local
processes and with each cluster (:mod:`ddltrace.executor`), which isolates what the tasks themselves cost.
Run: ``.venv/bin/python benchmarks/dask_speedup.py [--ranks 32] [--events 1000000] [--repeat 3]``.
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))
from dask_cluster import LocalDaskCluster  # noqa: E402

from ddltrace.analyses.run_analysis import analyze_store  # noqa: E402
from ddltrace.analyses.synthetic_ring import write_ring_store  # noqa: E402
from ddltrace.executor import DaskMapper, LocalMapper  # noqa: E402
from ddltrace.store import TraceStore  # noqa: E402


def timed_analyze(store: Path, how: list[str], workers: list[int]) -> tuple[float, float, float, str]:
    """(wall s, the analyze process's CPU s, the workers' CPU s, its JSON) of one fresh analyze process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    busy = [psutil.Process(pid) for pid in workers]
    worker_cpu = [sum(p.cpu_times()[:2]) for p in busy]
    started = time.perf_counter()
    child = subprocess.run([sys.executable, "-m", "ddltrace", "analyze", str(store), "--json", "--quiet", *how],
                           capture_output=True, text=True)
    wall = time.perf_counter() - started
    if child.returncode != 0:
        raise SystemExit(f"analyze {' '.join(how)} failed: {child.stderr}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    workers_cpu = sum(sum(p.cpu_times()[:2]) for p in busy) - sum(worker_cpu)
    return wall, cpu, workers_cpu, child.stdout


def timed_in_process(store: Path, mapper) -> float:
    """Wall seconds of ``analyze_store(store, mapper=mapper)`` in this process."""
    started = time.perf_counter()
    analyze_store(TraceStore.open(store), mapper=mapper)
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=32)
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    results: dict[str, list[tuple[float, float, float]]] = {}
    in_process: dict[str, list[float]] = {}
    reference = None
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        store = write_ring_store(tmp / "store", args.ranks, args.events // args.ranks).path
        events = args.ranks * (args.events // args.ranks)
        load_before = os.getloadavg()
        for workers in (1, 2):
            started = time.perf_counter()
            with LocalDaskCluster(tmp / f"cluster{workers}", workers=workers) as cluster:
                start_s = time.perf_counter() - started
                print(f"Dask cluster of {workers} worker(s) started in {start_s:.1f} s (not in the figures below)")
                pids = [p.pid for p in cluster.workers.values()]
                first = timed_analyze(store, ["--scheduler", cluster.address], pids)
                reference = reference or first[3]
                if first[3] != reference:
                    raise SystemExit("the first run on the second cluster: its JSON differs from the first run's")
                print(f"first run on the fresh cluster of {workers}: {first[0]:.2f} s wall, workers' CPU "
                      f"{first[2]:.2f} s (importing ddltrace there)")
                with DaskMapper(cluster.address) as mapper:
                    in_process[f"dask, {workers} worker{'s' if workers > 1 else ''}"] = \
                        [timed_in_process(store, mapper) for _ in range(args.repeat)]
                ways = {f"dask, {workers} worker{'s' if workers > 1 else ''}": (["--scheduler", cluster.address], pids),
                        f"local, --jobs {workers}": (["--jobs", str(workers)], [])}
                for _ in range(args.repeat):
                    for label, (how, busy) in ways.items():
                        wall, cpu, workers_cpu, out = timed_analyze(store, how, busy)
                        reference = reference or out
                        if out != reference:
                            raise SystemExit(f"{label}: its JSON differs from the first run's")
                        results.setdefault(label, []).append((wall, cpu, workers_cpu))
        with LocalMapper(2) as local:
            in_process["local, 2 processes"] = [timed_in_process(store, local) for _ in range(args.repeat)]
        in_process["local, map"] = [timed_in_process(store, map) for _ in range(args.repeat)]
        load_after = os.getloadavg()

    def median(label: str, i: int) -> float:
        return statistics.median(r[i] for r in results[label])

    print(f"\nddltrace analyze --json of {args.ranks} ranks, {events:,} events; medians of {args.repeat} fresh "
          f"processes each, on {platform.node()} ({psutil.cpu_count()} CPUs), "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print(f"load average (1 min) {load_before[0]:.1f} before, {load_after[0]:.1f} after")
    print(f"  {'way':22s} {'wall s':>7s} {'analyze CPU s':>14s} {'workers CPU s':>14s} {'events/s (wall)':>16s}")
    for label in sorted(results, key=lambda k: (k.split(",")[1], k)):
        wall = median(label, 0)
        print(f"  {label:22s} {wall:7.2f} {median(label, 1):14.2f} {median(label, 2):14.2f} {events / wall:16,.0f}")
    d1, d2 = median("dask, 1 worker", 0), median("dask, 2 workers", 0)
    l1, l2 = median("local, --jobs 1", 0), median("local, --jobs 2", 0)
    print(f"speed-up of the second worker (wall, 1 worker / 2 workers): Dask {d1 / d2:.2f}x, local {l1 / l2:.2f}x")
    print(f"Dask overhead at 1 worker (wall, Dask - local --jobs 1): {d1 - l1:+.2f} s ({(d1 - l1) / l1:+.0%})")
    print("\nanalyze_store in this process (imports done), median wall s:")
    for label, walls in in_process.items():
        print(f"  {label:22s} {statistics.median(walls):7.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
