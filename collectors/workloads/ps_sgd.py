"""Parameter-server SGD over MPI: the job Hashemi et al. measured (paper 002) with Rudra's protocols (004).

Rank 0 is the single parameter server; ranks 1..w are the workers (w = ranks - 1). With one rank there is
no server process: the lone worker applies its own updates (plain SGD), so a series can start at 1 rank.

Each worker: initialisation (read its share of the TSV data set, ``--init sequential`` one worker after
another as CNTK's reader did, or ``--init parallel``; then MPI_Barrier), then for every batch: pull the
weights (a 1-double request, a reply of 1 + n_w doubles: timestamp and weights), compute the gradient
(``--compute real``: numpy forward and backward pass; ``emulated``: a sleep of ``--sample-time`` seconds
per sample and a zero gradient, as if each worker had a core of its own), push it (4 + n_w doubles:
timestamp, epoch, summed loss, samples, gradient). The server answers pulls and applies pushes by the
protocol's rule (:mod:`.parameter_server`). Everything but the workers' compute is real in both modes.

Ground truth goes to ``--out``: ``ground_truth.json`` (configuration, per-rank initialisation, per-worker
compute, server summary, loss per epoch) and CSV logs (``gradients.csv``: per received gradient its
staleness and the server's busy time; ``updates.csv``; ``steps.csv``: per worker batch its compute time;
``init.csv``; ``loss.csv``). Times are wall-clock ns since the Unix epoch (``time.time_ns``), durations ns.

Run: ``mpiexec -n 5 python -m ddltrace.collectors.workloads.ps_sgd --out DIR [options]``,
under ddltrace: ``ddltrace run --np 5 -- python -m ddltrace.collectors.workloads.ps_sgd --out DIR``, or
``ddltrace workload ps-sgd --np 5 --out DIR``.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
import time
from dataclasses import asdict
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # one BLAS thread per rank: ranks share the cores

import numpy as np  # noqa: E402

from ddltrace.collectors.workloads import dataset, mlp  # noqa: E402
from ddltrace.collectors.workloads.parameter_server import ParameterServer, Protocol  # noqa: E402
from ddltrace.collectors.workloads.ps_sgd_config import SERVER, alpha0, data_path, run_config  # noqa: E402
from ddltrace.collectors.workloads.ps_sgd_options import add_job_arguments  # noqa: E402

TAG_PULL, TAG_WEIGHTS, TAG_PUSH, TAG_DONE, TAG_TOKEN = 11, 12, 13, 14, 15
HEADER = 4  # push header: timestamp, epoch, summed loss, samples


def check_arguments(args: argparse.Namespace, ranks: int) -> Protocol:
    """The protocol; ValueError naming the option when a value cannot work on ``ranks`` ranks."""
    protocol = Protocol.parse(args.sync)
    workers = max(1, ranks - 1)
    for name in ("samples", "hidden", "batch", "epochs", "read_block"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')} {getattr(args, name)}: must be at least 1")
    for name in ("server_cost", "read_delay", "sample_time"):
        if getattr(args, name) < 0:
            raise ValueError(f"--{name.replace('_', '-')} {getattr(args, name)}: must not be negative")
    if args.slowdown < 1:
        raise ValueError(f"--slowdown {args.slowdown}: must be at least 1")
    if ranks < 1:
        raise ValueError(f"ranks {ranks}: must be at least 1")
    if protocol.name == "softsync" and protocol.n > workers:
        raise ValueError(f"--sync softsync {protocol.n}: N must be at most the {workers} worker(s)")
    if args.straggler is not None and not (1 <= args.straggler <= workers if ranks > 1 else args.straggler == 0):
        raise ValueError(f"--straggler {args.straggler}: not a worker rank (workers are ranks "
                         f"{'1..' + str(workers) if ranks > 1 else '0'})")
    if args.samples < workers * args.batch:
        raise ValueError(f"--samples {args.samples}: fewer than one batch ({args.batch}) per worker ({workers})")
    return protocol


class Worker:
    """One worker's state: its data, its compute, and its ground-truth records."""

    def __init__(self, args, rank: int, index: int, workers: int, n_w: int):
        self.args, self.rank, self.index, self.workers = args, rank, index, workers
        self.grad = np.zeros(HEADER + n_w)
        self.slowdown = args.slowdown if args.straggler == rank else 1.0
        self.steps: list[tuple] = []  # (rank, step, epoch, start_ns, compute_ns, samples)
        self.overrun_ns = 0.0

    def read(self, path: Path, comm) -> dataset.ReadStats:
        """Initialisation's reading: sequential workers take turns (a token from the previous worker)."""
        reader = dataset.StorageReader(path, self.args.read_block, self.args.read_delay, self.args.cold_read)
        if self.args.init == "parallel":
            self.x, self.y = dataset.read_parallel(reader, self.index, self.workers)
            return reader.stats
        token = np.zeros(1)
        if comm is not None and self.index > 0:
            comm.Recv(token, source=self.rank - 1, tag=TAG_TOKEN)
        self.x, self.y = dataset.read_sequential(reader, self.index, self.workers, self.args.seed)
        if comm is not None and self.index < self.workers - 1:
            comm.Send(token, dest=self.rank + 1, tag=TAG_TOKEN)
        return reader.stats

    def batches(self):
        """(epoch, step, sample indices) for every batch of every epoch, shuffled per epoch."""
        rng = np.random.default_rng(self.args.seed + 1000 + self.rank)
        step = 0
        for epoch in range(self.args.epochs):
            order = rng.permutation(len(self.y))
            for begin in range(0, len(order), self.args.batch):
                yield epoch, step, order[begin:begin + self.args.batch]
                step += 1

    def compute(self, weights: np.ndarray, ts: float, epoch: int, step: int, rows: np.ndarray,
                t0: int) -> np.ndarray:
        """Fill and return the push message (header + gradient) for one batch.

        ``t0`` is when the weights arrived (wall clock ns): the batch's compute time runs from there to the
        return, the interval a trace sees between receiving the weights and sending the gradient.
        """
        if self.args.compute == "emulated":
            # Sleep the batch's compute time less what earlier batches overran (the OS wakes a sleeper late on
            # a busy machine), so that the mean time per sample is c_p, as on a core of its own.
            target_ns = self.args.sample_time * len(rows) * self.slowdown * 1e9
            _sleep_ns(target_ns - self.overrun_ns)
            loss = float("nan")
        else:
            loss = mlp.loss_and_gradient(weights, self.x[rows], self.y[rows], self.args.hidden, self.grad[HEADER:])
            if self.slowdown > 1:  # the straggler: sleep (F - 1) times its compute, overruns paid back
                extra_ns = (time.time_ns() - t0) * (self.slowdown - 1)
                t1 = time.time_ns()
                _sleep_ns(extra_ns - self.overrun_ns)
                self.overrun_ns += time.time_ns() - t1 - extra_ns
        self.grad[0], self.grad[1], self.grad[2], self.grad[3] = ts, epoch, loss, len(rows)
        elapsed = time.time_ns() - t0
        if self.args.compute == "emulated":
            self.overrun_ns += elapsed - target_ns
        self.steps.append((self.rank, step, epoch, t0, elapsed, len(rows)))
        return self.grad


