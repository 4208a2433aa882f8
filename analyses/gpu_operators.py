"""Device time by the host operator that launched it: which of the framework's operators (``aten::mm``, a module's
``## forward ##`` annotation, ...) the kernels' time comes from (the PyTorch profiler's "Self CUDA" and "CUDA total"
per operator, TraceLens' kernel launchers), from the trace itself.

Each device work item with a correlation id has its launch call on a host lane (:func:`~ddltrace.analyses.gpu_launch.
launch_pairs`). The rows of one host lane nest (a thread's operator encloses the operators and calls it made, as
Kineto writes them); the **operators of a launch** are the rows of its lane that enclose the call: its parent (the
innermost), the parent's parent, and so on. Per rank and operator name (ns, durations summed: concurrent kernels
each count, as the kernel breakdown's):

* ``calls``: the rows of that name on host lanes;
* ``self_ns``, ``self_work``: the device work whose launch's parent is a row of that name (what it launched itself);
* ``total_ns``: the device work launched inside a row of that name at any depth, each item counted once per name
  (an operator nested in one of its own name counts its work once);
* ``self_share``: ``self_ns`` over the rank's device work that has a launch in the trace.

Work whose launch has no enclosing row is under :data:`NO_OPERATOR`. Nesting is found per lane from the rows' times
(sorted by start, the longer first at one start; a row that ends where the next starts does not enclose it; a row of
no duration encloses nothing). Rows that overlap without nesting (not a thread's stack) have no well-defined parent:
such a lane's figures are as its times give them.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ddltrace.analyses.breakdown import host_lanes

COLUMNS = ["rank", "name", "calls", "self_work", "self_ns", "total_ns", "self_share"]
NO_OPERATOR = "(no enclosing operator)"
TOP_K = 10


def parents(lane: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """For each row (lane code, start, end in ns), the position of the innermost other row of its lane that encloses
    it, -1 where none: rows sorted by (lane, start, longer first), a row's depth is the rows of its lane started
    before it and not ended by its start; its parent the last row before it one level up."""
    n = len(start)
    out = np.full(n, -1, dtype=np.int64)
    if not n:
        return out
    order = np.lexsort((-end, start, lane))
    lane_s, start_s, end_s = lane[order], start[order], end[order]
    cuts = np.flatnonzero(np.diff(lane_s)) + 1
    parent_s = np.full(n, -1, dtype=np.int64)
    for lo, hi in zip(np.r_[0, cuts], np.r_[cuts, n], strict=True):
        s, e = start_s[lo:hi], end_s[lo:hi]
        instant = e == s  # (a row of no duration is not ended at its own start, nor at the start of a row beside it)
        closed = (np.searchsorted(np.sort(e[~instant]), s, side="right")  # rows of the lane ended by each start
                  + np.searchsorted(np.sort(e[instant]), s, side="left"))
        depth = np.arange(hi - lo) - closed
        by_depth = np.argsort(depth, kind="stable")  # each level's rows in order, one level after another
        bounds = np.searchsorted(depth[by_depth], np.arange(int(depth.max()) + 2))
        for d in range(1, int(depth.max()) + 1):
            above = by_depth[bounds[d - 1]:bounds[d]]
            mine = by_depth[bounds[d]:bounds[d + 1]]
            at = np.searchsorted(above, mine) - 1
            found = at >= 0
            parent_s[lo + mine[found]] = lo + above[at[found]]
    out[order] = np.where(parent_s >= 0, order[np.maximum(parent_s, 0)], -1)
    return out


def by_operator(rank: int, timeline: pd.DataFrame, pairs: pd.DataFrame) -> pd.DataFrame:
    """Per operator name of one rank: :data:`COLUMNS`, the most self time first. ``pairs``: the rank's
    :func:`~ddltrace.analyses.gpu_launch.launch_pairs` of ``timeline`` (with their ``launch_row``)."""
    if not len(pairs):
        return pd.DataFrame(columns=COLUMNS)
    host = np.flatnonzero(host_lanes(timeline["lane"]))
    lanes, _ = pd.factorize(timeline["lane"].take(host))
    start = timeline["start_ns"].to_numpy(np.int64)[host]
    parent = parents(lanes.astype(np.int64), start, start + timeline["dur_ns"].to_numpy(np.int64)[host])
    names, table = pd.factorize(timeline["name"].take(host).astype(str))
    at = np.full(len(timeline), -1, dtype=np.int64)
    at[host] = np.arange(len(host))
    launch = at[pairs["launch_row"].to_numpy(np.int64)]
    gpu = pairs["gpu_duration_ns"].to_numpy(np.int64)
    none = len(table)  # the code of NO_OPERATOR
    up = np.where(launch >= 0, parent[np.maximum(launch, 0)], -1)
    self_code = np.where(up >= 0, names[np.maximum(up, 0)], none)
    self_ns = np.bincount(self_code, weights=gpu, minlength=none + 1)
    self_work = np.bincount(self_code, minlength=none + 1)
    total = np.zeros(none + 1)
    seen = np.zeros((len(pairs), 0), dtype=np.int64)  # the names each item was counted under
    while (up >= 0).any():
        live = up >= 0
        code = np.where(live, names[np.maximum(up, 0)], -1)
        fresh = live & ~(seen == code[:, None]).any(axis=1)
        np.add.at(total, code[fresh], gpu[fresh])
        seen = np.column_stack([seen, code])
        up = np.where(live, parent[np.maximum(up, 0)], -1)
    total[none] = self_ns[none]
    calls = np.bincount(names, minlength=none + 1)
    keep = np.flatnonzero((self_work > 0) | (total > 0))
    launched = float(gpu.sum())
    frame = pd.DataFrame({"rank": rank, "name": np.append(np.asarray(table, dtype=object), NO_OPERATOR)[keep],
                          "calls": calls[keep].astype(np.int64), "self_work": self_work[keep].astype(np.int64),
                          "self_ns": self_ns[keep].astype(np.int64), "total_ns": total[keep].astype(np.int64),
                          "self_share": self_ns[keep] / launched if launched else 0.0})
    order = np.lexsort((frame["name"].to_numpy(object).astype(str), -frame["total_ns"].to_numpy(),
                        -frame["self_ns"].to_numpy()))
    return frame.iloc[order].reset_index(drop=True)[COLUMNS]
