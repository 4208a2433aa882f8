"""analyze (and report) of big synthetic stores: events/s, peak memory and memory per rank (issue 16).

Sizes: ``--ranks 64 256 1024`` ranks of ``--events-per-rank`` (100,000) MPI calls each, up to 10^8 events: the
ring of :mod:`ddltrace.analyses.synthetic_ring` (sends to the next rank, receives from the previous one, barriers
and all-reduces, in marked steps of 1,000 calls).
Each store is written once, rank by rank (one rank's events in memory at a time), into ``--data`` (outside the
repository; deleted at the end unless ``--keep``), before and outside any timing. Then, per size:

1. end to end, in a fresh process: ``ddltrace analyze STORE --json --jobs 1`` (one core; ``--report`` also
   ``ddltrace report``): wall time, CPU time (user + sys), events per CPU second, peak RSS (the largest of the
   command's processes, from ``wait4``) and peak RSS per rank;
2. inner figures, in another fresh process: ``analyze_store`` alone (no interpreter start, imports or output):
   the map step (reading and summarising every rank) and the reduce step (wait-state matching rank by rank
   through the scratch folder, tables) timed apart, in CPU seconds.

Last, the memory per rank added: (peak RSS at the largest size - at the smallest) / (ranks added).
Goals (issue 16): peak <= 2 GiB at every size, >= 1M events/s per core, time linear in events.
Run: ``.venv/bin/python benchmarks/report_scale.py --ranks 64 256 [1024] [--data /work/data/bench] [--report]``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

from ddltrace.analyses.synthetic_ring import write_ring_store
from ddltrace.store import TraceStore

GOAL_BYTES, GOAL_RATE = 2 * 1024**3, 1_000_000

INNER = """
import json, resource, sys, time
from ddltrace.analyses.rank_summary import summarise_rank
from ddltrace.analyses import run_analysis
map_cpu = [0.0]
def timed_map(fn, ranks):
    for r in ranks:
        t = time.process_time(); out = fn(r); map_cpu[0] += time.process_time() - t
        yield out
