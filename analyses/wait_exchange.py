"""Wait states of a store rank by rank, in memory bounded by the largest rank (the reduce side of
:func:`~ddltrace.analyses.run_analysis.analyze_store`).

Scalasca's patterns (:mod:`~ddltrace.analyses.wait_states`) need two ranks at once: a receive is late-sender time
only against the matching send's entry on another rank, a barrier's wait only against the last rank's entry.
Holding every rank's MPI calls to match them costs memory in proportion to the whole job (10^8 calls: gigabytes).
Here each rank's calls pass once, as the ranks' summaries arrive:

* its calls are written to a scratch folder (``calls-N.npz``, the columns of
  :func:`~ddltrace.analyses.wait_states.mpi_calls`, names as codes);
* for each partner it exchanges point-to-point messages with, the columns the partner needs of its sends and
  receives to that partner (rank, name, entry, peer, tag, communicator: 29 bytes a call) are appended to the
  partner's inbox (``inbox-M.bin``), in the rank's order;
* its collective calls are folded into the per-instance figures (how many ranks, the latest entry, the earliest
  leave, the root's entry: :func:`~ddltrace.analyses.wait_states.instance_aggregates`), whose size is that of a
  rank's collectives, not of the job's.

Then, rank by rank, :meth:`WaitStateExchange.rank_states` matches the rank's own calls with its inbox (the FIFO
sequence numbers of a channel depend only on the sender's sends or the receiver's receives, all of which are
there) and the collective figures, keeps the instances of that rank, and adds them up per pattern, partner and
phase. The instances are exactly those of :func:`~ddltrace.analyses.wait_states.wait_states` on all ranks' calls
(tests/test_analyze_mapreduce.py compares them).
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

from ddltrace.analyses.phases import RankPhases
from ddltrace.analyses.wait_states import (
    COLUMNS,
    P2P,
    RECV_BLOCKING,
    RECV_NONBLOCKING,
    RELEVANT,
    SEND_BLOCKING,
    SEND_NONBLOCKING,
    collective_rows,
    collective_wait_states,
    instance_aggregates,
    merge_aggregates,
    point_to_point,
)

#: The names of the MPI calls kept, numbered for the scratch files.
NAMES = np.array(sorted(RELEVANT), dtype=object)
_CODE = {n: i for i, n in enumerate(NAMES)}
#: One point-to-point call as a partner needs it.
INBOX = np.dtype([("rank", "<i4"), ("name", "i1"), ("start_ns", "<i8"), ("peer", "<i4"), ("tag", "<i4"),
                  ("comm", "<i8")], align=False)
#: The columns of a wait-state summary: time (ns) and instances per rank, pattern, partner (-1: none) and phase.
SUMMARY_COLUMNS = ["pattern", "rank", "peer", "phase", "instances", "time_ns"]
_NUMERIC = ["start_ns", "end_ns", "peer", "tag", "comm", "request", "bytes"]
_PARTNERED = np.array(sorted(SEND_BLOCKING | SEND_NONBLOCKING | RECV_BLOCKING | RECV_NONBLOCKING), dtype=object)


class WaitStateExchange:
    """The scratch folder and the collective figures of one store's wait-state matching (see the module).

    Use: :meth:`add` each rank's calls, then :meth:`summary` (every rank's states, added up). ``scratch`` is the
    folder to write in (default: a temporary folder, removed by :meth:`close`)."""

    def __init__(self, scratch: str | Path | None = None):
        self._made = scratch is None
        self.folder = Path(tempfile.mkdtemp(prefix="ddltrace-waits-") if scratch is None else scratch)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.aggregates: pd.DataFrame | None = None
        self.ranks: list[int] = []

    def close(self) -> None:
        if self._made:
            shutil.rmtree(self.folder, ignore_errors=True)

    def __enter__(self) -> WaitStateExchange:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def add(self, rank: int, calls: pd.DataFrame) -> None:
        """Take one rank's calls (:func:`~ddltrace.analyses.wait_states.mpi_calls` of that rank)."""
        self.ranks.append(rank)
        codes = np.array([_CODE[n] for n in calls["name"]], dtype=np.int8) if len(calls) < 64 else \
            pd.Series(calls["name"].to_numpy(dtype=object)).map(_CODE).to_numpy(np.int8)
        np.savez(self.folder / f"calls-{rank}.npz", name=codes,
                 **{c: calls[c].to_numpy(np.int64) for c in _NUMERIC})
        partnered = np.isin(calls["name"].to_numpy(dtype=object), _PARTNERED) & (calls["peer"].to_numpy() >= 0)
        if partnered.any():
            out = np.empty(int(partnered.sum()), dtype=INBOX)
            out["rank"], out["name"] = rank, codes[partnered]
            for c in ("start_ns", "peer", "tag", "comm"):
                out[c] = calls[c].to_numpy(np.int64)[partnered]
            order = np.argsort(out["peer"], kind="stable")  # grouped by partner, in the rank's order within
            out = out[order]
            bounds = np.flatnonzero(np.diff(out["peer"])) + 1
            for part in np.split(out, bounds):
                with open(self.folder / f"inbox-{int(part['peer'][0])}.bin", "ab") as fh:
                    fh.write(part.tobytes())
        coll = collective_rows(calls)
        if len(coll):
            self.aggregates = merge_aggregates(self.aggregates, instance_aggregates(coll))

    def _calls(self, rank: int) -> pd.DataFrame:
        with np.load(self.folder / f"calls-{rank}.npz") as saved:
            frame = pd.DataFrame({"rank": np.full(len(saved["name"]), rank, dtype=np.int64),
                                  "name": NAMES[saved["name"]], **{c: saved[c] for c in _NUMERIC}})
        return frame[["rank", "name", "start_ns", "end_ns", "peer", "tag", "comm", "request", "bytes"]]

    def _inbox(self, rank: int) -> pd.DataFrame:
        path = self.folder / f"inbox-{rank}.bin"
        rows = np.fromfile(path, dtype=INBOX) if path.exists() else np.empty(0, dtype=INBOX)
        minus = np.full(len(rows), -1, dtype=np.int64)
        return pd.DataFrame({"rank": rows["rank"].astype(np.int64), "name": NAMES[rows["name"]],
                             "start_ns": rows["start_ns"], "end_ns": rows["start_ns"],
                             "peer": rows["peer"].astype(np.int64), "tag": rows["tag"].astype(np.int64),
                             "comm": rows["comm"], "request": minus, "bytes": minus})

    def rank_states(self, rank: int) -> pd.DataFrame:
        """Every wait-state instance of ``rank`` (columns of :data:`~ddltrace.analyses.wait_states.COLUMNS`,
        times > 0): its point-to-point calls matched with its partners' (its inbox), its collectives with the
        figures of their instances."""
        own = self._calls(rank)
        parts = []
        if own["name"].isin(P2P).any():
            both = pd.concat([own, self._inbox(rank)], ignore_index=True)
            p2p = point_to_point(both)
            parts.append(p2p[p2p["rank"] == rank])
        coll = collective_rows(own)
        if len(coll) and self.aggregates is not None:
            parts.append(collective_wait_states(coll, self.aggregates))
        parts = [p for p in parts if len(p)]
        if not parts:
            return pd.DataFrame({c: pd.Series(dtype="object" if c in ("pattern", "name") else "int64")
                                 for c in COLUMNS})
        states = pd.concat(parts, ignore_index=True)
        return states[states["time_ns"] > 0][COLUMNS]

    def summary(self, phases: dict[int, RankPhases]) -> pd.DataFrame:
        """Wait-state time (ns) and instances per rank, pattern, partner and phase of the waiting rank (phases
        ``phases``; a rank without phases gets phase None), over every rank added."""
        out = []
        for rank in sorted(self.ranks):
            states = self.rank_states(rank)
            if not len(states):
                continue
            phase = phases[rank].phase_of(states["enter_ns"]) if rank in phases else \
                np.full(len(states), None, dtype=object)
            out.append(summarise_states(states.assign(phase=phase)))
        if not out:
            return empty_summary()
        return pd.concat(out).sort_values(["pattern", "rank", "peer", "phase"], kind="stable") \
            .reset_index(drop=True)


def summarise_states(states: pd.DataFrame) -> pd.DataFrame:
    """Instances (columns of :data:`~ddltrace.analyses.wait_states.COLUMNS` and ``phase``) added up per rank,
    pattern, partner and phase: :data:`SUMMARY_COLUMNS`."""
    if not len(states):
        return empty_summary()
    grouped = states.groupby(["pattern", "rank", "peer", "phase"], sort=True, dropna=False)["time_ns"]
    out = grouped.agg(instances="size", time_ns="sum").reset_index()
    out["rank"] = out["rank"].astype("int64")
    out["peer"] = out["peer"].astype("int64")
    out["time_ns"] = out["time_ns"].astype("int64")
    return out[SUMMARY_COLUMNS]


def empty_summary() -> pd.DataFrame:
    return pd.DataFrame({"pattern": pd.Series(dtype="object"), "rank": pd.Series(dtype="int64"),
                         "peer": pd.Series(dtype="int64"), "phase": pd.Series(dtype="object"),
                         "instances": pd.Series(dtype="int64"), "time_ns": pd.Series(dtype="int64")})
