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

import math
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
from ddltrace.store import StoreError, TraceStore
from ddltrace.units import format_ns


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
    #: where a rank ended abruptly: which rank's records end first (:func:`ended_first`)
    ended_first: EndedFirst | None = None

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
        out["ended_first"] = self.ended_first.to_dict() if self.ended_first is not None else None
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
    infos = _rank_infos(store)
    abrupt = any(info.get("ended") == "abrupt" for info in infos.values())
    ranks, ends = [], {}
    for rank, table in store.iter_timeline_tables():
        ranks.append(_rank_summary(rank, table, infos.get(rank, {}), sampled, stopped))
        if abrupt and _needs_records(infos.get(rank, {})):  # (read here once, not again by ended_first)
            ends[rank] = records_end(table, _open_calls(infos[rank]))
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
        ended_first=ended_first(store, ends) if abrupt else None,
    )


#: Below this gap (ns) between two ranks' last records, beyond their clocks' uncertainty, the records do not tell
#: which rank ended first: ranks leave one collective within microseconds to about a millisecond of each other, so
#: ranks stopped together (a job killed at once, every rank in its own code) have last records that close.
APART_NS = 1_000_000


@dataclass
class RankEnd:
    """Where a rank's records end: ``last_ns`` (common clock), the latest time they show the rank alive: the end of
    its last record, or, for a call it was inside when it stopped (``open_calls``: the store's row of it lasts to the
    job's end, an upper bound), that call's entry; ``host`` and ``ended`` from its manifest entry."""

    rank: int
    last_ns: int
    open_calls: list[str]
    ended: str | None = None
    host: str | None = None


@dataclass
class EndedFirst:
    """What a store's records say of which rank ended first, where a rank ended abruptly (:func:`ended_first`):
    ``ranks`` each rank's :class:`RankEnd`, earliest first; ``first``: the rank whose records end first, where
    ``ahead_ns`` (the gap to the next rank's last record) is above ``apart_ns`` (:data:`APART_NS` plus the two ranks'
    clock uncertainty and any drift the clocks were measured to have), else None and ``together`` names the ranks whose
    last records are within ``apart_ns`` of the earliest; ``stop_ns``: where an interrupted job was stopped; where
    every rank's records run to the stop or past it (``after_stop``) none is singled out: they ended on their way out
    of the stopped job."""

    ranks: list[RankEnd]
    first: int | None
    ahead_ns: int | None
    apart_ns: int
    clock_ns: int
    together: list[int] = field(default_factory=list)
    stop_ns: int | None = None
    #: the job was stopped (an interrupt) before every rank's last record: none ended first before the stop
    after_stop: bool = False

    def inside(self) -> dict[tuple[str, ...], list[int]]:
        """The ranks that ended inside MPI calls, by the calls (the collector's own clock sync left out where the
        rank was inside another)."""
        by_calls: dict[tuple[str, ...], list[int]] = {}
        for r in sorted(self.ranks, key=lambda r: r.rank):
            calls = [c for c in r.open_calls if c != "ddltrace_clock_sync"] or r.open_calls
            if calls:
                by_calls.setdefault(tuple(dict.fromkeys(calls)), []).append(r.rank)
        return by_calls

    def text(self) -> str:
        """The evidence in words: which rank's records end first and by how much, inside or outside a call; or that
        none can be singled out; then the ranks that ended inside calls."""
        said = []
        if self.first is not None:
            first = next(r for r in self.ranks if r.rank == self.first)
            where = (f"inside {', '.join(dict.fromkeys(first.open_calls))} (entered then, never left)"
                     if first.open_calls else "outside any MPI call (it died after its last record, when is not "
                     "recorded)")
            said.append(f"rank {first.rank}'s records end first, {format_ns(self.ahead_ns)} before any other "
                        f"rank's, {where}")
        elif self.after_stop:
            said.append("every rank's records run to the stop (the interrupt) or past it: none ended before it")
        elif len(self.together) > 1:
            said.append(f"the last records of rank {_ranks(self.together)} end within {format_ns(self.apart_ns)} of "
                        f"each other ({format_ns(APART_NS)}, the spread of ranks leaving one collective, plus the "
                        f"clocks' uncertainty, {format_ns(self.clock_ns)}): none can be singled out as the first to "
                        "end")
        for calls, ranks in self.inside().items():
            if ranks != [self.first]:
                said.append(f"rank {_ranks([r for r in ranks if r != self.first])} ended inside {', '.join(calls)}")
        return "; ".join(said)

    def to_dict(self) -> dict:
        return {**asdict(self), "inside": [{"calls": list(c), "ranks": r} for c, r in self.inside().items()],
                "text": self.text()}


def _ranks(ranks: list[int], shown: int = 8) -> str:
    return ", ".join(map(str, ranks[:shown])) + (f" and {len(ranks) - shown} more" if len(ranks) > shown else "")


