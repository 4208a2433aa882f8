"""Make the ps-sgd sample traces: run the shipped job under ``ddltrace run`` in each configuration.

Usage: ``python scripts/make_sample_traces.py [OUT] [--only NAME ...]`` (OUT defaults to sample_traces/ps-sgd).
Each configuration becomes OUT/NAME/ with ``store/`` (the trace store) and the job's ground truth beside it
(ground_truth.json, gradients.csv, updates.csv, steps.csv, init.csv, loss.csv). sample_traces/README.md says
what each should show. Compute is emulated (c_p = 200 us per sample) so that this 2-core machine does not
decide the scaling; the data set (16384 samples, seed 0) is written to a temporary folder and not kept.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
COMMON = ["--compute", "emulated", "--sample-time", "200e-6", "--epochs", "2", "--read-delay", "0.005"]

# name -> (workers, extra options)
CONFIGS = {
    **{f"seq-w{w}": (w, ["--init", "sequential"]) for w in (1, 2, 4, 8)},
    **{f"par-w{w}": (w, ["--init", "parallel"]) for w in (1, 2, 4, 8)},
    "server-saturated-w4": (4, ["--init", "parallel", "--server-cost", "0.002"]),
    "straggler-w4": (4, ["--init", "parallel", "--straggler", "2", "--slowdown", "4"]),
    "hardsync-w4": (4, ["--init", "parallel", "--sync", "hardsync"]),
    "softsync2-w4": (4, ["--init", "parallel", "--sync", "softsync", "2"]),
}


def make(out: Path, names: list[str]) -> None:
    ddltrace = [sys.executable, "-m", "ddltrace"]
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "ps_sgd_data_16384_0.tsv"
        for name in names:
            workers, options = CONFIGS[name]
            folder = out / name
            if folder.exists():
                shutil.rmtree(folder)
            cmd = [*ddltrace, "workload", "ps-sgd", "--trace", "--workers", str(workers), "--out", str(folder),
                   "--data", str(data), *COMMON, *options]
            print(f"== {name}: {' '.join(cmd[2:])}", flush=True)
            subprocess.run(cmd, check=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", nargs="?", default=str(REPO / "sample_traces" / "ps-sgd"), help="output folder")
    parser.add_argument("--only", nargs="+", choices=sorted(CONFIGS), help="make only these configurations")
    args = parser.parse_args(argv)
    make(Path(args.out), args.only or list(CONFIGS))
    return 0


if __name__ == "__main__":
    sys.exit(main())
