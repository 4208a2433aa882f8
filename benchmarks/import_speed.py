"""Import speed and memory: ddltrace against Holistic Trace Analysis (HTA) on the same PyTorch trace, side by side.

    .venv/bin/python benchmarks/import_speed.py [--trace FILE] [--hta-python PY] [--repeat N] [--synthetic]

Each tool runs in its own fresh process, one after the other (HTA in its own venv: ``.venvs/hta``, made by
``make hta``). Printed first: what a user waits for, the wall time of a fresh
process from start to exit, interpreter start and module imports included: ``ddltrace import TRACE --out STORE``
(the installed command) against ``python -c "from hta.trace_analysis import TraceAnalysis;
TraceAnalysis(trace_dir=...)"``, with the machine's load average and whether Python may cache bytecode
(``PYTHONDONTWRITEBYTECODE``: without the cache every module of ddltrace is compiled again in each process).
Then per tool: seconds to load the trace into a table
(HTA: ``TraceAnalysis(trace_dir=...)``; ddltrace: the Kineto importer to a validated timeline; the modules'
import time is left out for every tool), and the process's peak resident memory (whole process, and above the
process's size once its libraries are imported); for ddltrace also the full ``ddltrace import`` into a store on
disk. Then the ratios, and the temporal breakdown
(idle / compute / non-compute share of GPU time, HTA's definition) of both tools with the difference in
percentage points. ``--synthetic`` adds throughput on an 8-rank, 2M-event Chrome trace folder, read by one process
and by two (``--jobs``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from shared_traces import SHARED  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_TRACE = SHARED / "hta_traces" / "df_index_resolver" / "df_index_resolver.json.gz"
DEFAULT_HTA_PYTHON = ROOT / ".venvs" / "hta" / "bin" / "python"

_HTA_CHILD = r"""
import json, sys, time, logging
def hwm_kib():  # this process's peak resident memory since exec (ru_maxrss keeps the pre-exec process's)
    return int(next(l for l in open("/proc/self/status") if l.startswith("VmHWM:")).split()[1])
logging.disable(logging.CRITICAL)
t0 = time.perf_counter()
from hta.trace_analysis import TraceAnalysis
t1 = time.perf_counter()
base = hwm_kib()
analyzer = TraceAnalysis(trace_dir=sys.argv[1])
t2 = time.perf_counter()
peak = hwm_kib()
b = analyzer.get_temporal_breakdown(visualize=False)
rows = {int(r["rank"]): {"idle": float(r["idle_time_pctg"]), "compute": float(r["compute_time_pctg"]),
                         "non_compute": float(r["non_compute_time_pctg"])} for _, r in b.iterrows()}
print(json.dumps({"import_s": t1 - t0, "load_s": t2 - t1, "base_kib": base, "peak_kib": peak,
                  "events": int(sum(len(df) for df in analyzer.t.traces.values())), "breakdown": rows}))
"""

_HTA_FRESH = r"""
import logging, sys
logging.disable(logging.CRITICAL)
from hta.trace_analysis import TraceAnalysis
TraceAnalysis(trace_dir=sys.argv[1])
"""

_DDLTRACE_CHILD = r"""
import json, sys, time
def hwm_kib():  # this process's peak resident memory since exec (ru_maxrss keeps the pre-exec process's)
    return int(next(l for l in open("/proc/self/status") if l.startswith("VmHWM:")).split()[1])
from pathlib import Path
t0 = time.perf_counter()
import numpy as np
from ddltrace.collectors.importers import Categorizer, ImportContext, get_importer
from ddltrace.collectors.importers.base import FileReport
t1 = time.perf_counter()
base = hwm_kib()
path = Path(sys.argv[1])
ctx = ImportContext(Categorizer(), report=FileReport(str(path)))
parts = list(get_importer("kineto").read(path, ctx))
t2 = time.perf_counter()
peak = hwm_kib()

def union_ns(start, end):
    order = np.argsort(start, kind="stable")
    start, end = start[order], end[order]
    reach = np.maximum.accumulate(end)
    new = np.ones(len(start), bool)
    new[1:] = start[1:] > reach[:-1]
    group = np.cumsum(new) - 1
    first = start[new]
    last = np.maximum.reduceat(end, np.flatnonzero(new))
    return int((last - first).sum())

