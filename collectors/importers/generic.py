"""Any other Chrome Trace Event Format JSON: one file is one rank, lanes are (process, thread)."""

from __future__ import annotations

import re
from pathlib import Path

from ddltrace.collectors.importers.base import ImportContext, Importer, rank_from_path, register
from ddltrace.collectors.importers.chrome import read_chrome
from ddltrace.collectors.importers.convert import chrome_part, record

_SNIFF = re.compile(rb'^\s*(\{[\s\S]*"traceEvents"|\[\s*(\{[^{}]*"ph"|\]))')
EPOCH_US = 1e15


def sniff(head: bytes, path: Path) -> bool:
    return bool(_SNIFF.search(head))


def read(path: Path, ctx: ImportContext):
    trace = read_chrome(path, processes=ctx.processes)
    record(ctx, trace)

    def lane(pid, tid):
        proc = trace.process_names.get(pid) or f"pid {pid}"
        thread = trace.thread_names.get((pid, tid)) or f"tid {tid}"
        return f"{proc}/{thread}"

    epoch = bool(len(trace.ts_us)) and float(trace.ts_us.min()) >= EPOCH_US
    yield chrome_part(trace, fmt="chrome", rank=rank_from_path(path, ctx.rank_from, ctx), ctx=ctx, lane_name=lane,
                      clock="epoch" if epoch else "relative")


register(Importer("chrome", "generic Chrome Trace Event Format JSON (.json, .json.gz)", sniff, read))
