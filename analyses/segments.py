"""Every nanosecond of a rank once: its rows cut into segments, each given one category by the rules of
:mod:`ddltrace.analyses.breakdown` (innermost call within a lane, compute across lanes, the gap's category where
no row is), on NumPy arrays alone: ``ddltrace info`` reads a store's Arrow tables without pandas, the analyses
pass their DataFrames' columns (:func:`ddltrace.analyses.breakdown.classify`).

Which lanes are a device's, and which annotate a device's stream, is decided here too, per distinct lane name.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

# A lane whose name ends with ANNOTATION_LANE_SUFFIX holds annotations of a device stream (Kineto's
# ``gpu_user_annotation`` spans, on "gpu:0/stream 7/annotations"): region marks, no work of their own, so neither
# host nor device time. It is defined with the schema, which the importers read without pandas.
from ddltrace.arrow_timeline import ANNOTATION_LANE_SUFFIX, CATEGORIES

#: Within a lane, a higher category wins (innermost call first).
LANE_PRIORITY = ("idle", "other", "compute", "io", "memcpy", "comm", "wait", "barrier")  # lowest to highest
CODE = {c: i for i, c in enumerate(CATEGORIES)}
#: Lane names of a device's streams start with one of these (Kineto and XPlane name them "gpu:<device>/<stream>";
#: Kineto's other accelerators "mtia:<n>/...", "xpu:<n>/...", "hpu:<n>/..."; an XPlane TPU plane "tpu:<n>/...").
DEVICE_LANE_PREFIXES = ("gpu:", "tpu:", "mtia:", "xpu:", "hpu:")


def is_annotation_lane(name: str) -> bool:
    """Whether lane ``name`` annotates a device's stream (it ends with :data:`ANNOTATION_LANE_SUFFIX`)."""
    return name.endswith(ANNOTATION_LANE_SUFFIX)


def is_device_lane(name: str) -> bool:
    """Whether lane ``name`` is a device's (it starts with one of :data:`DEVICE_LANE_PREFIXES`), an annotation lane
    excepted."""
    return name.startswith(DEVICE_LANE_PREFIXES) and not is_annotation_lane(name)


def lane_flags(codes: np.ndarray, names: Sequence[str], flag) -> np.ndarray:
    """``flag(name)`` for each row, rows given as ``codes`` into the distinct lane ``names`` (computed once per
    distinct lane: a rank has a few lanes and up to millions of rows)."""
    per_lane = np.fromiter((flag(name) for name in names), dtype=bool, count=len(names))
    return per_lane[codes] if len(codes) else np.zeros(0, dtype=bool)


def sorted_unique(values: np.ndarray) -> np.ndarray:
    """The distinct values of an int64 array, sorted (``np.unique`` without its hashing pass)."""
    values = np.sort(values)
    if len(values) < 2:
        return values
    keep = np.empty(len(values), dtype=bool)
    keep[0] = True
    np.not_equal(values[1:], values[:-1], out=keep[1:])
    return values[keep]


def classify_rows(start_ns: np.ndarray, dur_ns: np.ndarray, categories: np.ndarray, lanes: np.ndarray, cuts,
                  gap: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Split the span of ``cuts`` (sorted ns boundaries; the first and last bound the rank) into segments.

    The rows: ``start_ns`` and ``dur_ns`` (ns), ``categories`` (index into CATEGORIES, -1 for none) and ``lanes``
    (a code per distinct lane, -1 for none). ``gap`` is the category of time no row covers (default: compute on a
    rank of MPI calls only, else idle). Returns ``edges`` (ns, increasing) and ``codes`` (index into CATEGORIES of
    each segment between two edges). Vectorised: per lane and category one pass of ``np.bincount`` over the rows,
    no Python loop per row.
    """
    cuts = np.asarray(cuts, dtype=np.int64)
    lo, hi = int(cuts[0]), int(cuts[-1])
    starts = np.clip(np.asarray(start_ns, dtype=np.int64), lo, hi)
    ends = np.clip(starts + np.asarray(dur_ns, dtype=np.int64), lo, hi)
    edges = sorted_unique(np.concatenate([cuts, starts, ends]))
    nseg = max(len(edges) - 1, 0)
    si, ei = np.searchsorted(edges, starts), np.searchsorted(edges, ends)
    categories = np.asarray(categories, dtype=np.int16)
    lanes = np.asarray(lanes)
    combined = np.full(nseg, -1, dtype=np.int16)
    any_compute = np.zeros(nseg, dtype=bool)
    group = (lanes.astype(np.int64) + 1) * 16 + categories + 1  # rows grouped by lane, then category
    order = np.argsort(group.astype(np.int16) if group.max(initial=0) < 2**15 else group, kind="stable")
    group = group[order]
    bounds = np.flatnonzero(np.diff(group)) + 1 if len(group) else np.zeros(0, dtype=np.int64)
    by_lane: dict[int, dict[int, np.ndarray]] = {}
    for rows in np.split(order, bounds) if len(order) else []:
        lane, code = int(lanes[rows[0]]), int(categories[rows[0]])
        if lane >= 0 and code >= 0:
            by_lane.setdefault(lane, {})[code] = rows
    combined_rank = np.full(nseg, -1, dtype=np.int16)  # each segment's place in LANE_PRIORITY so far
    for groups in by_lane.values():
        lane_rank = np.full(nseg, -1, dtype=np.int16)
        for place, category in enumerate(LANE_PRIORITY):
            rows = groups.get(CODE[category])
            if rows is None:
                continue
            diff = np.bincount(si[rows], minlength=nseg + 1) - np.bincount(ei[rows], minlength=nseg + 1)
            lane_rank[np.cumsum(diff)[:-1] > 0] = place
        any_compute |= lane_rank == PLACE_OF_COMPUTE
        higher = lane_rank > combined_rank
        combined_rank[higher] = lane_rank[higher]
    combined[combined_rank >= 0] = PRIORITY_CODES[combined_rank[combined_rank >= 0]]
    combined[any_compute] = CODE["compute"]
    if gap is None:
        gap = "idle" if (categories == CODE["compute"]).any() else "compute"
    combined[combined < 0] = CODE[gap]
    return edges, combined


def time_per_category(edges: np.ndarray, codes: np.ndarray) -> dict[str, int]:
    """ns per category of the segments :func:`classify_rows` gives."""
    sums = np.bincount(codes.astype(np.int64), weights=np.diff(edges), minlength=len(CATEGORIES))
    return {c: int(sums[i]) for i, c in enumerate(CATEGORIES)}


#: The category code of each place in LANE_PRIORITY, and the place of compute.
PRIORITY_CODES = np.array([CODE[c] for c in LANE_PRIORITY], dtype=np.int16)
PLACE_OF_COMPUTE = LANE_PRIORITY.index("compute")
