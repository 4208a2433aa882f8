"""Wait states of a store rank by rank, in memory bounded by the largest rank (the reduce side of
:func:`~ddltrace.analyses.run_analysis.analyze_store`).

Scalasca's patterns (:mod:`~ddltrace.analyses.wait_states`) need two ranks at once: a receive is late-sender time
only against the matching send's entry on another rank, a barrier's wait only against the last rank's entry.
Holding every rank's MPI calls to match them costs memory in proportion to the whole job (10^8 calls: gigabytes).
Here each rank's calls pass once, as the ranks' summaries arrive:

* its calls are written to a scratch folder (``calls-N.bin``: the columns of
  :func:`~ddltrace.analyses.wait_states.mpi_calls` one after the other, int64, then the names as int8 codes:
  57 bytes per call), in one file opened once;
* for each partner it exchanges point-to-point messages with, the columns the partner needs of its sends and
  receives to that partner (rank, name, entry, peer, tag, communicator: 29 bytes a call) are appended to the
  partner's inbox (``inbox-M.bin``), in the rank's order;
* its collective calls are folded into the per-instance figures (how many ranks, the latest entry, the earliest
  leave, the root's entry: :func:`~ddltrace.analyses.wait_states.instance_aggregates`), whose size is that of a
  rank's collectives, not of the job's.

Then, rank by rank, :meth:`WaitStateExchange.rank_states` matches the rank's own calls with its inbox (the FIFO
sequence numbers of a channel depend only on the sender's sends or the receiver's receives, all of which are
there) and the collective figures, keeps the instances of that rank, and adds them up per pattern, partner and
phase: in numpy for a rank whose non-blocking calls complete nothing (:func:`blocking_states`: look-up tables of
the name codes, one int64 key per channel and FIFO number, sums per sorted run of keys), through pandas
otherwise. The instances are exactly those of :func:`~ddltrace.analyses.wait_states.wait_states` on all ranks' calls
(tests/test_analyze_mapreduce.py compares them).
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

from ddltrace.analyses.phases import PARTS, RankPhases
from ddltrace.analyses.wait_states import (
    BARRIER,
    BLOCKING_RECEIVES,
    COLLECTIVE_NAMES,
    COLLECTIVES,
    COLUMNS,
    MESSAGE_RECEIVES,
    MESSAGE_SENDS,
    MISSING,
    N_TO_1,
    N_TO_N,
    NONE_EARLY,
    NONE_LATE,
    ONE_TO_N,
    P2P,
    PATTERNS,
    PROBES,
    RECV_NONBLOCKING,
    RELEVANT,
    SEND_BLOCKING,
    SEND_NONBLOCKING,
    WAITS,
    InstanceFold,
    collective_rows,
    collective_wait_states,
    following,
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
_PARTNERED = np.array(sorted(MESSAGE_SENDS | MESSAGE_RECEIVES), dtype=object)


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
        found, uniques = pd.factorize(calls["name"])
        codes = np.array([_CODE[n] for n in uniques], dtype=np.int8)[found] if len(found) else \
            np.zeros(0, dtype=np.int8)
        own = {"name": codes, **{c: calls[c].to_numpy(np.int64) for c in _NUMERIC}}
        with open(self.folder / f"calls-{rank}.bin", "wb") as fh:
            for c in (*_NUMERIC, "name"):  # the int64 columns first: each read back aligned
                fh.write(memoryview(np.ascontiguousarray(own[c])).cast("B"))
        partnered = _IS["partnered"][codes] & (own["peer"] >= 0)
        if partnered.any():
            out = np.empty(int(partnered.sum()), dtype=INBOX)
            out["rank"] = rank
            for c in ("name", "start_ns", "peer", "tag", "comm"):
                out[c] = own[c][partnered]
            out = out[np.argsort(out["peer"], kind="stable")]  # grouped by partner, in the rank's order within
            bounds = np.flatnonzero(np.diff(out["peer"])) + 1
            for part in np.split(out, bounds):
                with open(self.folder / f"inbox-{int(part['peer'][0])}.bin", "ab") as fh:
                    fh.write(part.tobytes())
        coll = np.flatnonzero(_COLLECTIVE_CODE[codes] >= 0)
        if len(coll):
            self.fold.add_rank(rank, _COLLECTIVE_CODE[codes[coll]], own["comm"][coll], own["start_ns"][coll],
                               own["end_ns"][coll], own["peer"][coll])

    def _own(self, rank: int) -> dict[str, np.ndarray]:
        """One rank's calls as :meth:`add` wrote them: a column per name."""
        raw = np.fromfile(self.folder / f"calls-{rank}.bin", dtype=np.uint8)
        n = len(raw) // (1 + 8 * len(_NUMERIC))
        own = {c: raw[8 * n * i:8 * n * (i + 1)].view(np.int64) for i, c in enumerate(_NUMERIC)}
        own["name"] = raw[8 * n * len(_NUMERIC):].view(np.int8)
        return own

    def _calls(self, rank: int) -> pd.DataFrame:
        saved = self._own(rank)
        frame = pd.DataFrame({"rank": np.full(len(saved["name"]), rank, dtype=np.int64),
                              "name": pd.Categorical.from_codes(saved["name"], dtype=_NAME_TYPE),
                              **{c: saved[c] for c in _NUMERIC}})
        return frame[["rank", "name", "start_ns", "end_ns", "peer", "tag", "comm", "request", "bytes"]]

    def _inbox(self, rank: int) -> pd.DataFrame:
        path = self.folder / f"inbox-{rank}.bin"
        rows = np.fromfile(path, dtype=INBOX) if path.exists() else np.empty(0, dtype=INBOX)
        minus = np.full(len(rows), MISSING, dtype=np.int64)
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
        out, fast = [], []
        ranks = sorted(self.ranks)
        for done, rank in enumerate(ranks):
            if progress is not None:
                progress(done, len(ranks))
            own = self._own(rank)
            if _completes_nothing(own):  # the common case, in numpy: see blocking_states
                path = self.folder / f"inbox-{rank}.bin"
                inbox = np.fromfile(path, dtype=INBOX) if path.exists() else np.empty(0, dtype=INBOX)
                fast.append(blocking_states(rank, own, inbox, self.fold, phases.get(rank)))
                continue
            states = self.rank_states(rank)
            if not len(states):
                continue
            phase = phases[rank].phase_of(states["enter_ns"]) if rank in phases else \
                np.full(len(states), None, dtype=object)
            out.append(summarise_states(states.assign(phase=phase)))
        if progress is not None:
            progress(len(ranks), len(ranks))
        if fast:
            out.append(_summary_frame(*(np.concatenate(column) for column in zip(*fast, strict=True))))
        out = [part for part in out if len(part)]
        if not out:
            return empty_summary()
        return pd.concat(out).sort_values(["pattern", "rank", "peer", "phase"], kind="stable") \
            .reset_index(drop=True)


