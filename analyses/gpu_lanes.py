"""The device side of one rank's timeline, as the GPU analyses read it: which rows are device work, on which
device and stream, and the interval arithmetic (union, intersection) their figures are made of.

A device lane is named ``<device>/<stream or line>`` (``gpu:0/stream 7`` from Kineto, ``gpu:0/<stream line>``
from an XPlane device plane, ``gpu:0/thread 1`` from MXNet; see
:data:`~ddltrace.analyses.breakdown.DEVICE_LANE_PREFIXES`). The kind of each row is its category, which the
importers' rule files (``collectors/importers/categories.toml``) gave it, never a pattern on its name here:

* ``compute``: a compute kernel; ``comm``: a communication kernel (NCCL, RCCL, ...); ``memcpy``: a copy or fill.
  These three are **device work** (:data:`WORK`), what HTA calls kernels (its compute, communication and memory
  kernel types).
* ``wait`` (a stream waiting on an event, a device-side sync) and ``other`` (uncategorised, and the profiler's
  ``gpu_user_annotation`` spans, which annotate a stretch of a stream and are no work of their own) are not
  work: a device running only those is idle.

Times are ns on the run's common clock.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from ddltrace.analyses.breakdown import device_lanes

#: Categories of device work, and the kernel class each is (HTA's kernel types in brackets).
WORK = ("compute", "comm", "memcpy")
CLASS_TITLES = {"compute": "compute kernels (HTA: COMPUTATION)", "comm": "communication kernels (HTA: COMMUNICATION)",
                "memcpy": "memory copies and fills (HTA: MEMORY)"}
WORK_COLUMNS = {"device": object, "stream": object, "name": object, "category": object, "start_ns": "int64",
                "end_ns": "int64", "dur_ns": "int64", "step": "Int64", "correlation": "Int64", "bytes": "Int64",
                "comm": "Int64"}
#: A device lane's second part names a stream when it says so (Kineto's "stream 7", XPlane's "Stream #7(...)").
_STREAM = re.compile(r"(?i)\bstream\b")


def split_lane(lane: str) -> tuple[str, str]:
    """(device, stream) of a device lane: ``"gpu:0/stream 7"`` -> ``("gpu:0", "stream 7")``."""
    device, _, stream = str(lane).partition("/")
    return device, stream


def device_work(timeline: pd.DataFrame) -> pd.DataFrame:
    """The device work of one rank's timeline (rows on a device lane whose category is in :data:`WORK`):
    columns ``device``, ``stream``, ``name``, ``category`` (str), ``start_ns``, ``end_ns``, ``dur_ns``,
    ``step`` (the training step the importer linked the row to, <NA> where none), ``correlation`` (the id linking
    the row to its host launch, <NA> where the trace gives none), ``bytes`` (payload bytes of a copy or a
    collective) and ``comm`` (a collective's process group), <NA> where the importer gives none."""
    rows = np.zeros(0, np.int64)
    if len(timeline):  # positions of the work rows; only their columns are taken, not the whole frame's
        rows = np.flatnonzero(device_lanes(timeline["lane"]) & timeline["category"].isin(WORK).to_numpy(bool))
    if not len(rows):
        return pd.DataFrame({c: pd.Series([], dtype=d) for c, d in WORK_COLUMNS.items()})
    codes, lanes = pd.factorize(timeline["lane"].take(rows).astype(str))  # split each distinct lane once
    device, stream = (np.array(part, dtype=object)[codes] for part in zip(*map(split_lane, lanes), strict=True))
    start = timeline["start_ns"].to_numpy(np.int64)[rows]
    dur = timeline["dur_ns"].to_numpy(np.int64)[rows]
    return pd.DataFrame({
        "device": device, "stream": stream, "name": timeline["name"].take(rows).astype(str).to_numpy(object),
        "category": timeline["category"].take(rows).astype(str).to_numpy(object),
        "start_ns": start, "end_ns": start + dur, "dur_ns": dur,
        **{column: timeline[column].array.take(rows) if column in timeline
           else pd.array([pd.NA] * len(rows), dtype="Int64") for column in ("step", "correlation", "bytes", "comm")},
    })


def has_streams(work: pd.DataFrame) -> bool:
    """Whether the device lanes of ``work`` are CUDA/HIP streams (named so by the trace), not threads or lines
    of another kind (MXNet's engine threads)."""
    return bool(len(work)) and all(_STREAM.search(s) for s in work["stream"].unique())


def _merged(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The disjoint intervals covering the union of [start, end)."""
    if not len(start):
        return start, end
    order = np.argsort(start, kind="stable")
    start, end = start[order], end[order]
    reach = np.maximum.accumulate(end)
    new = np.ones(len(start), bool)
    new[1:] = start[1:] > reach[:-1]
    first = np.flatnonzero(new)
    return start[first], np.maximum.reduceat(end, first)


def union_ns(start: np.ndarray, end: np.ndarray) -> int:
    """Length (ns) of the union of the intervals [start, end)."""
    lo, hi = _merged(np.asarray(start, np.int64), np.asarray(end, np.int64))
    return int((hi - lo).sum())


def intersection_ns(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]) -> int:
    """Length (ns) of (union of the intervals ``a``) intersected with (union of ``b``): |A| + |B| - |A u B|."""
    both = (np.concatenate([a[0], b[0]]), np.concatenate([a[1], b[1]]))
    return union_ns(*a) + union_ns(*b) - union_ns(*both)


#: The value :func:`lookup` gives a key it does not find (below any time in ns).
NOT_FOUND = np.iinfo(np.int64).min


def lookup(keys: np.ndarray, values: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """The int64 ``values`` of the sorted, distinct int64 ``keys`` at each of ``wanted``, :data:`NOT_FOUND` where a
    key is absent. In int64 throughout: a time in ns since the epoch (1.8e18) moves by up to 256 ns through a float,
    as a pandas reindex with missing keys takes it."""
    keys, values, wanted = (np.asarray(x, np.int64) for x in (keys, values, wanted))
    if not len(keys):
        return np.full(len(wanted), NOT_FOUND, np.int64)
    at = np.clip(np.searchsorted(keys, wanted), 0, len(keys) - 1)
    return np.where(keys[at] == wanted, values[at], NOT_FOUND)