def records_end(table: pa.Table, open_calls: list[str]) -> int | None:
    """Where a rank's records (``table``, its timeline) show it alive last (:class:`RankEnd`): the end of its last
    row, but a call it was inside when it stopped (``open_calls``: the rows of those names that end last, at the
    job's end, as the collector made them) counts at its entry; py-spy's samples are no record of the rank's own."""
    if not table.num_rows:
        return None
    sources, source_names = codes_of(table.column("source"))
    starts = values_of(table.column("start_ns"))[0].astype(np.int64, copy=False)
    ends = starts + values_of(table.column("dur_ns"))[0].astype(np.int64, copy=False)
    keep = sources != (source_names.index(SAMPLED_STACKS) if SAMPLED_STACKS in source_names else -2)
    if not keep.any():
        return None
    starts, ends, sources = starts[keep], ends[keep], sources[keep]
    if not open_calls:
        return int(ends.max())
    names, name_list = codes_of(table.column("name"))
    names = names[keep]
    wanted = [i for i, n in enumerate(name_list) if n in open_calls]
    pmpi = source_names.index("pmpi") if "pmpi" in source_names else -2
    open_rows = np.isin(names, wanted) & (sources == pmpi) & (ends == ends.max())
    if not open_rows.any():
        return int(ends.max())
    return int(max(starts[open_rows].max(), ends[~open_rows].max() if (~open_rows).any() else 0))


def _clock_bound(clock: dict, rank: int) -> int:
    """The most rank ``rank``'s offset onto the common clock can be wrong by (ns): its largest uncertainty in the
    store's clock entry, else the entry's largest of any rank, else 0 (one clock)."""
    found = [table.get(str(rank)) for key in ("uncertainty_ns", "finalize_uncertainty_ns", "framework_uncertainty_ns")
             if isinstance(table := clock.get(key), dict)]
    found = [v for v in found if isinstance(v, int) and not isinstance(v, bool) and v >= 0]
    if found:
        return max(found)
    every = [v for key in ("uncertainty_ns", "finalize_uncertainty_ns", "framework_uncertainty_ns")
             if isinstance(table := clock.get(key), dict) for v in table.values()
             if isinstance(v, int) and not isinstance(v, bool) and v >= 0]
    return max(every, default=0)


def _drift_ppm(clock: dict) -> float:
    """The largest drift (ppm) measured between any two clocks of the store (ranks' or nodes'), 0 where none was."""
    found = [abs(v) for key in ("drift_ppm", "node_drift_ppm") if isinstance(table := clock.get(key), dict)
             for v in table.values() if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)]
    return max(found, default=0.0)


def _rank_infos(store: TraceStore) -> dict[int, dict]:
    """Each rank's manifest entry ({} where it is not an object)."""
    return {rank: info if isinstance(info := store.rank_info(rank), dict) else {} for rank in store.ranks}


def _open_calls(info: dict) -> list[str]:
    calls = info.get("open_calls")
    return [str(c) for c in calls] if isinstance(calls, list) else []


def _needs_records(info: dict) -> bool:
    """Whether where a rank's records end must be read from its timeline: it ended inside a call (its stored end is
    the job's), or its manifest entry records no end."""
    last = info.get("end_ns")
    return bool(_open_calls(info)) or not isinstance(last, int) or isinstance(last, bool)


def ended_first(store: TraceStore, read: dict[int, int | None] | None = None) -> EndedFirst | None:
    """Which rank's records end first (:class:`EndedFirst`), where at least one rank ended abruptly and two ranks hold
    records (None elsewhere). Read from each rank's manifest entry (``ended``, ``open_calls``, ``end_ns``) and, for a
    rank that ended inside a call, its timeline (``read``: where :func:`records_end` of those ranks was already
    read, by rank); the clock entry gives the uncertainty. A rank's records end at its last call's exit (or its
    last call's entry, when it never left it), not at its death: the words say so."""
    infos = _rank_infos(store)
    if not any(info.get("ended") == "abrupt" for info in infos.values()):
        return None
    ends = []
    read = read or {}
    for rank, info in infos.items():
        calls, last = _open_calls(info), info.get("end_ns")
        if rank in read:
            last = read[rank]
        elif _needs_records(info):
            try:
                last = records_end(next(iter(store.iter_timeline_tables([rank])))[1], calls)
            except (StoreError, StopIteration):
                last = None
        if last is not None:
            host = info.get("host")
            ends.append(RankEnd(rank, int(last), calls, info.get("ended"), host if isinstance(host, str) else None))
    if len(ends) < 2:
        return None
    ends.sort(key=lambda r: (r.last_ns, r.rank))
    clock = store.manifest.get("clock") if isinstance(store.manifest.get("clock"), dict) else {}
    starts = [v for info in infos.values() if isinstance(v := info.get("start_ns"), int)]
    origin = min(starts, default=ends[0].last_ns)

    def apart(a: RankEnd, b: RankEnd) -> tuple[int, int]:
        """(the gap that tells ``a`` and ``b`` apart, of which the clocks' part), ns."""
        bound = _clock_bound(clock, a.rank) + _clock_bound(clock, b.rank)
        if a.host != b.host:  # two machines' clocks: what they may have drifted since the offsets were measured
            bound += int(_drift_ppm(clock) * max(b.last_ns - origin, 0) / 1e6)
        return APART_NS + bound, bound

    stop = stopped_at(store.run)
    gap = ends[1].last_ns - ends[0].last_ns
    need, clock_ns = apart(ends[0], ends[1])
    if stop is not None and ends[0].last_ns >= stop - need:  # (the ranks' way out of the stopped job: no sign)
        return EndedFirst(ends, None, None, need, clock_ns, stop_ns=stop, after_stop=True)
    if gap > need:
        return EndedFirst(ends, ends[0].rank, gap, need, clock_ns, stop_ns=stop)
    together = [r.rank for r in ends if r.last_ns - ends[0].last_ns <= apart(ends[0], r)[0]]
    bounds = [apart(ends[0], next(e for e in ends if e.rank == r)) for r in together[1:]]
    return EndedFirst(ends, None, None, max(b[0] for b in bounds), max(b[1] for b in bounds), sorted(together),
                      stop_ns=stop)
