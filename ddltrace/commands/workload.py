"""``ddltrace workload ps-sgd``: run the parameter-server SGD job that ships with ddltrace, on local MPI ranks.

The job (:mod:`ddltrace.collectors.workloads.ps_sgd`) reproduces the workload of Hashemi et al. (paper 002)
with Rudra's synchronisation protocols (paper 004); its pathologies (sequential initialisation, a saturated
server, a straggler, slow shared storage) are switched on by options. It writes its ground truth to ``--out``;
with ``--trace`` it runs under ``ddltrace run`` and the trace store goes to ``OUT/store``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from ddltrace.collectors.mpi_env import mpiexec_command
from ddltrace.collectors.workloads.ps_sgd_options import add_job_arguments, job_argv
from ddltrace.errors import DdltraceError
from ddltrace.options import integer
from ddltrace.outputs import check_writable
from ddltrace.units import format_ns, format_percent

JOB_MODULE = "ddltrace.collectors.workloads.ps_sgd"


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "workload", help="run a training job shipped with ddltrace (to learn the tool, calibrate a cluster)",
        description="Run a training job that ships with ddltrace and whose pathologies can be switched on.")
    jobs = p.add_subparsers(dest="workload", metavar="JOB")
    ps = jobs.add_parser(
        "ps-sgd", help="parameter-server SGD over MPI (Hashemi et al. 2016; Rudra's protocols)",
        description="Asynchronous SGD with one parameter server (rank 0) and w = ranks - 1 workers on local MPI "
                    "ranks: the 2 - d_h - 2 sigmoid network of Hashemi et al. on a synthetic TSV data set. "
                    "Writes its ground truth (ground_truth.json, gradients.csv, updates.csv, steps.csv, init.csv, "
                    "loss.csv) to --out. Examples: sequential initialisation on 8 workers with slow storage: "
                    "--workers 8 --read-delay 0.005; a saturated server: --server-cost 0.002; "
                    "a straggler: --straggler 2 --slowdown 4; Rudra's protocols: --sync softsync 2. "
                    "On a machine with fewer cores than ranks use --compute emulated.")
    size = ps.add_mutually_exclusive_group()
    size.add_argument("--np", type=integer(1), help="MPI ranks (server + workers; default 5)")
    size.add_argument("--workers", type=integer(1), help="workers w (ranks = w + 1)")
    add_job_arguments(ps)
    ps.add_argument("--trace", action="store_true",
                    help="run under 'ddltrace run' (the job collectors) and write the trace store to OUT/store")
    ps.add_argument("--json", action="store_true", help="print the ground truth's summary as JSON")
    ps.set_defaults(func=run)
    p.set_defaults(func=_no_job, parser=p)


def _no_job(args) -> int:
    args.parser.print_help(sys.stderr)
    return 2


def ranks_of(args) -> int:
    """MPI ranks from --np or --workers (default 5 ranks)."""
    if args.workers is not None:
        return args.workers + 1
    return args.np or 5


def run(args) -> int:
    from ddltrace.collectors.workloads.ps_sgd import check_arguments

    ranks = ranks_of(args)
    try:
        check_arguments(args, ranks)
    except ValueError as exc:
        raise DdltraceError(str(exc)) from None
    out = Path(args.out)
    check_writable(out, "the ground truth")
    out.mkdir(parents=True, exist_ok=True)
    job = [sys.executable, "-m", JOB_MODULE, *job_argv(args)]
    if args.trace:
        exit_code = _run_traced(ranks, job, out / "store")
    else:
        if ranks == 1:  # one rank needs no launcher: MPI starts as a singleton
            cmd, env = job, dict(os.environ)
        else:
            cmd, env = mpiexec_command(ranks, job)
        env.setdefault("OPENBLAS_NUM_THREADS", "1")
        exit_code = subprocess.run(cmd, env=env).returncode
    if exit_code != 0:  # the job failed, not the input: exit 1, as `ddltrace run` does for a failed job
        print(f"ddltrace: error: ps-sgd: the job exited with status {exit_code} ({' '.join(job)})", file=sys.stderr)
        return 1
    truth = out / "ground_truth.json"
    if not truth.exists():
        raise DdltraceError(f"{truth}: the job ended without writing its ground truth")
    doc = json.loads(truth.read_text())
    if args.json:
        json.dump(summary(doc), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(render(doc, out))
    return 0


def _run_traced(ranks: int, job: list[str], store: Path) -> int:
    """Run ``job`` under the job collectors (what ``ddltrace run --np RANKS --out STORE`` does); its exit code."""
    if store.exists():
        raise DdltraceError(f"{store}: already exists (remove it, or choose another --out)")
    try:
        from ddltrace.collectors.launcher import RunConfig, run_job
    except ImportError:
        raise DdltraceError("--trace: needs the job collectors (ddltrace run), which this installation lacks") from None
    result = run_job(RunConfig(argv=job, out=store, np=ranks))
    for note in result.notes:
        print(f"ddltrace: note: {note}", file=sys.stderr)
    if result.interrupted:
        raise KeyboardInterrupt
    return result.exit_code


def summary(doc: dict) -> dict:
    """The figures a person looks at first (times in s, fractions 0..1)."""
    server, loss = doc["server"], [r["loss"] for r in doc["loss"]]
    return {"ranks": doc["config"]["ranks"], "workers": doc["config"]["workers"], "sync": doc["config"]["sync"],
            "init": doc["config"]["init"], "compute": doc["config"]["compute"], "init_s": doc["init_s"],
            "train_s": doc["train_s"], "server_busy_fraction": server["busy_fraction"],
            "staleness_mean": server["staleness_mean"], "staleness_max": server["staleness_max"],
            "loss_first_epoch": loss[0] if loss else None, "loss_last_epoch": loss[-1] if loss else None,
            "compute_per_sample_s": doc["compute_per_sample_s"]}


def render(doc: dict, out: Path) -> str:
    s = summary(doc)
    lines = [
        f"ps-sgd      {s['ranks']} rank(s), {s['workers']} worker(s), {s['sync']}, {s['init']} init, "
        f"{s['compute']} compute",
        f"init        {format_ns(s['init_s'] * 1e9)}",
        f"training    {format_ns(s['train_s'] * 1e9)}",
        f"server      busy {format_percent(s['server_busy_fraction'])} of training, "
        f"{doc['server']['gradients']} gradients, {doc['server']['updates']} updates",
        f"staleness   mean {s['staleness_mean']:.2f} updates, max {s['staleness_max']} updates",
        f"compute     {format_ns(s['compute_per_sample_s']['measured'] * 1e9)} per sample (measured)",
    ]
    if s["loss_first_epoch"] is not None:
        lines.append(f"loss        {s['loss_first_epoch']:.4f} -> {s['loss_last_epoch']:.4f} nats per sample "
                     f"(epoch 0 -> {len(doc['loss']) - 1})")
    lines.append(f"truth       {out / 'ground_truth.json'}")
    return "\n".join(lines) + "\n"
