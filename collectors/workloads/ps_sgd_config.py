"""The ps-sgd job's configuration from its command line and world size, and the manifest's ``workload`` entry.

The job (:mod:`.ps_sgd`) writes this configuration into its ground truth (``ground_truth.json``'s ``config``);
:func:`manifest_entry` records the same in a trace store's manifest, so that an analysis reads the job's workers
and its server rank from what the job was told (``--workers`` is the world size less the server) rather than
inferring them from its messages. ``ddltrace run`` records it for any command that runs the job (also wrapped:
a cgroup's ``in-quota`` script, a throttle, a launcher; :func:`job_arguments`), and
``scripts/annotate_workload_stores.py`` for a store kept from before, from the command line its manifest
recorded.
"""

from __future__ import annotations

import argparse
import os
import shlex
from pathlib import Path

from ddltrace.collectors.workloads.ps_sgd_options import add_job_arguments

JOB_MODULE = "ddltrace.collectors.workloads.ps_sgd"
#: rank 0 is the parameter server (one rank: no server, the lone worker updates its own weights)
SERVER = 0


def parser() -> argparse.ArgumentParser:
    """The job's own argument parser (raises instead of exiting on a bad option)."""
    p = argparse.ArgumentParser(prog=f"python -m {JOB_MODULE}", exit_on_error=False, add_help=False)
    add_job_arguments(p)
    return p


def job_arguments(command: list[str] | str) -> argparse.Namespace | None:
    """The job's options when ``command`` runs the job (``python -m ddltrace.collectors.workloads.ps_sgd ...`` or
    ``python .../workloads/ps_sgd.py ...``, after any wrapper or launcher); None for any other command, or one whose
    options the job would refuse."""
    argv = shlex.split(command) if isinstance(command, str) else list(command)
    for i, word in enumerate(argv):
        if (word == JOB_MODULE and i > 0 and argv[i - 1] == "-m") or word.endswith("workloads/ps_sgd.py"):
            try:
                return parser().parse_args(argv[i + 1:])
            except (argparse.ArgumentError, SystemExit):
                return None
    return None


def data_path(args: argparse.Namespace) -> Path:
    """The data set the job reads: ``--data``, else ``OUT/ps_sgd_data_SAMPLES_SEED.tsv``."""
    return Path(args.data) if args.data else Path(args.out) / f"ps_sgd_data_{args.samples}_{args.seed}.tsv"


def alpha0(args: argparse.Namespace) -> float:
    """The base learning rate alpha_0: ``--lr``, else 2 / d_h (the output layer sums d_h units)."""
    return args.lr if args.lr is not None else 2.0 / args.hidden


def run_config(args: argparse.Namespace, ranks: int) -> dict:
    """The job's configuration on ``ranks`` MPI ranks, as its ground truth records it: the options, the protocol's
    label, ``workers`` w = ranks - 1 (1 on one rank), ``n_w``, the learning rates (alpha0, and alpha as the server's
    protocol scales it), ``gradients_per_update``, ``softsync_n``, ``server_rank`` (None on one rank)."""
    from ddltrace.collectors.workloads import mlp
    from ddltrace.collectors.workloads.parameter_server import Protocol

    protocol = Protocol.parse(args.sync)
    workers = max(1, ranks - 1)
    base = alpha0(args)
    served = protocol if ranks > 1 else Protocol("hardsync")  # one rank: plain SGD, the worker its own server
    return {**{k: v for k, v in vars(args).items() if k not in ("out", "sync")}, "sync": protocol.label(),
            "data": str(data_path(args)), "ranks": ranks, "workers": workers, "n_w": mlp.n_weights(args.hidden),
            "alpha0": base, "alpha": served.learning_rate(base, workers),
            "gradients_per_update": served.gradients_per_update(workers),
            "softsync_n": protocol.splitting(workers), "server_rank": SERVER if ranks > 1 else None,
            "local": ranks == 1}


def manifest_entry(args: argparse.Namespace, ranks: int, store: Path, truth: Path | None) -> dict:
    """The manifest's ``workload`` entry of a store at ``store`` of the job run with ``args`` on ``ranks`` ranks:
    the job, its compute mode, protocol, initialisation, configuration (:func:`run_config`) and, where ``truth``
    is given, its ground truth's path relative to the store."""
    config = run_config(args, ranks)
    entry = {"job": "ps-sgd", "compute": config["compute"], "sync": config["sync"], "init": config["init"],
             "config": config}
    if truth is not None:
        entry["ground_truth"] = os.path.relpath(truth, store)
    return entry


def note(config: dict) -> str:
    """The manifest's note on the workload."""
    return (f"ps-sgd workload, compute {config['compute']}"
            + (f" (emulated c_p = {config['sample_time']} s per sample)" if config["compute"] == "emulated" else ""))


def record(manifest: dict, command: list[str] | str, ranks: int, store: Path, out: Path | None = None) -> bool:
    """Record in ``manifest`` (a store's at ``store``) the ``workload`` entry of ``command`` run on ``ranks`` ranks,
    with its ground truth where the job wrote one (``out``/ground_truth.json; ``out`` defaults to the job's
    ``--out``); False (nothing recorded) when the command does not run the job."""
    args = job_arguments(command)
    if args is None or ranks < 1:
        return False
    truth = Path(args.out if out is None else out) / "ground_truth.json"
    entry = manifest_entry(args, ranks, Path(store), truth if truth.is_file() else None)
    manifest["workload"] = entry
    manifest.setdefault("notes", []).append(note(entry["config"]))
    return True
