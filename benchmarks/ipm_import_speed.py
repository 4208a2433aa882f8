"""IPM import speed: a full ``ddltrace import`` of an IPM XML profile against ElementTree parsing the same file.

    .venv/bin/python benchmarks/ipm_import_speed.py [--trace FILE] [--repeat N] [--before COMMIT]

Every figure is the wall time of a fresh Python process (interpreter start and module imports included), the
fastest of ``--repeat`` runs, ddltrace and the reference interleaved so that a busy spell on the machine hits
both alike; beside it the process's CPU time (user + system, the fastest run's), which moves less with the
machine's other work:

- ours: ``python -m ddltrace import FILE --out STORE --progress never``, the whole command;
- reference: ``python -c "ElementTree.parse(FILE)"``, the file parsed into a tree and nothing else (issue 20,
  item 11 takes this as the floor: an import that reads the file once cannot be much faster);
- their ratio, and the inner figures of one more fresh import process (timers around the command's phases):
  module imports, reading the XML into per-rank timelines, writing the ranks into the store (validation and
  Parquet), clock alignment, the rest (manifest, summary), and store writing per rank.

``--before COMMIT`` measures the same figures for ddltrace as it was at COMMIT (its tree exported with
``git archive`` into a temporary folder and put first on the children's PYTHONPATH), interleaved with this
tree's runs, and prints the speed-up: the figure the issue asks for.

The issue's file is the 168-rank, 1.8 MB profile ``pin1008.xml`` (PARTISN, 42 hosts) of github.com/raptox/ipm-hpc-v2
at 186292a (MIT): ``git -C CLONE show 186292a:ipm_raw/pin1008.xml > pin1008.xml``, then ``--trace pin1008.xml``.
Without ``--trace``: the first of :data:`CANDIDATES` that exists (the 64-rank ipm_hunold_1494937738 of the
shared wild traces is the last).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from shared_traces import SHARED  # noqa: E402

CANDIDATES = [SHARED / "mpi_traces" / "ipm-xml" / "pin1008.xml",
              SHARED / "wild_traces" / "ipm_hunold_1494937738" / "hunold.1494937738.200810.ipm.xml"]

_REFERENCE = "import sys, xml.etree.ElementTree as ET; ET.parse(sys.argv[1])"

#: One import with timers around its phases (monkeypatched from outside: the command itself is unchanged).
_PHASES_CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
from ddltrace.cli import build_parser
try:
    parser = build_parser("import")  # what `ddltrace import` builds: that verb only
except TypeError:  # a tree from before the verb-only parser
    parser = build_parser()
from ddltrace.collectors.importers import get_importer
from ddltrace.commands import import_trace
import ddltrace.store  # the modules the command imports as it runs
t1 = time.perf_counter()
spent = {"read": 0.0, "store": 0.0, "align": 0.0}

def timed(phase, function):
    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            spent[phase] += time.perf_counter() - start
    return wrapper

ipm = get_importer("ipm")
plain_read = ipm.read
def read(path, ctx):  # the importer's generator, timed at each part it yields
    parts = plain_read(path, ctx)
    while True:
        start = time.perf_counter()
        try:
            part = next(parts)
        except StopIteration:
            spent["read"] += time.perf_counter() - start
            return
        spent["read"] += time.perf_counter() - start
        yield part
object.__setattr__(ipm, "read", read)
import_trace._add = timed("store", import_trace._add)
import_trace._align_clocks = timed("align", import_trace._align_clocks)
args = parser.parse_args(["import", sys.argv[2], "--out", sys.argv[1], "--progress", "never"])
import contextlib, io
with contextlib.redirect_stdout(io.StringIO()):
    code = args.func(args)
t2 = time.perf_counter()
ranks = len(json.load(open(sys.argv[1] + "/manifest.json"))["ranks"])
print(json.dumps({"code": code, "modules_s": t1 - t0, "run_s": t2 - t1, "ranks": ranks, **spent}))
"""


def _wall(command: list[str], env: dict | None = None) -> tuple[float, float]:
    """Seconds of wall time and of CPU time (user + system) of ``command`` in a fresh process (it must
    succeed). The CPU time moves less with the other work on the machine than the wall time does."""
    cpu = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    result = subprocess.run(command, capture_output=True, text=True, cwd=tempfile.gettempdir(), env=env)
    elapsed = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(command[:4])} ... failed:\n{result.stderr[-3000:]}")
    return elapsed, after.ru_utime + after.ru_stime - cpu.ru_utime - cpu.ru_stime


def _phases(trace: Path, store: Path, env: dict | None = None) -> dict:
    result = subprocess.run([sys.executable, "-c", _PHASES_CHILD, str(store), str(trace)], capture_output=True,
                            text=True, cwd=tempfile.gettempdir(), env=env)
    if result.returncode != 0:
        raise SystemExit(f"phase-timing child failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def _tree_env(commit: str, folder: Path) -> dict:
    """An environment whose Python imports ddltrace from ``commit``'s tree, exported into ``folder`` (the
    installed layout: collectors/ and analyses/ inside ddltrace/)."""
    root = Path(__file__).resolve().parents[1]
    archive = subprocess.run(["git", "-C", str(root), "archive", commit], capture_output=True, check=True).stdout
    folder.mkdir()
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive, check=True)
    for name in ("collectors", "analyses"):
        (folder / "ddltrace" / name).symlink_to(folder / name)
    return {**os.environ, "PYTHONPATH": str(folder)}


