"""From a :class:`~ddltrace.collectors.importers.chrome.ChromeTrace` to a rank's timeline and counters."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa

from ddltrace.arrow_timeline import counters_table, numbers
from ddltrace.collectors.importers.base import ImportContext, RankPart, build_timeline
from ddltrace.collectors.importers.chrome import TRUNCATED, ChromeTrace

#: A pid no process has (no counters).
_NONE = object()


def record(ctx: ImportContext, trace: ChromeTrace) -> None:
    """Add what the reader counted to the file's report."""
    if ctx.report is None:
        return
    ctx.report.events += trace.read + trace.skipped.get(TRUNCATED, 0)  # (read: the whole events)
    ctx.report.skipped.update(trace.skipped)
    ctx.report.problems.extend(trace.problems)


def chrome_part(trace: ChromeTrace, *, fmt: str, rank: int | tuple, ctx: ImportContext,
                lane_name: Callable[[Any, Any], str | None], offset_ns: int = 0, clock: str = "epoch",
                info: dict | None = None, step_of: Callable[[str, str], int | None] | None = None,
                rows: np.ndarray | None = None, drop_reason: str = "events on a duplicate or derived lane",
                row_steps: np.ndarray | None = None, row_correlation: np.ndarray | None = None,
                row_columns: dict[str, np.ndarray] | None = None,
                row_missing: dict[str, np.ndarray] | None = None, counter_pid: Any = None) -> RankPart:
    """One rank's part: ``lane_name(pid, tid)`` names each lane (None drops the lane's events, counted
    under ``drop_reason``); ``offset_ns`` is added to every time; ``rows`` selects a subset of intervals
    (several ranks in one file); ``step_of(cat, name)`` gives a step number for step-marker events, or
    ``row_steps`` one per interval (-1: none); ``row_correlation`` each interval's launch correlation id
    (-1: none); ``row_columns`` more optional integer columns of the timeline (``bytes``, ``comm``), a value
    per interval (-1: none, or where a column's boolean mask in ``row_missing`` is set: a column that holds
    negative values); ``counter_pid``: only the counters of that process, or of those of a frozenset (several ranks
    in one file)."""
    row_missing = row_missing or {}
    lane_names = [lane_name(pid, tid) for pid, tid in trace.lanes]
    keep_lane = np.array([n is not None for n in lane_names], dtype=bool)
    lane_codes, key_codes = trace.lane_key, trace.key
    ts, dur = trace.ts_ns, trace.dur_ns
    if row_steps is None and step_of is not None and trace.keys and len(key_codes):
        row_steps = np.array([step_of(cat, name) if step_of(cat, name) is not None else -1
                              for cat, name in trace.keys], dtype=np.int64)[key_codes]
    if rows is not None:
        lane_codes, key_codes, ts, dur = lane_codes[rows], key_codes[rows], ts[rows], dur[rows]
        row_steps = row_steps[rows] if row_steps is not None else None
        row_correlation = row_correlation[rows] if row_correlation is not None else None
        row_columns = {column: values[rows] for column, values in (row_columns or {}).items()}
        row_missing = {column: missing[rows] for column, missing in row_missing.items()}
    if len(lane_codes) and not keep_lane.all():
        keep = keep_lane[lane_codes]
        dropped = int((~keep).sum())
        if dropped and ctx.report is not None:
            ctx.report.dropped[drop_reason] += dropped
        lane_codes, key_codes, ts, dur = lane_codes[keep], key_codes[keep], ts[keep], dur[keep]
        row_steps = row_steps[keep] if row_steps is not None else None
        row_correlation = row_correlation[keep] if row_correlation is not None else None
        row_columns = {column: values[keep] for column, values in (row_columns or {}).items()}
        row_missing = {column: missing[keep] for column, missing in row_missing.items()}
    table = [n if n is not None else "" for n in lane_names]
    extra = {}
    if row_steps is not None:
        extra["step"] = numbers(np.maximum(row_steps, 0), pa.int64(), row_steps < 0)
    if row_correlation is not None:
        extra["correlation"] = numbers(np.maximum(row_correlation, 0), pa.int64(), row_correlation < 0)
    for column, values in (row_columns or {}).items():
        if column in row_missing:
            if not row_missing[column].all():
                extra[column] = numbers(values, pa.int64(), row_missing[column])
        elif (values >= 0).any():
            extra[column] = numbers(np.maximum(values, 0), pa.int64(), values < 0)
    timeline = build_timeline(rank=0 if isinstance(rank, tuple) else rank, lane_codes=lane_codes,
                              lane_table=table, key_codes=key_codes, key_table=trace.keys,
                              start_ns=ts + offset_ns, dur_ns=dur, fmt=fmt, ctx=ctx, extra=extra)
    if ctx.report is not None:
        ctx.report.intervals += timeline.num_rows
    counter_rank = rank if isinstance(rank, int) else 0  # renumbered with the rank when it is an identity
    if isinstance(counter_pid, frozenset):  # several processes (a rank of a TraceFusion file)
        arrays = [trace.counter_arrays(pid) for pid in sorted(counter_pid, key=str)] or [trace.counter_arrays(_NONE)]
        _pid, names, t_ns, values = (np.concatenate(column) for column in zip(*arrays, strict=True))
    else:
        _pid, names, t_ns, values = trace.counter_arrays(counter_pid)
    counters = counters_table(np.full(len(names), counter_rank, dtype=np.int32), names, t_ns + offset_ns,
                              values) if len(names) else None
    allocator = (sum(trace.allocator_events.get(pid, 0) for pid in counter_pid)
                 if isinstance(counter_pid, frozenset) else trace.allocator_events.get(counter_pid, 0)
                 if counter_pid is not None else sum(trace.allocator_events.values()))
    return RankPart(rank=rank, timeline=timeline, counters=counters,
                    info={"format": fmt, "file": trace.path, **({"allocator_events": allocator} if allocator else {}),
                          **(info or {})}, clock=clock)
