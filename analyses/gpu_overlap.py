"""Communication-computation overlap per rank and device (HTA's ``get_comm_comp_overlap``).

overlap = |C and K| / |C|, where C is the union of the communication kernels' intervals on the device (any
stream) and K the union of its compute kernels' (:mod:`ddltrace.analyses.gpu_lanes`): the share of the time
communication runs during which the device also computes. 1 means all communication is hidden behind
computation; 0 that none is. A device with no communication kernel has no overlap figure (it is left out).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ddltrace.analyses.gpu_lanes import intersection_ns, union_ns

COLUMNS = ["rank", "device", "comm_ns", "overlap_ns", "overlap"]


def comm_comp_overlap(rank: int, work: pd.DataFrame) -> pd.DataFrame:
    """One row per device of ``rank`` that ran communication kernels. Columns :data:`COLUMNS` (ns, fraction)."""
    rows = []
    for device, on_device in work.groupby("device", sort=True):
        cat = on_device["category"].to_numpy(object)
        start, end = on_device["start_ns"].to_numpy(np.int64), on_device["end_ns"].to_numpy(np.int64)
        comm, comp = cat == "comm", cat == "compute"
        comm_ns = union_ns(start[comm], end[comm])
        if not comm_ns:
            continue
        both = intersection_ns((start[comm], end[comm]), (start[comp], end[comp]))
        rows.append({"rank": rank, "device": device, "comm_ns": comm_ns, "overlap_ns": both,
                     "overlap": both / comm_ns})
    return pd.DataFrame(rows, columns=COLUMNS)