t0, w0 = time.process_time(), time.perf_counter()
run = run_analysis.analyze_store(sys.argv[1], mapper=timed_map)
cpu, wall = time.process_time() - t0, time.perf_counter() - w0
print(json.dumps({"cpu": cpu, "wall": wall, "map_cpu": map_cpu[0], "reduce_cpu": cpu - map_cpu[0],
                  "ranks": len(run.ranks), "waits": int(run.wait_state_summary["instances"].sum()),
                  "rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))
"""


def write_store(path: Path, ranks: int, per_rank: int) -> float:
    """Write the store rank by rank (seconds taken); an existing complete one is kept."""
    if (path / "manifest.json").exists() and len(TraceStore.open(path).ranks) == ranks:
        return 0.0
    shutil.rmtree(path, ignore_errors=True)
    started = time.perf_counter()
    write_ring_store(path, ranks, per_rank)
    return time.perf_counter() - started


def run_child(argv: list[str]) -> dict:
    """Run ``argv`` in a fresh process: wall and CPU seconds (user + sys, its processes together), peak RSS (bytes)
    of its largest process, from ``wait4`` (Popen.wait would reap the child first), and its stdout."""
    started = time.perf_counter()
    child = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out = child.stdout.read()
    err = child.stderr.read()
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - started
    if child.returncode:
        raise SystemExit(f"{' '.join(map(str, argv[:5]))}: exit {child.returncode}\n{err.decode()[-2000:]}")
    return {"wall": wall, "cpu": usage.ru_utime + usage.ru_stime, "rss": usage.ru_maxrss * 1024, "out": out}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--events-per-rank", type=int, default=100_000)
    parser.add_argument("--data", default="/work/data/report_scale", help="folder for the stores (created)")
    parser.add_argument("--keep", action="store_true", help="keep the stores (default: delete them at the end)")
    parser.add_argument("--report", action="store_true", help="also time 'ddltrace report' end to end")
    parser.add_argument("--inner-max-ranks", type=int, default=256,
                        help="the inner figures (a second full run) only up to this many ranks (default 256)")
    args = parser.parse_args()
    data = Path(args.data)
    data.mkdir(parents=True, exist_ok=True)
    print(f"machine: {platform.node()}, {os.cpu_count()} CPUs, {platform.processor() or platform.machine()}; "
          f"load average {os.getloadavg()[0]:.1f}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    rows = []
    try:
        for ranks in args.ranks:
            store = data / f"ranks-{ranks}"
            events = ranks * args.events_per_rank
            took = write_store(store, ranks, args.events_per_rank)
            print(f"\n{ranks} ranks x {args.events_per_rank:,} = {events:,} events "
                  f"({sum(f.stat().st_size for f in store.rglob('*')) / 2**20:.0f} MiB on disk"
                  + (f", written in {took:.0f} s" if took else ", written before") + ")")
            py = sys.executable
            e2e = run_child([py, "-m", "ddltrace", "analyze", str(store), "--json", "--quiet", "--jobs", "1"])
            print(f"  analyze end to end  wall {e2e['wall']:6.1f} s  CPU {e2e['cpu']:6.1f} s  "
                  f"{events / e2e['cpu'] / 1e6:5.2f} M events per CPU s  peak RSS {e2e['rss'] / 2**20:6.0f} MiB "
                  f"({e2e['rss'] / ranks / 2**10:.0f} KiB per rank)")
            if args.report:
                rep = run_child([py, "-m", "ddltrace", "report", str(store), "--out", str(data / "report"),
                                 "--quiet", "--force", "--jobs", "1"])
                print(f"  report end to end   wall {rep['wall']:6.1f} s  CPU {rep['cpu']:6.1f} s  "
                      f"{events / rep['cpu'] / 1e6:5.2f} M events per CPU s  peak RSS {rep['rss'] / 2**20:6.0f} MiB")
            if ranks > args.inner_max_ranks:
                rows.append((ranks, events, e2e, None))
                continue
            inner = json.loads(run_child([py, "-c", INNER, str(store)])["out"])
            print(f"  analyze_store alone CPU {inner['cpu']:6.1f} s (map {inner['map_cpu']:.1f} s: "
                  f"{events / inner['map_cpu'] / 1e6:.2f} M events/s; reduce {inner['reduce_cpu']:.1f} s)  "
                  f"{events / inner['cpu'] / 1e6:5.2f} M events per CPU s  peak RSS {inner['rss'] / 2**20:.0f} MiB; "
                  f"{inner['waits']:,} wait-state instances")
            rows.append((ranks, events, e2e, inner))
    finally:
        if not args.keep:
            shutil.rmtree(data, ignore_errors=True)
    if len(rows) > 1:
        (r0, e0, a0, _), (r1, e1, a1, _) = rows[0], rows[-1]
        print(f"\nmemory per rank added: ({a1['rss'] / 2**20:.0f} - {a0['rss'] / 2**20:.0f} MiB) / ({r1} - {r0} ranks) "
              f"= {(a1['rss'] - a0['rss']) / (r1 - r0) / 2**10:.0f} KiB")
        print(f"CPU time per event: {a0['cpu'] / e0 * 1e9:.0f} ns at {e0:,} events, {a1['cpu'] / e1 * 1e9:.0f} ns "
              f"at {e1:,} (equal when the time is linear in events)")
    worst = max(a["rss"] for _, _, a, _ in rows)
    print(f"goals: peak <= {GOAL_BYTES / 2**30:.0f} GiB: {'met' if worst <= GOAL_BYTES else 'NOT met'} "
          f"(largest {worst / 2**20:.0f} MiB); >= {GOAL_RATE / 1e6:.0f}M events per CPU s end to end: "
          + ", ".join(f"{e / a['cpu'] / 1e6:.2f}M" for _, e, a, _ in rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