rows = {}
for part in parts:
    tl = part.timeline
    gpu = tl[tl["lane"].str.startswith("gpu:")]
    if gpu["step"].notna().any():  # HTA's window: GPU work launched before the last ProfilerStep began
        gpu = gpu[gpu["step"].fillna(-1).lt(int(tl["step"].max())) & gpu["step"].notna()]
    start = gpu["start_ns"].to_numpy(); end = start + gpu["dur_ns"].to_numpy()
    span = int(end.max() - start.min())
    busy = union_ns(start, end)
    comp = gpu["category"].astype(str).to_numpy() == "compute"
    compute = union_ns(start[comp], end[comp])
    rows[int(part.rank)] = {"idle": 100.0 * (span - busy) / span, "compute": 100.0 * compute / span,
                            "non_compute": 100.0 * (busy - compute) / span}
print(json.dumps({"import_s": t1 - t0, "load_s": t2 - t1, "base_kib": base, "peak_kib": peak,
                  "events": int(sum(len(p.timeline) for p in parts)), "read": ctx.report.events, "breakdown": rows}))
"""

_STORE_CHILD = r"""
import json, resource, sys, time
def hwm_kib():  # this process's peak resident memory since exec (ru_maxrss keeps the pre-exec process's)
    return int(next(l for l in open("/proc/self/status") if l.startswith("VmHWM:")).split()[1])
t0 = time.perf_counter()
from ddltrace.cli import build_parser
import ddltrace.collectors.importers, ddltrace.collectors.importers.align, ddltrace.collectors.importers.pool
import ddltrace.store  # imports, as for HTA
args = build_parser().parse_args(["import", *sys.argv[2:], "--out", sys.argv[1], "--progress", "never"])
t1 = time.perf_counter()
base = hwm_kib()
import contextlib, io
with contextlib.redirect_stdout(io.StringIO()):
    code = args.func(args)
