"""Where each rank's time goes: time per category and phase, as IPM shows it (paper 002, figure 5).

Every nanosecond of a rank, from its first event to its last, gets exactly one category:

* within one lane (thread or stream) the innermost call wins: an MPI call inside an annotated compute span counts
  as communication, so the categories are ranked barrier > wait > comm > memcpy > io > compute > other (an
  unclassified span, such as a step marker around the step, never hides what it contains);
* across lanes, compute wins: communication that runs while another lane computes is hidden, and only the rest
  is *exposed* (this is what Rudra's communication overlap needs);
* time no row covers is **compute** on a rank whose rows are all MPI calls (a PMPI trace: computation is what
  happens between calls, as IPM counts it) and **idle** on a rank that records its computation explicitly.

A rank with a device (lanes named ``gpu:<n>/...`` and the like, see :func:`device_lanes`) is also broken down
over its host lanes alone and over its device lanes alone (a stream's annotation lanes, :func:`annotation_lanes`,
in neither) (``gap="idle"``: a device is idle when no kernel, copy
or collective runs on it), so that what the host did and what the device did can be shown side by side (the
all-lanes view counts an instant as compute when either computes).

Tables are pandas DataFrames, one row per rank; times in ns, shares as fractions of the phase.
The average rank stands beside the slowest (RALP, paper 003 figure 2): the slowest is the rank with the most
busy time (compute + io + memcpy) in the phase, the one the others wait for.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ddltrace.analyses.phases import PHASES, RankPhases

# A lane whose name ends with ANNOTATION_LANE_SUFFIX holds annotations of a device stream (Kineto's
# ``gpu_user_annotation`` spans, on "gpu:0/stream 7/annotations"): region marks, no work of their own, so neither
# host nor device time. It is defined with the schema, which the importers read without pandas.
from ddltrace.arrow_timeline import ANNOTATION_LANE_SUFFIX
from ddltrace.timeline import CATEGORIES, category_codes

#: Within a lane, a higher category wins (innermost call first).
LANE_PRIORITY = ("idle", "other", "compute", "io", "memcpy", "comm", "wait", "barrier")  # lowest to highest
CODE = {c: i for i, c in enumerate(CATEGORIES)}
BUSY = ("compute", "io", "memcpy")
EXPOSED_COMM = ("comm", "wait")
#: Lane names of a device's streams start with one of these (Kineto and XPlane name them "gpu:<device>/<stream>";
#: Kineto's other accelerators "mtia:<n>/...", "xpu:<n>/...", "hpu:<n>/..."; an XPlane TPU plane "tpu:<n>/...").
DEVICE_LANE_PREFIXES = ("gpu:", "tpu:", "mtia:", "xpu:", "hpu:")


def _lane_flags(lanes: pd.Series, flag) -> np.ndarray:
    """``flag(names)`` (a vectorised test on an array of lane names) for each row, computed once per distinct lane
    (a rank has a few lanes and up to millions of rows)."""
    codes, uniques = pd.factorize(lanes, use_na_sentinel=False)
    names = pd.Series(np.asarray(uniques, dtype=object), dtype="object").fillna("").astype(str)
    return np.asarray(flag(names), dtype=bool)[codes] if len(codes) else np.zeros(0, dtype=bool)


def annotation_lanes(lanes: pd.Series) -> np.ndarray:
    """True for each row on a stream's annotation lane (its name ends with :data:`ANNOTATION_LANE_SUFFIX`)."""
    return _lane_flags(lanes, lambda names: names.str.endswith(ANNOTATION_LANE_SUFFIX).to_numpy(bool))


def device_lanes(lanes: pd.Series) -> np.ndarray:
    """True for each row whose lane is a device's (its name starts with one of :data:`DEVICE_LANE_PREFIXES`),
    an annotation lane (:func:`annotation_lanes`) excepted."""
    return _lane_flags(lanes, lambda names: (names.str.startswith(DEVICE_LANE_PREFIXES)
                                             & ~names.str.endswith(ANNOTATION_LANE_SUFFIX)).to_numpy(bool))


def host_lanes(lanes: pd.Series) -> np.ndarray:
    """True for each row on a host lane: neither a device's lane nor an annotation lane."""
    return ~device_lanes(lanes) & ~annotation_lanes(lanes)


def sorted_unique(values: np.ndarray) -> np.ndarray:
    """The distinct values of an int64 array, sorted (``np.unique`` without its hashing pass)."""
    values = np.sort(values)
    if len(values) < 2:
        return values
    keep = np.empty(len(values), dtype=bool)
    keep[0] = True
    np.not_equal(values[1:], values[:-1], out=keep[1:])
    return values[keep]


