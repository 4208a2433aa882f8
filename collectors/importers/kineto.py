"""PyTorch profiler / Kineto JSON (``export_chrome_trace``, ``tensorboard_trace_handler``)."""

from __future__ import annotations

import re
from pathlib import Path

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


def _step_of(cat: str, name: str) -> int | None:
    m = _STEP.match(name)
    return int(m.group(1)) if m else None


def read(path: Path, ctx: ImportContext):
    trace = read_chrome(path)
    record(ctx, trace)
    info = trace.header.get("distributedInfo") or {}
    default = info.get("rank") if isinstance(info.get("rank"), int) else None
    rank = rank_from_path(path, ctx.rank_from, ctx, default)
    base = trace.header.get("baseTimeNanoseconds")
    offset, clock = 0, "epoch"
    if len(trace.ts_us) and float(trace.ts_us.min()) < EPOCH_US:
        if isinstance(base, int):
            offset = base
        else:
            clock = "relative"
    extra = {"host": trace.header.get("host_name", ""), "role": "worker"}
    if info:
        extra.update({"backend": info.get("backend"), "world_size": info.get("world_size")})
    yield chrome_part(trace, fmt="kineto", rank=rank, ctx=ctx, lane_name=_lane_namer(trace), offset_ns=offset,
                      clock=clock, info=extra, step_of=_step_of, drop_reason="profiler bookkeeping spans")


register(Importer("kineto", "PyTorch profiler / Kineto trace JSON (.json, .json.gz)", sniff, read))
