"""Memory copies: bytes and bandwidth of the host-to-device, device-to-host and device-to-device copies, in total
and over time (HTA's ``get_memory_bw_summary`` and ``get_memory_bw_time_series``).

The copies are the device work of class ``memcpy`` (:mod:`ddltrace.analyses.gpu_lanes`; the importers' rule
files put copies and fills there). Their direction is what their name says (:func:`direction`): ``H2D``
(Kineto's ``Memcpy HtoD (Pinned -> Device)``, XPlane's ``MemcpyH2D``, nsys' ``[CUDA memcpy Host-to-Device]``,
MXNet's ``CopyCPU2GPU``), ``D2H``, ``D2D``, ``P2P`` (between devices), ``fill`` (a memset, or ROCm's blit kernel
``__amd_rocclr_fillBuffer...``: no transfer) or ``other`` (ROCm's blit copies ``__amd_rocclr_copyBuffer...``, whose
name does not say between which memories). Their payload is the timeline's ``bytes`` where the importer gives it.

Per rank, device and direction (:func:`copy_summary`): copies, their summed duration (ns), the union of their
intervals (ns, concurrent copies counted once), ``sized`` (the copies whose size the trace gives, with a
duration), their bytes, the effective bandwidth = those bytes / those copies' summed duration (bytes/s: a copy of
unknown size counts in neither; on TraceLens' MI300 trace 184 of 550 device-to-device copies have no
``args.bytes``), the mean of the copies' own bandwidths (bytes / duration of each, bytes/s; HTA's summary mean where
the copies of a kind never overlap) and the peak of the time series; ``vs_pcie`` = effective bandwidth over the
calibrated bandwidth of that direction where a hardware profile gives one (``gpu0_h2d`` and ``gpu0_d2h`` of
``ddltrace calibrate``: pinned copies of 256 MiB or more). No bandwidth where the store holds no bytes for the
copies.

The time series (:func:`bandwidth_series`, HTA's definition): each copy moves its bytes at bytes / duration over
its interval; the series is the sum of the copies running at each instant (bytes/s), per direction, changing
only where a copy starts or ends (per rank, device and direction).
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from ddltrace.analyses.gpu_lanes import union_ns

DIRECTIONS = ("H2D", "D2H", "D2D", "P2P", "fill", "other")
#: What a copy's name says of its direction, looked for in order in the name lower-cased without separators.
_SAID = (("fill", ("memset", "rocclrfill")), ("H2D", ("htod", "h2d", "hosttodevice", "cpu2gpu")),
         ("D2H", ("dtoh", "d2h", "devicetohost", "gpu2cpu")), ("P2P", ("ptop", "p2p", "peertopeer")),
         ("D2D", ("dtod", "d2d", "devicetodevice", "gpu2gpu")))
_SEPARATORS = re.compile(r"[^a-z0-9]+")
COLUMNS = ["rank", "device", "direction", "copies", "time_ns", "busy_ns", "sized", "bytes", "bandwidth",
           "mean_bandwidth", "peak_bandwidth", "vs_pcie"]
SERIES_COLUMNS = ["rank", "device", "direction", "t_ns", "bytes_per_s"]


def direction(name: str) -> str:
    """The direction a copy's ``name`` says (:data:`DIRECTIONS`)."""
    flat = _SEPARATORS.sub("", name.lower())
    return next((d for d, words in _SAID if any(w in flat for w in words)), "other")


def rank_copies(rank: int, work: pd.DataFrame) -> pd.DataFrame:
    """The copies and fills of one rank's device ``work`` with their direction: rank, device, direction,
    start_ns, end_ns, dur_ns, bytes (<NA> where unknown)."""
    rows = work[work["category"] == "memcpy"]
    codes, names = pd.factorize(rows["name"])  # the direction of each distinct name, not of each copy
    said = np.array([direction(n) for n in names] + ["other"], dtype=object)
    return pd.DataFrame({
        "rank": rank, "device": rows["device"].to_numpy(object),
        "direction": said[codes], "start_ns": rows["start_ns"].to_numpy(np.int64),
        "end_ns": rows["end_ns"].to_numpy(np.int64), "dur_ns": rows["dur_ns"].to_numpy(np.int64),
        "bytes": rows["bytes"].array if "bytes" in rows else pd.array([pd.NA] * len(rows), dtype="Int64")})


