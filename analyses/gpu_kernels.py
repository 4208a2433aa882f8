"""Kernel breakdown: device time by kernel class and by kernel (HTA's ``get_gpu_kernel_breakdown``).

Per rank and device, over the device work (:mod:`ddltrace.analyses.gpu_lanes`):

* by class (compute, communication, memory, the importers' categories): the **sum of the kernels' durations**
  (ns; kernels on concurrent streams both count, as in HTA) and its share of the sum over all classes;
* by kernel name: count, sum, mean, min and max of the duration (ns), the top ``k`` per rank and device by sum,
  the rest summed in one row named ``(others)`` (HTA groups its tail the same way).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ddltrace.analyses.gpu_lanes import WORK

CLASS_COLUMNS = ["rank", "device", "class", "kernels", "sum_ns", "share"]
KERNEL_COLUMNS = ["rank", "device", "class", "name", "count", "sum_ns", "mean_ns", "min_ns", "max_ns", "share"]
OTHERS = "(others)"
TOP_K = 10


def by_class(rank: int, work: pd.DataFrame) -> pd.DataFrame:
    """Sum of kernel durations per class, per device of ``rank``. Columns :data:`CLASS_COLUMNS`."""
    rows = []
    for device, on_device in work.groupby("device", sort=True):
        total = int(on_device["dur_ns"].sum())
        sums = on_device.groupby("category")["dur_ns"].agg(["count", "sum"])
        for cls in WORK:
            if cls in sums.index:
                s = int(sums.loc[cls, "sum"])
                rows.append({"rank": rank, "device": device, "class": cls, "kernels": int(sums.loc[cls, "count"]),
                             "sum_ns": s, "share": s / total if total else 0.0})
    return pd.DataFrame(rows, columns=CLASS_COLUMNS)


def top_kernels(rank: int, work: pd.DataFrame, k: int = TOP_K) -> pd.DataFrame:
    """The ``k`` kernels with the most time per device of ``rank`` (by name and class), and ``(others)``.
    Columns :data:`KERNEL_COLUMNS`; ``share`` is of the device's summed kernel time."""
    parts = []
    for device, on_device in work.groupby("device", sort=True):
        dur = on_device["dur_ns"].to_numpy(np.int64)
        total = int(dur.sum())
        # per (class, name) in sorted order, with numpy (a pandas groupby and sort cost 6 ms of CPU a rank)
        classes, class_names = pd.factorize(on_device["category"].to_numpy(object), sort=True)
        names, kernel_names = pd.factorize(on_device["name"].to_numpy(object), sort=True)
        keys, kernel = np.unique(classes * len(kernel_names) + names, return_inverse=True)
        count = np.bincount(kernel, minlength=len(keys)).astype(np.int64)
        total_ns, least, most = (np.zeros(len(keys), np.int64), np.full(len(keys), np.iinfo(np.int64).max),
                                 np.full(len(keys), np.iinfo(np.int64).min))
        np.add.at(total_ns, kernel, dur)
        np.minimum.at(least, kernel, dur)
        np.maximum.at(most, kernel, dur)
        order = np.lexsort((keys % len(kernel_names), -total_ns))  # most time first, then by name (stable)
        top, rest = order[:k], order[k:]
        cls = np.asarray(class_names, dtype=object)[keys // len(kernel_names)][top]
        name = np.asarray(kernel_names, dtype=object)[keys % len(kernel_names)][top]
        stats = [count[top], total_ns[top], total_ns[top] / count[top], least[top], most[top]]
        if len(rest):
            cls, name = np.append(cls, ""), np.append(name, OTHERS)
            others = [count[rest].sum(), total_ns[rest].sum(), total_ns[rest].sum() / count[rest].sum(),
                      least[rest].min(), most[rest].max()]
            stats = [np.append(column, extra) for column, extra in zip(stats, others, strict=True)]
        parts.append(pd.DataFrame({
            "rank": rank, "device": device, "class": cls, "name": name, "count": stats[0].astype("int64"),
            "sum_ns": stats[1].astype("int64"), "mean_ns": stats[2].astype(float), "min_ns": stats[3].astype("int64"),
            "max_ns": stats[4].astype("int64"), "share": stats[1].astype(float) / total if total else 0.0}))
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=KERNEL_COLUMNS)


ACROSS_COLUMNS = ["class", "name", "ranks", "min_ns", "median_ns", "max_ns", "min_rank", "max_rank"]


def across_ranks(sums: list[pd.Series], k: int = TOP_K) -> pd.DataFrame:
    """Per-rank distribution of the ``k`` kernels with the most time over all ranks: each rank's summed duration
    of the kernel (ns; a rank that never ran it counts 0), its min, median and max over ranks and which ranks
    hold the min and the max. ``sums``: per rank, the summed duration by (class, name), named by the rank."""
    if not sums:
        return pd.DataFrame(columns=ACROSS_COLUMNS)
    table = pd.concat(sums, axis=1).fillna(0).astype("int64")
    top = table.loc[table.sum(axis=1).sort_values(ascending=False).index[:k]]
    return pd.DataFrame({
        "class": top.index.get_level_values(0), "name": top.index.get_level_values(1),
        "ranks": (top > 0).sum(axis=1).to_numpy(), "min_ns": top.min(axis=1).to_numpy(),
        "median_ns": top.median(axis=1).to_numpy(), "max_ns": top.max(axis=1).to_numpy(),
        "min_rank": top.idxmin(axis=1).to_numpy(), "max_rank": top.idxmax(axis=1).to_numpy()},
        columns=ACROSS_COLUMNS)
