"""Collectives of a host backend (PyTorch's gloo): each collective's span on the backend's worker threads, matched
across ranks, with its size and bus bandwidth as :mod:`~ddltrace.analyses.gpu_collectives` gives them for a
device's communication kernels.

PyTorch's gloo backend runs each collective on one of its worker threads (``pt_gloo_runloop``) inside a span
named ``gloo:<op>`` (``gloo:all_reduce``, ``gloo:broadcast``, ``gloo:all_to_all``, ``gloo:send``, ...): from the
thread taking the work to the collective's end on this rank, the wait for the other ranks included. Those spans
are the host's counterpart of a device's collective kernels: :func:`rank_collectives` keeps them (on host lanes,
a collective their name says; ``gloo:barrier`` moves no payload and is left out) with their step, start,
duration (ns) and bytes: the timeline's ``bytes``, which the Kineto importer takes from the span's input tensors
where the profile recorded shapes (``ddltrace run --framework pytorch --record-shapes``; nccl-tests' size: the
buffer of an all-reduce, broadcast or reduce, an all-to-all's send buffer; an all-gather's, gather's or
scatter's span is not sized, its inputs being one rank's share). Gloo's spans name no process group: the
instances are matched by collective, step and order (:func:`~ddltrace.analyses.gpu_collectives.match_instances`,
whose definitions hold here: duration = the shortest span of an instance, the late arriver's; algbw = bytes /
duration; busbw = algbw x nccl-tests' factor for the store's world size).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ddltrace.analyses.breakdown import device_lanes
from ddltrace.analyses.gpu_collectives import RANK_COLUMNS, parse_name

#: The prefix of a host backend's collective spans.
BACKEND_PREFIX = "gloo:"


def rank_collectives(rank: int, timeline: pd.DataFrame) -> pd.DataFrame:
    """The host backend's collective spans of one rank's ``timeline`` (:data:`~ddltrace.analyses.gpu_collectives.
    RANK_COLUMNS`; device "cpu", stream: the worker thread's lane; bytes <NA> where the trace gives none)."""
    named = timeline["name"].str.startswith(BACKEND_PREFIX, na=False).to_numpy(bool) if len(timeline) else []
    if not np.any(named):
        return pd.DataFrame(columns=RANK_COLUMNS)
    spans = timeline[named]
    spans = spans[~device_lanes(spans["lane"])]
    collective = np.array([parse_name(n)[0] for n in spans["name"]], dtype=object)
    spans, collective = spans[collective != "unknown"], collective[collective != "unknown"]
    group = spans["comm"].astype("string").fillna("").to_numpy(object) if "comm" in spans else ""
    return pd.DataFrame({
        "rank": rank, "device": "cpu", "stream": spans["lane"].astype(str).to_numpy(object),
        "name": spans["name"].astype(str).to_numpy(object), "collective": collective, "algorithm": "",
        "protocol": "", "group": group, "step": spans["step"].astype("Int64").array,
        "start_ns": spans["start_ns"].to_numpy(np.int64), "dur_ns": spans["dur_ns"].to_numpy(np.int64),
        "bytes": spans["bytes"].astype("Int64").array if "bytes" in spans
        else pd.array([pd.NA] * len(spans), dtype="Int64"),
    }, columns=RANK_COLUMNS)
