"""Why a device is idle: waiting for the host, or not (after HTA's idle-time breakdown, per device).

Per device of a rank, the idle gaps are the stretches of its window (:mod:`ddltrace.analyses.gpu_temporal`) where
no device work runs on any stream. A gap [a, b) ends with the work that starts at b; where the trace links that
work to the runtime call that launched it (:func:`~ddltrace.analyses.gpu_launch.launch_pairs`), the part of the
gap before the launch call returned, min(b, launch end) - a, is **host wait**: the device had nothing queued and
waited for the host to hand it work (the host was busy elsewhere: the input pipeline, Python, a synchronisation,
or launching itself). The rest of the gap is **other** (work queued but held, e.g. behind an event wait, or the
host's launch done early); gaps ending with work that is not linked to a launch are **unlinked**.

Columns (times in ns): ``window_ns``, ``idle_ns`` (the gaps' sum: the temporal breakdown's idle), ``host_wait_ns``,
``other_ns``, ``unlinked_ns``, ``gaps``, ``host_wait_gaps`` (gaps with some host wait), ``share_host_wait``
(host wait over the window) and ``host_wait_short_ns``: the host wait of the gaps whose host wait is under
:data:`SHORT_GAP_NS` (1 ms), the host's own overhead between one launch and the next (Python, the framework's
dispatch, the launch call); the rest is the host away for longer (an input pipeline, a collective run on the host,
a synchronisation, a sleep). Where the host was in the long ones, from the rank's host lanes (ns, they sum to
the long host wait; each instant to the first that holds it): ``long_in_comm_ns``, some host thread in a
collective (category ``comm``: gloo's spans, c10d's calls); ``long_in_sync_ns``, in a wait (``wait``:
``cudaStreamSynchronize``, a blocking receive); ``long_in_ops_ns``, in the framework's CPU work (``compute``,
``io``, ``memcpy``); ``long_outside_ns``, in none of them (Python between ops, an input pipeline in another
process, a sleep); ``long_top_op`` and ``long_top_op_ns``: the name of the host spans of those CPU-work categories
that overlap the long host waits the most, and by how much (a DataLoader's ``enumerate(DataLoader)#...`` on Kineto's
TensorBoard ResNet-50 worker). On real traces the two kinds part: of the host wait, under 1 ms 70 to 100 % on jobs
of many short kernels (HTA's nccl_parser_config and df_index_resolver, TraceLens' B200 eager trace, one H100 rank of
ResNet-18 on NCCL), 5 to 24 % where the host is away (Kineto's TensorBoard ResNet-50 worker, its DataLoader;
HTA's trace_filter; sample_traces/h100-ddp's host-bound and gloo runs).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ddltrace.analyses.breakdown import host_lanes
from ddltrace.analyses.gpu_lanes import NOT_FOUND, _merged, lookup

COLUMNS = ["rank", "device", "window_ns", "idle_ns", "host_wait_ns", "other_ns", "unlinked_ns", "gaps",
           "host_wait_gaps", "share_host_wait", "host_wait_short_ns", "long_in_comm_ns", "long_in_sync_ns",
           "long_in_ops_ns", "long_outside_ns", "long_top_op", "long_top_op_ns"]
#: The host lanes' categories that tell where the host was during a long host wait, in order of precedence.
HOST_ACTIVITY = (("comm",), ("wait",), ("compute", "io", "memcpy"))
#: A gap's host wait under this (ns) is the host's overhead between launches, not the host away (module docstring).
SHORT_GAP_NS = 1_000_000


def idle_breakdown(rank: int, work: pd.DataFrame, pairs: pd.DataFrame,
                   timeline: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per device of ``rank``: :data:`COLUMNS`. ``work``: the rank's device work; ``pairs``: its launch
    pairs (empty where the trace has no correlation ids: every gap is then unlinked); ``timeline``: the rank's, whose
    rows on host lanes give the long host waits' split (all outside without; read only where some wait is long)."""
    rows = []
    host = None  # the rank's host rows, read once where some device's wait is long
    launch_end = None
    if len(pairs):
        end = pairs["launch_start_ns"].astype(np.int64) + pairs["cpu_duration_ns"].astype(np.int64)
        launch_end = pairs.assign(end=end).groupby(["device", "gpu_start_ns"])["end"].min()
    for device, on_device in work.groupby("device", sort=True):
        lo, hi = _merged(on_device["start_ns"].to_numpy(np.int64), on_device["end_ns"].to_numpy(np.int64))
        a, b = hi[:-1], lo[1:]
        gap = b - a
        ends = np.full(len(b), NOT_FOUND, np.int64)
        if launch_end is not None and device in launch_end.index.get_level_values(0):
            known = launch_end.loc[device]
            ends = lookup(known.index.to_numpy(np.int64), known.to_numpy(np.int64), b)
        linked = ends != NOT_FOUND
        wait = np.where(linked, np.clip(np.minimum(ends, b) - a, 0, None), 0)
        window = int(hi[-1] - lo[0]) if len(lo) else 0
        idle = int(gap.sum())
        long = wait >= SHORT_GAP_NS
        if long.any() and host is None:
            host = _host_rows(timeline)
        rows.append([rank, device, window, idle, int(wait.sum()), int((gap - wait)[linked].sum()),
                     int(gap[~linked].sum()), len(gap), int((wait > 0).sum()),
                     wait.sum() / window if window else 0.0, int(wait[~long].sum()),
                     *host_activity(a[long], a[long] + wait[long], host)])
    return pd.DataFrame(rows, columns=COLUMNS)