def _table(names) -> np.ndarray:
    """Whether each name code (an index into :data:`NAMES`) is one of ``names``: a look-up table."""
    return np.isin(NAMES, list(names))


#: Per group of names, a table of the name codes in it (``_IS[group][codes]``: a mask, one look-up per call).
_IS = {group: _table(names) for group, names in (
    ("recv", MESSAGE_RECEIVES), ("send", MESSAGE_SENDS),
    ("late_sender", BLOCKING_RECEIVES), ("late_receiver", SEND_BLOCKING), ("post", SEND_NONBLOCKING | RECV_NONBLOCKING),
    ("wait", WAITS), ("probe", PROBES), ("barrier", BARRIER), ("nxn", N_TO_N), ("n_to_1", N_TO_1),
    ("one_to_n", ONE_TO_N), ("partnered", _PARTNERED))}
_COLLECTIVE_CODE = np.array([COLLECTIVE_NAMES.index(n) if n in COLLECTIVES else -1 for n in NAMES], np.int16)
_PATTERN = {p: i for i, p in enumerate(PATTERNS)}
_PATTERNS = np.array(list(PATTERNS), dtype=object)
_PHASES = np.array([*PARTS, None], dtype=object)  # a phase, the part after the stop, or none


def _completes_nothing(own: dict[str, np.ndarray]) -> bool:
    """Whether no non-blocking call of one rank's calls (:meth:`WaitStateExchange._own`) is completed by a Wait*
    (a request on both sides): then only blocking calls wait, and :func:`blocking_states` gives the instances."""
    name = own["name"][own["request"] != MISSING]
    return not (_IS["post"][name].any() and _IS["wait"][name].any())


