"""The temporal breakdown and overlap of the device work **launched in the trace** (HTA's set), beside those of all
device work (:mod:`~ddltrace.analyses.gpu_temporal`, :mod:`~ddltrace.analyses.gpu_overlap`).

HTA 0.5 keeps only the device work it can join to a CPU event by correlation id (``Trace.
_filter_irrelevant_gpu_kernels``, an inner join; ``include_last_profiler_step=True``, as
``benchmarks/gpu_vs_hta.py`` runs it). Where a trace holds kernels launched before it began or by a thread not
recorded, HTA's figures are over fewer kernels and a shorter window. Its rule, per rank:

* only where the trace names two or more ProfilerStep spans (``ProfilerStep#N``); elsewhere it keeps all work
  (HTA counts the names over all the ranks it reads, ddltrace over the rank's own: the same where each rank's
  trace names its steps);
* a device event with a correlation id is kept where a host event carries that id, wherever it is in the trace;
  one with no id (HTA files it with the CPU events) is kept. HTA means to keep only the launches that start by the
  end of the last ProfilerStep, but compares their start, shifted to the trace's first event, with the step's
  end not shifted (its ``end`` column is made before ``_align_all_ranks``): on a trace whose clock is the epoch
  (Kineto's) the bound never applies, and ddltrace takes none (``tests/test_gpu_analyses.py`` checks both
  against HTA on a trace whose last step is cut short).

The figures are HTA's definitions over the kept work, per device: window = its first kept work's start to its last
kept work's end (ns), idle / compute / non-compute shares of that window, overlap = communication time under
compute over communication time. They are made only where the rank's timeline has correlation ids and some device
work is not kept; ``unlaunched_events`` and ``unlaunched_ns`` (summed durations) say how much is left out.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ddltrace.analyses import gpu_overlap, gpu_temporal
from ddltrace.analyses.breakdown import device_lanes
from ddltrace.analyses.gpu_lanes import WORK

#: Per device: its device work (count, summed durations in ns), what of it is not kept (no launch in the trace),
#: and the temporal breakdown (:data:`~ddltrace.analyses.gpu_temporal.COLUMNS`) and overlap of the kept work.
COLUMNS = ["rank", "device", "events", "work_ns", "unlaunched_events", "unlaunched_ns", "window_start_ns",
           "window_ns", "busy_ns", "compute_ns", "non_compute_ns", "idle_ns", "share_idle", "share_compute",
           "share_non_compute", "comm_ns", "overlap_ns", "overlap"]


def launched(timeline: pd.DataFrame, work: pd.DataFrame) -> np.ndarray | None:
    """Which rows of ``work`` (:func:`~ddltrace.analyses.gpu_lanes.device_work` of ``timeline``, one rank) HTA
    keeps, as a bool array; None where HTA keeps them all (fewer than two ProfilerStep names) or the timeline has
    no correlation ids."""
    if "correlation" not in timeline or not len(work) or work["correlation"].isna().all():
        return None
    on_device = device_lanes(timeline["lane"])
    host = ~on_device & timeline["correlation"].notna().to_numpy(bool)
    ids = timeline["correlation"].to_numpy(np.int64, na_value=-1)[host]
    correlation = work["correlation"]
    keep = correlation.isna().to_numpy(bool) | np.isin(correlation.to_numpy(np.int64, na_value=-1), ids)
    if keep.all():  # nothing for HTA's filter to drop
        return keep
    names = timeline["name"].astype(str)
    is_work = on_device & timeline["category"].isin(WORK).to_numpy(bool)  # HTA's GPU events
    steps = names.str.contains("ProfilerStep", regex=False).to_numpy(bool) & ~is_work
    return keep if names[steps].nunique() >= 2 else None


def launched_breakdown(rank: int, work: pd.DataFrame, keep: np.ndarray | None) -> pd.DataFrame:
    """One row per device of ``rank`` with work HTA does not keep (``keep``: :func:`launched` of the rank's timeline
    and ``work``): :data:`COLUMNS` (ns, fractions; the breakdown and overlap are NaN where it keeps none of the
    device's work, the overlap where it keeps no communication kernel). Empty where HTA keeps all the rank's work."""
    if keep is None or keep.all():
        return pd.DataFrame(columns=COLUMNS)
    counts = work.assign(unlaunched_events=~keep, unlaunched_ns=np.where(keep, 0, work["dur_ns"]))
    counts = counts.groupby("device", sort=True).agg(events=("dur_ns", "size"), work_ns=("dur_ns", "sum"),
                                                     unlaunched_events=("unlaunched_events", "sum"),
                                                     unlaunched_ns=("unlaunched_ns", "sum"))
    counts = counts[counts["unlaunched_events"] > 0].reset_index()
    kept = work[keep]
    temporal = gpu_temporal.temporal_breakdown(rank, kept, per_stream=False).drop(columns=["rank", "stream"])
    overlap = gpu_overlap.comm_comp_overlap(rank, kept).drop(columns="rank")
    table = counts.merge(temporal, on="device", how="left").merge(overlap, on="device", how="left")
    table.insert(0, "rank", rank)
    return table[COLUMNS]
