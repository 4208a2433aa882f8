"""What changed between two runs, name by name: HTA's ``TraceDiff.compare_traces`` and ``ops_diff``, for any trace
ddltrace reads (Kineto, XPlane, MXNet, OTF2, the PMPI collector's MPI calls, ...).

Each side is one rank's rows in one window: a training step (the timeline's ``step`` column, which the importers
fill from the trace's step markers, ``ProfilerStep#N`` in Kineto; a device row takes its launch's step), by default
the rank's first (HTA's default: the first iteration of the first rank), or the whole run. Rows can be limited to
the host's (``cpu``: not on a device lane) or the devices' (``gpu``: kernels, copies and the annotations of device
lanes; HTA's ``DeviceType``). Per name:

* ``count``: the rows of that name in the window;
* ``sum_ns``: their durations summed (ns). A row nested in another counts in both, as each trace event does in
  HTA's (a ``ProfilerStep#N`` span holds every operator of its step); the sums are per name, not a share of time.

:func:`compare` sets the two side by side: ``diff_count`` and ``diff_ns`` (test minus control) and the change of
each name, HTA's ``ops_diff`` categories: ``added`` (not in the control), ``deleted`` (not in the test),
``increased`` / ``decreased`` (in both, more / fewer rows in the test) and ``unchanged`` (in both, as many).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ddltrace.analyses.breakdown import host_lanes

DEVICES = ("all", "cpu", "gpu")
SUMMARY_COLUMNS = ["name", "category", "count", "sum_ns"]
COLUMNS = ["name", "category", "control_count", "test_count", "control_ns", "test_ns", "diff_count", "diff_ns",
           "change"]
#: A name's change of count (HTA's trace_diff's words): in test only, in control only, more rows, fewer, as many (its
#: time may have changed all the same: diff_ns).
CHANGES = ("added", "deleted", "increased", "decreased", "unchanged")


def steps(timeline: pd.DataFrame) -> list[int]:
    """The training steps the rows of ``timeline`` (one rank) belong to, in order."""
    if "step" not in timeline:
        return []
    return sorted(int(s) for s in timeline["step"].dropna().unique())


def window(timeline: pd.DataFrame, step: int | None, device: str = "all") -> pd.DataFrame:
    """The rows of ``timeline`` (one rank) in ``step`` (None: all its rows) on ``device`` (:data:`DEVICES`)."""
    keep = np.ones(len(timeline), dtype=bool)
    if step is not None:
        keep &= (timeline["step"] == step).fillna(False).to_numpy(bool)
    if device != "all":
        on_host = host_lanes(timeline["lane"])
        keep &= on_host if device == "cpu" else ~on_host
    return timeline[keep]


def summary(rows: pd.DataFrame) -> pd.DataFrame:
    """Per name of ``rows``: its category (the most frequent where its rows have several), row count and summed
    duration (ns). Columns :data:`SUMMARY_COLUMNS`, by name."""
    if not len(rows):
        return pd.DataFrame({"name": pd.Series([], dtype=object), "category": pd.Series([], dtype=object),
                             "count": pd.Series([], dtype="int64"), "sum_ns": pd.Series([], dtype="int64")})
    frame = pd.DataFrame({"name": rows["name"].astype(str).to_numpy(object),
                          "category": rows["category"].astype(str).to_numpy(object),
                          "dur_ns": rows["dur_ns"].to_numpy(np.int64)})
    sums = frame.groupby("name", sort=True)["dur_ns"].agg(["size", "sum"])
    category = frame.groupby(["name", "category"]).size().sort_values(ascending=False, kind="stable")
    category = category.reset_index().drop_duplicates("name").set_index("name")["category"]
    return pd.DataFrame({"name": sums.index.to_numpy(object), "category": category.reindex(sums.index).to_numpy(object),
                         "count": sums["size"].to_numpy(np.int64), "sum_ns": sums["sum"].to_numpy(np.int64)})


def compare(control: pd.DataFrame, test: pd.DataFrame) -> pd.DataFrame:
    """The two :func:`summary` tables by name, :data:`COLUMNS`: counts and summed durations (ns) of each, test minus
    control, and the name's change (:data:`CHANGES`). The category is the test's where the name is in it. Sorted
    by the size of the change in time, the largest first (then by name)."""
    both = control.merge(test, on="name", how="outer", suffixes=("_c", "_t"))
    counts = [both[f"count_{s}"].fillna(0).astype("int64") for s in ("c", "t")]
    sums = [both[f"sum_ns_{s}"].fillna(0).astype("int64") for s in ("c", "t")]
    table = pd.DataFrame({
        "name": both["name"], "category": both["category_t"].fillna(both["category_c"]),
        "control_count": counts[0], "test_count": counts[1], "control_ns": sums[0], "test_ns": sums[1],
        "diff_count": counts[1] - counts[0], "diff_ns": sums[1] - sums[0]})
    c, t, d = table["control_count"], table["test_count"], table["diff_count"]
    table["change"] = np.select([c.eq(0), t.eq(0), d.gt(0), d.lt(0)], list(CHANGES[:4]), CHANGES[4])
    order = np.lexsort((table["name"].to_numpy(object).astype(str), -table["diff_ns"].abs().to_numpy()))
    return table.iloc[order].reset_index(drop=True)[COLUMNS]
