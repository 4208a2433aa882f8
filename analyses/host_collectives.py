"""Collectives of a host backend (PyTorch's gloo): each collective's span on the backend's worker threads, matched
across ranks, with its size and bus bandwidth as :mod:`~ddltrace.analyses.gpu_collectives` gives them for a
device's communication kernels.

PyTorch's gloo backend runs each collective on one of its worker threads (``pt_gloo_runloop``) inside a span
named ``gloo:<op>`` (``gloo:all_reduce``, ``gloo:broadcast``, ``gloo:all_gather``, ``gloo:gather``,
``gloo:scatter``, ``gloo:all_to_all``, ``gloo:send``, ...): from the thread taking the work to the collective's end
on this rank, the wait for the other ranks included. Those spans are the host's counterpart of a device's
collective kernels: :func:`rank_collectives` keeps them (on host lanes, a collective their name says;
``gloo:barrier`` moves no payload and is left out) with their step, start and duration (ns). Their size is
nccl-tests' (doc/PERFORMANCE.md), made from the timeline's ``bytes``, which the Kineto importer takes from the
span's input tensors where the profile recorded shapes (``ddltrace run --framework pytorch --record-shapes``):

* all-reduce, broadcast, reduce: the buffer; all-to-all: the send buffer (all ranks' parts); send, receive: the
  message; scatter: the root's list of every rank's part (its span alone has it). ``size_from``: "input tensors";
* all-gather, gather: the span's input is one rank's share, nccl-tests' size the n shares gathered. n, the
  group's size, is taken, in order of trust, from (:func:`instances`): the process groups the files list
  (``distributedInfo.pg_config``) when they all have the same size n (gloo's spans name no group, so only then
  is the group's size known whatever group ran it), ``size_from`` "distributedInfo"; else, where the files
  list no groups, the ranks the instance was matched across when that is every rank of the world, "matched
  ranks". Otherwise it is not sized and :func:`not_sized` says why. torch 2.13 writes no group size, rank list
  or element count on gloo's spans, and the gathered output is not among their inputs (it is on the caller's
  ``c10d::_allgather_base_``, which no id links to the span): none of those can be read.

torch 2.13's gloo runs a reduce-scatter as all-reduces (``reduce_scatter``: one ``gloo:all_reduce`` per input
tensor; ``reduce_scatter_tensor``: one of the whole input), so no span says reduce-scatter: those are counted and
sized as the all-reduces they are. Gloo's spans name no process group: the instances are matched by collective,
step and order (:func:`~ddltrace.analyses.gpu_collectives.match_instances`, whose definitions hold here: duration =
the shortest span of an instance, the late arriver's; algbw = bytes / duration; busbw = algbw x nccl-tests' factor
for n = the store's world size, which every group size used here equals).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ddltrace.analyses.breakdown import host_lanes
from ddltrace.analyses.gpu_collectives import COLUMNS, RANK_COLUMNS, SHORTEST, bandwidth, match_instances, parse_name

#: The prefix of a host backend's collective spans.
BACKEND_PREFIX = "gloo:"
#: Collectives whose span's input is one rank's share of nccl-tests' size (the n shares gathered).
SHARED = frozenset({"allgather", "gather"})
#: A rank's spans: :data:`~ddltrace.analyses.gpu_collectives.RANK_COLUMNS`, then ``share_bytes``: the input of
#: an all-gather's or gather's span (its ``bytes`` left <NA> until the group's size is known).
SPAN_COLUMNS = RANK_COLUMNS + ["share_bytes"]
#: The instances: :data:`~ddltrace.analyses.gpu_collectives.COLUMNS`, then ``share_bytes``, ``group_size`` (the n
#: the share was multiplied by) and ``size_from`` (where the bytes come from, "" where they are not known).
#: ``duration_from`` of an instance whose duration is its shortest span (the late arriver's)
SHORTEST_SPAN = "shortest span"
INSTANCE_COLUMNS = COLUMNS + ["share_bytes", "group_size", "size_from"]


def collective(name: str) -> str:
    """The collective of a gloo span's name: ``gloo:all_gather`` -> ``allgather``, ``gloo:gather`` -> ``gather``;
    ``unknown`` where it names none (``gloo:barrier``)."""
    found = parse_name(name)[0]
    if found == "unknown" and name[len(BACKEND_PREFIX):] in ("gather", "scatter"):
        return name[len(BACKEND_PREFIX):]
    return found


def rank_collectives(rank: int, timeline: pd.DataFrame) -> pd.DataFrame:
    """The host backend's collective spans of one rank's ``timeline`` (:data:`SPAN_COLUMNS`; device "cpu",
    stream: the worker thread's lane; bytes: nccl-tests' size where the span's input is it, else <NA>; share_bytes:
    an all-gather's or gather's input, one rank's share)."""
    named = timeline["name"].str.startswith(BACKEND_PREFIX, na=False).to_numpy(bool) if len(timeline) else []
    if not np.any(named):
        return pd.DataFrame(columns=SPAN_COLUMNS)
    spans = timeline[named]
    spans = spans[host_lanes(spans["lane"])]  # not the device streams' annotation lanes (gpu_user_annotation)
    kind = np.array([collective(n) for n in spans["name"]], dtype=object)
    spans, kind = spans[kind != "unknown"], kind[kind != "unknown"]
    group = spans["comm"].astype("string").fillna("").to_numpy(object) if "comm" in spans else ""
    inputs = spans["bytes"].astype("Int64") if "bytes" in spans else pd.Series(pd.NA, spans.index, "Int64")
    shared = np.isin(kind, list(SHARED))
    return pd.DataFrame({
        "rank": rank, "device": "cpu", "stream": spans["lane"].astype(str).to_numpy(object),
        "name": spans["name"].astype(str).to_numpy(object), "collective": kind, "algorithm": "",
        "protocol": "", "group": group, "step": spans["step"].astype("Int64").array,
        "start_ns": spans["start_ns"].to_numpy(np.int64), "dur_ns": spans["dur_ns"].to_numpy(np.int64),
        "bytes": inputs.where(~shared).array, "share_bytes": inputs.where(shared).array,
    }, columns=SPAN_COLUMNS)


def instances(spans: pd.DataFrame, world_size: int, group_sizes: list[int] | None,
              link_bytes_per_s: float | None = None) -> pd.DataFrame:
    """The collective instances of all ranks' ``spans`` (:func:`rank_collectives`, concatenated):
    :data:`INSTANCE_COLUMNS`, sized as the module docstring says. ``group_sizes``: the sizes of the process groups
    the ranks' files list (None where none lists any); ``world_size``: the store's."""
    if not len(spans):  # (most stores: the steps below cost 5 ms of CPU on no rows)
        return pd.DataFrame(columns=INSTANCE_COLUMNS)
    out = match_instances(spans, world_size, link_bytes_per_s, carry=("share_bytes",))
    out["duration_from"] = out["duration_from"].replace(SHORTEST, SHORTEST_SPAN)  # spans, not kernels
    out["share_bytes"] = out["share_bytes"].astype("Int64")
    out["size_from"] = np.where(out["bytes"].notna(), "input tensors", "")
    n, source = pd.Series(pd.NA, index=out.index, dtype="Int64"), ""
    if group_sizes == [world_size]:
        n[:], source = world_size, "distributedInfo"
    elif group_sizes is None:
        n[out["ranks"] == world_size], source = world_size, "matched ranks"
    sized = (out["collective"].isin(SHARED) & out["share_bytes"].notna() & n.notna()).to_numpy(bool)
    out["group_size"] = n.where(sized)
    out.loc[sized, "bytes"] = out.loc[sized, "share_bytes"] * n[sized]
    out.loc[sized, "size_from"] = source
    bandwidth(out, world_size, link_bytes_per_s)
    return out[INSTANCE_COLUMNS]


def matched_count(run) -> int:
    """How many of the run's host-backend collective instances were matched across two or more ranks."""
    found = run.host_collectives()
    return int((found["ranks"] >= 2).sum()) if len(found) else 0


def not_sized(found: pd.DataFrame, world_size: int, group_sizes: list[int] | None) -> pd.DataFrame:
    """Per collective whose instances (:func:`instances`) are not all sized: how many are not, and why (columns
    collective, instances, reason); empty where every one is sized."""
    rows = []
    for kind, part in found[found["bytes"].isna()].groupby("collective", sort=True):
        if kind in SHARED and part["share_bytes"].notna().any():
            if group_sizes is None:
                reason = (f"the span holds one rank's share and names no process group; the files list no groups "
                          f"and the instance was matched on fewer than the world's {world_size} ranks")
            else:
                listed = ", ".join(str(size) for size in group_sizes)
                reason = (f"the span holds one rank's share and names no process group; the files list groups of "
                          f"{listed} rank(s) (the world: {world_size}), so its group's size is not known")
        elif kind == "scatter":
            reason = ("only the root's span holds the scatter list (the other ranks' have no input) and the root's "
                      "is not in the store or has no input shapes")
        else:
            reason = "the spans have no input shapes (a profile without record_shapes)"
        rows.append([kind, len(part), reason])
    return pd.DataFrame(rows, columns=["collective", "instances", "reason"])
