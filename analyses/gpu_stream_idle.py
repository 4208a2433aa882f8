"""Why a stream is idle, by HTA's definition (``get_idle_time_breakdown``): host wait, kernel wait, other.

Per stream of a rank, its device work in start order; each item's idle interval is its start minus the end of
the item before it on the stream (the stream's first item has none). The interval is **host wait** where the
runtime call that launched the item (the host row with its correlation id, any name) started after the item
before it ended: the stream had run dry before the host asked for more. Else **kernel wait** where the interval is
under :data:`KERNEL_WAIT_BELOW_NS` (the overhead of launching back-to-back kernels), else **other** (the work was
queued but held: an event wait, a dependency on another stream). An item with no launch in the trace is never host
wait. Shares are of the stream's idle time (HTA's ``idle_time_ratio``).

HTA's own definition, under its name: a stream idle while another stream of the device works counts here; the
device's own idle waiting for the host is :mod:`~ddltrace.analyses.gpu_idle`'s. As HTA, the intervals are summed as
they are (two items of a stream that overlap in the trace give a negative one).

Columns: ``rank``, ``device``, ``stream``, ``idle_category`` (``host_wait``, ``kernel_wait``, ``other``), ``idle_ns``
(ns), ``intervals`` (how many) and ``share`` (of the stream's idle time, a fraction).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ddltrace.analyses.breakdown import device_lanes
from ddltrace.analyses.gpu_lanes import NOT_FOUND, lookup

#: HTA's ``consecutive_kernel_delay``, 30 (its docstring says ns; it compares it with its times in µs): an interval
#: under 30 µs not explained by the host is kernel wait.
KERNEL_WAIT_BELOW_NS = 30_000
CATEGORIES = ("host_wait", "kernel_wait", "other")
COLUMNS = ["rank", "device", "stream", "idle_category", "idle_ns", "intervals", "share"]


def stream_idle(rank: int, work: pd.DataFrame, timeline: pd.DataFrame) -> pd.DataFrame:
    """:data:`COLUMNS` for each stream of ``rank``'s device ``work`` (:func:`~ddltrace.analyses.gpu_lanes.
    device_work`) and each category it has, the launches read from ``timeline`` (the rank's); empty where no
    work has a correlation id."""
    if not len(work) or work["correlation"].isna().all():
        return pd.DataFrame(columns=COLUMNS)
    host = ~device_lanes(timeline["lane"]) & timeline["correlation"].notna().to_numpy(bool)
    launched_at = (pd.Series(timeline["start_ns"].to_numpy(np.int64)[host],
                             index=timeline["correlation"].to_numpy(np.int64, na_value=-1)[host])
                   .groupby(level=0).min())  # (one host row per id in Kineto; the earliest if more)
    ids = work["correlation"].to_numpy(np.int64, na_value=-1)
    launch = lookup(launched_at.index.to_numpy(np.int64), launched_at.to_numpy(np.int64), ids)
    launch[ids < 0] = NOT_FOUND
    device_codes, devices = pd.factorize(work["device"].to_numpy(object))
    stream_codes, streams = pd.factorize(work["stream"].to_numpy(object))
    start, end = work["start_ns"].to_numpy(np.int64), work["end_ns"].to_numpy(np.int64)
    order = np.lexsort((start, stream_codes, device_codes))
    device_codes, stream_codes = device_codes[order], stream_codes[order]
    start, end, launch = start[order], end[order], launch[order]
    follows = (device_codes[1:] == device_codes[:-1]) & (stream_codes[1:] == stream_codes[:-1])  # same stream
    previous_end = end[:-1][follows]
    interval = (start[1:] - end[:-1])[follows]
    host_wait = launch[1:][follows] > previous_end
    kernel_wait = ~host_wait & (interval < KERNEL_WAIT_BELOW_NS)
    category = np.select([host_wait, kernel_wait], [0, 1], 2)  # index into CATEGORIES
    streams_n = len(streams)
    key = ((device_codes[1:][follows] * streams_n + stream_codes[1:][follows]) * len(CATEGORIES) + category)
    cells = len(devices) * streams_n * len(CATEGORIES)  # (a few per device: sums by integer key, no string frame)
    counts = np.bincount(key, minlength=cells)
    sums = np.zeros(cells, np.int64)
    np.add.at(sums, key, interval)  # int64 throughout: bincount's weights would be floats
    present = np.flatnonzero(counts)
    device, rest = np.divmod(present, streams_n * len(CATEGORIES))
    stream, code = np.divmod(rest, len(CATEGORIES))
    out = pd.DataFrame({"rank": rank, "device": np.asarray(devices, dtype=object)[device],
                        "stream": np.asarray(streams, dtype=object)[stream],
                        "idle_category": np.array(CATEGORIES, dtype=object)[code], "idle_ns": sums[present],
                        "intervals": counts[present]})
    total = out.groupby(["device", "stream"], sort=False)["idle_ns"].transform("sum").to_numpy()
    out["share"] = np.where(total != 0, out["idle_ns"] / np.where(total != 0, total, 1), 0.0)
    return out.sort_values(["device", "stream", "idle_category"], kind="stable").reset_index(drop=True)[COLUMNS]
