"""The innermost span around each of some intervals, on the same lane (a thread's nested host operations around a
runtime call): the Kineto importer's sizing of a kernel by the operation that launched it, and the GPU collectives'
collective of a kernel whose name says none, both ask it."""

from __future__ import annotations

import numpy as np


def innermost_enclosing(span_lane: np.ndarray, span_start: np.ndarray, span_end: np.ndarray, lane: np.ndarray,
                        start: np.ndarray, end: np.ndarray, depth: int) -> np.ndarray:
    """For each interval (``lane``, ``start``, ``end``; ns, lanes as integer codes shared with the spans'): the
    index into the spans of the innermost one on its lane that encloses it (the latest to start at or before its
    start whose end is at or after its end; at one start, the shorter), looking back through at most ``depth``
    spans that began before it; -1 where none does."""
    order = np.lexsort((-span_end, span_start, span_lane))  # by lane, start; at one start the outer first
    s_lane, s_start, s_end = span_lane[order], span_start[order], span_end[order]
    lo = np.searchsorted(s_lane, lane, side="left")
    hi = np.searchsorted(s_lane, lane, side="right")
    out = np.full(len(lane), -1, dtype=np.int64)
    for q, (first, last, t0, t1) in enumerate(zip(lo.tolist(), hi.tolist(), start.tolist(), end.tolist(),
                                                   strict=True)):
        i = first + int(np.searchsorted(s_start[first:last], t0, side="right"))
        for j in range(i - 1, max(i - 1 - depth, first - 1), -1):
            if s_end[j] >= t1:
                out[q] = order[j]
                break
    return out