def _host_rows(timeline: pd.DataFrame | None) -> pd.DataFrame | None:
    """The rows of ``timeline`` on host lanes (start_ns, dur_ns, category, name); None without a timeline."""
    if timeline is None:
        return None
    return timeline.loc[host_lanes(timeline["lane"]), ["start_ns", "dur_ns", "category", "name"]]


def host_activity(start: np.ndarray, end: np.ndarray, host: pd.DataFrame | None) -> list[int]:
    """Of the intervals [start, end) (disjoint), the ns during which the host was in each of :data:`HOST_ACTIVITY`
    (the first that holds an instant takes it), then the ns in none: the module docstring's ``long_in_*``."""
    total = int((end - start).sum())
    if not total or host is None or not len(host):
        return [0] * len(HOST_ACTIVITY) + [total, "", 0]
    sets = [(start, end)]
    for categories in HOST_ACTIVITY:
        rows = host[host["category"].isin(categories).to_numpy(bool)]
        first = rows["start_ns"].to_numpy(np.int64)
        sets.append(_merged(first, first + rows["dur_ns"].to_numpy(np.int64)))
    points = np.unique(np.concatenate([np.concatenate(pair) for pair in sets]))
    length, left = np.diff(points), points[:-1]
    inside = [_covers(lo, hi, left) for lo, hi in sets]
    free, out = inside[0], []
    for held in inside[1:]:
        out.append(int(length[free & held].sum()))
        free = free & ~held
    return out + [int(length[free].sum()), *_top_op(start, end, host)]


def _top_op(start: np.ndarray, end: np.ndarray, host: pd.DataFrame) -> list:
    """[name, ns]: the host spans of CPU work (the last of :data:`HOST_ACTIVITY`) whose summed overlap with the
    disjoint sorted intervals [start, end) is the largest; ["", 0] where none overlaps."""
    ops = host[host["category"].isin(HOST_ACTIVITY[-1]).to_numpy(bool)]
    if not len(ops):
        return ["", 0]
    before = np.concatenate([[0], np.cumsum(end - start)])  # the intervals' length before each one's start

    def covered(x: np.ndarray) -> np.ndarray:  # length of the intervals before x
        at = np.searchsorted(start, x, side="right")
        inside = np.maximum(at - 1, 0)
        return before[inside] + np.where(at > 0, np.clip(np.minimum(x, end[inside]) - start[inside], 0, None), 0)

    first = ops["start_ns"].to_numpy(np.int64)
    overlap = pd.Series(covered(first + ops["dur_ns"].to_numpy(np.int64)) - covered(first), index=ops.index)
    by_name = overlap.groupby(ops["name"].astype(str).to_numpy()).sum()
    if not len(by_name) or by_name.max() <= 0:
        return ["", 0]
    return [str(by_name.idxmax()), int(by_name.max())]


def _covers(lo: np.ndarray, hi: np.ndarray, points: np.ndarray) -> np.ndarray:
    """For each of ``points``, whether it lies in one of the disjoint sorted intervals [lo, hi)."""
    at = np.searchsorted(lo, points, side="right") - 1
    return (at >= 0) & (points < hi[np.maximum(at, 0)]) if len(lo) else np.zeros(len(points), bool)
