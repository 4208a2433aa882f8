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
a synchronisation, a sleep). On real traces the two kinds part: of the host wait, under 1 ms 70 to 100 % on jobs of
many short kernels (HTA's nccl_parser_config and df_index_resolver, TraceLens' B200 eager trace, one H100 rank of
ResNet-18 on NCCL), 5 to 24 % where the host is away (Kineto's TensorBoard ResNet-50 worker, its DataLoader;
HTA's trace_filter; sample_traces/h100-ddp's host-bound and gloo runs).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ddltrace.analyses.gpu_lanes import NOT_FOUND, _merged, lookup

COLUMNS = ["rank", "device", "window_ns", "idle_ns", "host_wait_ns", "other_ns", "unlinked_ns", "gaps",
           "host_wait_gaps", "share_host_wait", "host_wait_short_ns"]
#: A gap's host wait under this (ns) is the host's overhead between launches, not the host away (module docstring).
SHORT_GAP_NS = 1_000_000


def idle_breakdown(rank: int, work: pd.DataFrame, pairs: pd.DataFrame) -> pd.DataFrame:
    """One row per device of ``rank``: :data:`COLUMNS`. ``work``: the rank's device work; ``pairs``: its launch
    pairs (empty where the trace has no correlation ids: every gap is then unlinked)."""
    rows = []
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
        host = np.where(linked, np.clip(np.minimum(ends, b) - a, 0, None), 0)
        window = int(hi[-1] - lo[0]) if len(lo) else 0
        idle = int(gap.sum())
        rows.append([rank, device, window, idle, int(host.sum()), int((gap - host)[linked].sum()),
                     int(gap[~linked].sum()), len(gap), int((host > 0).sum()),
                     host.sum() / window if window else 0.0, int(host[host < SHORT_GAP_NS].sum())])
    return pd.DataFrame(rows, columns=COLUMNS)
