"""``ddltrace run [--np N | --launcher "mpiexec ..."] [--framework NAME [--steps A-B]] [--out STORE]
[--sample-hz HZ] [--pyspy] -- CMD ...``"""

from __future__ import annotations

import argparse
import datetime as _dt
import signal
import sys
from pathlib import Path

from ddltrace.errors import DdltraceError
from ddltrace.options import MAX_COUNT, SAMPLE_HZ, integer, number
from ddltrace.outputs import check_writable


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "run", help="run a job under the collectors and write a trace store",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Run a job under ddltrace's job collectors and write one trace store.\n\n"
                    "MPI jobs (--np or --launcher): every rank runs with the PMPI wrapper preloaded (built with\n"
                    "mpicc on first use), which records each MPI call crash-safely; clocks are aligned to rank 0.\n"
                    "Any job: the machine and the job's processes are sampled (CPU, memory, disk, network,\n"
                    "context switches; GPUs through NVML where a driver is present), and with --pyspy each\n"
                    "Python process's stacks. Ctrl-C stops the job and still writes the store; Ctrl-C during\n"
                    "the write says how long it will take, and a second one abandons it. The raw records are\n"
                    "deleted only once the store is written and verified: if ddltrace is killed or the write\n"
                    "fails, `ddltrace recover` makes the store from them (docs/COLLECTORS.md).\n\n"
                    "--framework switches the framework's own profiler on in every Python process of the job,\n"
                    "from outside its code, for a window of training steps (docs/FRAMEWORKS.md); each process\n"
                    "(worker, server, scheduler, ps) becomes a rank with its role, on the samplers' clock.",
        epilog="examples:\n"
               "  ddltrace run --np 4 -- python train.py\n"
               "  ddltrace run --launcher 'mpiexec -f hosts -n 64' --out run64 -- python train.py\n"
               "  ddltrace run --launcher 'srun -n 64' -- python train.py\n"
               "  ddltrace run --pyspy -- python train_single.py\n"
               "  ddltrace run --framework pytorch -- torchrun --nproc-per-node 2 train.py\n"
               "  ddltrace run --framework mxnet --steps 10-20 -- python launch.py -n 2 -s 1 python train.py\n"
               "  ddltrace run --framework tf -- sh start_cluster.sh\n"
               "  ddltrace run --framework horovod --np 4 -- python train_hvd.py")
    how = p.add_mutually_exclusive_group()
    how.add_argument("--np", type=integer(1, MAX_COUNT), metavar="N", help="start N ranks with this Python's mpiexec")
    how.add_argument("--launcher", metavar="CMD",
                     help="your launcher command that CMD is appended to (mpiexec, mpirun, srun ...), quoted")
    p.add_argument("--out", metavar="STORE", help="trace store folder to create (default: ddltrace-run-<time>)")
    p.add_argument("--sample-hz", type=number(*SAMPLE_HZ, unit="Hz"), default=10.0, metavar="HZ",
                   help=f"system and GPU samples per second, {SAMPLE_HZ[0]:g} to {SAMPLE_HZ[1]:g} (default 10)")
    p.add_argument("--pyspy", action="store_true", help="sample each Python process's stacks with py-spy")
    p.add_argument("--pyspy-rate", type=integer(1, 1000, unit="Hz"), metavar="HZ",
                   help="py-spy samples per second, 1 to 1000 (default 100)")
    p.add_argument("--framework", metavar="NAME",
                   help="switch this framework's profiler on: pytorch, mxnet, tf, horovod or cntk")
    p.add_argument("--steps", metavar="A-B",
                   help="with --framework: the training steps to profile, from 1, both included (default 5-9)")
    p.add_argument("--record-shapes", action="store_true",
                   help="with --framework pytorch or horovod: torch.profiler records each op's input shapes, which "
                        "gives the bytes of gloo's collectives (their bus bandwidth in `analyze`); see "
                        "docs/FRAMEWORKS.md for its cost")
    p.add_argument("--launcher-addr", metavar="ADDR",
                   help="with --launcher: the address the nodes reach this machine at, for the node agents' clock "
                        "ping-pong and the gather of node-local records (default: its address on the default route)")
    p.add_argument("--no-progress", action="store_true", help="no live progress line on stderr")
    p.add_argument("command", nargs=argparse.REMAINDER, help="the job, after --")
    p.set_defaults(func=run)


def _check_options(args, argv: list[str]) -> None:
    """Refuse, before the job runs, options that would be ignored or fail later: each one line naming it."""
    import shlex
    import shutil

    for option, value, needs, given in (("--steps", args.steps, "--framework", args.framework),
                                        ("--pyspy-rate", args.pyspy_rate, "--pyspy", args.pyspy),
                                        ("--launcher-addr", args.launcher_addr, "--launcher", args.launcher)):
        if value is not None and not given:
            raise DdltraceError(f"{option}: only with {needs}")
    for option, value in (("--out", args.out), ("--launcher", args.launcher)):
        if value is not None and not value.strip():
            raise DdltraceError(f"{option}: empty")
    if args.launcher is not None:
        try:
            shlex.split(args.launcher)
        except ValueError as exc:
            raise DdltraceError(f"--launcher {args.launcher!r}: cannot be split into words ({exc})") from None
    elif shutil.which(argv[0]) is None:  # (a launcher's nodes may have what this machine lacks)
        raise DdltraceError(f"{argv[0]}: no such command (not a program on PATH, nor an executable file)")


def run(args) -> int:
    from ddltrace.collectors import frameworks
    from ddltrace.collectors.launcher import RunConfig, run_job

    argv = list(args.command)
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv:
        raise DdltraceError("command: nothing to run (give it after --, e.g. ddltrace run --np 4 -- python job.py)")
    _check_options(args, argv)
    steps = frameworks.parse_steps(args.steps) if args.steps else frameworks.DEFAULT_STEPS
    out = Path(args.out) if args.out else Path(f"ddltrace-run-{_dt.datetime.now():%Y%m%d-%H%M%S}")
    check_writable(out.parent, "the store")  # before the job runs, not after it
    result = run_job(RunConfig(argv=argv, out=out, np=args.np, launcher=args.launcher, sample_hz=args.sample_hz,
                               pyspy=args.pyspy, pyspy_rate_hz=args.pyspy_rate or 100, progress=not args.no_progress,
                               framework=args.framework, steps=steps, record_shapes=args.record_shapes,
                               launcher_addr=args.launcher_addr))
    for note in result.notes:  # on stderr, as every line of ddltrace's own: stdout is the job's
        print(f"ddltrace: note: {note}", file=sys.stderr)
    if result.interrupted:  # 128 + the signal that stopped it, as the shell reports one (130 Ctrl-C, 143 SIGTERM)
        return 128 + (result.stop_signal or signal.SIGINT)
    return 0 if result.exit_code == 0 else 1
