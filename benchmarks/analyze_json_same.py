"""``ddltrace analyze --json`` of two checkouts of ddltrace: the same output, and the time of each.

    .venv/bin/python benchmarks/analyze_json_same.py --old OLD_CHECKOUT [--repeat N] [INPUT ...]

For a change that should only make ``analyze --json`` faster: runs ``ddltrace analyze INPUT --json --quiet`` with
this checkout's ddltrace and with the one at ``OLD_CHECKOUT`` (a ``git worktree add /tmp/old <commit>``; put first
on ``PYTHONPATH``, its ``analyses/`` and ``collectors/`` included, same interpreter and libraries), in fresh
processes, and says for each input whether the two outputs parse to the same value and whether their texts are the
same byte for byte; with ``--repeat N``, the fastest of N wall times of each (s, the whole process: start-up, module
imports, reading, analyses, JSON; the two checkouts' runs alternated). Both checkouts' modules are compiled to their
bytecode cache first (see benchmarks/gpu_vs_hta.py).

Default inputs: the GPU traces benchmarks/gpu_vs_hta.py compares with HTA (each trace's files copied alone into a
folder of its own, as that benchmark does; the folder imported into a temporary store by the command), three
sample stores of the parameter-server job and five framework traces of tests/data (gloo collectives, Horovod, MXNet,
TensorFlow; all copied, so that nothing is written beside the shipped ones). Exits 1
when an output differs. The load average is printed before and after: the times vary with the machine's other jobs.
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_vs_hta import DEFAULT_TRACES, SHARED  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_STORES = ["ps-sgd/par-w4/store", "ps-sgd/seq-w8/store", "ps-sgd/server-saturated-w4/store"]
#: Committed framework traces (tests/data/README.md): gloo collectives, Horovod, MXNet, TensorFlow.
DEFAULT_FRAMEWORKS = ["torch_gloo_collectives", "torch_gloo_shapes", "horovod_gloo", "mxnet_dist_sync", "tf2_profile"]


def inputs(names: list[str], tmp: Path) -> list[Path]:
    """The folders to analyse: named ones as they are, else copies of the default traces and sample stores."""
    if names:
        return [Path(n).resolve() for n in names]
    out = []
    for name in DEFAULT_TRACES:
        job = tmp / name.replace("/", "-")
        job.mkdir()
        for f in (SHARED / name).glob("*.json*"):
            shutil.copy(f, job / f.name)
        out.append(job)
    for name in DEFAULT_STORES:
        copy = tmp / name.replace("/", "-")
        shutil.copytree(ROOT / "sample_traces" / name, copy)
        out.append(copy)
    for name in DEFAULT_FRAMEWORKS:
        shutil.copytree(ROOT / "tests" / "data" / name, tmp / name)
        out.append(tmp / name)
    return out


#: Starts ddltrace's command line, with ``ddltrace.analyses`` and ``ddltrace.collectors`` (the checkout's top-level
#: ``analyses/`` and ``collectors/``, mapped by setup.py) taken from the checkout first on ``PYTHONPATH`` too, not
#: from the editable install's mapping to this checkout.
OWN_PACKAGES = ("import os, sys, ddltrace; root = os.environ.get('PYTHONPATH'); "
                "root and ddltrace.__path__.append(root); from ddltrace.cli import command; command()")


def analyze(path: Path, pythonpath: str | None) -> tuple[float, str]:
    """Wall time (s) and stdout of ``ddltrace analyze PATH --json --quiet`` in a fresh process."""
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", OWN_PACKAGES, "analyze", str(path), "--json", "--quiet"],
                          capture_output=True, text=True, env=env, cwd=tempfile.gettempdir())
    wall = time.perf_counter() - t0
    if done.returncode:
        sys.exit(f"{path}: exit {done.returncode}: {done.stderr.strip()[-500:]}")
    return wall, done.stdout


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--old", required=True, help="checkout of the ddltrace to compare with (its root folder)")
    p.add_argument("--repeat", type=int, default=1, help="runs of each command; the fastest is printed")
    p.add_argument("inputs", nargs="*", help="trace folders or stores (default: see the module's docstring)")
    args = p.parse_args()
    old = str(Path(args.old).resolve())
    for checkout in (old, str(ROOT)):  # as benchmarks/gpu_vs_hta.py does: no process compiles them again
        for folder in ("ddltrace", "analyses", "collectors"):
            compileall.compile_dir(Path(checkout) / folder, quiet=1)
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    differ = 0
    with tempfile.TemporaryDirectory() as tmp:
        print(f"{'input':42} {'parsed':>7} {'text':>7} {'old s':>7} {'new s':>7}")
        for path in inputs(args.inputs, Path(tmp)):
            runs = [analyze(path, checkout) for _ in range(args.repeat) for checkout in (old, None)]  # alternated
            old_runs, new_runs = runs[0::2], runs[1::2]
            same = json.loads(old_runs[0][1]) == json.loads(new_runs[0][1])
            text = old_runs[0][1] == new_runs[0][1]
            differ += not same
            print(f"{path.name:42} {'same' if same else 'DIFFER':>7} {'same' if text else 'differ':>7} "
                  f"{min(w for w, _ in old_runs):7.3f} {min(w for w, _ in new_runs):7.3f}", flush=True)
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    sys.exit(1 if differ else 0)


if __name__ == "__main__":
    main()
