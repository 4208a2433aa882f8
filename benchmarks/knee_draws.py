"""What drawing the knee's interval costs: ``model fit`` and ``model predict --profile`` on the committed samples.

Run: ``.venv/bin/python benchmarks/knee_draws.py [--old REPO] [--repeats 3]``

For each command (the closed loop and its ``--cpu-shares`` variant fitted on ``sample_traces/ps-sgd-quota``'s A runs
with A.json; that model carried to B.json, to B.json with its uncertainties ten times, to A.json; the max and the
closed loop fitted on ``sample_traces/ps-sgd``'s par-w1..8 with A.json, carried to B.json) it prints the seconds
spent in the knee's interval (``HashemiFit._knee_interval``, ``model._knee_interval_on_b``: 2,000 draws) and in the
whole command after the CLI's imports, the fastest of ``--repeats`` fresh processes, with the 1-minute load average
before each command (the machine is shared: the figures move with it). ``--old REPO``: a checkout with its own
``.venv`` (``git worktree add /tmp/old COMMIT && make -C /tmp/old install``), timed alternately with this one, and
every interval of both printed, which must be the same.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "sample_traces"
QUOTA = SAMPLES / "ps-sgd-quota"

#: Run inside each fresh process: the command, with the knee's interval timed; prints its seconds, the command's
#: seconds and the intervals it found.
PROBE = """
import contextlib, io, json, sys, time
from ddltrace.analyses import fit_hashemi
from ddltrace.cli import main
from ddltrace.commands import model
spent, found = [], []
def timed(fn):
    def wrapper(*args, **kwargs):
        t0 = time.perf_counter()
        try:
            out = fn(*args, **kwargs)
        finally:
            spent.append(time.perf_counter() - t0)
        found.append(out.get("ci") if isinstance(out, dict) else out)
        return out
    return wrapper
fit_hashemi.HashemiFit._knee_interval = timed(fit_hashemi.HashemiFit._knee_interval)
model._knee_interval_on_b = timed(model._knee_interval_on_b)
t0 = time.perf_counter()
with contextlib.redirect_stdout(io.StringIO()):
    code = main(sys.argv[1:])
print(json.dumps({"knee_s": sum(spent), "command_s": time.perf_counter() - t0, "code": code,
                  "intervals": [list(x) if x else None for x in found]}))
"""


def uncertain(scale: float, source: Path, path: Path) -> Path:
    """``source``'s profile with every uncertainty (constants and the compute curves' spreads) ``scale`` times."""
    b = json.loads(source.read_text())
    for entry in b["constants"].values():
        if isinstance(entry, dict) and "uncertainty" in entry:
            entry["uncertainty"] *= scale
    for curve in b["curves"].values():
        for point in curve["points"]:
            for key in ("spread", "cpu_spread"):
                if key in point:
                    point[key] *= scale
    path.write_text(json.dumps(b))
    return path


def _commands(work: Path) -> dict[str, list[str]]:
    quota_a = [str(QUOTA / f"A-compute-w{w}" / "store") for w in (1, 2, 4)]
    par = [str(SAMPLES / "ps-sgd" / f"par-w{w}" / "store") for w in (1, 2, 4, 8)]
    fit = ["--dnn", "mlp-2-10k-2", "--servers", "1", "--profile", str(QUOTA / "A.json"), "--serial-comm"]
    plain, par_model, par_loop = (str(work / f"{name}.json") for name in ("plain", "par", "par-loop"))
    vague = uncertain(10.0, QUOTA / "B.json", work / "B-vague.json")
    return {
        "fit closed loop": ["model", "fit", *quota_a, *fit, "--out", plain],
        "fit --cpu-shares": ["model", "fit", *quota_a, *fit, "--cpu-shares", "--out", str(work / "shares.json")],
        "fit par (max)": ["model", "fit", *par, "--dnn", "mlp-2-10k-2", "--profile", str(QUOTA / "A.json"),
                          "--out", par_model],
        "fit par closed loop": ["model", "fit", *par, "--dnn", "mlp-2-10k-2", "--profile", str(QUOTA / "A.json"),
                                "--serial-comm", "--out", par_loop],
        "predict on B": ["model", "predict", plain, "--workers", "1,2,4", "--profile", str(QUOTA / "B.json")],
        "predict on B x10": ["model", "predict", plain, "--workers", "1,2,4", "--profile", str(vague)],
        "predict on A as B": ["model", "predict", plain, "--workers", "1,2,4", "--profile", str(QUOTA / "A.json")],
        "predict par on B": ["model", "predict", par_model, "--workers", "1,4,16", "--profile",
                             str(QUOTA / "B.json")],
        "predict par closed loop on B": ["model", "predict", par_loop, "--workers", "1,4,16", "--profile",
                                         str(QUOTA / "B.json")],
    }


def _probe(repo: Path, argv: list[str]) -> dict:
    done = subprocess.run([str(repo / ".venv" / "bin" / "python"), "-c", PROBE, *argv], capture_output=True,
                          text=True, check=True, cwd=repo)  # (python -c imports from its working directory first)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", type=Path, help="a checkout with its own .venv to compare with")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    repos = {"old": args.old, "new": ROOT} if args.old else {"new": ROOT}
    with tempfile.TemporaryDirectory() as tmp:
        for name, argv in _commands(Path(tmp)).items():
            load = os.getloadavg()[0]
            runs: dict[str, list[dict]] = {side: [] for side in repos}
            for _ in range(args.repeats):
                for side, repo in repos.items():
                    runs[side].append(_probe(repo, argv))
            cells = []
            for side, got in runs.items():
                if any(r["code"] != 0 for r in got):
                    print(f"{name}: {side} exited {got[0]['code']}", file=sys.stderr)
                    return 1
                cells.append(f"{side}: knee interval {min(r['knee_s'] for r in got):.3f} s, command "
                             f"{min(r['command_s'] for r in got):.2f} s, intervals {got[0]['intervals']}")
            same = len({json.dumps(r["intervals"]) for side in runs.values() for r in side}) == 1
            print(f"{name} (load {load:.2f}): " + "; ".join(cells) + ("" if same else "  INTERVALS DIFFER"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
