"""ddltrace against HTA on an 8-rank Kineto folder of ~1.73M events, end to end (issue 16).

    .venv/bin/python benchmarks/hta_multirank.py [--ranks 8] [--repeat 3] [--data /work/data/htascale] [--keep]

The folder (written before and outside any timing, into ``--data``, outside the repository; deleted at the end
unless ``--keep``): the real PyTorch trace ../shared/hta_traces/df_index_resolver (216,092 events: CPU ops,
``cudaLaunchKernel`` runtime events with correlation ids, kernels on CUDA streams with NCCL all-reduce kernels,
copies, ``ac2g`` flow events) written once per rank as ``rank<N>.json.gz``, each with its ``distributedInfo`` rank
set to N and ``world_size`` to the number of ranks, and every timestamp shifted by N microseconds; 8 ranks make
1.73M events, the size of HTA's research figures (19-35 s to load).

Timed, each in fresh processes (interpreter start and module imports included), fastest of ``--repeat``:

* ddltrace: ``ddltrace import FOLDER --out STORE --progress never`` then ``ddltrace analyze STORE --json --quiet``,
  the sum of both processes' wall times; peak RSS: the larger of the two processes (``wait4``);
* HTA 0.5.0: ``TraceAnalysis(trace_dir=FOLDER, include_last_profiler_step=True)`` (every step kept, as
  ddltrace does), from the process's start to the trace being loaded; peak RSS
  of that process or of its worker processes, whichever is larger (``VmHWM`` and ``RUSAGE_CHILDREN``, read right
  after loading).

Guard: the GPU kernels each tool kept (ddltrace: ``analyze --json``'s kernels per rank; HTA: rows of category
``kernel`` on a stream) must be equal, or the script exits 1.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from import_speed import DEFAULT_HTA_PYTHON, DEFAULT_TRACE, _ddltrace_command  # noqa: E402
from report_scale import run_child  # noqa: E402

_HTA_LOAD = r"""
import json, logging, resource, sys, time, warnings
warnings.simplefilter("ignore")
logging.disable(logging.CRITICAL)
from hta.trace_analysis import TraceAnalysis
analyzer = TraceAnalysis(trace_dir=sys.argv[1], include_last_profiler_step=True)
loaded = time.time()
peak = int(next(l for l in open("/proc/self/status") if l.startswith("VmHWM:")).split()[1])
peak = max(peak, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)  # its worker processes, if any
kernel = [i for i, name in enumerate(analyzer.t.symbol_table.get_sym_table()) if name == "kernel"]
kernels = {int(r): int((df["cat"].isin(kernel) & df["stream"].ne(-1)).sum()) for r, df in analyzer.t.traces.items()}
print(json.dumps({"loaded": loaded, "peak_kib": peak, "kernels": kernels,
                  "events": int(sum(len(df) for df in analyzer.t.traces.values()))}))