def bandwidth_series(copies: pd.DataFrame) -> pd.DataFrame:
    """The summed bandwidth (bytes/s) of the copies running at each instant, per rank, device and direction
    (:data:`SERIES_COLUMNS`; the value holds from ``t_ns`` to the next row of the same key). Copies
    of unknown size or no duration are left out."""
    known = copies[copies["bytes"].notna() & (copies["dur_ns"] > 0)]
    if not len(known):
        return pd.DataFrame(columns=SERIES_COLUMNS)
    rate = known["bytes"].to_numpy(np.float64) / (known["dur_ns"].to_numpy(np.float64) / 1e9)
    steps = pd.DataFrame({
        "rank": np.concatenate([known["rank"].to_numpy()] * 2),
        "device": np.concatenate([known["device"].to_numpy(object)] * 2),
        "direction": np.concatenate([known["direction"].to_numpy(object)] * 2),
        "t_ns": np.concatenate([known["start_ns"].to_numpy(np.int64), known["end_ns"].to_numpy(np.int64)]),
        "change": np.concatenate([rate, -rate])})
    steps = steps.groupby(["rank", "device", "direction", "t_ns"], sort=True)["change"].sum().reset_index()
    steps["bytes_per_s"] = steps.groupby(["rank", "device", "direction"], sort=False)["change"].cumsum().clip(lower=0)
    return steps[SERIES_COLUMNS]


def against(table: pd.DataFrame, calibrated: dict[str, float] | None) -> pd.DataFrame:
    """``table`` (:data:`COLUMNS`) with ``vs_pcie`` = bandwidth over the ``calibrated`` bandwidth (bytes/s) of its
    direction (``H2D``, ``D2H``), NaN where there is none."""
    reference = table["direction"].map(calibrated or {}).astype(float)
    return table.assign(vs_pcie=table["bandwidth"].astype(float) / reference)


def copy_summary(copies: pd.DataFrame, calibrated: dict[str, float] | None = None,
                 series: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per rank, device and direction: :data:`COLUMNS` (see the module docstring; NaN bandwidth where no copy
    has a known size). ``calibrated``: the calibrated bandwidth (bytes/s) by direction (``H2D``, ``D2H``);
    ``series``: :func:`bandwidth_series` of ``copies`` where the caller has it already (else it is made here)."""
    rows = []
    series = bandwidth_series(copies) if series is None else series
    order = {d: i for i, d in enumerate(DIRECTIONS)}
    groups = sorted(copies.groupby(["rank", "device", "direction"], sort=False).indices.items(),
                    key=lambda g: (g[0][0], g[0][1], order[g[0][2]]))
    # each group's rows from numpy arrays taken once (a pandas filter per group cost 5 ms of CPU a rank)
    start, end, dur = (copies[c].to_numpy(np.int64) for c in ("start_ns", "end_ns", "dur_ns"))
    size = copies["bytes"].astype("Int64")
    known = size.notna().to_numpy() & (dur > 0)
    size = size.to_numpy(np.int64, na_value=0)
    at = {c: series[c].to_numpy() for c in ("rank", "device", "direction")}
    for (rank, device, kind), part in groups:
        sized = part[known[part]]
        total = int(size[sized].sum()) if len(sized) else None
        bandwidth = mean = peak = float("nan")
        if total is not None and kind != "fill":
            bandwidth = total / (dur[sized].sum() / 1e9)
            mean = float((size[sized].astype(np.float64) / (dur[sized].astype(np.float64) / 1e9)).mean())
            mine = (at["rank"] == rank) & (at["device"] == device) & (at["direction"] == kind)
            peak = float(series["bytes_per_s"].to_numpy()[mine].max()) if mine.any() else float("nan")
        rows.append([rank, device, kind, len(part), int(dur[part].sum()), union_ns(start[part], end[part]),
                     len(sized), total, bandwidth, mean, peak, float("nan")])
    return against(pd.DataFrame(rows, columns=COLUMNS), calibrated)
