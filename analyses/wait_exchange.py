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

import contextlib
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

from ddltrace.analyses.phases import PHASES, RankPhases
from ddltrace.analyses.wait_states import (
    BARRIER,
    COLLECTIVE_NAMES,
    COLLECTIVES,
    COLUMNS,
    N_TO_1,
    N_TO_N,
    NONE_EARLY,
    NONE_LATE,
    ONE_TO_N,
    P2P,
    PATTERNS,
    RECV_BLOCKING,
    RECV_NONBLOCKING,
    RELEVANT,
    SEND_BLOCKING,
    SEND_NONBLOCKING,
    WAITS,
    InstanceFold,
    collective_rows,
    collective_wait_states,
    point_to_point,
)
from ddltrace.interrupts import sigterm_unwinds

#: The names of the MPI calls kept, numbered for the scratch files.
NAMES = np.array(sorted(RELEVANT), dtype=object)
_CODE = {n: i for i, n in enumerate(NAMES)}
#: Names read back as a categorical of these (cheap to build and compare, unlike a column of strings).
_NAME_TYPE = pd.CategoricalDtype(list(NAMES))
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
    folder to write in (default: a temporary folder ``ddltrace-waits-*`` in ``$TMPDIR``, removed by :meth:`close`).
    Used as a context, the temporary folder is removed however the block ends: an exception, Ctrl-C, or a SIGTERM
    (:func:`~ddltrace.interrupts.sigterm_unwinds` is in force within it)."""

    def __init__(self, scratch: str | Path | None = None):
        self._temporary = tempfile.TemporaryDirectory(prefix="ddltrace-waits-") if scratch is None else None
        self.folder = Path(self._temporary.name if scratch is None else scratch)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.fold = InstanceFold()
        self._aggregates: pd.DataFrame | None = None
        self.ranks: list[int] = []
        self._signals = contextlib.ExitStack()

    def close(self) -> None:
        if self._temporary is not None:
            self._temporary.cleanup()
        self._signals.close()

    def __enter__(self) -> WaitStateExchange:
        self._signals.enter_context(sigterm_unwinds())
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def add(self, rank: int, calls: pd.DataFrame) -> None:
        """Take one rank's calls (:func:`~ddltrace.analyses.wait_states.mpi_calls` of that rank)."""
        self.ranks.append(rank)
        found, uniques = pd.factorize(calls["name"].to_numpy(dtype=object))
        codes = np.array([_CODE[n] for n in uniques], dtype=np.int8)[found] if len(found) else \
            np.zeros(0, dtype=np.int8)
        np.savez(self.folder / f"calls-{rank}.npz", name=codes,
                 **{c: calls[c].to_numpy(np.int64) for c in _NUMERIC})
        partnered = np.isin(codes, [_CODE[n] for n in _PARTNERED]) & (calls["peer"].to_numpy() >= 0)
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
        self.fold.add(collective_rows(calls))

    def _calls(self, rank: int) -> pd.DataFrame:
        with np.load(self.folder / f"calls-{rank}.npz") as saved:
            frame = pd.DataFrame({"rank": np.full(len(saved["name"]), rank, dtype=np.int64),
                                  "name": pd.Categorical.from_codes(saved["name"], dtype=_NAME_TYPE),
                                  **{c: saved[c] for c in _NUMERIC}})
        return frame[["rank", "name", "start_ns", "end_ns", "peer", "tag", "comm", "request", "bytes"]]

    def _inbox(self, rank: int) -> pd.DataFrame:
        path = self.folder / f"inbox-{rank}.bin"
        rows = np.fromfile(path, dtype=INBOX) if path.exists() else np.empty(0, dtype=INBOX)
        minus = np.full(len(rows), -1, dtype=np.int64)
        return pd.DataFrame({"rank": rows["rank"].astype(np.int64),
                             "name": pd.Categorical.from_codes(rows["name"], dtype=_NAME_TYPE),
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
            p2p = point_to_point(pd.concat([own, self._inbox(rank)], ignore_index=True))
            parts.append(p2p[p2p["rank"] == rank])
        coll = collective_rows(own)
        if len(coll):
            if self._aggregates is None:
                self._aggregates = self.fold.frame()
            parts.append(collective_wait_states(coll, self._aggregates))
        parts = [p for p in parts if len(p)]
        if not parts:
            return pd.DataFrame({c: pd.Series(dtype="object" if c in ("pattern", "name") else "int64")
                                 for c in COLUMNS})
        states = pd.concat(parts, ignore_index=True)
        return states[states["time_ns"] > 0][COLUMNS]

    def summary(self, phases: dict[int, RankPhases],
                progress: Callable[[int, int], None] | None = None) -> pd.DataFrame:
        """Wait-state time (ns) and instances per rank, pattern, partner and phase of the waiting rank (phases
        ``phases``; a rank without phases gets phase None), over every rank added. ``progress(done, total)`` is
        called before the first rank is matched and after each rank (ranks matched, ranks to match)."""
        out = []
        ranks = sorted(self.ranks)
        for done, rank in enumerate(ranks):
            if progress is not None:
                progress(done, len(ranks))
            with np.load(self.folder / f"calls-{rank}.npz") as saved:
                own = {c: saved[c] for c in ("name", *_NUMERIC)}
            if _completes_nothing(own):  # the common case, in numpy: see blocking_states
                path = self.folder / f"inbox-{rank}.bin"
                inbox = np.fromfile(path, dtype=INBOX) if path.exists() else np.empty(0, dtype=INBOX)
                out.append(blocking_states(rank, own, inbox, self.fold, phases.get(rank)))
                continue
            states = self.rank_states(rank)
            if not len(states):
                continue
            phase = phases[rank].phase_of(states["enter_ns"]) if rank in phases else \
                np.full(len(states), None, dtype=object)
            out.append(summarise_states(states.assign(phase=phase)))
        if progress is not None:
            progress(len(ranks), len(ranks))
        if not out:
            return empty_summary()
        out = [part for part in out if len(part)]
        if not out:
            return empty_summary()
        return pd.concat(out).sort_values(["pattern", "rank", "peer", "phase"], kind="stable") \
            .reset_index(drop=True)


def _codes(names) -> np.ndarray:
    return np.array(sorted(_CODE[n] for n in names), dtype=np.int8)


_RECVS, _SENDS = _codes(RECV_BLOCKING | RECV_NONBLOCKING), _codes(SEND_BLOCKING | SEND_NONBLOCKING)
_BLOCKING = {"late_sender": _codes(RECV_BLOCKING), "late_receiver": _codes(SEND_BLOCKING)}
_POSTS, _WAITS = _codes(SEND_NONBLOCKING | RECV_NONBLOCKING), _codes(WAITS)
_KIND = {name: _codes(names) for name, names in (("barrier", BARRIER), ("nxn", N_TO_N), ("n_to_1", N_TO_1),
                                                 ("one_to_n", ONE_TO_N), ("collective", COLLECTIVES))}
_COLLECTIVE_CODE = np.array([COLLECTIVE_NAMES.index(n) if n in COLLECTIVES else -1 for n in NAMES], np.int16)
_PATTERN = {p: i for i, p in enumerate(PATTERNS)}
_PHASES = np.array([*PHASES, None], dtype=object)


def _completes_nothing(own: dict) -> bool:
    """Whether no non-blocking call of one rank's calls (the arrays of ``calls-N.npz``) is completed by a Wait* (a
    request on both sides): then only blocking calls wait, and :func:`blocking_states` gives the instances."""
    with_request = own["request"] >= 0
    return not (np.isin(own["name"], _POSTS)[with_request].any() and np.isin(own["name"], _WAITS)[with_request].any())


def _fifo_seq(group: np.ndarray, start: np.ndarray) -> np.ndarray:
    """Each row's number within its group (ids in ``group``), in order of ``start`` then of the row: MPI's
    non-overtaking order, as :func:`~ddltrace.analyses.wait_states.match_messages` and ``collective_rows``
    number them."""
    order = np.lexsort((np.arange(len(start)), start, group))
    first = np.ones(len(order), dtype=bool)
    first[1:] = group[order][1:] != group[order][:-1]
    run_start = np.maximum.accumulate(np.where(first, np.arange(len(order)), 0))
    seq = np.empty(len(order), dtype=np.int64)
    seq[order] = np.arange(len(order)) - run_start
    return seq


def _channel_keys(comm, partner, tag, seq) -> np.ndarray:
    """One int64 per (comm, partner, tag, seq) of the rows of both sides concatenated (equal tuples, equal keys)."""
    key = np.zeros(len(comm), dtype=np.int64)
    for column in (comm, partner, tag, seq):
        codes, uniques = pd.factorize(column)
        key = key * len(uniques) + codes
    return key


def blocking_states(rank: int, own: dict, inbox: np.ndarray, fold: InstanceFold,
                    phases: RankPhases | None) -> pd.DataFrame:
    """The wait-state summary (:data:`SUMMARY_COLUMNS`) of ``rank`` when its non-blocking calls complete nothing
    (:func:`_completes_nothing`), in numpy: each blocking receive (send) matched on (comm, partner, tag, FIFO
    number) with the partner's send (receive) from the inbox, ``min(partner's entry, leave) - entry`` (Late Sender,
    Late Receiver); each collective with its instance's figures (``fold``). The same instances as
    :meth:`WaitStateExchange.rank_states` (a non-blocking call that nothing completes waits nowhere)."""
    name, start, end = own["name"], own["start_ns"], own["end_ns"]
    peer, tag, comm = own["peer"], own["tag"], own["comm"]
    pattern, partner, enter, time = [], [], [], []
    for kind, mine, theirs in (("late_sender", _RECVS, _SENDS), ("late_receiver", _SENDS, _RECVS)):
        rows = np.flatnonzero(np.isin(name, mine) & (peer >= 0))
        other = inbox[np.isin(inbox["name"], theirs)]
        if not len(rows) or not len(other):
            continue
        n = len(rows)
        c = np.concatenate([comm[rows], other["comm"]])
        p = np.concatenate([peer[rows], other["rank"].astype(np.int64)])
        t = np.concatenate([tag[rows], other["tag"].astype(np.int64)])
        channel = _channel_keys(c, p, t, np.zeros(len(c), dtype=np.int64))
        seq = np.concatenate([_fifo_seq(channel[:n], start[rows]), _fifo_seq(channel[n:], other["start_ns"])])
        key = _channel_keys(c, p, t, seq)
        blocking = np.isin(name[rows], _BLOCKING[kind])
        _, here, there = np.intersect1d(key[:n][blocking], key[n:], assume_unique=True, return_indices=True)
        matched = rows[blocking][here]
        pattern.append(np.full(len(matched), _PATTERN[kind]))
        partner.append(peer[matched])
        enter.append(start[matched])
        time.append(np.minimum(other["start_ns"][there], end[matched]) - start[matched])
    coll = np.flatnonzero(np.isin(name, _KIND["collective"]))
    for c in np.unique(comm[coll]):
        rows = coll[comm[coll] == c]
        rows = rows[np.argsort(start[rows], kind="stable")]  # the rank's k-th collective on c: instance k
        agg = fold.comms[int(c)]
        valid = (agg["n"][:len(rows)] > 1) & (agg["name"][:len(rows)] == _COLLECTIVE_CODE[name[rows]])
        k = np.flatnonzero(valid)
        rows = rows[valid]
        s, e, kind = start[rows], end[rows], name[rows]
        waits = np.minimum(agg["max_enter"][k], e) - s
        for label, mask, value, who in (
                ("wait_at_barrier", np.isin(kind, _KIND["barrier"]), waits, -1),
                ("barrier_completion", np.isin(kind, _KIND["barrier"]), e - agg["min_leave"][k], -1),
                ("wait_at_nxn", np.isin(kind, _KIND["nxn"]), waits, -1)):
            pattern.append(np.full(int(mask.sum()), _PATTERN[label]))
            partner.append(np.full(int(mask.sum()), who, dtype=np.int64))
            enter.append(s[mask])
            time.append(value[mask])
        rooted = peer[rows] >= 0
        is_root = rooted & (peer[rows] == rank)
        others, root = agg["others_enter"][k], agg["root_enter"][k]
        early = is_root & np.isin(kind, _KIND["n_to_1"])
        late = rooted & ~is_root & np.isin(kind, _KIND["one_to_n"])
        for label, mask, value, who in (
                ("early_reduce", early, np.where(others == NONE_EARLY, 0, np.minimum(others, e) - s),
                 np.full(len(rows), -1, dtype=np.int64)),
                ("late_broadcast", late, np.where(root == NONE_LATE, 0, np.minimum(root, e) - s), peer[rows])):
            pattern.append(np.full(int(mask.sum()), _PATTERN[label]))
            partner.append(who[mask])
            enter.append(s[mask])
            time.append(value[mask])
    if not pattern:
        return empty_summary()
    pattern, partner, enter, time = (np.concatenate(x) for x in (pattern, partner, enter, time))
    keep = time > 0
    phase = np.full(int(keep.sum()), len(PHASES)) if phases is None else \
        np.searchsorted([phases.init_end_ns, phases.steady_end_ns], enter[keep], side="right")
    frame = pd.DataFrame({"pattern": pattern[keep], "peer": partner[keep], "phase": phase, "time_ns": time[keep]})
    grouped = frame.groupby(["pattern", "peer", "phase"], sort=False)["time_ns"].agg(["size", "sum"]).reset_index()
    return pd.DataFrame({"pattern": np.array(list(PATTERNS), dtype=object)[grouped["pattern"].to_numpy()],
                         "rank": np.full(len(grouped), rank, dtype=np.int64),
                         "peer": grouped["peer"].to_numpy(np.int64),
                         "phase": _PHASES[grouped["phase"].to_numpy()],
                         "instances": grouped["size"].to_numpy(np.int64),
                         "time_ns": grouped["sum"].to_numpy(np.int64)})


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
