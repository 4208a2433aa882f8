"""Horovod timeline (``HOROVOD_TIMELINE``): rank 0's view of every tensor's negotiation and collective.

Each tensor is a "process" (pid) named by an ``M process_name``; pid 0's ``start_time_since_epoch_in_micros``
(Horovod >= 0.21) anchors ``ts`` (µs since the timeline started) to the wall clock. Old versions never close
the JSON array; the reader tolerates that, and an ``E`` with no ``B`` (``join.noname``) is counted, not fatal.
Negotiation ticks named "0", "1", ... are the moments each rank reported the tensor ready: the world size is
the highest rank they name plus one, and the store says that its one rank (0) is the coordinator's view of them.
"""

from __future__ import annotations

import re
from pathlib import Path

from ddltrace.collectors.importers.base import ImportContext, Importer, rank_from_path, register
from ddltrace.collectors.importers.chrome import read_chrome
from ddltrace.collectors.importers.convert import chrome_part, record
from ddltrace.store import rank_ranges

_SNIFF = re.compile(rb'start_time_since_epoch_in_micros|"NEGOTIATE_[A-Z]+"|"CYCLE_START"')


def sniff(head: bytes, path: Path) -> bool:
    return bool(_SNIFF.search(head))


def read(path: Path, ctx: ImportContext):
    trace = read_chrome(path, processes=ctx.processes)
    record(ctx, trace)
    start_us = None
    for args in trace.process_args.values():
        if isinstance(args.get("start_time_since_epoch_in_micros"), int):
            start_us = args["start_time_since_epoch_in_micros"]
    rank = rank_from_path(path, ctx.rank_from, ctx, default=0)
    named = sorted({int(name) for _cat, name in trace.keys if name.isascii() and name.isdigit() and len(name) < 10})
    info = {"role": "coordinator (rank 0's view of all ranks)"}
    if named:
        info["world_size"] = named[-1] + 1
        info["view"] = (f"rank 0's view of a {named[-1] + 1}-rank job: the negotiation ticks name ranks "
                        f"{rank_ranges(named)}; only rank 0's timeline is recorded")

    def lane(pid, tid):
        name = trace.process_names.get(pid) or f"tensor {pid}"
        return f"tensor:{name}" if tid in (0, None) else f"tensor:{name}/thread {tid}"

    yield chrome_part(trace, fmt="horovod", rank=rank, ctx=ctx, lane_name=lane,
                      offset_ns=(start_us or 0) * 1000, clock="epoch" if start_us else "relative",
                      info=info)


register(Importer("horovod", "Horovod timeline JSON (HOROVOD_TIMELINE), also never-closed arrays", sniff, read))
