"""Where each rank's time goes: time per category and phase, as IPM shows it (paper 002, figure 5).

Every nanosecond of a rank, from its first event to its last, gets exactly one category:

* within one lane (thread or stream) the highest-ranked category among the calls covering an instant wins,
  barrier > wait > comm > memcpy > io > compute > other: an MPI call inside an annotated compute span counts as
  communication (the innermost call), and a lower-ranked call takes the category of what holds it (a runtime
  call inside an op is the op's compute; an unclassified span, such as a step marker, never hides what it holds);
* across lanes, compute wins: communication that runs while another lane computes is hidden, and only the rest
  is *exposed* (this is what Rudra's communication overlap needs); but a host thread's own time in a span that
  holds others (not a leaf op) is not computing while another host thread of the rank is in a collective, a wait
  or a barrier: it is blocked in the collective a host backend (gloo) runs on its own threads
  (:mod:`~ddltrace.analyses.segments`);
* at a host backend's collectives (gloo's spans, matched across ranks by :mod:`~ddltrace.analyses.host_collectives`)
  the part of a rank's communication from its entry to the last rank's entry is **wait**, the rest comm: Scalasca's
  Wait at N x N, the time an early rank waits for a late one, not moving data (:func:`collective_comm` of each rank's
  segments, then :func:`with_wait_at_nxn` across ranks, ns; a span matched on no other rank stays comm). In
  ``sample_traces/cpu-gloo-stack`` rank 0's 132.2 ms of comm holds 121.8 ms of waiting for rank 1, asleep 40 ms a
  step: wait, 10.4 ms comm left (the map step, :mod:`~ddltrace.analyses.rank_summary`, keeps each rank's
  stretches; the reduce, :func:`~ddltrace.analyses.run_analysis.reduce_summaries`, moves them, in the all-lanes
  and the host breakdowns);
* time no row covers is **compute** on a rank whose rows are all MPI calls (a PMPI, Score-P or IPM trace of MPI
  alone: computation is what happens between calls, as IPM counts it) and **idle** elsewhere: on a rank that
  records its computation explicitly, and on one whose rows say nothing of it (a host's runtime API calls alone,
  a Chrome trace of some operators: until 2026-11-26 their gaps were compute, 66 % of a rocprofv3 host).

A rank with a device (lanes named ``gpu:<n>/...`` and the like, see :func:`device_lanes`) is also broken down
over its host lanes alone and over its device lanes alone (a stream's annotation lanes, :func:`annotation_lanes`,
in neither) (``gap="idle"``: a device is idle when no kernel, copy
or collective runs on it), so that what the host did and what the device did can be shown side by side (the
all-lanes view counts an instant as compute when either computes).

A rank's breakdown has a row per phase and one for its time after the stop where its job was stopped (an interrupt,
:attr:`~ddltrace.analyses.phases.RankPhases.stop_ns`; 0 elsewhere): the whole run (``phase="all"``) is the three
phases, each rank's time up to the stop. Counted in, the ranks' wait for the stop and their way out (5.13 s of a hung
job's 7.29 s) made its sleeping rank read 29.9 % compute, 69.2 % barrier; up to the stop it computed 96.9 %.

Tables are pandas DataFrames, one row per rank; times in ns, shares as fractions of the phase.
The average rank stands beside the slowest (RALP, paper 003 figure 2): the slowest is the rank with the most
busy time (compute + io + memcpy) in the phase, the one whose work the others wait for (a rank late for
other reasons, a sleep or an input wait, is not the busiest: the straggler findings name it).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ddltrace.analyses.phases import AFTER_STOP, PARTS, RankPhases
from ddltrace.analyses.segments import (  # noqa: F401  (the lane rules, also read from here)
    ANNOTATION_LANE_SUFFIX,
    DEVICE_LANE_PREFIXES,
    classify_rows,
    is_annotation_lane,
    is_device_lane,
    lane_flags,
    untraced_gap,
)
from ddltrace.timeline import CATEGORIES, category_codes

BUSY = ("compute", "io", "memcpy")
EXPOSED_COMM = ("comm", "wait", "barrier")


def _lane_flags(lanes: pd.Series, flag) -> np.ndarray:
    """``flag(name)`` for each row of ``lanes`` (a missing lane's name is "")."""
    codes, uniques = pd.factorize(lanes, use_na_sentinel=False)
    names = pd.Series(np.asarray(uniques, dtype=object), dtype="object").fillna("").astype(str)
    return lane_flags(codes, names.tolist(), flag)


def annotation_lanes(lanes: pd.Series) -> np.ndarray:
    """True for each row on a stream's annotation lane (its name ends with :data:`ANNOTATION_LANE_SUFFIX`)."""
    return _lane_flags(lanes, is_annotation_lane)


def device_lanes(lanes: pd.Series) -> np.ndarray:
    """True for each row whose lane is a device's (its name starts with one of :data:`DEVICE_LANE_PREFIXES`),
    an annotation lane (:func:`annotation_lanes`) excepted."""
    return _lane_flags(lanes, is_device_lane)


def host_lanes(lanes: pd.Series) -> np.ndarray:
    """True for each row on a host lane: neither a device's lane nor an annotation lane."""
    return ~device_lanes(lanes) & ~annotation_lanes(lanes)


def classify(timeline: pd.DataFrame, cuts, gap: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """:func:`~ddltrace.analyses.segments.classify_rows` of a timeline's rows: the span of ``cuts`` in segments
    (``edges``, ns) and the category of each (``codes``, index into CATEGORIES). ``gap``: the category of time no
    row covers; None: :func:`~ddltrace.analyses.segments.untraced_gap` of the rows."""
    lanes, names = pd.factorize(timeline["lane"])  # a missing lane (-1) is no lane's
    categories = category_codes(timeline["category"])
    if gap is None:  # (the names read only where no row computes)
        computes = (categories == CATEGORIES.index("compute")).any()
        gap = "idle" if computes else untraced_gap(categories, timeline["name"].unique())
    return classify_rows(timeline["start_ns"].to_numpy(np.int64), timeline["dur_ns"].to_numpy(np.int64),
                         categories, lanes, cuts, gap, [str(n) for n in names])


def rank_breakdown(timeline: pd.DataFrame, phases: RankPhases, gap: str | None = None) -> pd.DataFrame:
    """Time per phase and category of one rank (ns): one row per part of :data:`~ddltrace.analyses.phases.PARTS`
    (columns rank, phase, then CATEGORIES): init, steady, final, and ``after_stop``, the rank's time after its job
    was stopped (all 0 where it was not: :attr:`~ddltrace.analyses.phases.RankPhases.stop_ns`); each row's sum is
    its part's length. ``gap``: see :func:`classify`."""
    return phase_breakdown(*rank_segments(timeline, phases, gap), phases)


def rank_segments(timeline: pd.DataFrame, phases: RankPhases, gap: str | None = None
                  ) -> tuple[np.ndarray, np.ndarray]:
    """:func:`classify` of the rank's rows over its phases' bounds (and the stop's): ``edges`` (ns) and ``codes``."""
    return classify(timeline, phases.edges(), gap)


def time_in_steps(edges: np.ndarray, codes: np.ndarray, steps: pd.DataFrame, category: str = "compute"
                  ) -> np.ndarray:
    """ns of ``category`` inside each of ``steps`` (start_ns, end_ns; disjoint), from the segments of
    :func:`rank_segments` (whose edges hold the steps' bounds only where a row starts or ends there: a segment is
    cut at them here)."""
    if not len(steps) or len(edges) < 2:
        return np.zeros(len(steps), dtype=np.int64)
    mine = codes == CATEGORIES.index(category)
    before = np.concatenate([[0], np.cumsum(np.where(mine, np.diff(edges), 0))])  # category's ns up to each edge

    def upto(x: np.ndarray) -> np.ndarray:  # category's ns from edges[0] to x
        x = np.clip(x, edges[0], edges[-1])
        at = np.clip(np.searchsorted(edges, x, side="right") - 1, 0, len(edges) - 2)
        return before[at] + np.where(mine[at], x - edges[at], 0)

    return upto(steps["end_ns"].to_numpy(np.int64)) - upto(steps["start_ns"].to_numpy(np.int64))


def phase_breakdown(edges: np.ndarray, codes: np.ndarray, phases: RankPhases) -> pd.DataFrame:
    """:func:`rank_breakdown` from the segments of :func:`rank_segments`."""
    bounds = phases.edges()
    lengths = np.diff(edges)
    phase_idx = np.clip(np.searchsorted(bounds[1:-1], edges[:-1], side="right"), 0, len(PARTS) - 1)
    key = phase_idx * len(CATEGORIES) + codes.astype(np.int64)
    cells = len(PARTS) * len(CATEGORIES)
    if edges[-1] - edges[0] < 2**53:  # every partial sum an integer below 2**53 ns: float64 adds it exactly
        sums = np.rint(np.bincount(key, weights=lengths, minlength=cells)).astype(np.int64)
    else:
        sums = np.array([lengths[key == k].sum() for k in range(cells)], dtype=np.int64)
    sums = sums.reshape(len(PARTS), len(CATEGORIES))
    frame = pd.DataFrame(sums, columns=list(CATEGORIES))
    frame.insert(0, "phase", list(PARTS))
    frame.insert(0, "rank", phases.rank)
    return frame


def breakdown_table(breakdown: pd.DataFrame, phase: str = "all") -> pd.DataFrame:
    """One row per rank: time per category (ns), ``total_ns``, ``share_<category>`` of the phase and ``overlap``.

    ``breakdown`` holds :func:`rank_breakdown` rows of any number of ranks; ``phase`` is init, steady, final, all
    (the three: the whole run, up to the stop where the job was stopped) or ``after_stop`` (the time after it, which
    no other is of).
    """
    part = breakdown[breakdown["phase"] != AFTER_STOP] if phase == "all" else breakdown[breakdown["phase"] == phase]
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

    Exposed communication is comm + wait + barrier time not hidden behind compute on another lane (a barrier is a
    wait for every peer: before 2026-11-26 it was left out, and a rank 72 % in barriers over seq-w8's initialisation
    read 100 % overlap). 1.0 means every transfer hides behind computation; NaN for a rank with neither.
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


def collective_comm(edges: np.ndarray, codes: np.ndarray, spans: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """The stretches of a rank's segments (``edges``, ns, and ``codes`` of :func:`rank_segments`) filed as comm
    that overlap its host backend's collective ``spans`` (:func:`~ddltrace.analyses.host_collectives.
    rank_collectives`: start_ns, dur_ns): (starts, ends) in ns, disjoint, what :func:`with_wait_at_nxn` needs of
    the rank once its spans are matched across ranks (a few per collective, where the rank's segments are many)."""
    change = np.diff(np.concatenate([[0], (codes == CATEGORIES.index("comm")).astype(np.int8), [0]]))
    lo, hi = edges[np.flatnonzero(change == 1)], edges[np.flatnonzero(change == -1)]
    order = np.argsort(spans["start_ns"].to_numpy(np.int64), kind="stable")
    start = spans["start_ns"].to_numpy(np.int64)[order]
    reach = np.maximum.accumulate(start + spans["dur_ns"].to_numpy(np.int64)[order]) if len(start) else start
    at = np.searchsorted(start, hi, side="left") - 1  # the spans that start before the stretch ends: up to here
    overlaps = (at >= 0) & (reach[np.maximum(at, 0)] > lo) if len(start) else np.zeros(len(lo), dtype=bool)
    return lo[overlaps], hi[overlaps]


def with_wait_at_nxn(breakdown: pd.DataFrame, comm: dict[int, tuple[np.ndarray, np.ndarray]], spans: pd.DataFrame,
                     phases: dict[int, RankPhases]) -> pd.DataFrame:
    """``breakdown`` (:func:`rank_breakdown` rows of any ranks, ns) with each rank's comm time at its host backend's
    collectives that waited for the last rank to arrive filed as wait: Scalasca's Wait at N x N, from the rank's
    entry to the last rank's (:func:`~ddltrace.analyses.gpu_collectives.wait_intervals` of all ranks' ``spans``,
    matched across ranks), where the rank's segments filed it as comm (``comm``: :func:`collective_comm` of each
    rank; an instant another lane computes stays compute). Each phase's total is unchanged: ns move from comm to
    wait."""
    from ddltrace.analyses.gpu_collectives import wait_intervals

    out = breakdown.copy()
    for rank, part in wait_intervals(spans).groupby("rank"):
        if int(rank) not in comm or int(rank) not in phases:
            continue
        moved = _phase_overlaps(part["start_ns"].to_numpy(np.int64), part["end_ns"].to_numpy(np.int64),
                                comm[int(rank)], phases[int(rank)])
        mine = (out["rank"] == rank).to_numpy()
        moved = moved[out.loc[mine, "phase"].map(PARTS.index).to_numpy()]
        out.loc[mine, "comm"] -= moved
        out.loc[mine, "wait"] += moved
    return out


def _phase_overlaps(start: np.ndarray, end: np.ndarray, stretches: tuple[np.ndarray, np.ndarray],
                    phases: RankPhases) -> np.ndarray:
    """ns of the union of the intervals [``start``, ``end``) inside the union of ``stretches``, per part of the
    breakdown (in :data:`~ddltrace.analyses.phases.PARTS`' order)."""
    from ddltrace.analyses.gpu_lanes import intersection_ns

    bounds = phases.edges()
    out = np.zeros(len(PARTS), dtype=np.int64)
    for k, (lo, hi) in enumerate(zip(bounds[:-1], bounds[1:], strict=True)):
        out[k] = intersection_ns((np.clip(start, lo, hi), np.clip(end, lo, hi)),
                                 (np.clip(stretches[0], lo, hi), np.clip(stretches[1], lo, hi)))
    return out
