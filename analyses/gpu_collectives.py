"""Collectives across ranks: each collective instance matched on every rank that ran it, its size, duration,
algorithm, bus bandwidth (nccl-tests' definitions) and the start skew across ranks (who arrives late).

**Per rank (map)**: :func:`rank_collectives` keeps the communication kernels of one rank's device work
(:mod:`ddltrace.analyses.gpu_lanes`: category ``comm``, from the importers' rule files) with what their name says:
the collective (``allreduce``, ``allgather``, ``reducescatter``, ``broadcast``, ``reduce``, ``alltoall``;
``sendrecv``, ``send``, ``recv`` are point-to-point), NCCL's algorithm (``RING``, ``TREE``, ``NVLS``, ``COLLNET``...)
and protocol (``LL``, ``LL128``, ``SIMPLE``) where the name holds them (``ncclKernel_AllReduce_RING_LL_Sum_float``,
``ncclDevKernel_AllGather_RING_LL``), or c10d's collective name the Kineto importer appended to a kernel's name
from its args (``ncclDevKernel_Generic(...) [allreduce]``). A kernel whose name says no collective
(``ncclDevKernel_Generic`` of NCCL 2.19 on and RCCL) takes the collective of the host operation that launched
it (c10d's ``nccl:all_reduce`` around the runtime call of the same correlation id), else is kind ``unknown``; a
point-to-point kernel launched by a collective's host operation is that collective (NCCL runs an all-to-all as
``ncclKernel_SendRecv`` kernels under c10d's ``nccl:all_to_all``: before 2026-11-26 a DLRM job's 5 all-to-alls a
rank were 40 unmatched point-to-point instances). Its
payload is the timeline's ``bytes`` (nccl-tests' *size*: the whole buffer of an all-reduce, broadcast or reduce;
the gathered output of an all-gather, the input of a reduce-scatter, the send buffer of an all-to-all; the Kineto
importer takes it from c10d's args), its process group the timeline's ``comm`` (c10d's process group), where
the importer gives them.

**Across ranks (reduce)**: :func:`match_instances` matches the kernels of the ranks into instances by
(process group, collective, step, sequence): the n-th kernel of that collective of that group in that training
step on each rank is one instance (NCCL runs the collectives of a communicator in the same order on every rank);
without steps, the n-th over the whole trace. Point-to-point kernels and ``unknown`` ones are not matched (the
store names no peer for them): they are instances of one rank. Per instance, times in ns on the run's clock:

* ``ranks``: how many ranks ran it; ``skew_ns`` = latest start - earliest start; ``late_rank``: the rank that
  started last (the late arriver every other rank's kernel waits for); ``lead_ns``: latest start - the second
  latest, how much later than every other rank the late one came (what the instance lost to it alone);
  ``wait_ns``: the sum over ranks of (the earlier of own end and the latest start - own start), the time the early
  ranks' kernels spent before the last rank arrived (all of it from own start to the latest start, but for a
  :data:`ROOTED` collective's kernel that ended before: NCCL runs those down a chain, each rank waiting only for
  the one before it);
* ``duration_ns``: the shortest kernel of the instance, the late arriver's (it starts when all have arrived, so it
  is the time the data took to move); but for a :data:`ROOTED` collective's instance one of whose kernels ended
  before the last rank's started (NCCL's chain: its kernels need not all overlap), the latest end - the latest
  start: the data had reached every rank only when the last kernel ended, and the root's, the shortest, ended
  once it had pushed its data into the next rank's buffer (TraceLens' fused NCCL trace: a 212 KB broadcast's root
  kernel of 15.3 us, its data at the last rank 22.5 us after the last had arrived). That is nccl-tests' time with
  ``-a 3``: every rank's timer starts after a barrier (all have arrived) and stops when its own stream is done,
  the largest over the ranks reported; from the latest start, as a hop of the chain done before the last rank came
  overlapped the wait for it. ``duration_from`` says which: :data:`SHORTEST` or :data:`CHAIN`;
  ``max_duration_ns``: the longest kernel (an early arriver's, waiting included); on a one-rank instance both are
  its kernel's duration, waiting included;
* ``algbw`` = bytes / duration (bytes/s) and ``busbw`` = algbw x the nccl-tests factor of the collective
  (:data:`BUS_FACTORS`) for a group of n ranks: all-reduce 2(n-1)/n, all-gather, reduce-scatter, all-to-all,
  gather and scatter (n-1)/n, broadcast, reduce and point-to-point 1. n is the store's world size (the default
  process group).
  ``busbw_vs_link``: busbw over the network's calibrated payload bandwidth (1 / r_net of a hardware profile) when
  one is given. No bandwidth where the store holds no bytes for the kernel, or n < 2 (no data moves).
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from ddltrace.analyses.gpu_lanes import union_ns
from ddltrace.enclosing import innermost_enclosing

#: Collectives in the order their names are looked for (a longer name before the one it contains).
COLLECTIVES = ("reducescatter", "allreduce", "allgather", "alltoall", "broadcast", "sendrecv", "reduce", "send",
               "recv")
POINT_TO_POINT = frozenset({"sendrecv", "send", "recv"})
#: Collectives with a root, whose kernels may end before the last rank's starts: NCCL runs them down a chain from
#: (or to) the root, each rank waiting only for the one before it (TraceLens' fused NCCL trace: a 424-byte
#: broadcast's four 8 us kernels over 1.5 ms, none overlapping the last's; a 212 KB one's root kernel of 15 us
#: ending 1.5 ms before the last rank's started). Where no other collective ties the ranks' clocks together, the
#: kernels of such an instance are not matched (gloo's broadcasts in files of separate runs, 12.9 s apart).
ROOTED = frozenset({"broadcast", "reduce"})
#: ``duration_from`` of an instance: its duration is its shortest kernel's (all its kernels overlap the last one's
#: start), or the latest end - the latest start (a :data:`ROOTED` collective's chain, see the module docstring).
SHORTEST = "shortest kernel"
CHAIN = "chain: latest end - latest start"
ALGORITHMS = frozenset({"RING", "TREE", "COLLNET", "COLLNETDIRECT", "COLLNETCHAIN", "NVLS", "NVLSTREE", "PAT"})
PROTOCOLS = frozenset({"LL", "LL128", "SIMPLE"})
#: nccl-tests' bus-bandwidth factor of each collective for n ranks (doc/PERFORMANCE.md of nccl-tests).
BUS_FACTORS = {
    "allreduce": lambda n: 2 * (n - 1) / n,
    "allgather": lambda n: (n - 1) / n,
    "reducescatter": lambda n: (n - 1) / n,
    "alltoall": lambda n: (n - 1) / n,
    "gather": lambda n: (n - 1) / n,
    "scatter": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "reduce": lambda n: 1.0,
    "sendrecv": lambda n: 1.0,
    "send": lambda n: 1.0,
    "recv": lambda n: 1.0,
}
RANK_COLUMNS = ["rank", "device", "stream", "name", "collective", "algorithm", "protocol", "group", "step",
                "start_ns", "dur_ns", "bytes"]
COLUMNS = ["group", "collective", "step", "seq", "algorithm", "protocol", "ranks", "first_start_ns", "skew_ns",
           "late_rank", "lead_ns", "wait_ns", "duration_ns", "duration_from", "max_duration_ns", "bytes", "algbw",
           "busbw", "busbw_vs_link"]
_TOKENS = re.compile(r"[^A-Za-z0-9]+")


def parse_name(name: str) -> tuple[str, str, str]:
    """(collective, algorithm, protocol) of a communication kernel's name; ``unknown`` and "" where it says none:
    ``"ncclKernel_AllReduce_RING_LL_Sum_float(...)"`` -> ``("allreduce", "RING", "LL")``."""
    head = name.split("(", 1)[0]
    if name.endswith("]") and " [" in name:  # "ncclDevKernel_Generic(...) [allreduce]": c10d's name, appended
        head += "_" + name.rsplit(" [", 1)[1]  # by the Kineto importer from the kernel's args
    flat = _TOKENS.sub("", head).lower()
    collective = next((c for c in COLLECTIVES if c in flat), "unknown")
    tokens = {t.upper() for t in _TOKENS.split(head)}
    algorithm = next(iter(sorted(tokens & ALGORITHMS)), "")
    protocol = "LL128" if "LL128" in tokens else next(iter(sorted(tokens & PROTOCOLS)), "")
    return collective, algorithm, protocol


def rank_collectives(rank: int, work: pd.DataFrame, timeline: pd.DataFrame | None = None) -> pd.DataFrame:
    """The communication kernels of one rank's device ``work`` with their collective, algorithm, protocol,
    group (the ``comm`` column as text, "" where none), step, start, duration (ns) and bytes (<NA> where none).
    Columns :data:`RANK_COLUMNS`: the small table the cross-rank step reads. A kernel whose name says no
    collective takes the one its host operation says, where ``timeline`` (the rank's) links it to its launch
    (:func:`host_collectives`); so does a point-to-point kernel whose host operation is a collective (an
    all-to-all's ``ncclKernel_SendRecv``)."""
    comm = work[work["category"] == "comm"]
    codes, names = pd.factorize(comm["name"].to_numpy(object))  # each distinct name parsed once
    parsed = np.array([parse_name(n) for n in names], dtype=object).reshape(-1, 3)[codes]
    collective = parsed[:, 0].copy()
    unknown = collective == "unknown"
    ask = unknown | np.isin(collective, list(POINT_TO_POINT))
    if ask.any() and timeline is not None and "correlation" in timeline:
        said = host_collectives(timeline, comm["correlation"][ask])
        # an unknown kernel takes what its host operation says; a point-to-point one only a collective (NCCL runs an
        # all-to-all as ncclKernel_SendRecv kernels under c10d's nccl:all_to_all)
        take = (said != "") & (unknown[ask] | ~np.isin(said, list(POINT_TO_POINT)))
        collective[np.flatnonzero(ask)[take]] = said[take]
    group = comm["comm"].astype("string").fillna("").to_numpy(object) if "comm" in comm else ""
    return pd.DataFrame({
        "rank": rank, "device": comm["device"].to_numpy(object), "stream": comm["stream"].to_numpy(object),
        "name": comm["name"].to_numpy(object), "collective": collective,
        "algorithm": parsed[:, 1], "protocol": parsed[:, 2], "group": group,
        "step": comm["step"].array, "start_ns": comm["start_ns"].to_numpy(np.int64),
        "dur_ns": comm["dur_ns"].to_numpy(np.int64),
        "bytes": comm["bytes"].array if "bytes" in comm else pd.array([pd.NA] * len(comm), dtype="Int64"),
    }, columns=RANK_COLUMNS)


#: How many enclosing host operations are looked through for one that names a collective.
_DEPTH = 8


def host_collectives(timeline: pd.DataFrame, correlations: pd.Series) -> np.ndarray:
    """For each correlation id of a kernel whose name says no collective (NCCL's ``ncclDevKernel_Generic``, RCCL):
    the collective named by the innermost host operation around the runtime call that launched it, on the
    launch's own thread (c10d's ``nccl:all_reduce``, ``c10d::allreduce_``, ``nccl:_all_gather_base``); "" where
    there is no launch with that id or no such operation."""
    from ddltrace.analyses.breakdown import device_lanes

    out = np.full(len(correlations), "", dtype=object)
    host = timeline[~device_lanes(timeline["lane"])]
    ids = correlations.astype("Int64")
    launches = host[host["correlation"].isin(ids.dropna())].drop_duplicates("correlation")
    if not len(launches):
        return out
    names = pd.Series(host["name"].unique())
    said = names.map(lambda n: parse_name(n)[0])
    named = dict(zip(names[said != "unknown"], said[said != "unknown"], strict=True))
    ops = host[host["name"].isin(named)]
    lanes = pd.factorize(pd.concat([ops["lane"], launches["lane"]]).astype(str))[0]
    op_start, at = ops["start_ns"].to_numpy(np.int64), launches["start_ns"].to_numpy(np.int64)
    around = innermost_enclosing(lanes[:len(ops)], op_start, op_start + ops["dur_ns"].to_numpy(np.int64),
                                 lanes[len(ops):], at, at + launches["dur_ns"].to_numpy(np.int64), _DEPTH)
    what = ops["name"].map(named).to_numpy(object)
    found = {int(corr): what[j] for corr, j in zip(launches["correlation"], around.tolist(), strict=True) if j >= 0}
    for i, corr in enumerate(ids):
        if corr is not pd.NA and int(corr) in found:
            out[i] = found[int(corr)]
    return out


def match_instances(kernels: pd.DataFrame, world_size: int, link_bytes_per_s: float | None = None,
                    carry: tuple[str, ...] = ()) -> pd.DataFrame:
    """The collective instances of all ranks' ``kernels`` (:func:`rank_collectives` of each, concatenated):
    :data:`COLUMNS`, one row per instance, in order of their first start (see the module docstring); then the
    ``carry`` columns of ``kernels``, each the largest value over the instance's kernels."""
    if not len(kernels):
        return pd.DataFrame(columns=COLUMNS + list(carry))
    k = matched(kernels)
    use_steps = bool(kernels["step"].notna().all())
    # latest start first within each instance: its first row is the late arriver, its second the next latest
    k = k.sort_values(["instance", "start_ns", "rank"], ascending=[True, False, True], kind="stable")
    instance = k["instance"].to_numpy()
    # each instance's rows follow its first: reduced with numpy over those runs of rows, not a pandas groupby (its
    # cost per call made this 20 ms of CPU a store whatever its size, 7 ms now)
    first = np.flatnonzero(np.r_[True, instance[1:] != instance[:-1]])
    ranks = np.diff(np.r_[first, len(k)])
    start, dur = k["start_ns"].to_numpy(np.int64), k["dur_ns"].to_numpy(np.int64)
    latest = start[first]
    second = np.where(ranks > 1, start[np.minimum(first + 1, len(k) - 1)], latest)
    late_rank = pd.array(k["rank"].to_numpy()[first], dtype="Int64")
    late_rank[ranks < 2] = pd.NA
    earliest = np.minimum.reduceat(start, first)
    end = start + dur
    # a kernel ended before the last started: a ROOTED collective's chain (matched() splits any other such instance)
    chain = (ranks > 1) & (np.minimum.reduceat(end, first) < latest)
    duration = np.where(chain, np.maximum.reduceat(end, first) - latest, np.minimum.reduceat(dur, first))
    heads = k.iloc[first]
    out = pd.DataFrame({
        "group": heads["group"].array, "collective": heads["collective"].array,
        "step": pd.array(heads["step_key"].to_numpy(), dtype="Int64") if use_steps else None,
        "seq": heads["seq"].array, "ranks": ranks, "first_start_ns": earliest, "skew_ns": latest - earliest,
        "late_rank": late_rank, "lead_ns": latest - second,
        "wait_ns": np.add.reduceat(np.minimum(end, np.repeat(latest, ranks)) - start, first),
        "duration_ns": duration, "duration_from": np.where(chain, CHAIN, SHORTEST).astype(object),
        "max_duration_ns": np.maximum.reduceat(dur, first),
        "bytes": _largest(k["bytes"], first)})
    for column in carry:  # (instances in the order of their first row, as ``first``)
        out[column] = k.groupby("instance", sort=False)[column].max().array
    for column in ("algorithm", "protocol"):
        out[column] = _agreed(k[column].to_numpy(object), first)
    bandwidth(out, world_size, link_bytes_per_s)
    return out[COLUMNS + list(carry)].sort_values("first_start_ns", kind="stable", ignore_index=True)


def matched(kernels: pd.DataFrame) -> pd.DataFrame:
    """``kernels`` (:func:`rank_collectives` of each rank, concatenated) sorted by rank and start, with
    ``step_key`` (the step, -1 where some kernel has none: then the order is over the whole trace), ``seq`` (the
    kernel's place among its rank's of that group, collective and step) and ``instance``: the instance it is
    matched into (one id per (group, collective, step, seq) on every rank; a negative id of its own for
    point-to-point and ``unknown`` kernels, which are not matched, and for the kernels of an instance one of
    which ended before its last started: no collective's, whose kernels all wait for the last rank, but a
    :data:`ROOTED` one's, whose ranks wait only for the rank before them in NCCL's chain, where other collectives
    whose kernels did all overlap tie its ranks' clocks together: files of separate runs have none)."""
    k = kernels.sort_values(["rank", "start_ns"], kind="stable").reset_index(drop=True)
    use_steps = bool(k["step"].notna().all())
    step = k["step"].astype("Int64").fillna(-1).to_numpy(np.int64) if use_steps else np.full(len(k), -1)
    k = k.assign(step_key=step)
    k["seq"] = k.groupby(["rank", "group", "collective", "step_key"], sort=False).cumcount()
    single = k["collective"].isin(POINT_TO_POINT | {"unknown"}).to_numpy()
    # a kernel that is matched on no other rank is an instance of its own; point-to-point ones always are
    k["instance"] = np.where(single, -1 - np.arange(len(k)), 0)
    keys = ["group", "collective", "step_key", "seq"]
    shared = k[~single].groupby(keys, sort=False).ngroup()
    k.loc[~single, "instance"] = shared.to_numpy()
    # one collective's kernels (spans) overlap: each waits until the last rank arrives. Where one ended before the
    # last started they are not one collective (files of separate runs, clocks far apart): each is its own
    instance = k["instance"].to_numpy()
    latest = k.groupby("instance")["start_ns"].transform("max").to_numpy(np.int64)
    early_end = (k["start_ns"] + k["dur_ns"]).to_numpy(np.int64) < latest
    apart = (instance >= 0) & pd.Series(early_end).groupby(instance).transform("any").to_numpy(bool)
    rooted = k["collective"].isin(ROOTED).to_numpy(bool)
    if (apart & rooted).any():  # kept where collectives that overlapped tie the ranks' clocks together
        tied = _tied_ranks(k[(instance >= 0) & ~apart])
        chained = np.flatnonzero(apart & rooted)
        clock = pd.Series([tied.get(int(r), -1 - int(r)) for r in k["rank"].to_numpy()[chained]])
        one_clock = clock.groupby(instance[chained]).transform("nunique").to_numpy() == 1
        apart[chained[one_clock]] = False
    k.loc[apart, "instance"] = -1 - len(k) - np.flatnonzero(apart)
    return k


def _tied_ranks(overlapping: pd.DataFrame) -> dict[int, int]:
    """Each rank of the instances of ``overlapping`` (kernels of matched instances whose kernels all overlap the
    last one's start) mapped to one rank of its set: ranks that some such instance holds together, directly or
    through others, share a clock (union-find)."""
    parent: dict[int, int] = {}

    def root(r: int) -> int:
        while parent.setdefault(r, r) != r:
            parent[r] = parent[parent[r]]
            r = parent[r]
        return r

    for ranks in overlapping.groupby("instance")["rank"]:
        first, *rest = (int(r) for r in ranks[1])
        for r in rest:
            parent[root(r)] = root(first)
    return {r: root(r) for r in list(parent)}


def bandwidth(instances: pd.DataFrame, world_size: int, link_bytes_per_s: float | None = None) -> None:
    """Set the ``algbw``, ``busbw`` and ``busbw_vs_link`` of ``instances`` (in place) from their ``bytes`` and
    ``duration_ns``: the module docstring's definitions, n = ``world_size``."""
    size = instances["bytes"].astype("Float64")
    factor = pd.Series([BUS_FACTORS[c](world_size) if c in BUS_FACTORS and world_size >= 2 else np.nan
                        for c in instances["collective"]], index=instances.index, dtype=float)
    duration = instances["duration_ns"].astype(float)
    algbw = (size / (duration.where(duration > 0) / 1e9)).astype(float)
    instances["algbw"] = algbw.where(factor.notna())
    instances["busbw"] = algbw * factor
    instances["busbw_vs_link"] = instances["busbw"] / link_bytes_per_s if link_bytes_per_s else np.nan


def _largest(values: pd.Series, first: np.ndarray) -> pd.arrays.IntegerArray:
    """Per instance (its rows from ``first``), the largest of ``values`` (Int64; <NA> where all are missing)."""
    known = values.notna().to_numpy()
    size = values.astype("Int64").to_numpy(np.int64, na_value=np.iinfo(np.int64).min)
    largest = pd.array(np.maximum.reduceat(size, first), dtype="Int64")
    largest[np.add.reduceat(known, first) == 0] = pd.NA
    return largest


def _agreed(values: np.ndarray, first: np.ndarray) -> list[str]:
    """Per instance (its rows from ``first``), the value of ``values`` all its ranks agree on, or the distinct
    values joined with '/' in sorted order ("" where none has one)."""
    ends = np.r_[first[1:], len(values)]
    out = []
    for a, b in zip(first, ends, strict=True):
        seen = {v for v in values[a:b] if isinstance(v, str) and v}
        out.append(seen.pop() if len(seen) == 1 else "/".join(sorted(seen)))
    return out


SUMMARY_COLUMNS = ["collective", "algorithm", "instances", "matched", "time_ns", "bytes", "busbw_median",
                   "busbw_max", "busbw_vs_link_median", "skew_median_ns", "skew_max_ns", "wait_ns", "chain"]


def summary(instances: pd.DataFrame) -> pd.DataFrame:
    """Per collective and algorithm: instances (matched on two or more ranks), summed duration (ns), bytes,
    median and maximum bus bandwidth (bytes/s; NaN where no size is known), median busbw against the link, median
    and maximum skew (ns, over the matched instances), the summed wait of the early arrivers (ns) and ``chain``: how
    many of the instances' durations are their chain's (``duration_from`` :data:`CHAIN`), the others' their shortest
    kernel's."""
    rows = []
    for (collective, algorithm), part in instances.groupby(["collective", "algorithm"], sort=True):
        matched = part[part["ranks"] >= 2]
        bw = part["busbw"].astype(float)
        chain = int((part["duration_from"] == CHAIN).sum()) if "duration_from" in part else 0
        rows.append([collective, algorithm, len(part), len(matched), int(part["duration_ns"].sum()),
                     int(part["bytes"].dropna().sum()) if part["bytes"].notna().any() else None,
                     float(bw.median()), float(bw.max()), float(part["busbw_vs_link"].astype(float).median()),
                     float(matched["skew_ns"].median()) if len(matched) else float("nan"),
                     int(matched["skew_ns"].max()) if len(matched) else None, int(part["wait_ns"].sum()), chain])
    return pd.DataFrame(rows, columns=SUMMARY_COLUMNS)


LATE_COLUMNS = ["rank", "late", "instances", "lead_ns", "lead_median_ns", "caused_wait_ns"]


def waits_for(kernels: pd.DataFrame) -> pd.DataFrame:
    """Who waited for whom, in wall time: for every pair (late rank L, waiting rank r), the time rank r's spans of
    the matched instances L started last at spent before L arrived (from r's own start to L's, or to its own end
    where a :data:`ROOTED` collective's ended before, per instance), the
    union of those intervals on r's clock in ns, so collectives that wait at once (two of gloo's worker threads,
    two NCCL streams) count once. Columns ``late_rank``, ``rank``, ``instances`` (how many L was last at with r in
    them), ``wait_ns``; ``kernels`` as :func:`match_instances` takes them."""
    return _union_waits(wait_intervals(kernels), ["late_rank", "rank"])


def waited(kernels: pd.DataFrame) -> pd.DataFrame:
    """Each rank's own wait at the matched instances, in wall time: the union over them of the intervals from its
    start to the last rank's, or to its own end where a :data:`ROOTED` collective's ended before (Scalasca's Wait at
    N x N, the collectives' early arrivers). Columns ``rank``,
    ``instances`` (those it was not last at), ``wait_ns``."""
    return _union_waits(wait_intervals(kernels), ["rank"])


def wait_intervals(kernels: pd.DataFrame) -> pd.DataFrame:
    """Per span of a matched instance other than its late arriver's: ``late_rank``, ``rank``, ``start_ns`` (the
    span's) and ``end_ns`` (the late arriver's start, or the span's end where it ended before: a
    :data:`ROOTED` collective's)."""
    columns = ["late_rank", "rank", "start_ns", "end_ns"]
    if not len(kernels):
        return pd.DataFrame(columns=columns)
    k = matched(kernels)
    k = k[k["instance"] >= 0].sort_values(["instance", "start_ns", "rank"], ascending=[True, False, True],
                                          kind="stable")
    first = k.groupby("instance", sort=False)["rank"].transform("first").to_numpy()
    latest = k.groupby("instance", sort=False)["start_ns"].transform("max").to_numpy(np.int64)
    end = np.minimum((k["start_ns"] + k["dur_ns"]).to_numpy(np.int64), latest)  # a rooted one's may end before
    waits = pd.DataFrame({"late_rank": first, "rank": k["rank"].to_numpy(), "start_ns": k["start_ns"].to_numpy(),
                          "end_ns": end}, columns=columns)
    return waits[waits["rank"] != waits["late_rank"]]


def _union_waits(waits: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """The union (ns) of the ``waits`` intervals of each group of ``keys``, with their count (``instances``)."""
    rows = [[*(int(k) for k in (key if isinstance(key, tuple) else (key,))), len(part),
             union_ns(part["start_ns"].to_numpy(np.int64), part["end_ns"].to_numpy(np.int64))]
            for key, part in waits.groupby(keys, sort=True)]
    return pd.DataFrame(rows, columns=[*keys, "instances", "wait_ns"])


def late_arrivals(instances: pd.DataFrame) -> pd.DataFrame:
    """Per rank, how many matched instances it arrived last at, its summed and median lead over the next latest
    rank there (ns) and the wait it caused the others (ns: the instances' ``wait_ns``), most often late first:
    the straggler at the top. Columns :data:`LATE_COLUMNS`."""
    matched = instances[instances["ranks"] >= 2]
    if not len(matched):
        return pd.DataFrame(columns=LATE_COLUMNS)
    by = matched.groupby("late_rank").agg(late=("skew_ns", "size"), lead_ns=("lead_ns", "sum"),
                                          lead_median_ns=("lead_ns", "median"), caused_wait_ns=("wait_ns", "sum"))
    by = by.reset_index().rename(columns={"late_rank": "rank"}).assign(instances=len(matched))
    by["rank"] = by["rank"].astype(int)
    return by.sort_values(["late", "caused_wait_ns"], ascending=False, ignore_index=True)[LATE_COLUMNS]
