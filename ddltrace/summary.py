"""What a store holds, in numbers: world size, time span, events and time per category per rank.

Used by ``ddltrace info``. Reads the store rank by rank (one rank's events in memory at a time), as Arrow tables and
NumPy arrays, without pandas (``info`` starts in a fraction of a second: :meth:`TraceStore.iter_timeline_tables`).
A rank with a device (lanes ``gpu:<n>/...``) is also split into what its host did (its other lanes) and what its
device did (its device lanes; idle where none runs), each over the rank's span: the all-lanes view counts an instant
as compute when either computes, which hides a device that is idle most of the time behind the host's CPU ops.
Every instant is counted once by the rules of the breakdown (:mod:`ddltrace.analyses.segments`).

A run that was stopped (an interrupt: the store's ``interrupted_ns``, which ``ddltrace run`` records) is counted up to
the stop: a rank's span and its time per category end there, and its time after the stop (its wait for the stop,
then its way out) is its ``after_stop_ns``, in no category, as ``analyze`` leaves it out of the whole run's shares
(:data:`~ddltrace.analyses.phases.AFTER_STOP`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np
import pyarrow as pa

from ddltrace.analyses.segments import (
    CODE,
    SAMPLED_STACKS,
    classify_rows,
    is_annotation_lane,
    is_device_lane,
    lane_flags,
    untraced_gap,
)
from ddltrace.arrow_timeline import CATEGORIES, codes_of, values_of
from ddltrace.store import TraceStore


@dataclass
class RankSummary:
    """One rank: ``events`` intervals from ``start_ns`` to ``end_ns`` (ns, common clock); ``time_ns``: the rank's
    span split by category (ns), each instant counted once as the breakdown does (innermost call within a
    thread, compute across threads), so the categories sum to the span. ``stop_ns``: where the job was stopped
    (the store's ``interrupted_ns``) when that is before the rank's last event's end, else None: the span ends there
    (:attr:`span_ns`), and the rest is :attr:`after_stop_ns`. ``host_time_ns`` and ``device_time_ns``:
    the same over the rank's host lanes and over its device lanes alone, ``device_events`` the rows on its device
    lanes, ``annotation_events`` those on its streams' annotation lanes, in neither view (all four None when the
    rank has no device).
    ``aggregate``: the rank holds per-call totals laid end to end (IPM), not a timeline."""

    rank: int
    events: int
    start_ns: int | None
    end_ns: int | None
    time_ns: dict[str, int] = field(default_factory=dict)
    host: str | None = None
    role: str | None = None
    ended: str | None = None
    host_time_ns: dict[str, int] | None = None
    device_time_ns: dict[str, int] | None = None
    device_events: int | None = None
    aggregate: bool = False
    annotation_events: int | None = None
    stop_ns: int | None = None

    @property
    def span_ns(self) -> int:
        """Wall time from the rank's first event to the end of its last, or to the stop where the job was stopped
        before that (:attr:`stop_ns`), in ns (0 when empty)."""
        return 0 if self.start_ns is None else (self.end_ns if self.stop_ns is None else self.stop_ns) - self.start_ns

    @property
    def after_stop_ns(self) -> int:
        """Wall time from the stop to the end of the rank's last event, in ns (0 where it was not stopped)."""
        return 0 if self.start_ns is None or self.stop_ns is None else self.end_ns - self.stop_ns


@dataclass
class StoreSummary:
    """The whole store: its path, world size, time span (ns), counters and one :class:`RankSummary` per rank;
    ``damaged``: the ranks left out, each with why (:attr:`TraceStore.damaged`); ``unlisted``: the ranks below the
    world size the manifest has no usable entry for (:meth:`TraceStore.missing`, the damaged ones aside)."""

    path: str
    world_size: int
    start_ns: int | None
    end_ns: int | None
    counter_samples: int
    counter_names: list[str]
    ranks: list[RankSummary]
    run: dict
    damaged: dict[int, str] = field(default_factory=dict)
    unlisted: dict[int, str] = field(default_factory=dict)
    #: the manifest's ``workload`` entry: the shipped job's configuration (``ddltrace run`` records it)
    workload: dict = field(default_factory=dict)

    @property
    def span_ns(self) -> int:
        return 0 if self.start_ns is None else self.end_ns - self.start_ns

    @property
    def events(self) -> int:
        return sum(r.events for r in self.ranks)

    def to_dict(self) -> dict:
        out = asdict(self)
        out["span_ns"] = self.span_ns
        out["events"] = self.events
        for rank, summary in zip(out["ranks"], self.ranks, strict=True):
            rank["span_ns"] = summary.span_ns
            rank["after_stop_ns"] = summary.after_stop_ns
        return out


def _time_per_category(rows: dict[str, np.ndarray], start: int | None, end: int | None, lane_names: list[str],
                       names_of=None, gap: str | None = None) -> dict[str, int]:
    """ns per category of the ``rows`` (columns start_ns, dur_ns, categories, lanes: codes into ``lane_names``,
    row: each row's index in the rank's table) over [start, end], each instant once
    (:func:`~ddltrace.analyses.segments.classify_rows`); ``gap`` None: the rows' own
    (:func:`~ddltrace.analyses.segments.untraced_gap`; ``names_of(row)``, the distinct names of those rows, is read
    only where no row computes)."""
    if not len(rows["start_ns"]) or start is None or end <= start:
        return dict.fromkeys(CATEGORIES, 0)
    if gap is None:
        computes = (rows["categories"] == CODE["compute"]).any()
        gap = "idle" if computes else untraced_gap(rows["categories"], names_of(rows["row"]))
    edges, codes = classify_rows(rows["start_ns"], rows["dur_ns"], rows["categories"], rows["lanes"], [start, end],
                                 gap, lane_names)
    sums = np.bincount(codes.astype(np.int64), weights=np.diff(edges), minlength=len(CATEGORIES))
    return {c: int(sums[i]) for i, c in enumerate(CATEGORIES)}


