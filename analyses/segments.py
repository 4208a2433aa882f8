"""Every nanosecond of a rank once: its rows cut into segments, each given one category by the rules of
:mod:`ddltrace.analyses.breakdown` (innermost call within a lane, compute across lanes, the gap's category where
no row is), on NumPy arrays alone: ``ddltrace info`` reads a store's Arrow tables without pandas, the analyses
pass their DataFrames' columns (:func:`ddltrace.analyses.breakdown.classify`).

Which lanes are a device's, and which annotate a device's stream, is decided here too, per distinct lane name.

One rule looks across a rank's host lanes. A thread blocked in a host backend's collective records nothing:
PyTorch's gloo runs the collective on its own threads (``gloo:broadcast`` on ``pt_gloo_runloop``) while the caller
waits inside whatever span it is in (``DistributedDataParallel.forward`` waiting for the buffers' broadcast, 41 ms
a step in ``sample_traces/h100-ddp/straggler1``, where the early rank's breakdown said 92 % compute). So the own
time of a compute span that holds other spans on its lane (a parent, never a leaf op) is the wait for a call of
another host lane of the rank (a collective, a wait or a barrier) where the thread's stretch of own time ends
just after that call does (within ``WAKE_NS``: the thread woken by its end) and lies at least half within it:
over the call's span the instant takes the other lanes' category. Across lanes compute still wins wherever a leaf
op, a kernel or any other lane computes.
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


#: Names of the rows of a rank traced at its MPI calls alone: the calls, and the PMPI collector's own rows.
MPI_NAME_PREFIXES = ("MPI_", "PMPI_", "ddltrace_")


def untraced_gap(categories: np.ndarray, names: Sequence[str]) -> str:
    """The category of the time no row covers on a rank (``categories``: the rows' codes; ``names``: their distinct
    names): compute where no row computes and every row is an MPI call (the PMPI collector's, Score-P's or IPM's
    rank that traced nothing else: the time outside MPI is the job's own, as Scalasca and IPM count it); else idle,
    the time not known to be work (a host's API calls alone, a device, a trace of some operators)."""
    if (np.asarray(categories) == CODE["compute"]).any() or not len(names):
        return "idle"
    return "compute" if all(str(n).startswith(MPI_NAME_PREFIXES) for n in names) else "idle"


#: The ``source`` of py-spy's rows: samples of the stacks a rank's other rows already cover, so neither its time nor
#: its span (a process sampled from start to exit beside a framework profiler's window of a few steps read as 94 %
#: "other" over 5.9 s where the profile held 354 ms): the breakdowns, phases and spans leave them out.
SAMPLED_STACKS = "py-spy"


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
                  gap: str = "idle", lane_names: Sequence[str] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Split the span of ``cuts`` (sorted ns boundaries; the first and last bound the rank) into segments.

    The rows: ``start_ns`` and ``dur_ns`` (ns), ``categories`` (index into CATEGORIES, -1 for none) and ``lanes``
    (a code per distinct lane, -1 for none). ``gap`` is the category of time no row covers (:func:`untraced_gap`
    tells it from the rows' names; default idle). ``lane_names`` (the name of each lane code) says which lanes are the
    host's, for the rule on host collectives (the module's docstring); without them no lane is. Returns ``edges``
    (ns, increasing) and ``codes`` (index into CATEGORIES of each segment between two edges). Vectorised: per lane
    and category one pass of ``np.bincount`` over the rows, no Python loop per row.
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
    host = _host_lanes(by_lane, lane_names)
    parents = _parents(starts, ends, lanes, by_lane, host)
    for lane, groups in by_lane.items():
        lane_rank = np.full(nseg, -1, dtype=np.int16)
        for place, category in enumerate(LANE_PRIORITY):
            rows = groups.get(CODE[category])
            if rows is None:
                continue
            lane_rank[_covered(si[rows], ei[rows], nseg)] = place
        computing = lane_rank == PLACE_OF_COMPUTE
        if lane in parents:
            leaves = groups[CODE["compute"]][~parents[lane]]
            waits = np.concatenate([rows for other in host - {lane} for code, rows in by_lane[other].items()
                                    if code in COMM_CODES])
            computing &= ~_held(computing & ~_covered(si[leaves], ei[leaves], nseg), edges, starts[waits],
                                ends[waits])
        any_compute |= computing
        higher = lane_rank > combined_rank
        combined_rank[higher] = lane_rank[higher]
    combined[combined_rank >= 0] = PRIORITY_CODES[combined_rank[combined_rank >= 0]]
    combined[any_compute] = CODE["compute"]
    combined[combined < 0] = CODE[gap]
    return edges, combined


def _covered(si: np.ndarray, ei: np.ndarray, nseg: int) -> np.ndarray:
    """Whether any of the rows (segment indices ``si`` to ``ei``, end excluded) covers each of ``nseg`` segments."""
    diff = np.bincount(si, minlength=nseg + 1) - np.bincount(ei, minlength=nseg + 1)
    return np.cumsum(diff)[:-1] > 0


def _host_lanes(by_lane: dict[int, dict[int, np.ndarray]], lane_names: Sequence[str] | None) -> set[int]:
    """The codes of the host's lanes among ``by_lane``'s (none without ``lane_names``)."""
    if lane_names is None:
        return set()
    return {lane for lane in by_lane if not is_device_lane(str(lane_names[lane]))
            and not is_annotation_lane(str(lane_names[lane]))}


def _parents(starts: np.ndarray, ends: np.ndarray, lanes: np.ndarray, by_lane: dict[int, dict[int, np.ndarray]],
             host: set[int]) -> dict[int, np.ndarray]:
    """For each host lane the rule on host collectives (the module's docstring) may concern (it computes, and
    another host lane has collectives, waits or barriers), whether each of its compute rows (in ``by_lane``'s
    order) holds another of the lane's rows: the lane's rows sorted by start, longest first, a row is a parent when
    the next one starts before it ends."""
    talking = {lane for lane in host if COMM_CODES & by_lane[lane].keys()}
    out = {}
    for lane in (lane for lane in host if CODE["compute"] in by_lane[lane] and talking - {lane}):
        rows = np.flatnonzero((lanes == lane) & (ends > starts))
        order = rows[np.lexsort((-ends[rows], starts[rows]))]
        parent = np.zeros(len(starts), dtype=bool)
        parent[order[:-1]] = starts[order[1:]] < ends[order[:-1]]
        if parent.any():
            out[lane] = parent[by_lane[lane][CODE["compute"]]]
    return out


def _held(own: np.ndarray, edges: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Of the segments where a lane is in a parent's own time (``own``), those it spends blocked in a call of
    another host lane (rows ``starts`` to ``ends``, ns): each stretch of own time that ends within
    :data:`WAKE_NS` after one of those calls ends (the thread woken by it) and lies at least half within the call
    (not a thread that went on with its own work after the call's end: a busy thread's stretches between its ops
    are short, and end just after a call's end by chance), over that call's span."""
    held = np.zeros(len(own), dtype=bool)
    if not len(starts) or not own.any():
        return held
    before = np.concatenate([[False], own[:-1]])
    after = np.concatenate([own[1:], [False]])
    began, woke = edges[np.flatnonzero(own & ~before)], edges[np.flatnonzero(own & ~after) + 1]  # each stretch (ns)
    by_end = np.argsort(ends, kind="stable")
    call = by_end[np.maximum(np.searchsorted(ends[by_end], woke, side="right") - 1, 0)]
    inside_call = ends[call] - np.maximum(began, starts[call])
    matched = (ends[call] <= woke) & (woke - ends[call] <= WAKE_NS) & (2 * inside_call >= woke - began)
    stretch = np.cumsum(own & ~before) - 1  # each segment's stretch (where own)
    seg_start = edges[:-1]
    inside = own & matched[stretch]
    waited = call[stretch[inside]]
    held[inside] = (seg_start[inside] >= starts[waited]) & (seg_start[inside] < ends[waited])
    return held


def time_per_category(edges: np.ndarray, codes: np.ndarray) -> dict[str, int]:
    """ns per category of the segments :func:`classify_rows` gives."""
    sums = np.bincount(codes.astype(np.int64), weights=np.diff(edges), minlength=len(CATEGORIES))
    return {c: int(sums[i]) for i, c in enumerate(CATEGORIES)}


#: The category code of each place in LANE_PRIORITY, and the place of compute.
PRIORITY_CODES = np.array([CODE[c] for c in LANE_PRIORITY], dtype=np.int16)
PLACE_OF_COMPUTE = LANE_PRIORITY.index("compute")
#: The categories of a call a thread can be blocked in: a collective, a wait, a barrier.
COMM_CODES = frozenset(CODE[c] for c in ("comm", "wait", "barrier"))
#: How soon after the end of the call it waited for a blocked thread records again (ns): 26-110 us measured on
#: an H100 host (``sample_traces/h100-ddp``: the autograd thread after gloo's all-reduces, the main thread after
#: the buffers' broadcast).
WAKE_NS = 500_000