t2 = time.perf_counter()
print(json.dumps({"code": code, "import_s": t1 - t0, "load_s": t2 - t1, "base_kib": base,
                  "peak_kib": hwm_kib(),
                  "worker_peak_kib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}))
"""


def _child(python: str, code: str, *args: str) -> dict:
    result = subprocess.run([python, "-c", code, *args], capture_output=True, text=True, cwd=tempfile.gettempdir())
    if result.returncode != 0:
        raise SystemExit(f"child {python} failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def _wall(argv: list[str]) -> tuple[float, float, int]:
    """Seconds from starting ``argv`` in a fresh process to its exit (it must succeed), the CPU seconds (user
    + system) it and the children it waited for used, which move less than the wall time with the machine's other
    work, and their minor page faults (each a page of memory touched for the first time: ~3 µs of system time on
    this VM)."""
    cpu = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    result = subprocess.run(argv, capture_output=True, text=True, cwd=tempfile.gettempdir())
    elapsed = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed:\n{result.stderr[-3000:]}")
    return elapsed, after.ru_utime + after.ru_stime - cpu.ru_utime - cpu.ru_stime, after.ru_minflt - cpu.ru_minflt


def _ddltrace_command() -> list[str]:
    """The installed ``ddltrace`` command beside this interpreter (what a user runs), else ``python -m ddltrace``."""
    script = Path(sys.executable).parent / "ddltrace"
    return [str(script)] if script.exists() else [sys.executable, "-m", "ddltrace"]


def _best(runs: list[dict]) -> dict:
    return min(runs, key=lambda r: r["load_s"])


def _mib(kib: float) -> str:
    return f"{kib / 1024:.0f} MiB"


def compare(trace: Path, hta_python: Path, repeat: int) -> None:
    print(f"trace: {trace} ({trace.stat().st_size / 2**20:.1f} MiB on disk)")
    print(f"machine: {os.cpu_count()} CPUs ({platform.machine()}, {platform.python_implementation()} "
          f"{platform.python_version()}), {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    have_hta = hta_python.exists()
    if not have_hta:
        print(f"HTA not found at {hta_python}: make it with 'make hta'")
    ours_runs, store_runs, hta_runs = [], [], []
    fresh_ours, fresh_hta = [], []
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        hta_dir = Path(tmp) / "hta"  # HTA parses every file of a folder: give it only this one
        hta_dir.mkdir()
        shutil.copy(trace, hta_dir / trace.name)
        for i in range(repeat):  # interleaved, so a busy spell on the machine hits both tools alike
            fresh_ours.append(_wall([*_ddltrace_command(), "import", str(trace), "--out", str(Path(tmp) / f"f{i}"),
                                     "--progress", "never"]))
            if have_hta:
                fresh_hta.append(_wall([str(hta_python), "-c", _HTA_FRESH, str(hta_dir)]))
        load_after = os.getloadavg()
        cache = "off (PYTHONDONTWRITEBYTECODE set)" if os.environ.get("PYTHONDONTWRITEBYTECODE") else "on"
        print(f"\nwhat a user waits for: a fresh process from start to exit, imports included (fastest of {repeat}; "
              f"load average {load_before[0]:.2f} before, {load_after[0]:.2f} after; bytecode cache {cache})")
        ours_fresh, ours_cpu = min(run[0] for run in fresh_ours), min(run[1] for run in fresh_ours)
        if fresh_hta:
            hta_fresh, hta_cpu = min(run[0] for run in fresh_hta), min(run[1] for run in fresh_hta)
            print(f"  ddltrace import: {ours_fresh:.2f} s   HTA TraceAnalysis(trace_dir=...): {hta_fresh:.2f} s   "
                  f"ratio {hta_fresh / ours_fresh:.1f} x")
            print(f"  (CPU time, user + system, fastest of {repeat}: ddltrace {ours_cpu:.2f} s, HTA {hta_cpu:.2f} s, "
                  f"ratio {hta_cpu / ours_cpu:.1f} x)")
            faults = [statistics.median(run[2] for run in runs) for runs in (fresh_ours, fresh_hta)]
            print(f"  (minor page faults, median of {repeat}: ddltrace {faults[0]:,.0f}, HTA {faults[1]:,.0f})")
            floor = min(_wall([sys.executable, "-c", "import numpy, pyarrow.parquet, msgspec"])[0]
                        for _ in range(repeat))
            print(f"  (10x means {hta_fresh / 10:.3f} s; a fresh interpreter that only imports numpy, pyarrow.parquet "
                  f"and msgspec takes {floor:.3f} s of it, fastest of {repeat}: the rest is reading and writing)")
        else:
            print(f"  ddltrace import: {ours_fresh:.2f} s (CPU time {ours_cpu:.2f} s)   HTA: n/a")
        print("\nin-process (module imports left out of every measure, HTA's included):")
        for i in range(repeat):
            ours_runs.append(_child(sys.executable, _DDLTRACE_CHILD, str(trace)))
            store_runs.append(_child(sys.executable, _STORE_CHILD, str(Path(tmp) / f"s{i}"), str(trace)))
            if have_hta:
                hta_runs.append(_child(str(hta_python), _HTA_CHILD, str(hta_dir)))
    ours, store = _best(ours_runs), _best(store_runs)
    hta = _best(hta_runs) if hta_runs else None
    print(f"\n{'':34s}{'ddltrace':>14s}{'HTA':>14s}{'ratio':>10s}")

    def row(label, a, b, fmt, ratio_of):
        ratio = f"{ratio_of(a, b):8.1f} x" if b is not None else ""
        print(f"{label:34s}{fmt(a):>14s}{(fmt(b) if b is not None else 'n/a'):>14s}{ratio:>10s}")

    sec = lambda v: f"{v:.2f} s"  # noqa: E731
    row("load into a table", ours["load_s"], hta and hta["load_s"], sec, lambda a, b: b / a)
    row("full import into a store", store["load_s"], hta and hta["load_s"], sec, lambda a, b: b / a)
    row("peak memory, whole process", ours["peak_kib"], hta and hta["peak_kib"], _mib, lambda a, b: b / a)
    row("peak memory above libraries", ours["peak_kib"] - ours["base_kib"],
        hta and hta["peak_kib"] - hta["base_kib"], _mib, lambda a, b: b / a)
    row("  (full import into a store)", store["peak_kib"] - store["base_kib"],
        hta and hta["peak_kib"] - hta["base_kib"], _mib, lambda a, b: b / a)
    print(f"{'events kept':34s}{ours['events']:>14d}{(hta['events'] if hta else 0):>14d}")
    print(f"{'events/s (all read / load time)':34s}{ours['read'] / ours['load_s']:>14,.0f}"
          f"{(ours['read'] / hta['load_s'] if hta else 0):>14,.0f}")
    print("(ratio = HTA / ddltrace: how many times faster, or smaller, ddltrace is)")
    if hta:
        print("\ntemporal breakdown of GPU time (HTA's definition), percent of the GPU's active span:")
        worst = 0.0
        for rank, theirs in hta["breakdown"].items():
            mine = ours["breakdown"].get(rank)
            if mine is None:
                print(f"  rank {rank}: missing in ddltrace")
                continue
            for key in ("idle", "compute", "non_compute"):
                diff = mine[key] - theirs[key]
                worst = max(worst, abs(diff))
                print(f"  rank {rank} {key:12s} ddltrace {mine[key]:6.2f} %   HTA {theirs[key]:6.2f} %   "
                      f"difference {diff:+.2f} percentage points")
        print(f"  largest difference: {worst:.2f} percentage points (target: within 1)")


def synthetic(ranks: int = 8, events: int = 2_000_000) -> None:
    try:
        from orjson import dumps
    except ImportError:  # only writes the input; the stdlib is slower at it but makes the same bytes' meaning
        def dumps(obj):
            return json.dumps(obj, separators=(",", ":")).encode()

    per_rank = events // ranks
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "trace"
        folder.mkdir()
        names = ["aten::mm", "aten::add_", "ncclKernel_AllReduce_RING_LL_Sum_float", "Memcpy HtoD", "sgemm_128x64",
                 "c10d::allreduce_", "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"]
        for rank in range(ranks):
            ev = [{"ph": "X", "cat": "kernel" if i % 3 else "cpu_op", "name": names[i % len(names)],
                   "pid": 0 if i % 3 else 4242, "tid": 7 if i % 3 else 4243, "ts": 1700000000000000 + 2 * i,
                   "dur": 1 + i % 4, "args": {"External id": i, "correlation": i}} for i in range(per_rank)]
            (folder / f"rank{rank}.json").write_bytes(
                dumps({"distributedInfo": {"rank": rank, "world_size": ranks}, "traceEvents": ev}))
            del ev
        size = sum(p.stat().st_size for p in folder.iterdir())
        runs = {jobs: _child(sys.executable, _STORE_CHILD, str(Path(tmp) / f"store{jobs}"), str(folder),
                             "--jobs", str(jobs)) for jobs in (1, 2)}
        print(f"\nsynthetic: {ranks} ranks x {per_rank:,} events ({size / 2**20:.0f} MiB of JSON) imported into "
              "a store:")
        for jobs, run in runs.items():
            above = (run["peak_kib"] - run["base_kib"]) * 1024
            workers = (f"; each of the {jobs} reader processes at most {_mib(run['worker_peak_kib'])} "
                       f"({(run['worker_peak_kib'] - run['base_kib']) / 1024:.0f} MiB above libraries)"
                       if jobs > 1 else "")
            print(f"  --jobs {jobs}: {run['load_s']:.2f} s = {events / run['load_s']:,.0f} events/s; peak memory "
                  f"{_mib(run['peak_kib'])} ({above / 2**20:.0f} MiB above libraries = {above / per_rank:.0f} bytes "
                  f"per event of the largest rank held at once, {above / events:.0f} bytes per event of the whole "
                  f"folder){workers}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    parser.add_argument("--hta-python", type=Path, default=DEFAULT_HTA_PYTHON)
    parser.add_argument("--repeat", type=int, default=5, help="runs per tool; the fastest is shown (default 5)")
    parser.add_argument("--synthetic", action="store_true", help="also the 8-rank, 2M-event folder")
    args = parser.parse_args()
    if not args.trace.exists():
        raise SystemExit(f"{args.trace}: not found")
    os.environ.setdefault("PYTHONWARNINGS", "ignore")
    compare(args.trace, args.hta_python, args.repeat)
    if args.synthetic:
        synthetic()


if __name__ == "__main__":
    main()