def _measure(trace: Path, work: Path, repeat: int, envs: dict[str, dict | None]) -> dict[str, dict]:
    """Per tree (None: this one), the fastest whole import, the fastest reference parse and the phases of the
    fastest phase-timed import, over ``repeat`` interleaved rounds."""
    runs = {label: {"ours": [], "reference": [], "phases": []} for label in envs}
    for i in range(repeat):
        for label, env in envs.items():
            store = work / f"{label}-s{i}"
            runs[label]["ours"].append(_wall([sys.executable, "-m", "ddltrace", "import", str(trace), "--out",
                                              str(store), "--progress", "never"], env))
            runs[label]["reference"].append(_wall([sys.executable, "-c", _REFERENCE, str(trace)], env))
            runs[label]["phases"].append(_phases(trace, work / f"{label}-p{i}", env))
            shutil.rmtree(store)
    return {label: {"ours": min(r["ours"]), "reference": min(r["reference"]),
                    "ours_cpu": min(c for _, c in r["ours"]), "reference_cpu": min(c for _, c in r["reference"]),
                    "phases": min(r["phases"], key=lambda p: p["modules_s"] + p["run_s"])}
            for label, r in runs.items()}


def _report(label: str, figures: dict, repeat: int) -> None:
    (best, _), (ref, _), p = figures["ours"], figures["reference"], figures["phases"]
    best_cpu, ref_cpu = figures["ours_cpu"], figures["reference_cpu"]
    print(f"\n{label}: wall time of a fresh process, fastest of {repeat} (interpreter start and module imports "
          "included):")
    print(f"  ddltrace import (the whole command)       {best:6.2f} s   (CPU time, fastest: {best_cpu:.2f} s)")
    print(f"  ElementTree parse of the file (reference) {ref:6.2f} s   (CPU time, fastest: {ref_cpu:.2f} s)")
    print(f"  ratio ddltrace / ElementTree              {best / ref:6.1f} x   (CPU time: {best_cpu / ref_cpu:.1f} x)")
    rest = p["run_s"] - p["read"] - p["store"] - p["align"]
    print(f"  inside one import process (the fastest of {repeat}; seconds of wall time):")
    print(f"    module imports (ddltrace, numpy, pyarrow, ...)  {p['modules_s']:6.2f} s")
    print(f"    reading the XML into per-rank timelines         {p['read']:6.2f} s")
    print(f"    handing the ranks to the store (writing, or     {p['store']:6.2f} s"
          f" = {1e3 * p['store'] / p['ranks']:.1f} ms per rank ({p['ranks']} ranks)")
    print("       holding the small ones for one shared file)")
    print(f"    clock alignment                                 {p['align']:6.2f} s")
    print(f"    the rest (staging, rules, the shared file of    {rest:6.2f} s")
    print("       small ranks, manifest, summary)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trace", type=Path, help="an IPM XML profile (default: the first of "
                        + ", ".join(map(str, CANDIDATES)) + " that exists)")
    parser.add_argument("--repeat", type=int, default=5, help="fresh processes per figure; the fastest is shown")
    parser.add_argument("--before", metavar="COMMIT", help="also measure ddltrace at COMMIT, for the speed-up")
    args = parser.parse_args()
    trace = args.trace or next((p for p in CANDIDATES if p.exists()), None)
    if trace is None or not trace.exists():
        print(f"no IPM profile found ({args.trace or ', '.join(map(str, CANDIDATES))}): nothing measured")
        return
    tasks = trace.read_bytes().count(b"<task ")
    load = os.getloadavg()
    print(f"trace: {trace} ({trace.stat().st_size / 1e6:.2f} MB, {tasks} <task> elements = ranks)")
    print(f"machine: {os.cpu_count()} CPUs, load average {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} "
          "(1 / 5 / 15 min) at the start")
    with tempfile.TemporaryDirectory() as tmp:
        envs = {"this tree": None}
        if args.before:
            envs = {f"before ({args.before})": _tree_env(args.before, Path(tmp) / "before"), **envs}
        figures = _measure(trace, Path(tmp), args.repeat, envs)
    for label, figure in figures.items():
        _report(label, figure, args.repeat)
    if args.before:
        (before, _), (after, _) = (figures[label]["ours"] for label in envs)
        before_cpu, after_cpu = (figures[label]["ours_cpu"] for label in envs)
        print(f"\nspeed-up of the whole command: {before:.2f} s before / {after:.2f} s now = {before / after:.1f} x "
              f"wall time; CPU time {before_cpu:.2f} s / {after_cpu:.2f} s = {before_cpu / after_cpu:.1f} x")
    print(f"load average at the end: {os.getloadavg()[0]:.1f} (1 min)")


if __name__ == "__main__":
    main()
