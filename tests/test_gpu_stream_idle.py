"""Idle time per stream by HTA's categories (analyses/gpu_stream_idle.py: host wait, kernel wait, other) on real
Kineto traces: HTA's trace_filter (two ranks of one NCCL job, five streams each) and TraceLens' B200 eager trace
(whose times since the epoch, 1.8e18 ns, lose up to 256 ns through a float), each figure checked against one computed
here from the JSON itself, and trace_filter's against HTA 0.5's own ``get_idle_time_breakdown``.

Truth: per stream (``args.stream``), the kernel / gpu_memcpy / gpu_memset events in start order; each one's gap is
its start minus the end of the one before it; host wait where the runtime or driver call with its
``args.correlation`` started after that end, kernel wait where not and the gap is under 30 us, other the rest. Times
are the file's decimal us times 1000 (exact ns)."""

from __future__ import annotations

import gzip
import json
from collections import defaultdict
from decimal import Decimal
from itertools import pairwise
from pathlib import Path

import pytest
from hta_reference import NEEDS_HTA, hta_figures
from shared_data import SHARED

from ddltrace.analyses.run_analysis import analyze_store
from ddltrace.cli import main

NCCL_JOB = SHARED / "hta_traces" / "trace_filter"
NEGATIVE = SHARED / "hta_traces" / "negative_queue_length_values_check"
B200 = SHARED / "wild_traces" / "tracelens_b200_eager"
WORK = {"kernel", "gpu_memcpy", "gpu_memset"}
HOST = {"cuda_runtime", "cuda_driver"}


def truth(path: Path) -> dict[str, dict[str, tuple[int, int]]]:
    """Per stream ("stream 7"), per category: (idle ns, gaps), from the JSON."""
    with gzip.open(path, "rt") as fh:
        events = json.load(fh, parse_float=Decimal)["traceEvents"]
    launched, streams = {}, defaultdict(list)
    for e in events:
        args = e.get("args") or {}
        if e.get("ph") != "X" or "correlation" not in args:
            continue
        start, end = int(e["ts"] * 1000), int((e["ts"] + e["dur"]) * 1000)
        if e.get("cat") in HOST:
            launched.setdefault(args["correlation"], start)
        elif e.get("cat") in WORK:
            streams[f"stream {args['stream']}"].append((start, end, args["correlation"]))
    out: dict = {}
    for stream, work in streams.items():
        work.sort()
        for (_, end, _), (start, _, correlation) in pairwise(work):
            launch = launched.get(correlation)
            category = ("host_wait" if launch is not None and launch > end else
                        "kernel_wait" if start - end < 30_000 else "other")
            idle, gaps = out.setdefault(stream, {}).get(category, (0, 0))
            out[stream][category] = (idle + start - end, gaps + 1)
    return out


def ours(folder: Path, tmp_path: Path, launched: bool = False) -> dict[int, dict]:
    """Per rank, stream and category: (idle ns, gaps) as analyze makes them (``launched``: over HTA's set)."""
    store = tmp_path / folder.name
    assert main(["import", str(folder), "--out", str(store), "--progress", "never"]) == 0
    gpu = analyze_store(store).gpu
    table = gpu.stream_idle_launched_table() if launched else gpu.stream_idle_table()
    got: dict = {}
    for r in table.to_dict("records"):
        got.setdefault(r["rank"], {}).setdefault(r["stream"], {})[r["idle_category"]] = (r["idle_ns"], r["intervals"])
        assert 0 <= r["share"] <= 1
    return got


@pytest.mark.skipif(not NCCL_JOB.exists() or not B200.exists(), reason="the shared real traces are not here")
def test_the_idle_time_per_stream_is_the_files(tmp_path):
    """Every stream's host wait, kernel wait and other (ns, and how many gaps) are the file's, to the nanosecond, on
    both ranks of trace_filter and on the B200 trace (through a float, as a pandas shift with a missing value takes
    them, its host wait and kernel wait read 3.0 us and 1.4 us off: the module keeps the times in int64)."""
    mine = ours(NCCL_JOB, tmp_path)
    files = sorted(NCCL_JOB.glob("*.json.gz"))
    assert sorted(mine) == [0, 1] and len(files) == 2
    for rank, path in zip((0, 1), files, strict=True):
        assert mine[rank] == truth(path)
    b200 = ours(B200, tmp_path)
    (path,) = B200.glob("*.json.gz")
    assert b200 == {0: truth(path)}
    assert b200[0]["stream 7"] == {"host_wait": (72_470_093, 711), "kernel_wait": (351_325, 217)}


@NEEDS_HTA
@pytest.mark.skipif(not NCCL_JOB.exists(), reason="the shared real traces are not here")
def test_hta_gives_the_same_idle_time_per_stream(tmp_path):
    """HTA 0.5's own get_idle_time_breakdown on trace_filter (whole-microsecond times: its rounding changes
    nothing): every rank, stream and category the same (us)."""
    hta = hta_figures(NCCL_JOB)
    mine = ours(NCCL_JOB, tmp_path)
    for rank, figures in hta.items():
        theirs = {stream: {c: v for c, v in categories.items() if v}
                  for stream, categories in figures["idle_streams"].items()}
        assert {stream: {c: idle / 1e3 for c, (idle, _) in categories.items() if idle}
                for stream, categories in mine[int(rank)].items()} == theirs


@NEEDS_HTA
@pytest.mark.skipif(not NEGATIVE.exists(), reason="the shared real traces are not here")
def test_over_the_work_launched_in_the_trace_hta_gives_the_same(tmp_path):
    """negative_queue_length_values_check holds 872 device events launched before the trace began, which HTA leaves
    out: over all device work ddltrace's per-stream idle differs from HTA's, over the work launched in the trace
    (HTA's set, ``idle_streams_launched``) every stream and category is HTA's (us)."""
    hta = hta_figures(NEGATIVE)
    every, kept = ours(NEGATIVE, tmp_path / "all"), ours(NEGATIVE, tmp_path / "kept", launched=True)
    (rank, figures), = hta.items()
    theirs = {stream: {c: v for c, v in categories.items() if v}
              for stream, categories in figures["idle_streams"].items()}

    def in_us(mine: dict) -> dict:
        return {stream: {c: idle / 1e3 for c, (idle, _) in categories.items() if idle}
                for stream, categories in mine[int(rank)].items()}

    assert in_us(kept) == theirs
    assert in_us(every) != theirs

