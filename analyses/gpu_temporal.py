"""Temporal breakdown of a device: idle, compute and non-compute time (HTA's ``get_temporal_breakdown``).

Per device of a rank, over its **window**: from the start of its first device work to the end of its last
(:mod:`ddltrace.analyses.gpu_lanes`; HTA's window is the same on the events it keeps):

* ``busy_ns``: the union of all device work (compute, communication and memory kernels) on any of its streams;
* ``compute_ns``: the union of its compute kernels;
* ``non_compute_ns`` = busy - compute: time only communication or memory kernels run;
* ``idle_ns`` = window - busy: no kernel runs on any stream of the device.

Shares are of the window (HTA's ``idle_time_pctg`` etc. are these times 100). Per stream (where the trace names
streams), the same over the stream's own work, with the **device's** window, so that the streams of one device
add up against one span.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from ddltrace.analyses.gpu_lanes import union_ns

COLUMNS = ["rank", "device", "stream", "window_start_ns", "window_ns", "busy_ns", "compute_ns", "non_compute_ns",
           "idle_ns", "share_idle", "share_compute", "share_non_compute"]


def _row(rank: int, device: str, stream: str, lo: int, hi: int, rows: pd.DataFrame) -> dict:
    start, end = rows["start_ns"].to_numpy(np.int64), rows["end_ns"].to_numpy(np.int64)
    compute = rows["category"].to_numpy(object) == "compute"
    busy = union_ns(start, end)
    comp = union_ns(start[compute], end[compute])
    window = hi - lo
    return {"rank": rank, "device": device, "stream": stream, "window_start_ns": lo, "window_ns": window,
            "busy_ns": busy, "compute_ns": comp, "non_compute_ns": busy - comp, "idle_ns": window - busy,
            "share_idle": (window - busy) / window if window else 0.0,
            "share_compute": comp / window if window else 0.0,
            "share_non_compute": (busy - comp) / window if window else 0.0}


def _natural(name: str) -> tuple:
    """Sort key: "stream 7" before "stream 23"."""
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name))


def temporal_breakdown(rank: int, work: pd.DataFrame, per_stream: bool = True) -> pd.DataFrame:
    """One row per device of ``rank`` (``stream`` empty) and, with ``per_stream``, one per stream of it; ``work``
    is :func:`~ddltrace.analyses.gpu_lanes.device_work` of the rank's timeline. Columns :data:`COLUMNS`."""
    rows = []
    for device, on_device in work.groupby("device", sort=True):
        lo, hi = int(on_device["start_ns"].min()), int(on_device["end_ns"].max())
        rows.append(_row(rank, device, "", lo, hi, on_device))
        if per_stream:
            streams = sorted(on_device.groupby("stream"), key=lambda kv: _natural(kv[0]))
            rows.extend(_row(rank, device, stream, lo, hi, on_stream) for stream, on_stream in streams)
    return pd.DataFrame(rows, columns=COLUMNS)
