"""The NVML sampler's counters joined with the trace: what nvidia-smi saw of each GPU while the trace's device
work ran.

``ddltrace run`` samples every GPU through NVML (:mod:`ddltrace.collectors.gpu_sampler`) into the machine's
counters (rank -1): ``gpuI_util_percent`` (share of the sample period a kernel ran, %), ``gpuI_mem_util_percent``
(share of it the memory was read or written, %), ``gpuI_mem_used_bytes``, ``gpuI_power_watts``,
``gpuI_sm_clock_mhz``, ``gpuI_pcie_rx_bytes_per_s`` and ``gpuI_pcie_tx_bytes_per_s``. GPU ``I`` is the trace's
device ``gpu:I``.

Per device and counter (:func:`joined`): the samples taken inside the device's window in the trace (its first
device work to its last, over the ranks that hold it: :mod:`~ddltrace.analyses.gpu_temporal`), their count, mean,
minimum and maximum in the counter's unit, beside the trace's busy share (the union of the device's work over its
window: NVML's utilisation measures the same thing, sampled). Where several ranks share one device (processes
time-sliced on one GPU) it is their busy times over their windows, summed (``busy / window`` of the temporal
breakdown's rows of that device): each rank's union, not the union across the ranks, which the per-rank summaries
do not keep (on sample_traces/h100-ddp/run-straggler, two ranks on one H100: 38.7 %, their union 43.5 %, NVML
34.3 % over 3 samples). A device with no sample in its window has ``samples`` 0 and no figures.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

#: NVML's counters (as the sampler names them, after ``gpuI_``) and their units.
UNITS = {"util_percent": "%", "mem_util_percent": "%", "mem_used_bytes": "bytes", "power_watts": "W",
         "sm_clock_mhz": "MHz", "pcie_rx_bytes_per_s": "bytes/s", "pcie_tx_bytes_per_s": "bytes/s"}
_NAME = re.compile(r"^gpu(\d+)_(" + "|".join(UNITS) + r")$")
SERIES_COLUMNS = ["device", "counter", "t_ns", "value"]
COLUMNS = ["device", "counter", "unit", "samples", "mean", "min", "max", "window_start_ns", "window_ns",
           "trace_busy_share"]


def nvml_series(counters: pd.DataFrame) -> pd.DataFrame:
    """The machine's NVML counters (rank -1) of a store's ``counters``: device (``gpu:I``), counter, t_ns, value."""
    machine = counters[counters["rank"] == -1] if len(counters) else counters
    found = machine["name"].astype(str).str.extract(_NAME) if len(machine) else pd.DataFrame(columns=[0, 1])
    keep = found[0].notna().to_numpy() if len(found) else np.zeros(0, bool)
    if not keep.any():
        return pd.DataFrame(columns=SERIES_COLUMNS)
    rows = machine[keep]
    return pd.DataFrame({"device": "gpu:" + found[0][keep], "counter": found[1][keep].to_numpy(object),
                         "t_ns": rows["t_ns"].to_numpy(np.int64), "value": rows["value"].to_numpy(float)},
                        columns=SERIES_COLUMNS).sort_values(["device", "counter", "t_ns"], ignore_index=True)


def joined(series: pd.DataFrame, temporal: pd.DataFrame) -> pd.DataFrame:
    """Per device of the trace with NVML counters and per counter: :data:`COLUMNS` (see the module docstring).
    ``temporal``: the temporal breakdown per device (:func:`~ddltrace.analyses.gpu_temporal.temporal_breakdown`
    rows with an empty stream)."""
    rows = []
    for device, on_device in temporal.groupby("device", sort=True):
        mine = series[series["device"] == device]
        if not len(mine):
            continue
        lo = int(on_device["window_start_ns"].min())
        hi = int((on_device["window_start_ns"] + on_device["window_ns"]).max())
        busy = float(on_device["busy_ns"].sum() / on_device["window_ns"].sum()) if on_device["window_ns"].sum() \
            else 0.0
        for counter, part in mine.groupby("counter", sort=False):
            inside = part[(part["t_ns"] >= lo) & (part["t_ns"] <= hi)]["value"]
            figures = ([float(inside.mean()), float(inside.min()), float(inside.max())] if len(inside)
                       else [float("nan")] * 3)
            rows.append([device, counter, UNITS[counter], len(inside), *figures, lo, hi - lo, busy])
    order = {c: i for i, c in enumerate(UNITS)}
    out = pd.DataFrame(rows, columns=COLUMNS)
    return out.sort_values(["device", "counter"], key=lambda s: s.map(order) if s.name == "counter" else s,
                           ignore_index=True)