def _sleep_ns(ns: float) -> None:
    """Sleep ``ns`` nanoseconds; not at all when ns <= 0 (even sleep(0) gives the core away on a busy machine)."""
    if ns > 0:
        time.sleep(ns / 1e9)


def _init_record(rank: int, role: str, start_ns: int, stats: dataset.ReadStats | None, end_ns: int) -> dict:
    stats = stats or dataset.ReadStats(start_ns=start_ns, end_ns=start_ns)
    return {"rank": rank, "role": role, "start_ns": start_ns, "read_start_ns": stats.start_ns,
            "read_end_ns": stats.end_ns, "end_ns": end_ns, "bytes": stats.bytes, "reads": stats.reads,
            "lines": stats.lines, "device_bytes": stats.device_bytes}


def run_server(comm, args, protocol: Protocol, workers: int, n_w: int, start_ns: int) -> dict:
    """Rank 0: initialise the weights, wait out initialisation, then serve pulls and pushes until all are done."""
    from mpi4py import MPI

    sbuf = np.empty(1 + n_w)
    sbuf[1:] = mlp.init_weights(args.hidden, args.seed)
    ps = ParameterServer(sbuf[1:], protocol, list(range(1, workers + 1)), alpha0(args),
                         extra_cost_s=args.server_cost)
    comm.Barrier()
    init_end = time.time_ns()
    rbuf, status = np.empty(HEADER + n_w), MPI.Status()
    done, deferred, pull_ns, pulls = 0, [], 0, 0
    loss_sum: dict[int, list[float]] = {}

    def serve(worker: int) -> None:
        nonlocal pull_ns, pulls
        t0 = time.time_ns()
        sbuf[0] = ps.ts
        comm.Send(sbuf, dest=worker, tag=TAG_WEIGHTS)
        pull_ns, pulls = pull_ns + time.time_ns() - t0, pulls + 1

    while done < workers:
        if args.server_receive == "probe":  # the message's source first, then a receive from that rank only
            comm.Probe(source=MPI.ANY_SOURCE, tag=MPI.ANY_TAG, status=status)
            comm.Recv(rbuf, source=status.Get_source(), tag=status.Get_tag(), status=status)
        else:
            comm.Recv(rbuf, source=MPI.ANY_SOURCE, tag=MPI.ANY_TAG, status=status)
        source, tag = status.Get_source(), status.Get_tag()
        if tag == TAG_PULL:
            if ps.may_serve_pull(source):
                serve(source)
            else:
                deferred.append(source)
            continue
        if tag == TAG_PUSH:
            acc = loss_sum.setdefault(int(rbuf[1]), [0.0, 0])
            acc[0], acc[1] = acc[0] + rbuf[2], acc[1] + int(rbuf[3])
            applied = ps.push(source, rbuf[HEADER:], int(rbuf[0]))
        else:  # TAG_DONE
            done += 1
            applied = ps.retire(source)
        if applied:
            for worker in deferred:
                serve(worker)
            deferred = []
    end_ns = time.time_ns()
    return {"init": _init_record(SERVER, "server", start_ns, None, init_end), "server": ps, "pull_ns": pull_ns,
            "pulls": pulls, "loss_sum": loss_sum, "train_end_ns": end_ns}


