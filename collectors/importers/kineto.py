"""PyTorch profiler / Kineto JSON (``export_chrome_trace``, ``tensorboard_trace_handler``)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd

from ddltrace.collectors.importers.base import ImportContext, Importer, rank_from_path, register
from ddltrace.collectors.importers.chrome import read_chrome
from ddltrace.collectors.importers.convert import chrome_part, record

_SNIFF = re.compile(rb'"(schemaVersion|deviceProperties|distributedInfo|baseTimeNanoseconds)"\s*:|'
                    rb'"cat"\s*:\s*"(cpu_op|cuda_runtime|kernel|python_function|user_annotation|gpu_memcpy|'
                    rb'cpu_instant_event|cuda_driver)"')
_STEP = re.compile(r"^ProfilerStep#(\d+)$")
#: Timestamps above this (µs) are since the Unix epoch (2001-09-09), below it relative to baseTimeNanoseconds.
EPOCH_US = 1e15


def sniff(head: bytes, path: Path) -> bool:
    return bool(_SNIFF.search(head))


def _lane_namer(trace):
    def lane(pid, tid):
        if isinstance(pid, str):
            return None  # "Spans"/"Traces": the profiler's own bookkeeping
        label = trace.process_labels.get(pid, "")
        thread = trace.thread_names.get((pid, tid), "").strip()
        if label.startswith("GPU"):
            proc = "gpu:" + label.split()[-1]
        elif label == "CPU" or not label:
            proc = "cpu" if not thread.startswith("stream") else f"gpu:{pid}"
        else:
            proc = label.lower().replace(" ", ":")
        return f"{proc}/{thread or f'tid {tid}'}"
    return lane


def row_steps(trace, gpu_lane: np.ndarray) -> np.ndarray | None:
    """The training step of every interval (-1: none): host events by the ``ProfilerStep#N`` span their
    start falls in, GPU events by the time the host launched them (Kineto's ``ac2g`` flow arrows link each
    kernel to its launch); None when the trace marks no steps."""
    numbers = {k: int(m.group(1)) for k, (_cat, name) in enumerate(trace.keys) if (m := _STEP.match(name))}
    if not numbers:
        return None
    is_step = np.isin(trace.key, list(numbers))
    starts = trace.ts_us[is_step]
    order = np.argsort(starts, kind="stable")
    starts = starts[order]
    ends = (trace.ts_us[is_step] + trace.dur_us[is_step])[order]
    nums = np.array([numbers[k] for k in trace.key[is_step]], dtype=np.int64)[order]

    def step_at(t: np.ndarray) -> np.ndarray:
        idx = np.searchsorted(starts, t, side="right") - 1
        safe = np.clip(idx, 0, None)
        inside = (idx >= 0) & (t < ends[safe]) & ~np.isnan(t)
        return np.where(inside, nums[safe], -1)

    on_gpu = gpu_lane[trace.lane_key] if len(trace.lane_key) else np.zeros(0, dtype=bool)
    when = trace.ts_us.copy()
    if on_gpu.any():
        when[on_gpu] = np.nan
        flows = trace.flows
        if flows:
            start = flows["start"]
            launches = pd.DataFrame({"id": flows["id"][start], "launch": flows["ts"][start]})
            arrivals = pd.DataFrame({"id": flows["id"][~start], "lane": flows["lane"][~start],
                                     "ts": flows["ts"][~start]})
            linked = arrivals.merge(launches.drop_duplicates("id"), on="id").drop_duplicates(["lane", "ts"])
            rows = np.flatnonzero(on_gpu)
            gpu = pd.DataFrame({"row": rows, "lane": trace.lane_key[rows], "ts": trace.ts_us[rows]})
            found = gpu.merge(linked, on=["lane", "ts"])
            when[found["row"].to_numpy()] = found["launch"].to_numpy()
    return step_at(when)


def read(path: Path, ctx: ImportContext):
    trace = read_chrome(path, keep_flows="ac2g")
    record(ctx, trace)
    info = trace.header.get("distributedInfo") or {}
    default = info.get("rank") if isinstance(info.get("rank"), int) else None
    rank = rank_from_path(path, ctx.rank_from, ctx, default)
    base = trace.header.get("baseTimeNanoseconds")
    offset, clock = 0, "epoch"
    if len(trace.ts_us) and float(trace.ts_us.min()) < EPOCH_US:
        if isinstance(base, int) and 0 <= base < 1 << 62:  # ns since the epoch; beyond int64 ns is damage
            offset = base
        else:
            clock = "relative"
    extra = {"host": trace.header.get("host_name", ""), "role": "worker"}
    if info:
        extra.update({"backend": info.get("backend"), "world_size": info.get("world_size")})
    lane_name = _lane_namer(trace)
    gpu_lane = np.array([(lane_name(pid, tid) or "").startswith("gpu:") for pid, tid in trace.lanes], dtype=bool)
    yield chrome_part(trace, fmt="kineto", rank=rank, ctx=ctx, lane_name=lane_name, offset_ns=offset, clock=clock,
                      info=extra, row_steps=row_steps(trace, gpu_lane), drop_reason="profiler bookkeeping spans")


register(Importer("kineto", "PyTorch profiler / Kineto trace JSON (.json, .json.gz)", sniff, read))
