"""Memory the framework's allocator held, per rank and device: how much, at its peak when, and how it grew.

PyTorch's profiler (``profile_memory=True``) records each allocation and free of its allocators as a ``[memory]``
event, which the Chrome-format reader keeps as the rank's counters (:data:`~ddltrace.collectors.importers.chrome.
MEMORY_EVENT`): ``DEV_alloc_bytes`` (each event's bytes, negative for a free) and, where the trace writes them (PyTorch
1.10 and later), ``DEV_allocated_bytes`` and ``DEV_reserved_bytes`` (the allocator's totals after the event). Per
rank and device, over its events in time order (``basis``):

* ``total``: where the trace writes the totals, the allocated bytes are the allocator's own (``Total Allocated``);
* ``since the trace began``: where it does not (older PyTorch), the events' bytes summed from the trace's first one:
  what the allocator held beyond what it held when the trace began (negative where it frees what it allocated
  before).

Figures (bytes, ns): ``events``, ``allocations`` and ``frees`` (their counts) and ``allocated_sum_bytes`` /
``freed_sum_bytes`` (their bytes); ``start_bytes`` and ``end_bytes`` (allocated after the first and the last event)
and ``growth_bytes`` (end minus start: what the window kept); ``peak_bytes`` (the most allocated) and ``peak_ns``
(the first event at it); ``reserved_peak_bytes`` (the most the allocator reserved from the device, where written) and
``peak_share_of_reserved`` (the peak over it); ``device_memory_bytes`` (the device's memory, where the trace says:
Kineto's ``deviceProperties``, ``totalGlobalMem``), ``peak_share_of_device`` and ``reserved_share_of_device`` (the
peak and the most reserved over it: how much room the job leaves, for a larger batch or model).
"""

from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd

_NAME = re.compile(r"^(cpu|[a-z]+\d+|device\d+\.\d+|device\?)_(alloc|allocated|reserved)_bytes$")
COLUMNS = ["rank", "device", "basis", "events", "allocations", "frees", "allocated_sum_bytes", "freed_sum_bytes",
           "first_ns", "last_ns", "start_bytes", "end_bytes", "growth_bytes", "peak_bytes", "peak_ns",
           "reserved_peak_bytes", "peak_share_of_reserved", "device_memory_bytes", "peak_share_of_device",
           "reserved_share_of_device"]
TOTAL, SINCE_START = "total", "since the trace began"


def device_name(counter_device: str) -> str:
    """The counters' device (``gpu1``) as the timeline's lanes name it (``gpu:1``); ``cpu`` and others as they are."""
    m = re.fullmatch(r"([a-z]+)(\d+)", counter_device)
    return f"{m.group(1)}:{m.group(2)}" if m and counter_device != "cpu" else counter_device


def _devices(counters: pd.DataFrame):
    """Per device (as the counters name it) of one rank's ``counters``: its allocator series by kind (``alloc``,
    ``allocated``, ``reserved``), each a frame of ``t_ns`` and ``value`` in time order (stable)."""
    if not len(counters):
        return
    codes, names = pd.factorize(counters["name"])  # (each distinct name matched once)
    found = [_NAME.match(str(name)) for name in names]
    known = np.array([m is not None for m in found] + [False])  # (a missing name's code, -1, is the last)
    keep = known[codes]
    if not keep.any():
        return
    device = np.array([m.group(1) if m else "" for m in found] + [""], dtype=object)
    kind = np.array([m.group(2) if m else "" for m in found] + [""], dtype=object)
    frame = pd.DataFrame({"device": device[codes[keep]], "series": kind[codes[keep]],
                          "t_ns": counters["t_ns"].to_numpy(np.int64)[keep],
                          "value": counters["value"].to_numpy(float)[keep]})
    for device, mine in frame.groupby("device", sort=True):
        series = {name: part.sort_values("t_ns", kind="stable") for name, part in mine.groupby("series")}
        if "alloc" in series:
            yield device, series


def _held(series: dict) -> tuple[str, np.ndarray, np.ndarray, np.ndarray]:
    """(basis, event times in ns, each event's bytes, bytes allocated after each) of one device's series."""
    delta = series["alloc"]
    t, change = delta["t_ns"].to_numpy(np.int64), delta["value"].to_numpy(float)
    if "allocated" in series and len(series["allocated"]) == len(delta):
        return TOTAL, t, change, series["allocated"]["value"].to_numpy(float)
    return SINCE_START, t, change, np.cumsum(change)


SERIES_COLUMNS = ["rank", "device", "basis", "t_ns", "held_bytes"]


def held_series(rank: int, counters: pd.DataFrame) -> pd.DataFrame:
    """The bytes allocated after each allocator event of one rank (``counters``), per device: :data:`SERIES_COLUMNS`
    (``basis`` as in the module docstring), for the report's figure."""
    parts = [pd.DataFrame({"rank": rank, "device": device_name(device), "basis": basis, "t_ns": t, "held_bytes": held})
             for device, series in _devices(counters) for basis, t, _, held in [_held(series)]]
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=SERIES_COLUMNS)


def allocator_memory(rank: int, counters: pd.DataFrame, device_memory: dict | None = None) -> pd.DataFrame:
    """One row per device whose allocator events ``counters`` (one rank's) hold: :data:`COLUMNS`. ``device_memory``:
    each device's memory in bytes, keyed as the lanes name it (``gpu:0``), where the trace gives it."""
    device_memory = device_memory if isinstance(device_memory, dict) else {}
    rows = []
    for device, series in _devices(counters):
        basis, t, change, held = _held(series)
        at = int(np.argmax(held))
        reserved = series["reserved"]["value"].to_numpy(float) if "reserved" in series else np.zeros(0)
        reserved_peak = float(reserved.max()) if len(reserved) else float("nan")
        size = device_memory.get(device_name(device))
        size = float(size) if isinstance(size, int | float) and not isinstance(size, bool) and size > 0 else math.nan
        rows.append([rank, device_name(device), basis, len(t), int((change > 0).sum()), int((change < 0).sum()),
                     float(change[change > 0].sum()), float(-change[change < 0].sum()), int(t[0]), int(t[-1]),
                     float(held[0]), float(held[-1]), float(held[-1] - held[0]), float(held[at]), int(t[at]),
                     reserved_peak, float(held[at] / reserved_peak) if reserved_peak > 0 else math.nan,
                     size, float(held[at]) / size, reserved_peak / size])
    return pd.DataFrame(rows, columns=COLUMNS)
