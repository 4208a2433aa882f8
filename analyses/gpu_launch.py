"""Launch statistics (HTA's ``get_cuda_kernel_launch_stats``, CUDA's or HIP's): for each device activity launched by
a host runtime call, the duration of the call on the CPU, the duration of the activity on the GPU and the launch delay.

A *launch* is a host row (not on a device lane) named as one of HTA's runtime launch calls
(:data:`LAUNCH_NAMES`: ``cudaLaunchKernel``, ``cudaMemcpyAsync``, ``cudaMemsetAsync``, their driver-API and
HIP counterparts), paired with the device work (kernel, copy or fill: :func:`~ddltrace.analyses.gpu_lanes.
device_work`) that carries the same correlation id on the same rank (Kineto writes ``args.correlation`` on both;
rocprofv3 ``correlation_id.internal``). The TensorFlow and JAX profilers (XPlane) name the host event of a launch
after what it launched (the kernel's name, ``MemcpyH2D``) and give it the kernel's ``correlation_id``: a host row
with the same correlation id and the same name as the device work is its launch too. A CUDA (HIP) graph's launch
(:data:`GRAPH_LAUNCHES`: ``cudaGraphLaunch`` in Kineto, ``cuGraphLaunch (CudaGraph:18)`` in an XPlane of JAX, which
runs every jitted step as a graph on GPUs) carries the correlation id of every kernel of the graph: with
``graphs=True`` (what the idle analysis takes, :mod:`~ddltrace.analyses.gpu_idle`: a gap a graph's first kernel
ends waited for that launch) one pair per kernel; the launch statistics, queue length and operators keep HTA's set,
whose list has no graph launch (its negative_queue_length_values_check trace: 70 cudaGraphLaunch). The statistics
count what they leave out (``left_out_calls``, ``left_out_activities``): a rank whose launches are all graph
launches or blocking copies (JAX's, every jitted step a graph) gets a row of 0 launches and no duration figures
with those counts (sample_traces/h200-jax: 10 cuGraphLaunch calls, 200 kernels), not no row.
For each pair, all in ns:

* ``cpu_duration_ns``: the runtime call's duration;
* ``gpu_duration_ns``: the device activity's duration;
* ``launch_delay_ns``: the activity's start minus the runtime call's end, 0 where that is negative (HTA 0.5:
  ``(ts_gpu - ts_cpu - dur_cpu).clip(lower=0)``; a negative difference is the host's and device's clocks
  disagreeing in the trace, not a delay).

HTA 0.5's launch statistics pair only ``cudaLaunchKernel``, ``cudaLaunchKernelExC``, ``cudaMemcpyAsync`` and
``cudaMemsetAsync`` (and MTIA's); these take every call of :data:`LAUNCH_NAMES` (HTA's list for the queue length),
so that launches through the driver API and HIP are counted too.

Each rank's ``runtime`` is that of its launch calls: ``CUDA`` (``cuda*``, ``cu*``), ``HIP`` (``hip*``: ROCm),
``CUDA and HIP``, or empty where every launch is an XPlane host event named after its work (:func:`runtime_of`).

Outliers by HTA's cut-offs (its ``runtime_cutoff`` = 50 µs and ``launch_delay_cutoff`` = 100 µs): runtime
outliers (CPU duration above 50 µs), launch-delay outliers (delay above 100 µs) and short kernels (CPU duration
at most 50 µs and GPU duration below it: the host spent longer launching than the device running; a
launch-bound sign).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ddltrace.analyses.breakdown import device_lanes

#: The runtime calls that put work on a stream (HTA's ``get_runtime_launch_events_mask``, CUDA and ROCm).
LAUNCH_NAMES = frozenset({
    "cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx", "cudaMemcpyAsync",
    "cudaMemsetAsync", "hipLaunchKernel", "hipExtModuleLaunchKernel", "hipModuleLaunchKernel", "hipMemcpyAsync",
    "hipMemsetAsync", "hipMemcpyWithStream", "hipMemcpyHtoDAsync", "hipMemcpyDtoHAsync", "hipMemcpyDtoDAsync",
    "hipExtLaunchKernel",  # (not in HTA's list: TraceLens' MI300 trace launches its NCCL kernels so)
})
_LAUNCH_NAME_LIST = sorted(LAUNCH_NAMES)
#: The runtime calls that launch a graph (a name that begins with one: XPlane appends " (CudaGraph:<id>)").
GRAPH_LAUNCHES = ("cudaGraphLaunch", "cuGraphLaunch", "hipGraphLaunch")
#: The blocking copies and fills (a name that begins with one and is not in LAUNCH_NAMES: ``cudaMemcpy``,
#: ``cudaMemcpy2D``, ``hipMemset``): the host puts the work on the device and waits for it; not in HTA's list.
BLOCKING_COPIES = ("cudaMemcpy", "cudaMemset", "cuMemcpy", "cuMemset", "hipMemcpy", "hipMemset")
_LEFT_OUT_PREFIXES = (*GRAPH_LAUNCHES, *BLOCKING_COPIES)
#: HTA's cut-offs (ns): a runtime call longer than this is a runtime outlier.
RUNTIME_CUTOFF_NS = 50_000
#: HTA's cut-offs (ns): a launch delay longer than this is a launch-delay outlier.
LAUNCH_DELAY_CUTOFF_NS = 100_000

PAIR_COLUMNS = ["device", "stream", "launch", "kernel", "correlation", "launch_start_ns", "cpu_duration_ns",
                "gpu_start_ns", "gpu_duration_ns", "launch_delay_ns"]
COLUMNS = ["rank", "runtime", "launches", "cpu_duration_mean_ns", "cpu_duration_median_ns", "cpu_duration_max_ns",
           "gpu_duration_mean_ns", "gpu_duration_median_ns", "gpu_duration_max_ns", "launch_delay_mean_ns",
           "launch_delay_median_ns", "launch_delay_p95_ns", "launch_delay_max_ns", "runtime_outliers",
           "launch_delay_outliers", "short_kernels", "left_out_calls", "left_out_activities"]


def launch_pairs(timeline: pd.DataFrame, work: pd.DataFrame, graphs: bool = False) -> pd.DataFrame:
    """Each launch of one rank's ``timeline`` with the device ``work`` it launched (:data:`PAIR_COLUMNS`, and
    ``launch_row``: the launch's position in ``timeline``; one row per pair, as HTA's inner join: a launch whose
    activity is not in the trace is left out); with ``graphs``, the launches HTA's list lacks too: the graph
    launches (one pair per kernel) and the blocking copies and fills (:data:`BLOCKING_COPIES`)."""
    if "correlation" not in timeline or not len(work) or work["correlation"].isna().all():
        return pd.DataFrame(columns=[*PAIR_COLUMNS, "launch_row"])
    host = np.flatnonzero(~device_lanes(timeline["lane"]) & timeline["correlation"].notna().to_numpy(bool))
    done = np.flatnonzero(work["correlation"].notna().to_numpy(bool))
    left, right = _inner_join(timeline["correlation"].to_numpy(np.int64, na_value=-1)[host],
                              work["correlation"].to_numpy(np.int64, na_value=-1)[done])
    host, done = host[left], done[right]  # row positions of each pair in the timeline and in the work
    launch = timeline["name"].array.take(host)  # (arrays, not Series: pandas' per-call cost is most of it here)
    kernel = work["name"].array.take(done)
    keep = launch.isin(_LAUNCH_NAME_LIST)
    if graphs:
        keep |= np.asarray(pd.Series(launch).str.startswith((*GRAPH_LAUNCHES, *BLOCKING_COPIES), na=False), bool)
    named = ~keep  # the XPlane launches: a host row named as the device work it launched
    if named.any():
        keep[named] = np.asarray(launch[named] == kernel[named], bool)
    if not keep.all():  # (most traces launch through the runtime only: nothing to drop, no copy)
        host, done, launch, kernel = host[keep], done[keep], launch[keep], kernel[keep]
    launch_start = timeline["start_ns"].to_numpy(np.int64)[host]
    cpu = timeline["dur_ns"].to_numpy(np.int64)[host]
    gpu_start = work["start_ns"].to_numpy(np.int64)[done]
    pairs = pd.DataFrame({  # in the order of PAIR_COLUMNS
        "device": work["device"].array.take(done), "stream": work["stream"].array.take(done), "launch": launch,
        "kernel": kernel, "correlation": work["correlation"].to_numpy(np.int64, na_value=-1)[done],
        "launch_start_ns": launch_start, "cpu_duration_ns": cpu, "gpu_start_ns": gpu_start,
        "gpu_duration_ns": work["dur_ns"].to_numpy(np.int64)[done],
        "launch_delay_ns": np.clip(gpu_start - (launch_start + cpu), 0, None), "launch_row": host})
    return pairs


def without_graphs(pairs: pd.DataFrame) -> pd.DataFrame:
    """``pairs`` (:func:`launch_pairs` with ``graphs``) less the graph launches' and blocking copies' pairs: what
    :func:`launch_pairs` gives without them, row for row."""
    if not len(pairs):
        return pairs
    launch = pairs["launch"].astype(str)
    extra = (launch.str.startswith(GRAPH_LAUNCHES) | (launch.str.startswith(BLOCKING_COPIES)
                                                      & ~launch.isin(_LAUNCH_NAME_LIST))).to_numpy(bool)
    return pairs[~extra].reset_index(drop=True) if extra.any() else pairs


def left_out(pairs: pd.DataFrame) -> tuple[int, int]:
    """The graph launches and blocking copies of ``pairs`` (:func:`launch_pairs` with ``graphs``) that HTA's set
    and so :func:`launch_stats` leave out: (calls, the device activities they launched)."""
    extra = len(pairs) - len(without_graphs(pairs))
    if not extra:
        return 0, 0
    kept = set(without_graphs(pairs)["launch_row"].tolist())
    return len(set(pairs["launch_row"].tolist()) - kept), extra


def _inner_join(left: np.ndarray, right: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Positions (i, j) of every pair with ``left[i] == right[j]``, in the order of ``left``, then of ``right``
    among the rows of one key (the rows of pandas' inner ``merge``), by a sort of ``right`` and a binary search."""
    order = np.argsort(right, kind="stable")
    keys = right[order]
    lo, hi = np.searchsorted(keys, left, "left"), np.searchsorted(keys, left, "right")
    counts = hi - lo
    i = np.repeat(np.arange(len(left)), counts)
    first = np.repeat(lo - (np.cumsum(counts) - counts), counts)  # offset of each pair's match in keys
    return i, order[first + np.arange(len(i))]