def classify(timeline: pd.DataFrame, cuts, gap: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Split the span of ``cuts`` (sorted ns boundaries; the first and last bound the rank) into segments.

    ``gap`` is the category of time no row covers (default: compute on a rank of MPI calls only, else idle).
    Returns ``edges`` (ns, increasing) and ``codes`` (index into CATEGORIES of each segment between two edges).
    Vectorised: per lane and category one pass of ``np.bincount`` over the rows, no Python loop per row.
    """
    cuts = np.asarray(cuts, dtype=np.int64)
    lo, hi = int(cuts[0]), int(cuts[-1])
    starts = np.clip(timeline["start_ns"].to_numpy(np.int64), lo, hi)
    ends = np.clip(starts + timeline["dur_ns"].to_numpy(np.int64), lo, hi)
    edges = sorted_unique(np.concatenate([cuts, starts, ends]))
    nseg = max(len(edges) - 1, 0)
    si, ei = np.searchsorted(edges, starts), np.searchsorted(edges, ends)
    categories = category_codes(timeline["category"])
    lanes, _ = pd.factorize(timeline["lane"])  # a missing lane (-1) is no lane's
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
    for groups in by_lane.values():
        lane_code = np.full(nseg, -1, dtype=np.int16)
        for category in LANE_PRIORITY:
            rows = groups.get(CODE[category])
            if rows is None:
                continue
            diff = np.bincount(si[rows], minlength=nseg + 1) - np.bincount(ei[rows], minlength=nseg + 1)
            lane_code[np.cumsum(diff)[:-1] > 0] = CODE[category]
        any_compute |= lane_code == CODE["compute"]
        higher = _rank_of(lane_code) > _rank_of(combined)
        combined[higher] = lane_code[higher]
    combined[any_compute] = CODE["compute"]
    if gap is None:
        gap = "idle" if (categories == CODE["compute"]).any() else "compute"
    combined[combined < 0] = CODE[gap]
    return edges, combined


_ORDER = np.full(len(CATEGORIES) + 1, -1, dtype=np.int16)
for _i, _c in enumerate(LANE_PRIORITY):
    _ORDER[CODE[_c]] = _i


def _rank_of(codes: np.ndarray) -> np.ndarray:
    return np.where(codes < 0, -1, _ORDER[np.maximum(codes, 0)])


def rank_breakdown(timeline: pd.DataFrame, phases: RankPhases, gap: str | None = None) -> pd.DataFrame:
    """Time per phase and category of one rank (ns): one row per phase (columns rank, phase, then CATEGORIES).
    ``gap``: see :func:`classify`."""
    bounds = [phases.start_ns, phases.init_end_ns, phases.steady_end_ns, phases.end_ns]
    edges, codes = classify(timeline, bounds, gap)
    lengths = np.diff(edges)
    phase_idx = np.clip(np.searchsorted(bounds[1:3], edges[:-1], side="right"), 0, 2)
    key = phase_idx * len(CATEGORIES) + codes.astype(np.int64)
    cells = len(PHASES) * len(CATEGORIES)
    if edges[-1] - edges[0] < 2**53:  # every partial sum an integer below 2**53 ns: float64 adds it exactly
        sums = np.rint(np.bincount(key, weights=lengths, minlength=cells)).astype(np.int64)
    else:
        sums = np.array([lengths[key == k].sum() for k in range(cells)], dtype=np.int64)
    sums = sums.reshape(len(PHASES), len(CATEGORIES))
    frame = pd.DataFrame(sums, columns=list(CATEGORIES))
    frame.insert(0, "phase", list(PHASES))
    frame.insert(0, "rank", phases.rank)
    return frame


def breakdown_table(breakdown: pd.DataFrame, phase: str = "all") -> pd.DataFrame:
    """One row per rank: time per category (ns), ``total_ns``, ``share_<category>`` of the phase and ``overlap``.

    ``breakdown`` holds :func:`rank_breakdown` rows of any number of ranks; ``phase`` is init, steady, final or all.
    """
    part = breakdown if phase == "all" else breakdown[breakdown["phase"] == phase]
    wide = part.groupby("rank", sort=True)[list(CATEGORIES)].sum().astype("int64")
    wide["total_ns"] = wide[list(CATEGORIES)].sum(axis=1)
    total = wide["total_ns"].to_numpy(float)
    with np.errstate(invalid="ignore", divide="ignore"):
        for c in CATEGORIES:
            wide[f"share_{c}"] = np.where(total > 0, wide[c].to_numpy(float) / total, 0.0)
    wide["overlap"] = communication_overlap(wide)
    return wide


def communication_overlap(table: pd.DataFrame) -> pd.Series:
    """Rudra's communication overlap (paper 004, table 1): compute / (compute + exposed communication).

    Exposed communication is comm + wait time not hidden behind compute on another lane. 1.0 means every
    transfer hides behind computation; NaN for a rank with neither.
    """
    exposed = table[list(EXPOSED_COMM)].sum(axis=1)
    denominator = (table["compute"] + exposed).replace(0, np.nan)
    return table["compute"] / denominator


def average_and_slowest(table: pd.DataFrame, ranks=None) -> pd.DataFrame:
    """Two rows, 'average' and 'slowest (rank N)', from a :func:`breakdown_table` (RALP's figure 2)."""
    part = table if ranks is None else table.loc[[r for r in ranks if r in table.index]]
    if not len(part):
        return part.iloc[0:0]
    busy = part[list(BUSY)].sum(axis=1)
    slowest = busy.idxmax()
    average = part.mean(numeric_only=True).to_frame("average").T
    slow = part.loc[[slowest]].rename(index={slowest: f"slowest (rank {slowest})"})
    return pd.concat([average, slow])
