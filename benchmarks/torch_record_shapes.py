"""Cost of ``--record-shapes`` (torch.profiler's ``record_shapes``) on a real 2-rank gloo job.

The job (:data:`JOB`: the DistributedDataParallel training of tests/frameworks/jobs/torch_ddp.py, gloo on
127.0.0.1, 2 processes under torchrun, one thread each) writes the wall time and the process CPU time
(``time.process_time``: all its threads, gloo's included) of each training step. It runs under
``ddltrace run --framework pytorch --steps 3-14`` with and without ``--record-shapes``, alternating, REPEAT times
per shape of the model, so the profiler is on in both cases and only the shapes differ. Per run: the median over
the 12 profiled steps of both ranks; per case: the median and the minimum over the runs (the minimum is the run
least disturbed by other load on the machine). The overhead is (with - without) / without, of the wall time and of
the CPU time (the profiler's work per op is CPU time, which other processes on a busy machine disturb less than
the wall time). The PyTorch venv is ``.venvs/torch`` (``make test-frameworks``).

    .venv/bin/python benchmarks/torch_record_shapes.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TORCH_PYTHON = ROOT / ".venvs" / "torch" / "bin" / "python"
#: (label, the job's arguments): the default model of the framework tests, and a small one where the profiler's
#: per-op cost weighs most against the step
SHAPES = [("2x512 wide, batch 512", ["--width", "512", "--batch", "512"]),
          ("2x128 wide, batch 32", ["--width", "128", "--batch", "32"])]
WINDOW = (3, 14)
#: Runs of one case before giving up: torch 2.13's gloo job sometimes aborts at exit, after its last step
#: ("terminate called without an active exception", also without ddltrace: 2 of 8 plain runs here)
TRIES = 3
JOB = '''
import argparse, json, os, time
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int)
parser.add_argument("--width", type=int)
parser.add_argument("--batch", type=int)
parser.add_argument("--out")
args = parser.parse_args()
torch.set_num_threads(1)
dist.init_process_group("gloo")
torch.manual_seed(dist.get_rank())
model = DistributedDataParallel(torch.nn.Sequential(
    torch.nn.Linear(args.width, args.width), torch.nn.ReLU(), torch.nn.Linear(args.width, args.width),
    torch.nn.ReLU(), torch.nn.Linear(args.width, 10)))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
times = []
for step in range(1, args.steps + 1):
    wall, cpu = time.perf_counter_ns(), time.process_time_ns()
    x, y = torch.randn(args.batch, args.width), torch.randint(0, 10, (args.batch,))
    optimizer.zero_grad()
    torch.nn.functional.cross_entropy(model(x), y).backward()
    optimizer.step()
    times.append([step, time.perf_counter_ns() - wall, time.process_time_ns() - cpu])
with open(os.path.join(args.out, f"rank{dist.get_rank()}.json"), "w") as f:
    json.dump(times, f)
dist.destroy_process_group()
'''


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def step_ms(job: Path, job_args: list[str], shapes: bool, work: Path) -> tuple[float, float]:
    """(wall, CPU): the median time (ms) of the profiled steps of both ranks in one run."""
    times = work / "times"
    command = [sys.executable, "-m", "ddltrace", "run", "--no-progress", "--framework", "pytorch",
               "--steps", f"{WINDOW[0]}-{WINDOW[1]}", *(["--record-shapes"] if shapes else []),
               "--out", str(work / "store"), "--", str(TORCH_PYTHON), "-m", "torch.distributed.run",
               "--nproc-per-node", "2", "--master-port", str(free_port()), str(job), "--steps", str(WINDOW[1] + 1),
               "--out", str(times), *job_args]
    for _ in range(TRIES):
        shutil.rmtree(work / "store", ignore_errors=True)
        shutil.rmtree(times, ignore_errors=True)
        times.mkdir()
        done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
        if done.returncode == 0:
            break
    else:
        sys.exit(f"the job failed {TRIES} times (exit {done.returncode}):\n{done.stderr[-2000:]}")
    steps = [row for rank in (0, 1) for row in json.loads((times / f"rank{rank}.json").read_text())
             if WINDOW[0] <= row[0] <= WINDOW[1]]
    return statistics.median(r[1] for r in steps) / 1e6, statistics.median(r[2] for r in steps) / 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    if not TORCH_PYTHON.exists():
        print(f"no {TORCH_PYTHON} (make test-frameworks builds it): nothing measured")
        return
    print(f"per run: the median step time of the {WINDOW[1] - WINDOW[0] + 1} profiled steps x 2 ranks; "
          f"{args.repeat} runs per case, alternating")
    with tempfile.TemporaryDirectory() as tmp:
        job = Path(tmp) / "ddp_job.py"
        job.write_text(JOB)
        for label, job_args in SHAPES:
            runs: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
            for _ in range(args.repeat):
                for shapes in (False, True):
                    runs[shapes].append(step_ms(job, job_args, shapes, Path(tmp)))
            for what, k in (("wall", 0), ("CPU", 1)):
                off, on = [x[k] for x in runs[False]], [x[k] for x in runs[True]]
                for how, pick in (("median", statistics.median), ("min", min)):
                    print(f"{label}, {what} time per step, {how} of the runs: without {pick(off):.2f} ms, "
                          f"with --record-shapes {pick(on):.2f} ms: {100 * (pick(on) - pick(off)) / pick(off):+.1f} %")
                print(f"  runs without: {', '.join(f'{x:.2f}' for x in off)} ms; "
                      f"with: {', '.join(f'{x:.2f}' for x in on)} ms", flush=True)


if __name__ == "__main__":
    main()
