"""MXNet profiler JSON (``mx.profiler.dump()``): operators as B/E pairs per device and engine thread.

Process names (``cpu/0``, ``gpu/0``, ``MXNET_C_API``, ...) come from ``M`` events (a GPU's lanes are named
``gpu:0/thread N``, the device-lane form every importer uses; its threads are MXNet's engine threads, not CUDA
streams); pids of domains are
64-bit hashes and thread ids are hashes too (read as exact Python ints). ``ts`` is µs since the Unix epoch.
The file holds no rank: it comes from the file name (``profile_dist_sync_rank1.json``) or ``--rank-from``.
MXNet 1.9 also writes every operator a second time, as async events of the ``operator`` domain; those copies are
dropped when device processes are present.
"""

from __future__ import annotations

import re
from pathlib import Path

from ddltrace.collectors.importers.base import ImportContext, Importer, rank_from_path, register
from ddltrace.collectors.importers.chrome import read_chrome
from ddltrace.collectors.importers.convert import chrome_part, record

#: MXNet's GPU processes ("gpu/0"): their lanes are the device's, named like every importer's ("gpu:0/thread 1").
_DEVICE = re.compile(r"^gpu/(\d+)$")
_SNIFF = re.compile(rb'"MXNET_C_API"|"Device Storage"|"cat"\s*:\s*"operator"|"MXNet C API')


def sniff(head: bytes, path: Path) -> bool:
    return bool(_SNIFF.search(head))


def read(path: Path, ctx: ImportContext):
    trace = read_chrome(path, processes=ctx.processes)
    record(ctx, trace)
    thread_number: dict[tuple, int] = {}
    has_devices = any(re.match(r"^(cpu|gpu)", name) for name in trace.process_names.values())

    def lane(pid, tid):
        proc = trace.process_names.get(pid) or f"pid {pid}"
        if proc == "operator" and has_devices:
            return None  # the 'operator' domain repeats, as async events, what ran on the devices
        number = thread_number.setdefault((pid, tid), sum(1 for p, _ in thread_number if p == pid))
        return _DEVICE.sub(r"gpu:\1", proc) + f"/thread {number}"

    yield chrome_part(trace, fmt="mxnet", rank=rank_from_path(path, ctx.rank_from, ctx), ctx=ctx, lane_name=lane,
                      clock="epoch", info={"role": "worker"},
                      drop_reason="operator-domain copies of device operator events")


register(Importer("mxnet", "MXNet profiler JSON (mx.profiler.dump)", sniff, read))
