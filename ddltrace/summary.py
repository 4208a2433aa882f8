"""What a store holds, in numbers: world size, time span, events and time per category per rank.

Used by ``ddltrace info`` and by the one-line summaries of the commands that write stores. Reads the store
rank by rank (one rank's events in memory at a time). A rank with a device (lanes ``gpu:<n>/...``) is also split
into what its host did (its other lanes) and what its device did (its device lanes; idle where none runs), each
over the rank's span: the all-lanes view counts an instant as compute when either computes, which hides a device
that is idle most of the time behind the host's CPU ops.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from ddltrace.analyses.breakdown import annotation_lanes, classify, device_lanes
from ddltrace.store import TraceStore
from ddltrace.timeline import CATEGORIES


@dataclass
class RankSummary:
    """One rank: ``events`` intervals from ``start_ns`` to ``end_ns`` (ns, common clock); ``time_ns``: the rank's
    span split by category (ns), each instant counted once as the breakdown does (innermost call within a
    thread, compute across threads), so the categories sum to the span. ``host_time_ns`` and ``device_time_ns``:
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

    @property
    def span_ns(self) -> int:
        """Wall time from the rank's first event to the end of its last, in ns (0 when empty)."""
        return 0 if self.start_ns is None else self.end_ns - self.start_ns


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
        return out


def _time_per_category(frame, start: int | None, end: int | None, gap: str | None = None) -> dict[str, int]:
    """ns per category of ``frame``'s rows over [start, end], each instant once (see :func:`classify`)."""
    if not len(frame) or start is None or end <= start:
        return dict.fromkeys(CATEGORIES, 0)
    edges, codes = classify(frame, [start, end], gap)
    sums = np.bincount(codes.astype(np.int64), weights=np.diff(edges), minlength=len(CATEGORIES))
    return {c: int(sums[i]) for i, c in enumerate(CATEGORIES)}


def summarize(store: TraceStore) -> StoreSummary:
    """Summarise ``store`` rank by rank."""
    ranks: list[RankSummary] = []
    for rank, frame in store.iter_timeline():
        info = store.rank_info(rank)
        start = int(frame["start_ns"].min()) if len(frame) else None
        end = int((frame["start_ns"] + frame["dur_ns"]).max()) if len(frame) else None
        time_ns = _time_per_category(frame, start, end)
        host_ns = device_ns = None
        on_device = device_lanes(frame["lane"]) if len(frame) else np.zeros(0, dtype=bool)
        marks = annotation_lanes(frame["lane"]) if len(frame) else np.zeros(0, dtype=bool)
        if on_device.any():
            host_ns = _time_per_category(frame[~on_device & ~marks], start, end)
            device_ns = _time_per_category(frame[on_device], start, end, gap="idle")
        ranks.append(RankSummary(rank, len(frame), start, end, time_ns,
                                 info.get("host"), info.get("role"), info.get("ended"), host_ns, device_ns,
                                 int(on_device.sum()) if device_ns else None, bool(info.get("aggregate")),
                                 int(marks.sum()) if device_ns else None))
    starts = [r.start_ns for r in ranks if r.start_ns is not None]
    ends = [r.end_ns for r in ranks if r.end_ns is not None]
    counters = store.counters()
    return StoreSummary(
        path=str(store.path),
        world_size=store.world_size,
        start_ns=min(starts) if starts else None,
        end_ns=max(ends) if ends else None,
        counter_samples=len(counters),
        counter_names=sorted(set(counters["name"])),
        ranks=ranks,
        run=store.run,
        damaged=dict(store.damaged),
        unlisted={r: why for r, why in store.missing().items() if r not in store.damaged},
    )
