"""Where ``ddltrace analyze FOLDER --json --quiet`` spends its time after its module imports, part by part, in two
checkouts: CPU time of this process (or wall time), in-process, fastest of N runs after one run that warms up.

    .venv/bin/python benchmarks/analyze_parts.py --old OLD_CHECKOUT [--repeat N] [--wall] [FOLDER ...]

Parts (ms): ``read`` (the trace imported into the temporary store, this process's part of it), ``analyze_store``,
``detect`` (the findings, with the analyses they compute first), ``to_json`` (the value printed, ``gpu_json`` of it
the GPU section's), ``json_text`` (the text: ``json.dumps`` before ``ddltrace/json_output.py``, its ``encode``
since), ``launch`` (the launch statistics: ``launch_pairs``, ``launch_stats``, ``worst_launches`` of
``analyses/gpu_launch.py``, as benchmarks/gpu_vs_hta.py times them alone), ``queue`` (the queue length:
``queue_length_series``, ``queue_summary``), ``main`` (the whole ``cli.main`` call). The checkouts run
alternately, each in a fresh process with its checkout first on ``PYTHONPATH`` (its ``analyses/`` and
``collectors/`` included; same interpreter and libraries).
Default folders: the 7 HTA traces of benchmarks/gpu_vs_hta.py, each copied alone into a folder as that benchmark
does. CPU time is the default: on this shared 2-core machine wall times vary with the other jobs, the process's own
CPU time much less (the temporary store's fsyncs, waiting on the disk, are seen only with ``--wall``). """

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_vs_hta import DEFAULT_TRACES, SHARED  # noqa: E402

PARTS = ("read", "analyze_store", "detect", "to_json", "gpu_json", "json_text", "launch", "queue", "main")

#: Run in the measured process: wraps the parts' functions, runs the command, prints each part's fastest time.
_CHILD = r"""
import contextlib, io, json, os, sys, time
import ddltrace
if os.environ.get("PYTHONPATH"):  # the checkout's analyses/ and collectors/ too (mapped by setup.py)
    ddltrace.__path__.append(os.environ["PYTHONPATH"])
import ddltrace.commands.analyze as analyze, ddltrace.gpu_section as gpu, ddltrace.trace_inputs as inputs
import ddltrace.analyses.gpu_launch as launch, ddltrace.analyses.gpu_queue as queue
clock = time.perf_counter if os.environ.get("PARTS_WALL") else time.process_time
spent = {}
def timed(owner, name, part):
    real = getattr(owner, name)
    def wrapper(*a, **k):
        t = clock()
        try:
            return real(*a, **k)
        finally:
            spent[part] = spent.get(part, 0.0) + clock() - t
    setattr(owner, name, wrapper)
for owner, name, part in ((inputs, "_import", "read"), (analyze, "analyze_with_progress", "analyze_store"),
                          (analyze, "detect", "detect"), (analyze, "to_json", "to_json"),
                          (gpu, "gpu_json", "gpu_json"), (launch, "launch_pairs", "launch"),
                          (launch, "launch_stats", "launch"), (launch, "worst_launches", "launch"),
                          (queue, "queue_length_series", "queue"), (queue, "queue_summary", "queue")):
    timed(owner, name, part)
if not hasattr(analyze, "json"):
    import ddltrace.json_output
    timed(ddltrace.json_output, "encode", "json_text")
else:  # before json_output: the text was json.dumps(..., allow_nan=False)
    dumps = json.dumps
    def timed_dumps(*a, **k):
        t = clock()
        text = dumps(*a, **k)
        if k.get("allow_nan") is False:
            spent["json_text"] = spent.get("json_text", 0.0) + clock() - t
        return text
    json.dumps = timed_dumps
from ddltrace import cli
best = {}
for i in range(int(sys.argv[2]) + 1):
    spent.clear()
    t = clock()
    with contextlib.redirect_stdout(io.StringIO()):
        cli.main(["analyze", sys.argv[1], "--json", "--quiet"])
    spent["main"] = clock() - t
    if i:
        best = {k: min(best.get(k, v), v) for k, v in spent.items()}
print(json.dumps(best))
"""


def parts(folder: Path, pythonpath: str | None, repeat: int, wall: bool) -> dict[str, float]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PARTS_WALL")}
    env.update({"PYTHONPATH": pythonpath} if pythonpath else {})
    env.update({"PARTS_WALL": "1"} if wall else {})
    done = subprocess.run([sys.executable, "-c", _CHILD, str(folder), str(repeat)], capture_output=True, text=True,
                          env=env, cwd=tempfile.gettempdir(), check=True)
    return __import__("json").loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--old", required=True, help="checkout of the ddltrace to compare with (its root folder)")
    p.add_argument("--repeat", type=int, default=5, help="runs of the command in each process (the fastest kept)")
    p.add_argument("--wall", action="store_true", help="wall time instead of this process's CPU time")
    p.add_argument("folders", nargs="*", help="trace folders (default: the 7 HTA traces)")
    args = p.parse_args()
    old = str(Path(args.old).resolve())
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; "
          f"{'wall' if args.wall else 'CPU'} time (ms), fastest of {args.repeat}")
    print(f"{'folder':36} {'':4}" + "".join(f"{part:>14}" for part in PARTS))
    totals = {"old": dict.fromkeys(PARTS, 0.0), "new": dict.fromkeys(PARTS, 0.0)}
    with tempfile.TemporaryDirectory() as tmp:
        folders = [Path(f).resolve() for f in args.folders]
        for name in DEFAULT_TRACES if not folders else ():
            job = Path(tmp) / name.replace("/", "-")
            job.mkdir()
            for f in (SHARED / name).glob("*.json*"):
                shutil.copy(f, job / f.name)
            folders.append(job)
        for folder in folders:
            for label, path in (("old", old), ("new", None)):
                got = parts(folder, path, args.repeat, args.wall)
                print(f"{folder.name:36} {label:4}" + "".join(f"{got.get(k, 0.0) * 1000:14.1f}" for k in PARTS),
                      flush=True)
                for k in PARTS:
                    totals[label][k] += got.get(k, 0.0)
    for label, total in totals.items():
        print(f"{'all':36} {label:4}" + "".join(f"{total[k] * 1000:14.1f}" for k in PARTS))
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