def _fifo_seq(group: np.ndarray, start: np.ndarray) -> np.ndarray:
    """Each row's number within its group (ids in ``group``), in order of ``start`` then of the row: MPI's
    non-overtaking order, as :func:`~ddltrace.analyses.wait_states.match_messages` and ``collective_rows``
    number them."""
    order = np.lexsort((start, group))  # lexsort is stable: ties keep the rows' order
    first = np.ones(len(order), dtype=bool)
    first[1:] = group[order][1:] != group[order][:-1]
    run_start = np.maximum.accumulate(np.where(first, np.arange(len(order)), 0))
    seq = np.empty(len(order), dtype=np.int64)
    seq[order] = np.arange(len(order)) - run_start
    return seq


def _channels(comm, partner, tag) -> np.ndarray:
    """One int64 per (comm, partner, tag) of the rows of both sides concatenated (equal tuples, equal ids): the
    columns as digits of a mixed-radix number, each from its smallest value (a column whose range would overflow
    the number is numbered by its distinct values instead). The ids are below ``max(2**31, rows)``, so that a FIFO
    number can be added as one more digit."""
    key, span = np.zeros(len(comm), dtype=np.int64), 1
    for column in (comm, partner, tag):
        lo, hi = int(column.min()), int(column.max())
        if span * (hi - lo + 1) < 2**62:
            key, span = key * (hi - lo + 1) + (column - lo), span * (hi - lo + 1)
            continue
        key, known = pd.factorize(key)  # fewer than rows each: the product fits
        codes, uniques = pd.factorize(column)
        key, span = key * len(uniques) + codes, len(known) * len(uniques)
    return key if span < 2**31 else pd.factorize(key)[0].astype(np.int64)