def _columns(table: pa.Table) -> tuple[dict[str, np.ndarray], list[str]]:
    """What the summary reads of a rank's table: start_ns and dur_ns (ns), categories (index into CATEGORIES), lanes
    (a code per distinct lane, -1: none), row (each row's index), and the lanes' names."""
    categories, names = codes_of(table.column("category"))
    lookup = np.array([CODE.get(name, -1) for name in names] + [-1], dtype=np.int16)
    lanes, lane_names = codes_of(table.column("lane"))
    return {"start_ns": values_of(table.column("start_ns"))[0].astype(np.int64, copy=False),
            "dur_ns": values_of(table.column("dur_ns"))[0].astype(np.int64, copy=False),
            "categories": lookup[categories], "lanes": lanes, "row": np.arange(table.num_rows)}, lane_names


def _names_of(table: pa.Table):
    """``names_of(rows)``: the distinct names of the table's ``rows`` (indices), the name column read once."""
    read = []

    def names_of(rows: np.ndarray) -> list[str]:
        if not read:
            read.append(codes_of(table.column("name")))
        codes, names = read[0]
        return [names[i] for i in np.unique(codes[rows]) if i >= 0]
    return names_of


def stopped_at(run) -> int | None:
    """Where the store's job was stopped (ns; its run's ``interrupted_ns``), or None (as
    :func:`~ddltrace.analyses.rank_summary.stopped_at`, which ``info`` does not import: it starts without pandas)."""
    value = run.get("interrupted_ns") if isinstance(run, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _rank_summary(rank: int, table: pa.Table, info: dict, sampled: bool = False,
                  stopped_ns: int | None = None) -> RankSummary:
    """One rank's row of ``info``; ``sampled``: the run recorded py-spy's stacks, whose rows are neither the rank's
    time nor its span (as the analyses leave them out: :data:`~ddltrace.analyses.segments.SAMPLED_STACKS`);
    ``stopped_ns``: where the job was stopped (:func:`stopped_at`): the rank's time is counted up to there."""
    events = table.num_rows
    if sampled:
        sources, source_names = codes_of(table.column("source"))
        if SAMPLED_STACKS in source_names:
            table = table.filter(pa.array(sources != source_names.index(SAMPLED_STACKS)))
    rows, lane_names = _columns(table)
    names_of = _names_of(table)
    count = len(rows["start_ns"])
    start = int(rows["start_ns"].min()) if count else None
    end = int((rows["start_ns"] + rows["dur_ns"]).max()) if count else None
    stopped = stopped_ns is not None and count and stopped_ns < end and not info.get("aggregate")  # (totals: no time)
    stop = max(stopped_ns, start) if stopped else None
    until = end if stop is None else stop  # (the time after the stop is no category's: the module says why)
    time_ns = _time_per_category(rows, start, until, lane_names, names_of)
    host_ns = device_ns = None
    flagged = np.where(rows["lanes"] < 0, len(lane_names), rows["lanes"])  # a missing lane's name is ""
    on_device = lane_flags(flagged, [*lane_names, ""], is_device_lane)
    marks = lane_flags(flagged, [*lane_names, ""], is_annotation_lane)
    if on_device.any():
        host_ns = _time_per_category({k: v[~on_device & ~marks] for k, v in rows.items()}, start, until, lane_names,
                                     names_of)
        device_ns = _time_per_category({k: v[on_device] for k, v in rows.items()}, start, until, lane_names,
                                       gap="idle")
    return RankSummary(rank, events, start, end, time_ns, info.get("host"), info.get("role"), info.get("ended"),
                       host_ns, device_ns, int(on_device.sum()) if device_ns else None, bool(info.get("aggregate")),
                       int(marks.sum()) if device_ns else None, stop)


def summarize(store: TraceStore) -> StoreSummary:
    """Summarise ``store`` rank by rank."""
    sampled = SAMPLED_STACKS in (store.run.get("collectors") or [])
    stopped = stopped_at(store.run)
    ranks = [_rank_summary(rank, table, store.rank_info(rank), sampled, stopped)
             for rank, table in store.iter_timeline_tables()]
    starts = [r.start_ns for r in ranks if r.start_ns is not None]
    ends = [r.end_ns for r in ranks if r.end_ns is not None]
    counters = store.counter_tables()
    names = set()
    for table in counters.values():
        names.update(codes_of(table.column("name"))[1])
    return StoreSummary(
        path=str(store.path),
        world_size=store.world_size,
        start_ns=min(starts) if starts else None,
        end_ns=max(ends) if ends else None,
        counter_samples=sum(table.num_rows for table in counters.values()),
        counter_names=sorted(names),
        ranks=ranks,
        run=store.run,
        damaged=dict(store.damaged),
        unlisted={r: why for r, why in store.missing().items() if r not in store.damaged},
        workload=store.manifest.get("workload") if isinstance(store.manifest.get("workload"), dict) else {},
    )
