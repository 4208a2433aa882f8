"""Two runs compared name by name: ``ddltrace diff`` against HTA's ``TraceDiff`` on HTA's own pair of traces.

    .venv/bin/python benchmarks/trace_diff_vs_hta.py [--hta-python PY] [--repeat N] [CONTROL_DIR TEST_DIR]

Default pair: ../shared/hta_traces/trace_diff/control and test (one rank each of a recommendation model's training,
before and after a change; the pair HTA's own tests diff). Each tool runs in a fresh process, module imports
included, ``--repeat`` times alternately (default 3), and the fastest of each is kept:

* HTA (its venv, ``make hta``): ``LabeledTrace`` of each folder (the trace read), ``TraceDiff.compare_traces`` (the
  table: counts and total durations per name) and ``TraceDiff.ops_diff`` (the names per change; it computes the
  table again), with HTA's defaults: the first rank, its first iteration, CPU operators and GPU kernels;
* ddltrace: ``ddltrace diff CONTROL TEST --json --quiet`` (both traces imported into temporary stores, the same
  window, the table and the changes in one).

Then each process's own steps (HTA: imports, reading, compare_traces, ops_diff; ddltrace: its wall time only) and
whether the two agree: the names, every count and summed duration, and the names per change.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_vs_hta import DDLTRACE, DEFAULT_HTA_PYTHON, SHARED, compile_ddltrace  # noqa: E402

#: HTA's side, timed step by step in its process (argv: control folder, test folder, and the device type, ALL by
#: default, CPU or GPU: tests/hta_reference.py runs it for each).
HTA_CHILD = r"""
import time
t0 = time.perf_counter(); steps = {}
def lap(name):
    global t0
    now = time.perf_counter(); steps[name], t0 = now - t0, now
import json, logging, sys
logging.disable(logging.WARNING)
from hta.trace_diff import DeviceType, LabeledTrace, TraceDiff
lap("imports")
device = DeviceType[sys.argv[3] if len(sys.argv) > 3 else "ALL"]
control, test = LabeledTrace(label="c", trace_dir=sys.argv[1]), LabeledTrace(label="t", trace_dir=sys.argv[2])
lap("read")
table = TraceDiff.compare_traces(control, test, device_type=device)
lap("compare_traces")
changes = TraceDiff.ops_diff(control, test, device_type=device)
lap("ops_diff")
names = {str(n): [int(r["c_counts"]), int(r["t_counts"]), float(r["c_total_duration"]), float(r["t_total_duration"])]
         for n, r in table.iterrows()}
print(json.dumps({"steps": steps, "names": names, "changes": changes}))
"""


def _timed(argv: list[str]) -> tuple[float, str]:
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, cwd=tempfile.gettempdir())
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{argv[0]} failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    return wall, done.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("pair", nargs="*", help="control and test folders of Kineto traces (default: HTA's pair)")
    parser.add_argument("--hta-python", type=Path, default=DEFAULT_HTA_PYTHON)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    pair = [Path(p) for p in args.pair] or [SHARED / "trace_diff" / "control", SHARED / "trace_diff" / "test"]
    if len(pair) != 2:
        raise SystemExit("give two folders, the control's and the test's")
    if not args.hta_python.exists():
        raise SystemExit(f"HTA not found at {args.hta_python}: make it with 'make hta'")
    print(compile_ddltrace())
    with tempfile.TemporaryDirectory() as tmp:
        folders = []
        for folder, side in zip(pair, ("control", "test"), strict=True):  # each alone (HTA reads a whole folder)
            folders.append(Path(tmp) / side)
            folders[-1].mkdir()
            for f in folder.glob("*.json*"):
                shutil.copy(f, folders[-1] / f.name)
        load_before = os.getloadavg()[0]
        ours, theirs = [], []
        for _ in range(args.repeat):
            wall, out = _timed([str(DDLTRACE), "diff", *map(str, folders), "--json", "--quiet"])
            ours.append((wall, json.loads(out)))
            wall, out = _timed([str(args.hta_python.absolute()), "-c", HTA_CHILD, *map(str, folders)])
            theirs.append((wall, json.loads(out.strip().splitlines()[-1])))
        load_after = os.getloadavg()[0]
    (mine_s, mine), (hta_s, hta) = min(ours, key=lambda x: x[0]), min(theirs, key=lambda x: x[0])
    print(f"pair: {pair[0]} -> {pair[1]}")
    print(f"end to end, fastest of {args.repeat} fresh processes each (module imports included): ddltrace diff "
          f"{mine_s:.2f} s, HTA compare_traces + ops_diff {hta_s:.2f} s, HTA / ddltrace {hta_s / mine_s:.1f}x "
          f"(load average {load_before:.1f} before, {load_after:.1f} after, {os.cpu_count()} CPUs)")
    print("  HTA's process (s): " + ", ".join(f"{k} {v:.2f}" for k, v in hta["steps"].items())
          + f", interpreter {hta_s - sum(hta['steps'].values()):.2f}")
    names = {r["name"]: [r["control_count"], r["test_count"], r["control_ns"] / 1e3, r["test_ns"] / 1e3]
             for r in mine["names"]}
    same_changes = all(sorted(r["name"] for r in mine["names"] if r["change"] == change) == sorted(listed)
                       for change, listed in hta["changes"].items())
    differing = sum(names.get(n) != v for n, v in hta["names"].items()) + len(set(names) - set(hta["names"]))
    print(f"figures: {len(names)} names (HTA {len(hta['names'])}), {differing} with another count or total duration "
          f"(µs), changes {'the same' if same_changes else 'DIFFERENT'}: "
          + ", ".join(f"{change} {len(listed)}" for change, listed in hta["changes"].items()))


if __name__ == "__main__":
    main()