def run_worker(comm, args, rank: int, workers: int, n_w: int, path: Path, start_ns: int) -> dict:
    """Ranks 1..w: read this worker's share, then pull, compute, push every batch; DONE at the end."""
    worker = Worker(args, rank, rank - 1, workers, n_w)
    stats = worker.read(path, comm)
    comm.Barrier()
    init_end = time.time_ns()
    wbuf, request = np.empty(1 + n_w), np.array([float(rank)])
    for epoch, step, rows in worker.batches():
        comm.Send(request, dest=SERVER, tag=TAG_PULL)
        comm.Recv(wbuf, source=SERVER, tag=TAG_WEIGHTS)
        message = worker.compute(wbuf[1:], wbuf[0], epoch, step, rows, time.time_ns())
        comm.Send(message, dest=SERVER, tag=TAG_PUSH)
    comm.Send(request, dest=SERVER, tag=TAG_DONE)
    return {"init": _init_record(rank, "worker", start_ns, stats, init_end), "steps": worker.steps,
            "train_end_ns": time.time_ns()}


def run_local(args, n_w: int, path: Path, start_ns: int) -> dict:
    """One rank: the worker updates its own weights (plain SGD, no server process, no messages)."""
    worker = Worker(args, 0, 0, 1, n_w)
    stats = worker.read(path, None)
    init_end = time.time_ns()
    ps = ParameterServer(mlp.init_weights(args.hidden, args.seed), Protocol("hardsync"), [0], alpha0(args),
                         extra_cost_s=args.server_cost)
    loss_sum: dict[int, list[float]] = {}
    for epoch, step, rows in worker.batches():
        message = worker.compute(ps.weights, ps.ts, epoch, step, rows, time.time_ns())
        acc = loss_sum.setdefault(epoch, [0.0, 0])
        acc[0], acc[1] = acc[0] + message[2], acc[1] + int(message[3])
        ps.push(0, message[HEADER:], ps.ts)
    ps.retire(0)
    end_ns = time.time_ns()
    return {"init": _init_record(0, "worker+server", start_ns, stats, init_end), "steps": worker.steps,
            "server": ps, "pull_ns": 0, "pulls": 0, "loss_sum": loss_sum, "train_end_ns": end_ns}


