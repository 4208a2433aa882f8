"""Figures of GPU traces that the tests compute from the files themselves (Kineto JSON read with exact decimals),
and a written store of collectives with a late rank, for the GPU analyses' tests."""

from __future__ import annotations

import gzip
import json
from decimal import Decimal
from pathlib import Path

import pandas as pd

from ddltrace.store import write_store

#: c10d's dtype names and their sizes in bytes
DTYPE_BYTES = {"Float": 4, "Half": 2, "BFloat16": 2, "Double": 8, "Int": 4, "Long": 8, "Byte": 1, "Char": 1}
DEVICE_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}


def events(path: Path) -> tuple[list[dict], dict]:
    """The complete (X) events of a Kineto file and its distributedInfo, with ``baseTimeNanoseconds`` (the origin
    of a file's times when they are not since the epoch: below 1e15 µs) as ``"base_ns"``."""
    with gzip.open(path, "rt") as fh:
        doc = json.load(fh, parse_float=Decimal)
    evs = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    relative = min(Decimal(e["ts"]) for e in evs) < Decimal(10) ** 15
    info = dict(doc.get("distributedInfo", {}), base_ns=doc.get("baseTimeNanoseconds", 0) if relative else 0)
    return evs, info


def ns(us) -> int:
    return int(Decimal(us) * 1000)


def file_bytes(e: dict) -> int | None:
    """The payload of a device event as its args say: a copy's ``bytes``; a collective's nccl-tests size (the
    larger of c10d's in and out element counts, times the dtype's size: the gathered output of an all-gather)."""
    args = e.get("args", {})
    if e["cat"] == "gpu_memcpy":
        return int(args["bytes"])
    if "In msg nelems" in args:
        return max(int(args["In msg nelems"]), int(args["Out msg nelems"])) * DTYPE_BYTES[args["dtype"]]
    return None


#: the runtime calls that launch device work (as HTA's launch statistics pair them)
LAUNCHES = ("cudaLaunchKernel", "cudaMemcpyAsync", "cudaMemsetAsync", "cudaLaunchKernelExC", "cuLaunchKernel")


def idle_truth(path: Path) -> tuple[int, int]:
    """(idle, host wait) of the file's device in ns: the gaps of the union of its kernels, copies and fills, and
    of each gap the part before the end of the runtime call that launched the work ending it (the same
    args.correlation)."""
    evs = events(path)[0]
    work = sorted((ns(e["ts"]), ns(e["ts"]) + ns(e["dur"]), e["args"].get("correlation"))
                  for e in evs if e.get("cat") in DEVICE_CATS)
    launch_end = {e["args"]["correlation"]: ns(e["ts"]) + ns(e["dur"]) for e in evs
                  if e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {})
                  and e["name"] in LAUNCHES}
    idle = host = 0
    reach = work[0][1]
    for start, end, _ in work[1:]:
        if start > reach:
            idle += start - reach
            ends = [launch_end[c] for s, _, c in work if s == start and c in launch_end]
            if ends:
                host += max(0, min(min(ends), start) - reach)
        reach = max(reach, end)
    return idle, host


def late_store(path: Path, late_rank: int | None = 2, ranks: int = 4, count: int = 20,
               late_ns: int = 3_000_000) -> Path:
    """A written store: ``ranks`` ranks, each with ``count`` all-reduce kernels of 64 MiB in 5 steps, each
    followed by a 10 ms compute kernel; rank ``late_rank`` starts each all-reduce 3 ms after the others (which
    start 0-3 µs apart), every all-reduce ends at the same time, the late one's lasting 1 ms. With ``late_rank``
    None, no rank is late: the ranks start 0-3 µs apart, in an order that turns with each all-reduce."""
    rows = []
    for r in range(ranks):
        for i in range(count):
            t0 = 1_000_000_000 + i * 20_000_000
            start = t0 + (late_ns if r == late_rank else ((r + i) % ranks if late_rank is None else r) * 1000)
            end = t0 + late_ns + 1_000_000
            rows.append({"rank": r, "lane": "gpu:0/stream 7", "name": "ncclKernel_AllReduce_RING_LL_Sum_float",
                         "category": "comm", "start_ns": start, "dur_ns": end - start, "bytes": 64 << 20,
                         "step": i // 4})
            rows.append({"rank": r, "lane": "gpu:0/stream 7", "name": "volta_sgemm_128x64_nn",
                         "category": "compute", "start_ns": end, "dur_ns": 10_000_000, "step": i // 4})
    return write_store(path, pd.DataFrame(rows), run={"world_size": ranks}).path


