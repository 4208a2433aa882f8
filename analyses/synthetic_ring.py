"""Synthetic MPI ranks of any size, for the scaling benchmark and the memory-bound test of big jobs (issue 16).

Each rank makes ``events`` calls in steps of :data:`STEP_CALLS` (marked in the ``step`` column, as PyTorch's
profiler marks ProfilerStep#N): MPI_Send to the next rank and MPI_Recv from the previous one (a ring), MPI_Barrier
and MPI_Allreduce, drawn at random (40, 40, 5 and 15 %), with exponential durations (mean 20 us + 1 us) and
compute gaps between them (mean 80 us, not recorded). Seeded: the same arguments give the same store.
"""

from __future__ import annotations

import os

import numpy as np
import pandas as pd

from ddltrace.store import TraceStore
from ddltrace.timeline import make_timeline

#: Calls per training step.
STEP_CALLS = 1_000


def ring_rank(rank: int, ranks: int, events: int, rng: np.random.Generator) -> pd.DataFrame:
    """The timeline of one rank of a ring of ``ranks`` (see the module docstring)."""
    names = np.array(["MPI_Send", "MPI_Recv", "MPI_Barrier", "MPI_Allreduce"])
    categories = np.array(["comm", "wait", "barrier", "comm"])
    kind = rng.choice(4, size=events, p=[0.4, 0.4, 0.05, 0.15])
    dur = rng.exponential(20_000, size=events).astype(np.int64) + 1_000
    gap = rng.exponential(80_000, size=events).astype(np.int64)
    start = np.cumsum(gap + dur) - dur + rank * 1_000
    peer = np.where(kind == 0, (rank + 1) % ranks, np.where(kind == 1, (rank - 1) % ranks, -1))
    return make_timeline(dict(rank=np.full(events, rank, dtype=np.int32), name=names[kind],
                              category=categories[kind], start_ns=start, dur_ns=dur,
                              peer=pd.arrays.IntegerArray(peer.astype(np.int32), peer < 0),
                              step=np.arange(events) // STEP_CALLS, bytes=np.full(events, 65_536)))


def write_ring_store(path: str | os.PathLike, ranks: int, events: int, seed: int = 1) -> TraceStore:
    """Write a store of ``ranks`` ring ranks of ``events`` calls each, one rank in memory at a time."""
    store = TraceStore.create(path, run={"command": "synthetic ring", "world_size": ranks})
    rng = np.random.default_rng(seed)
    for rank in range(ranks):
        store.add_rank(rank, ring_rank(rank, ranks, events, rng), save=False)
    store.save_manifest()
    return store
