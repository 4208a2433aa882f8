"""The map step of :func:`~ddltrace.analyses.run_analysis.analyze_store`: one rank of a store read and summarised.

:func:`summarise_rank` takes a store's path and a rank number, reads that rank's timeline alone and returns a
:class:`RankSummary`: what the later, cross-rank steps need of that rank and nothing else (its phase boundaries
and steps, its time per phase and category, its MPI calls in compact columns, its GPU figures). Both the
function and its result are picklable, so the ranks can be summarised by any mapper: ``builtins.map`` in this
process, a process pool's ``imap``, or tasks on a Dask cluster; :func:`~ddltrace.analyses.run_analysis.
reduce_summaries` builds the :class:`~ddltrace.analyses.run_analysis.RunAnalysis` from the summaries.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pandas as pd

from ddltrace.analyses import host_collectives
from ddltrace.analyses.breakdown import (
    collective_comm,
    device_lanes,
    host_lanes,
    phase_breakdown,
    rank_breakdown,
    rank_segments,
    time_in_steps,
)
from ddltrace.analyses.gpu_analysis import GpuAnalysis
from ddltrace.analyses.phases import RankPhases, largest_receive_ends, segment_rank, whole_run
from ddltrace.analyses.segments import SAMPLED_STACKS
from ddltrace.analyses.wait_states import COLLECTIVES, P2P, mpi_calls
from ddltrace.errors import StoreError
from ddltrace.store import TraceStore


@dataclass
class RankSummary:
    """One rank of a store, summarised for the cross-rank steps. Times in ns on the run's common clock.

    ``damaged`` is the one line saying why the rank could not be read (then nothing else is set); ``phases`` is
    None for a rank with no events. ``breakdown`` has one row per phase (:func:`~ddltrace.analyses.breakdown.
    rank_breakdown`); ``host_breakdown`` and ``device_breakdown`` are set for a rank with a device only.
    ``calls`` holds the rank's MPI calls (:func:`~ddltrace.analyses.wait_states.mpi_calls`), what wait-state
    matching needs across ranks (the reduce passes them to :class:`~ddltrace.analyses.wait_exchange.
    WaitStateExchange` and drops them); ``gpu`` the rank's GPU figures; ``host_collectives`` its host backend's
    collective spans (:func:`~ddltrace.analyses.host_collectives.rank_collectives`, None where it has none), and
    ``collective_comm`` / ``host_collective_comm`` the stretches its breakdown / host breakdown filed as comm that
    overlap them (:func:`~ddltrace.analyses.breakdown.collective_comm`: the reduce files the part spent waiting for
    the last rank as wait); ``events`` the rows read.
    """

    rank: int
    events: int = 0
    damaged: str | None = None
    phases: RankPhases | None = None
    breakdown: pd.DataFrame | None = None
    host_breakdown: pd.DataFrame | None = None
    device_breakdown: pd.DataFrame | None = None
    calls: pd.DataFrame | None = None
    gpu: GpuAnalysis = field(default_factory=GpuAnalysis)
    host_collectives: pd.DataFrame | None = None
    collective_comm: tuple[np.ndarray, np.ndarray] | None = None
    host_collective_comm: tuple[np.ndarray, np.ndarray] | None = None
    #: whether the rank holds point-to-point calls naming a partner, and collective calls
    has_messages: bool = False
    has_collectives: bool = False
    #: the partners of its point-to-point calls within its steady state (a star of them: a parameter server)
    steady_peers: set[int] = field(default_factory=set)
    #: end times (ns) of its steady-state receives of its largest message: a parameter server's gradients
    #: (:func:`~ddltrace.analyses.phases.largest_receive_ends`; its steps once the reduce knows it is a server)
    largest_receive_ends: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))


def summarise_rank(store: str | os.PathLike | TraceStore, rank: int) -> RankSummary:
    """Read rank ``rank`` of the store at ``store`` (a path; an open :class:`TraceStore` is taken as is) and
    summarise it. A rank whose file is damaged comes back with ``damaged`` set, never as an exception: the caller
    names it and goes on with the others."""
    opened = store if isinstance(store, TraceStore) else _open(str(store))
    try:
        timeline = opened._read_timeline(rank)
    except StoreError as exc:
        return RankSummary(rank, damaged=f"{exc}; rank {rank} left out")
    return summarise_timeline(rank, timeline, aggregate=bool(opened.rank_info(rank).get("aggregate")),
                              stopped_ns=stopped_at(opened))


def stopped_at(store: TraceStore) -> int | None:
    """Where the store's job was interrupted (ns; its run's ``interrupted_ns``, which ``ddltrace run`` records), or
    None."""
    value = store.run.get("interrupted_ns")
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def summarise_timeline(rank: int, timeline: pd.DataFrame, aggregate: bool = False,
                       stopped_ns: int | None = None) -> RankSummary:
    """The summary of one rank's timeline (rows of that rank only); ``aggregate``: the rank holds per-call totals
    (no phases are sought, :func:`~ddltrace.analyses.phases.whole_run`); ``stopped_ns``: where the job was
    interrupted (:func:`~ddltrace.analyses.phases.segment_rank`)."""
    out = RankSummary(rank, events=len(timeline))
    if "source" in timeline and (sampled := (timeline["source"] == SAMPLED_STACKS).to_numpy(bool)).any():
        timeline = timeline[~sampled]  # (a copy only where there are py-spy's rows to leave out)
    found = whole_run(timeline) if aggregate else segment_rank(timeline, stopped_ns)
    if found is None:
        return out
    segments = rank_segments(timeline, found)
    out.phases = replace(found, steps=found.steps.assign(compute_ns=time_in_steps(*segments, found.steps)))
    out.breakdown = phase_breakdown(*segments, found)
    spans = host_collectives.rank_collectives(rank, timeline)
    if len(spans):
        out.host_collectives, out.collective_comm = spans, collective_comm(*segments, spans)
    on_device = device_lanes(timeline["lane"])
    if on_device.any():
        host = timeline[host_lanes(timeline["lane"])]
        # the host's gaps are its own work where it recorded any; a host that recorded nothing (a device-only
        # trace: rocprofv3's kernel dispatches) ran nothing recorded, idle, not 100 % compute
        host_segments = rank_segments(host, found, gap=None if len(host) else "idle")
        out.host_breakdown = phase_breakdown(*host_segments, found)
        if len(spans):
            out.host_collective_comm = collective_comm(*host_segments, spans)
        out.device_breakdown = rank_breakdown(timeline[on_device], found, gap="idle")
    out.calls = calls = mpi_calls(timeline)
    p2p = calls[calls["name"].isin(P2P) & (calls["peer"] >= 0)]
    out.has_messages = bool(len(p2p))
    out.has_collectives = bool(calls["name"].isin(COLLECTIVES).any())
    steady = (p2p["start_ns"] >= found.init_end_ns) & (p2p["end_ns"] <= found.steady_end_ns)
    out.steady_peers = set(p2p.loc[steady, "peer"].tolist())
    if not aggregate:
        out.largest_receive_ends = largest_receive_ends(calls, found.init_end_ns, found.steady_end_ns)
    out.gpu.add_rank(rank, timeline)
    return out


_OPENED: dict[tuple[str, int], TraceStore] = {}


def keep_open(store: TraceStore) -> None:
    """Let :func:`summarise_rank` in this process use ``store``, already open, rather than open it again (and
    warn again about its damaged parts)."""
    _OPENED.clear()
    _OPENED[_key(str(store.path))] = store


def _key(path: str) -> tuple[str, int]:
    manifest = Path(path) / "manifest.json"
    return os.path.abspath(path), manifest.stat().st_mtime_ns if manifest.exists() else 0


def _open(path: str) -> TraceStore:
    """The store at ``path``, opened once per process and manifest (a worker summarises many ranks of one store)."""
    key = _key(path)
    if key not in _OPENED:
        _OPENED.clear()
        _OPENED[key] = TraceStore.open(path)
    return _OPENED[key]