def write_ground_truth(out: Path, args, protocol: Protocol, ranks: int, start_ns: int, parts: list[dict]) -> dict:
    """Write ground_truth.json and the CSV logs into ``out``; returns the JSON document."""
    server_part = next(p for p in parts if "server" in p)
    ps: ParameterServer = server_part["server"]
    workers = max(1, ranks - 1)
    init = [p["init"] for p in parts]
    steps = [s for p in parts for s in p.get("steps", [])]
    train_start = max(r["end_ns"] for r in init)
    train_end = max(p["train_end_ns"] for p in parts)
    staleness = np.array([g.staleness for g in ps.gradients])
    n = protocol.splitting(workers)
    loss = [{"epoch": e, "samples": s[1], "loss": (s[0] / s[1]) if args.compute == "real" else None}
            for e, s in sorted(server_part["loss_sum"].items())]
    per_worker = {}
    for rank in sorted({s[0] for s in steps}):
        mine = [s for s in steps if s[0] == rank]
        compute_ns, samples = sum(s[4] for s in mine), sum(s[5] for s in mine)
        per_worker[str(rank)] = {"batches": len(mine), "samples": samples, "compute_ns": compute_ns,
                                 "compute_per_sample_s": compute_ns / 1e9 / samples}
    regular = [w for rank, w in per_worker.items() if int(rank) != args.straggler] or list(per_worker.values())
    busy = sum(g.busy_ns for g in ps.gradients) + server_part["pull_ns"]
    doc = {
        "job": "ps-sgd",
        "config": run_config(args, ranks),
        "clock": "wall clock, ns since the Unix epoch (time.time_ns); durations in ns",
        "start_ns": start_ns,
        "init_end_ns": train_start,
        "init_s": (train_start - start_ns) / 1e9,
        "train_end_ns": train_end,
        "train_s": (train_end - train_start) / 1e9,
        "init": sorted(init, key=lambda r: r["rank"]),
        "workers": per_worker,
        "compute_per_sample_s": {"configured": args.sample_time if args.compute == "emulated" else None,
                                 "measured": (sum(w["compute_ns"] for w in regular) / 1e9
                                              / max(1, sum(w["samples"] for w in regular))),
                                 "note": "measured: mean over the workers other than the straggler"},
        "server": {"gradients": len(ps.gradients), "updates": len(ps.updates), "final_ts": ps.ts,
                   "busy_ns": busy, "busy_fraction": busy / max(1, train_end - train_start),
                   "aggregate_busy_ns": sum(g.busy_ns for g in ps.gradients),
                   "pulls": server_part["pulls"], "pull_ns": server_part["pull_ns"],
                   "staleness_mean": float(staleness.mean()) if len(staleness) else 0.0,
                   "staleness_max": int(staleness.max()) if len(staleness) else 0,
                   "staleness_within_2n": (float(np.mean(staleness <= 2 * max(n, 0))) if len(staleness) else 1.0)},
        "loss": loss,
    }
    out.mkdir(parents=True, exist_ok=True)
    _write_csv(out / "init.csv", list(doc["init"][0]), [list(r.values()) for r in doc["init"]])
    _write_csv(out / "steps.csv", ["rank", "step", "epoch", "start_ns", "compute_ns", "samples"], sorted(steps))
    _write_csv(out / "gradients.csv", ["t_ns", "worker", "grad_ts", "server_ts", "staleness", "busy_ns", "update_ts"],
               [[g.t_ns, g.worker, g.grad_ts, g.server_ts, g.staleness, g.busy_ns, g.update_ts]
                for g in ps.gradients])
    _write_csv(out / "updates.csv", list(asdict(ps.updates[0])) if ps.updates else ["ts"],
               [list(asdict(u).values()) for u in ps.updates])
    _write_csv(out / "loss.csv", ["epoch", "samples", "loss"], [list(r.values()) for r in loss])
    tmp = out / ".ground_truth.json.tmp"
    tmp.write_text(json.dumps(doc, indent=1))
    os.replace(tmp, out / "ground_truth.json")
    return doc


def _write_csv(path: Path, header: list[str], rows) -> None:
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerows(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ddltrace.collectors.workloads.ps_sgd",
                                     description=__doc__.split("\n\n")[0])
    add_job_arguments(parser)
    args = parser.parse_args(argv)
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank, ranks = comm.Get_rank(), comm.Get_size()
    try:
        protocol = check_arguments(args, ranks)
    except ValueError as exc:
        if rank == 0:
            print(f"ps_sgd: error: {exc}", file=sys.stderr)
        return 2
    out = Path(args.out)
    path = data_path(args)
    if rank == 0:
        dataset.make_dataset(path, args.samples, args.seed)
    n_w, workers = mlp.n_weights(args.hidden), max(1, ranks - 1)
    comm.Barrier()
    start_ns = time.time_ns()
    if ranks == 1:
        part = run_local(args, n_w, path, start_ns)
    elif rank == SERVER:
        part = run_server(comm, args, protocol, workers, n_w, start_ns)
    else:
        part = run_worker(comm, args, rank, workers, n_w, path, start_ns)
    parts = comm.gather(part, root=0)
    if rank == 0:
        doc = write_ground_truth(out, args, protocol, ranks, start_ns, parts)
        print(f"ps_sgd: {ranks} rank(s), {doc['config']['sync']}, init {doc['init_s']:.3f} s, "
              f"training {doc['train_s']:.3f} s, ground truth in {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