def launch_stats(rank: int, pairs: pd.DataFrame, left: tuple[int, int] = (0, 0),
                 launched: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row of :data:`COLUMNS` for the rank's launch ``pairs``: counts, and the mean, median and maximum of each
    duration in ns (and the 95th percentile of the launch delay); ``left``: the graph launches and blocking copies
    left out of them (:func:`left_out`: calls, device activities). Where ``pairs`` is empty but ``left`` is not
    (every launch of the rank a graph's or a blocking copy's: JAX runs each jitted step as a CUDA graph), a row of
    0 launches, no duration figures (missing: an empty set has no mean), 0 outliers and the left-out counts, its
    ``runtime`` that of the left-out calls in ``launched`` (:func:`launch_pairs` with ``graphs``); empty where the
    rank has no launch at all."""
    if not len(pairs):
        if not left[0]:
            return pd.DataFrame(columns=COLUMNS)
        return _left_out_only(rank, left, launched)
    cpu, gpu, delay = (pairs[c].to_numpy(np.int64) for c in ("cpu_duration_ns", "gpu_duration_ns",
                                                               "launch_delay_ns"))
    row = {"rank": rank, "runtime": runtime_of(pairs["launch"]), "launches": len(pairs)}
    for key, values in (("cpu_duration", cpu), ("gpu_duration", gpu), ("launch_delay", delay)):
        row[f"{key}_mean_ns"] = float(values.mean())
        row[f"{key}_median_ns"] = float(np.median(values))
        if key == "launch_delay":
            row[f"{key}_p95_ns"] = float(np.percentile(values, 95))
        row[f"{key}_max_ns"] = int(values.max())
    row["runtime_outliers"] = int((cpu > RUNTIME_CUTOFF_NS).sum())
    row["launch_delay_outliers"] = int((delay > LAUNCH_DELAY_CUTOFF_NS).sum())
    row["short_kernels"] = int(((cpu <= RUNTIME_CUTOFF_NS) & (gpu < cpu)).sum())
    row["left_out_calls"], row["left_out_activities"] = left
    return pd.DataFrame([row], columns=COLUMNS)


def _left_out_only(rank: int, left: tuple[int, int], launched: pd.DataFrame | None) -> pd.DataFrame:
    """The row of a rank all of whose launches are left out (:func:`launch_stats`): the durations' figures missing
    (NaN, and <NA> in the integer maxima), the counts of an empty set 0."""
    row = {"rank": rank, "runtime": runtime_of(launched["launch"]) if launched is not None and len(launched) else "",
           "launches": 0, "runtime_outliers": 0, "launch_delay_outliers": 0, "short_kernels": 0,
           "left_out_calls": int(left[0]), "left_out_activities": int(left[1])}
    frame = pd.DataFrame([{c: row.get(c, np.nan) for c in COLUMNS}], columns=COLUMNS)
    maxima = [c for c in COLUMNS if c.endswith("_max_ns")]
    frame[maxima] = frame[maxima].astype("Int64")  # (an int column, as the other ranks' rows have it)
    return frame


def runtime_of(launches: pd.Series) -> str:
    """The runtime whose calls ``launches`` (launch call names) are: "CUDA", "HIP", "CUDA and HIP", or "" where
    none is a runtime call (XPlane's host events, named after the work they launched). The graph launches and
    blocking copies count too (``cuGraphLaunch (CudaGraph:18)`` is CUDA's): a rank whose launches are all left
    out of the statistics is still named by its runtime."""
    names = launches.unique()  # (the names once each: a set of 22,000 Arrow strings took 13 ms)
    calls = {n for n in names if isinstance(n, str) and (n in LAUNCH_NAMES or n.startswith(_LEFT_OUT_PREFIXES))}
    return " and ".join(sorted({"HIP" if name.startswith("hip") else "CUDA" for name in calls}))


#: The columns of :func:`worst_launches`.
WORST_COLUMNS = ["rank", "by", *PAIR_COLUMNS]


def worst_launches(rank: int, pairs: pd.DataFrame, k: int = 10) -> pd.DataFrame:
    """The ``k`` launches with the longest launch delay and the ``k`` with the longest CPU duration (column ``by``:
    ``launch_delay`` or ``cpu_duration``), longest first: which kernels the outliers are."""
    by = ("launch_delay", "cpu_duration")
    worst = [_longest(pairs[f"{b}_ns"].to_numpy(np.int64), k) for b in by]
    rows = np.concatenate(worst)  # (one take of each column, no concat)
    return pd.DataFrame({"rank": rank, "by": np.repeat(by, [len(w) for w in worst]),
                         **{c: pairs[c].array.take(rows) for c in PAIR_COLUMNS}})


def _longest(values: np.ndarray, k: int) -> np.ndarray:
    """Positions of the ``k`` largest ``values``, largest first, ties in the order of ``values`` (nlargest's; the
    first ``k`` of a stable descending sort), by a partition and a sort of only the values at or above the k-th."""
    if not 0 < k < len(values):
        return np.argsort(-values, kind="stable")[:k]
    top = np.flatnonzero(values >= np.partition(values, len(values) - k)[len(values) - k])
    return top[np.argsort(-values[top], kind="stable")[:k]]
