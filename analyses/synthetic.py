"""Synthetic parameter-server runs with known answers, as a PMPI collector would record them.

A run of w workers (ranks 1..w) and one server (rank 0), asynchronous SGD as in paper 002: every worker
computes a batch (``compute_ns``, recorded as the gap between MPI calls), sends its gradient (MPI_Send, tag 1),
and receives new weights (MPI_Recv, tag 2); the server receives updates in order of arrival, spends ``server_ns``
on each (the gap) and sends weights back. Initialisation reads the data (``read_ns`` per worker) either all at
once (``init="parallel"``) or one worker after another with everyone else in MPI_Barrier (``"sequential"``, CNTK's
reader: ``for i in 1..w: if rank == i: read(); MPI_Barrier()``). A straggler computes ``straggler_factor`` times
slower. The discrete-event simulation is exact: times are integers in ns, jitter is seeded.

These runs let the detectors and their thresholds be tried and tested without a cluster:
``write_ps_store(path, workers=8, init="sequential")`` then ``ddltrace analyze path``.
"""

from __future__ import annotations

import heapq
import os

import numpy as np
import pandas as pd

from ddltrace.store import TraceStore, write_store
from ddltrace.timeline import make_timeline

EPS_NS = 20_000  # duration of a send or of a receive whose message is already there (20 us)
GRAD_TAG, WEIGHTS_TAG = 1, 2


def ps_job(workers: int = 4, steps: int = 30, compute_ns: float = 10e6, server_ns: float = 0.2e6,
           init: str = "parallel", read_ns: float = 20e6, straggler: int | None = None,
           straggler_factor: float = 3.0, jitter: float = 0.02, seed: int = 0,
           bytes_per_message: int = 80_000) -> pd.DataFrame:
    """The timeline of one synthetic run (all ranks). ``steps`` is per worker; times in ns."""
    if init not in ("parallel", "sequential"):
        raise ValueError(f"init must be 'parallel' or 'sequential', not {init!r}")
    rng = np.random.default_rng(seed)
    rows: list[dict] = []

    def row(rank, name, category, start, end, peer=None, tag=None, nbytes=None):
        rows.append({"rank": rank, "name": name, "category": category, "start_ns": int(start),
                     "dur_ns": int(end - start), "peer": peer, "tag": tag, "comm": 1, "bytes": nbytes,
                     "source": "synthetic"})

    def noisy(value):
        return max(1.0, float(value) * (1 + jitter * rng.standard_normal()))

    ranks = range(workers + 1)
    clock = {}
    for r in ranks:
        start = int(rng.integers(0, 200_000))
        row(r, "MPI_Init", "other", start, start + 1_000_000)
        clock[r] = start + 1_000_000
    # initialisation
    if init == "parallel":
        ready = {r: clock[r] + (noisy(read_ns) if r else 0) for r in ranks}
        barriers = [ready]
    else:
        barriers = []
        for i in range(1, workers + 1):
            ready = {r: clock[r] + (noisy(read_ns) if r == i else 0) for r in ranks}
            barriers.append(ready)
            leave = max(ready.values()) + EPS_NS
            clock = {r: leave for r in ranks}
    for ready in barriers:
        leave = max(ready.values()) + EPS_NS
        for r in ranks:
            row(r, "MPI_Barrier", "barrier", ready[r], leave)
        clock = {r: leave for r in ranks}
    # steady state: asynchronous SGD against one server
    compute = {w: compute_ns * (straggler_factor if w == straggler else 1.0) for w in range(1, workers + 1)}
    arrivals = []
    for w in range(1, workers + 1):
        t = clock[w] + noisy(compute[w])
        row(w, "MPI_Send", "comm", t, t + EPS_NS, peer=0, tag=GRAD_TAG, nbytes=bytes_per_message)
        heapq.heappush(arrivals, (t, w, 1))
    server_free = clock[0]
    while arrivals:
        sent, w, k = heapq.heappop(arrivals)
        recv_leave = max(server_free, sent) + EPS_NS
        row(0, "MPI_Recv", "comm", server_free, recv_leave, peer=w, tag=GRAD_TAG, nbytes=bytes_per_message)
        reply = recv_leave + noisy(server_ns)
        row(0, "MPI_Send", "comm", reply, reply + EPS_NS, peer=w, tag=WEIGHTS_TAG, nbytes=bytes_per_message)
        server_free = reply + EPS_NS
        row(w, "MPI_Recv", "comm", sent + EPS_NS, reply + EPS_NS, peer=0, tag=WEIGHTS_TAG, nbytes=bytes_per_message)
        clock[w] = reply + EPS_NS
        if k < steps:
            t = clock[w] + noisy(compute[w])
            row(w, "MPI_Send", "comm", t, t + EPS_NS, peer=0, tag=GRAD_TAG, nbytes=bytes_per_message)
            heapq.heappush(arrivals, (t, w, k + 1))
    clock[0] = server_free
    # finalisation
    ready = {r: clock[r] + 100_000 for r in ranks}
    leave = max(ready.values()) + EPS_NS
    for r in ranks:
        row(r, "MPI_Barrier", "barrier", ready[r], leave)
        row(r, "MPI_Finalize", "other", leave, leave + 500_000)
    return make_timeline(rows)


def write_ps_store(path: str | os.PathLike, workers: int = 4, batch_size: int = 64, **options) -> TraceStore:
    """Write :func:`ps_job` as a store at ``path``; the manifest names the server and the workers."""
    timeline = ps_job(workers=workers, **options)
    run = {"command": "synthetic ps_job", "framework": "synthetic", "world_size": workers + 1, "workers": workers,
           "batch_size": batch_size, "synthetic": {k: v for k, v in options.items()}}
    info = {r: {"role": "server" if r == 0 else "worker", "host": "synthetic"} for r in range(workers + 1)}
    return write_store(path, timeline, run=run, rank_info=info)
