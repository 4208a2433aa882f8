"""The ps-sgd job's command-line options (``collectors/workloads/ps_sgd.py``), in a module of their own so that
``ddltrace workload ps-sgd --help`` builds them without importing the job (numpy)."""

from __future__ import annotations

import argparse

from ddltrace.options import integer, number, positive


def add_job_arguments(p: argparse.ArgumentParser) -> None:
    """The job's options (shared with ``ddltrace workload ps-sgd``)."""
    p.add_argument("--out", required=True, help="folder for the ground truth (created)")
    p.add_argument("--data", help="the TSV data set (default OUT/ps_sgd_data_SAMPLES_SEED.tsv; made if missing)")
    p.add_argument("--samples", type=integer(1), default=16384, help="data set size d in samples (default 16384)")
    p.add_argument("--seed", type=integer(0, 2**32 - 1), default=0,
                   help="seed of the data set, partition and weights (default 0)")
    p.add_argument("--hidden", type=integer(1), default=10000, help="hidden units d_h (default 10000: n_w = 40000)")
    p.add_argument("--batch", type=integer(1), default=64, help="batch size b in samples per worker (default 64)")
    p.add_argument("--epochs", type=integer(1), default=2, help="epochs E (default 2)")
    p.add_argument("--lr", type=positive(), default=None,
                   help="base learning rate alpha_0 (default 2/d_h; the output layer sums d_h units)")
    p.add_argument("--init", choices=["sequential", "parallel"], default="sequential",
                   help="sequential: each worker reads the whole file in turn and keeps a random 1/w "
                        "(CNTK); parallel: each reads its own byte range at once (default sequential)")
    p.add_argument("--sync", nargs="+", default=["async"], metavar="PROTOCOL",
                   help="async | hardsync | softsync N (Rudra's protocols; default async)")
    p.add_argument("--server-cost", type=number(0, None, "s"), default=0.0, metavar="SECONDS",
                   help="extra server time per received gradient, a slower server (default 0 s)")
    p.add_argument("--straggler", type=integer(0), default=None, metavar="RANK",
                   help="a worker rank that computes slower")
    p.add_argument("--slowdown", type=number(1), default=3.0, help="the straggler's compute time factor (default 3)")
    p.add_argument("--read-delay", type=number(0, None, "s"), default=0.0, metavar="SECONDS",
                   help="storage latency per read call, shared storage (default 0 s)")
    p.add_argument("--cold-read", action="store_true",
                   help="drop the data file's pages from the page cache (fdatasync, posix_fadvise DONTNEED) before "
                        "each worker reads it, so that every read reaches the disk as on shared storage (default: "
                        "reads served from the page cache once the file is cached)")
    p.add_argument("--read-block", type=integer(1, unit="B"), default=65536, metavar="BYTES",
                   help="bytes per read call (64 KiB)")
    p.add_argument("--server-receive", choices=["any", "probe"], default="any",
                   help="how the server takes the next message: any: MPI_Recv(MPI_ANY_SOURCE); probe: MPI_Probe("
                        "MPI_ANY_SOURCE), then MPI_Recv from that rank (MPICH's UCX over TCP between hosts stalls on "
                        "the first form; default any)")
    p.add_argument("--compute", choices=["real", "emulated"], default="real",
                   help="real: numpy forward/backward; emulated: sleep --sample-time per sample (default real)")
    p.add_argument("--sample-time", type=number(0, None, "s"), default=50e-6, metavar="SECONDS",
                   help="emulated compute time per sample c_p (default 50e-6 s)")


def job_argv(args: argparse.Namespace) -> list[str]:
    """The command-line options that reproduce ``args`` (for the launcher)."""
    argv = ["--out", str(args.out)]
    for name in ("data", "samples", "seed", "hidden", "batch", "epochs", "lr", "init", "server_cost", "straggler",
                 "slowdown", "read_delay", "read_block", "server_receive", "compute", "sample_time"):
        value = getattr(args, name)
        if value is not None:
            argv += ["--" + name.replace("_", "-"), repr(value) if isinstance(value, float) else str(value)]
    if args.cold_read:
        argv.append("--cold-read")
    return argv + ["--sync", *args.sync]
