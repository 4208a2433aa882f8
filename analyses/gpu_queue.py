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
    d, devices = pd.factorize(pairs["device"].array, sort=True)  # (codes of the distinct names: no string copies)
    s, streams = pd.factorize(pairs["stream"].array, sort=True)
    d, s = np.concatenate([d, d]), np.concatenate([s, s])
    t = np.concatenate([pairs["launch_start_ns"].to_numpy(np.int64), pairs["gpu_start_ns"].to_numpy(np.int64)])
    change = np.repeat(np.array([1, -1], np.int64), len(pairs))
    order = np.lexsort((t, s, d))  # by device, stream and time; stable: launches before starts at equal times
    d, s, change = d[order], s[order], change[order]
    total = np.cumsum(change)
    first = np.ones(len(order), bool)  # the first change of each stream
    first[1:] = (d[1:] != d[:-1]) | (s[1:] != s[:-1])
    before = np.maximum.accumulate(np.where(first, np.arange(len(order)), 0))  # each row's stream's first row
    queue = total - (total - change)[before]  # the running sum within the stream
    return pd.DataFrame({"device": devices.take(d), "stream": streams.take(s), "t_ns": t[order],
                         "queue_length": queue})  # in the order of SERIES_COLUMNS


def queue_summary(rank: int, series: pd.DataFrame, window_ns: int) -> pd.DataFrame:
    """Per stream of one rank's queue-length ``series``: :data:`COLUMNS` (times in ns); ``window_ns`` is the
    rank's window, for the share at the capacity."""
    rows = []
    devices, streams = series["device"].array, series["stream"].array  # (no groupby: its cost per call is most)
    run = np.ones(len(series), bool)  # the first row of each run of one stream's rows (queue_length_series writes
    run[1:] = np.asarray(devices[1:] != devices[:-1], bool) | np.asarray(streams[1:] != streams[:-1], bool)
    starts = np.flatnonzero(run)  # one run a stream)
    keys = list(zip(devices.take(starts), streams.take(starts), strict=True))  # (device, stream) of each run
    number: dict = {}  # each stream's number, in the order of its first row
    runs = np.array([number.setdefault(key, len(number)) for key in keys], np.int64)
    stream_of = np.repeat(runs, np.diff(starts, append=len(series)))  # each row's stream
    order = np.argsort(stream_of, kind="stable")  # the rows of each stream together, in their order
    t, q = series["t_ns"].to_numpy(np.int64)[order], series["queue_length"].to_numpy(np.int64)[order]
    bounds = [*np.flatnonzero(np.diff(stream_of[order], prepend=-1)), len(t)]  # each stream's rows in t and q
    groups = list(zip(number, bounds[:-1], bounds[1:], strict=True))
    for (device, stream), a, b in sorted(groups, key=lambda g: _natural(g[0])):  # (sorted is stable: ties in
        part_t, part_q = t[a:b], q[a:b]  # the order of the streams' first rows, as groupby(sort=False))
        held = np.diff(part_t)  # how long each value but the last held
        span = int(part_t[-1] - part_t[0])
        at_max = int(held[part_q[:-1] >= MAX_QUEUE_LENGTH].sum())
        rows.append([rank, device, stream, len(part_q), float(part_q.mean()),
                     float((part_q[:-1] * held).sum() / span) if span > 0 else float(part_q[0]), int(part_q.max()),
                     int(part_q.min()), at_max, at_max / window_ns if window_ns > 0 else 0.0])
    return pd.DataFrame(rows, columns=COLUMNS)