"""


def write_folder(folder: Path, ranks: int, trace: Path = DEFAULT_TRACE) -> int:
    """Write ``ranks`` copies of ``trace``, one per rank, rank set and timestamps shifted by the rank in µs;
    returns the events written in all."""
    doc = json.loads(gzip.open(trace).read())
    events = doc["traceEvents"]
    base = [e.get("ts") for e in events]
    folder.mkdir(parents=True, exist_ok=True)
    for rank in range(ranks):
        doc["distributedInfo"] = {**doc.get("distributedInfo", {}), "rank": rank, "world_size": ranks}
        for e, ts in zip(events, base, strict=True):
            if isinstance(ts, (int, float)):
                e["ts"] = ts + rank
        with gzip.open(folder / f"rank{rank}.json.gz", "wt", compresslevel=1) as out:
            json.dump(doc, out)
    return len(events) * ranks


def ours(folder: Path, store: Path) -> dict:
    """``ddltrace import`` then ``ddltrace analyze``, each a fresh process: wall (s), peak RSS (bytes), kernels."""
    shutil.rmtree(store, ignore_errors=True)
    cmd = _ddltrace_command()
    imp = run_child([*cmd, "import", str(folder), "--out", str(store), "--progress", "never"])
    ana = run_child([*cmd, "analyze", str(store), "--json", "--quiet"])
    return {"wall": imp["wall"] + ana["wall"], "import": imp["wall"], "analyze": ana["wall"],
            "rss": max(imp["rss"], ana["rss"]), "json": json.loads(ana["out"])}


def hta(folder: Path, python: Path) -> dict:
    started = time.time()
    done = subprocess.run([str(python), "-c", _HTA_LOAD, str(folder)], capture_output=True, text=True,
                          cwd=tempfile.gettempdir())
    if done.returncode:
        raise SystemExit(f"HTA failed:\n{done.stderr[-2000:]}")
    out = json.loads(done.stdout.strip().splitlines()[-1])
    out["kernels"] = {int(r): n for r, n in out["kernels"].items()}
    return {**out, "wall": out["loaded"] - started, "rss": out["peak_kib"] * 1024}


def our_kernels(report: dict) -> dict[int, int]:
    """GPU kernels per rank in ``analyze --json`` (compute and communication classes; copies and fills apart)."""
    kernels: dict[int, int] = {}
    for row in report["stores"][0]["gpu"]["kernel_classes"]:
        if row["class"] in ("compute", "comm"):
            kernels[row["rank"]] = kernels.get(row["rank"], 0) + row["kernels"]
    return kernels


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=3, help="runs per tool; the fastest is shown (default 3)")
    parser.add_argument("--data", type=Path, default=Path("/work/data/htascale"))
    parser.add_argument("--hta-python", type=Path, default=DEFAULT_HTA_PYTHON)
    parser.add_argument("--keep", action="store_true", help="keep the folder and store in --data")
    args = parser.parse_args()
    if not args.hta_python.exists():
        raise SystemExit(f"HTA not found at {args.hta_python}")
    folder, store = args.data / "trace", args.data / "store"
    events = write_folder(folder, args.ranks)
    size = sum(p.stat().st_size for p in folder.iterdir())
    load = os.getloadavg()
    try:
        runs_ours, runs_hta = [], []
        for _ in range(args.repeat):  # interleaved, so a busy spell on the machine hits both tools alike
            runs_ours.append(ours(folder, store))
            runs_hta.append(hta(folder, args.hta_python))
    finally:
        if not args.keep:
            shutil.rmtree(args.data, ignore_errors=True)
    a, b = min(runs_ours, key=lambda r: r["wall"]), min(runs_hta, key=lambda r: r["wall"])
    print(f"folder: {args.ranks} ranks x {events // args.ranks:,} events = {events:,} events "
          f"({size / 2**20:.0f} MiB of .json.gz), copies of {DEFAULT_TRACE.name}")
    print(f"machine: {os.cpu_count()} CPUs ({platform.machine()}, Python {platform.python_version()}), "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; load average {load[0]:.2f} before, "
          f"{os.getloadavg()[0]:.2f} after; fastest of {args.repeat}, fresh processes, imports included")
    print(f"  ddltrace import + analyze: {a['wall']:.2f} s (import {a['import']:.2f} s, analyze {a['analyze']:.2f} s)"
          f"; peak RSS {a['rss'] / 2**20:.0f} MiB (the larger process)")
    print(f"  HTA TraceAnalysis(trace_dir=..., include_last_profiler_step=True) load: {b['wall']:.2f} s; "
          f"peak RSS {b['rss'] / 2**20:.0f} MiB; "
          f"rows kept {b['events']:,}")
    print(f"  ratio HTA / ddltrace: time {b['wall'] / a['wall']:.1f} x, peak RSS {b['rss'] / a['rss']:.1f} x")
    mine, theirs = our_kernels(a["json"]), b["kernels"]
    print(f"  GPU kernels: ddltrace {sum(mine.values()):,}, HTA {sum(theirs.values()):,} "
          f"({'equal on every rank' if mine == theirs else 'DIFFERENT'})")
    if mine != theirs:
        print(f"  per rank: ddltrace {mine}, HTA {theirs}")
        sys.exit(1)


if __name__ == "__main__":
    main()