def blocking_states(rank: int, own: dict[str, np.ndarray], inbox: np.ndarray, fold: InstanceFold,
                    phases: RankPhases | None) -> tuple[np.ndarray, ...]:
    """The wait-state sums of ``rank`` when its non-blocking calls complete nothing (:func:`_completes_nothing`),
    in numpy: each blocking receive (send) matched on (comm, partner, tag, FIFO number) with the partner's send
    (receive) from the inbox, ``min(partner's entry, leave) - entry`` (Late Sender, Late Receiver), and each blocking
    probe with the send of the message its receive takes (Late Sender); each collective
    with its instance's figures (``fold``). The same instances as :meth:`WaitStateExchange.rank_states` (a
    non-blocking call that nothing completes waits nowhere). Returns the arrays of :func:`_summary_frame`."""
    name, start, end = own["name"], own["start_ns"], own["end_ns"]
    peer, tag, comm = own["peer"], own["tag"], own["comm"]
    pattern, partner, enter, time = [], [], [], []
    for kind, mine, theirs in (("late_sender", "recv", "send"), ("late_receiver", "send", "recv")):
        rows = np.flatnonzero(_IS[mine][name] & (peer >= 0))
        other = inbox[_IS[theirs][inbox["name"]]]
        if not len(rows) or not len(other):
            continue
        # the blocking probes wait for the message of the receive after them (Late Sender only)
        probes = np.flatnonzero(_IS["probe"][name] & (peer >= 0)) if kind == "late_sender" else rows[:0]
        n, m = len(rows), len(probes)
        channel = _channels(np.concatenate([comm[rows], comm[probes], other["comm"]]),
                            np.concatenate([peer[rows], peer[probes], other["rank"].astype(np.int64)]),
                            np.concatenate([tag[rows], tag[probes], other["tag"].astype(np.int64)]))
        seq = np.concatenate([_fifo_seq(channel[:n], start[rows]), _fifo_seq(channel[n + m:], other["start_ns"])])
        key = channel[np.r_[0:n, n + m:len(channel)]] * (int(seq.max()) + 1) + seq  # per (channel, FIFO number)
        blocking = _IS[kind][name[rows]]
        _, here, there = np.intersect1d(key[:n][blocking], key[n:], assume_unique=True, return_indices=True)
        matched = rows[blocking][here]
        send_enter = other["start_ns"][there]
        taken = following(channel[n:n + m], start[probes], channel[:n], start[rows])
        if (taken >= 0).any():  # a probe's send: that of its receive's message, looked up among the sends' keys
            probes, taken = probes[taken >= 0], key[:n][taken[taken >= 0]]
            sorter = np.argsort(key[n:])
            at = np.minimum(np.searchsorted(key[n:], taken, sorter=sorter), len(sorter) - 1)
            sent = key[n:][sorter[at]] == taken
            matched = np.r_[matched, probes[sent]]
            send_enter = np.r_[send_enter, other["start_ns"][sorter[at[sent]]]]
        pattern.append(np.full(len(matched), _PATTERN[kind]))
        partner.append(peer[matched])
        enter.append(start[matched])
        time.append(np.minimum(send_enter, end[matched]) - start[matched])
    coll = np.flatnonzero(_COLLECTIVE_CODE[name] >= 0)
    for c in np.unique(comm[coll]):
        rows = coll[comm[coll] == c]
        rows = rows[np.argsort(start[rows], kind="stable")]  # the rank's k-th collective on c: instance k
        agg = fold.comms[int(c)]
        valid = (agg["n"][:len(rows)] > 1) & (agg["name"][:len(rows)] == _COLLECTIVE_CODE[name[rows]])
        k = np.flatnonzero(valid)
        rows = rows[valid]
        s, e, kind = start[rows], end[rows], name[rows]
        waits = np.minimum(agg["max_enter"][k], e) - s
        barrier = _IS["barrier"][kind]
        for label, mask, value in (("wait_at_barrier", barrier, waits),
                                   ("barrier_completion", barrier, e - agg["min_leave"][k]),
                                   ("wait_at_nxn", _IS["nxn"][kind], waits)):
            pattern.append(np.full(int(mask.sum()), _PATTERN[label]))
            partner.append(np.full(int(mask.sum()), -1, dtype=np.int64))
            enter.append(s[mask])
            time.append(value[mask])
        rooted = peer[rows] >= 0
        is_root = rooted & (peer[rows] == rank)
        others, root = agg["others_enter"][k], agg["root_enter"][k]
        early = is_root & _IS["n_to_1"][kind]
        late = rooted & ~is_root & _IS["one_to_n"][kind]
        for label, mask, value, who in (
                ("early_reduce", early, np.where(others == NONE_EARLY, 0, np.minimum(others, e) - s),
                 np.full(len(rows), -1, dtype=np.int64)),
                ("late_broadcast", late, np.where(root == NONE_LATE, 0, np.minimum(root, e) - s), peer[rows])):
            pattern.append(np.full(int(mask.sum()), _PATTERN[label]))
            partner.append(who[mask])
            enter.append(s[mask])
            time.append(value[mask])
    if not pattern:
        return tuple(np.zeros(0, dtype=np.int64) for _ in range(6))
    pattern, partner, enter, time = (np.concatenate(x) for x in (pattern, partner, enter, time))
    keep = time > 0
    pattern, partner, enter, time = pattern[keep], partner[keep], enter[keep], time[keep]
    phase = np.full(len(time), len(PARTS)) if phases is None else phases.part_of(enter)
    # one group per (pattern, partner, phase): sorted on one int64 key, counted and summed per run (exact int64)
    peers, peer_code = np.unique(partner, return_inverse=True)
    key = (pattern.astype(np.int64) * len(peers) + peer_code) * (len(PARTS) + 1) + phase
    order = np.argsort(key, kind="stable")
    key = key[order]
    first = np.flatnonzero(np.r_[True, key[1:] != key[:-1]]) if len(key) else np.zeros(0, dtype=np.int64)
    instances = np.diff(np.r_[first, len(key)])
    sums = np.add.reduceat(time[order], first) if len(first) else np.zeros(0, dtype=np.int64)
    pick = order[first]
    return (pattern[pick], np.full(len(first), rank, dtype=np.int64), partner[pick], phase[pick],
            instances.astype(np.int64), sums.astype(np.int64))


def _summary_frame(pattern, rank, peer, phase, instances, time_ns) -> pd.DataFrame:
    """The summary rows (:data:`SUMMARY_COLUMNS`) of arrays: pattern and phase as codes (indices into
    :data:`~ddltrace.analyses.wait_states.PATTERNS` and :data:`~ddltrace.analyses.phases.PARTS`, its length:
    no phase)."""
    return pd.DataFrame({"pattern": _PATTERNS[pattern], "rank": rank.astype(np.int64),
                         "peer": peer.astype(np.int64), "phase": _PHASES[phase],
                         "instances": instances.astype(np.int64), "time_ns": time_ns.astype(np.int64)})


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
