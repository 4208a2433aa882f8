"""What a store holds, in numbers: world size, time span, events and time per category per rank.

Used by ``ddltrace info`` and by the one-line summaries of the commands that write stores. Reads the store
rank by rank (one rank's events in memory at a time).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from ddltrace.analyses.breakdown import classify
from ddltrace.store import TraceStore
from ddltrace.timeline import CATEGORIES


@dataclass
class RankSummary:
    """One rank: ``events`` intervals from ``start_ns`` to ``end_ns`` (ns, common clock); ``time_ns``: the rank's
    span split by category (ns), each instant counted once as the breakdown does (innermost call within a
    thread, compute across threads), so the categories sum to the span."""

    rank: int
    events: int
    start_ns: int | None
    end_ns: int | None
    time_ns: dict[str, int] = field(default_factory=dict)
    host: str | None = None
    role: str | None = None
    ended: str | None = None

    @property
    def span_ns(self) -> int:
        """Wall time from the rank's first event to the end of its last, in ns (0 when empty)."""
        return 0 if self.start_ns is None else self.end_ns - self.start_ns


@dataclass
class StoreSummary:
    """The whole store: its path, world size, time span (ns), counters and one :class:`RankSummary` per rank;
    ``damaged``: the ranks left out, each with why (:attr:`TraceStore.damaged`)."""

    path: str
    world_size: int
    start_ns: int | None
    end_ns: int | None
    counter_samples: int
    counter_names: list[str]
    ranks: list[RankSummary]
    run: dict
    damaged: dict[int, str] = field(default_factory=dict)

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


def summarize(store: TraceStore) -> StoreSummary:
    """Summarise ``store`` rank by rank."""
    ranks: list[RankSummary] = []
    for rank, frame in store.iter_timeline():
        info = store.rank_info(rank)
        start = int(frame["start_ns"].min()) if len(frame) else None
        end = int((frame["start_ns"] + frame["dur_ns"]).max()) if len(frame) else None
        time_ns = dict.fromkeys(CATEGORIES, 0)
        if len(frame) and end > start:
            edges, codes = classify(frame, [start, end])
            sums = np.bincount(codes.astype(np.int64), weights=np.diff(edges), minlength=len(CATEGORIES))
            time_ns = {c: int(sums[i]) for i, c in enumerate(CATEGORIES)}
        ranks.append(RankSummary(rank, len(frame), start, end, time_ns,
                                 info.get("host"), info.get("role"), info.get("ended")))
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
    )
