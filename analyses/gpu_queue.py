"""Queue length per stream over time (HTA's ``QueueLengthAnalysis``: ``get_queue_length_time_series``,
``get_queue_length_summary``, ``get_time_spent_blocked_on_full_queue``).

The queue length of a stream is the number of operations launched on it and not yet started: +1 at the start
of each runtime launch call, -1 at the start of the device activity it launched (the launch pairs of
:func:`~ddltrace.analyses.gpu_launch.launch_pairs`, placed on the activity's stream). The series changes only
at those instants and holds its value until the next one (a step function); equal instants keep launches before
starts.

Per stream: the number of changes, HTA's mean (over the change points, as its ``describe()``), the time-weighted
mean (each value weighted by how long it held, over the stream's first to last change), the maximum, and the
time at or above the launch queue's capacity (:data:`MAX_QUEUE_LENGTH`, 1024 on CUDA: the host blocks in the
launch call while it is full), also as a share of the rank's window (its first to last recorded instant, HTA's
trace duration). A minimum below 0 means a kernel started before its launch was recorded (clock skew between
host and device in the trace).
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

#: CUDA's launch queue holds this many pending operations per stream (HTA's ``max_queue_length``).
MAX_QUEUE_LENGTH = 1024

SERIES_COLUMNS = ["device", "stream", "t_ns", "queue_length"]
COLUMNS = ["rank", "device", "stream", "changes", "mean_hta", "mean_time_weighted", "max", "min",
           "time_at_max_queue_ns", "share_at_max_queue"]


def _natural(key: tuple[str, str]) -> tuple:
    """A (device, stream) sort key that puts "stream 7" before "stream 23"."""
    return tuple(tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", str(k))) for k in key)


def queue_length_series(pairs: pd.DataFrame) -> pd.DataFrame:
    """The queue length of each stream at each instant it changes (:data:`SERIES_COLUMNS`; ``t_ns`` on the
    run's clock), from one rank's launch ``pairs``."""
    if not len(pairs):
        return pd.DataFrame(columns=SERIES_COLUMNS)
    device = np.concatenate([pairs["device"].to_numpy(object)] * 2)
    stream = np.concatenate([pairs["stream"].to_numpy(object)] * 2)
    t = np.concatenate([pairs["launch_start_ns"].to_numpy(np.int64), pairs["gpu_start_ns"].to_numpy(np.int64)])
    change = np.repeat(np.array([1, -1], np.int64), len(pairs))
    d, s = pd.factorize(device, sort=True)[0], pd.factorize(stream, sort=True)[0]
    order = np.lexsort((t, s, d))  # by device, stream and time; stable: launches before starts at equal times
    d, s, change = d[order], s[order], change[order]
    total = np.cumsum(change)
    first = np.ones(len(order), bool)  # the first change of each stream
    first[1:] = (d[1:] != d[:-1]) | (s[1:] != s[:-1])
    before = np.maximum.accumulate(np.where(first, np.arange(len(order)), 0))  # each row's stream's first row
    queue = total - (total - change)[before]  # the running sum within the stream
    steps = pd.DataFrame({"device": device[order], "stream": stream[order], "t_ns": t[order], "queue_length": queue})
    return steps[SERIES_COLUMNS]


def queue_summary(rank: int, series: pd.DataFrame, window_ns: int) -> pd.DataFrame:
    """Per stream of one rank's queue-length ``series``: :data:`COLUMNS` (times in ns); ``window_ns`` is the
    rank's window, for the share at the capacity."""
    rows = []
    groups = sorted(series.groupby(["device", "stream"], sort=False), key=lambda g: _natural(g[0]))
    for (device, stream), part in groups:
        t = part["t_ns"].to_numpy(np.int64)
        q = part["queue_length"].to_numpy(np.int64)
        held = np.diff(t)  # how long each value but the last held
        span = int(t[-1] - t[0])
        at_max = int(held[q[:-1] >= MAX_QUEUE_LENGTH].sum())
        rows.append([rank, device, stream, len(q), float(q.mean()),
                     float((q[:-1] * held).sum() / span) if span > 0 else float(q[0]), int(q.max()), int(q.min()),
                     at_max, at_max / window_ns if window_ns > 0 else 0.0])
    return pd.DataFrame(rows, columns=COLUMNS)
