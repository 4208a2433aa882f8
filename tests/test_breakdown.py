"""Breakdowns: every nanosecond of a rank in exactly one category, per phase, with exact sums."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from ddltrace.analyses.breakdown import average_and_slowest, breakdown_table, rank_breakdown
from ddltrace.analyses.phases import segment_rank
from ddltrace.timeline import CATEGORIES, make_timeline


def row(name, category, start, dur, lane="main", rank=0):
    return {"rank": rank, "lane": lane, "name": name, "category": category, "start_ns": start, "dur_ns": dur}


def table_of(rows, phase="all"):
    timeline = make_timeline(rows)
    parts = [rank_breakdown(part, segment_rank(part)) for _, part in timeline.groupby("rank")]
    return breakdown_table(pd.concat(parts, ignore_index=True), phase)


def test_pmpi_trace_gaps_are_compute_and_phases_split_exactly():
    rows = [row("MPI_Init", "other", 0, 100), row("MPI_Barrier", "barrier", 300, 50),
            row("MPI_Wait", "wait", 600, 150), row("MPI_Send", "comm", 800, 25),
            row("MPI_Finalize", "other", 1000, 40)]
    t = table_of(rows)
    assert t.loc[0, "total_ns"] == 1040
    assert (t.loc[0, "other"], t.loc[0, "barrier"], t.loc[0, "wait"], t.loc[0, "comm"]) == (140, 50, 150, 25)
    assert t.loc[0, "compute"] == 1040 - 140 - 50 - 150 - 25
    assert t.loc[0, "idle"] == 0
    steady = table_of(rows, "steady")  # no pattern: steady runs from MPI_Init's end to MPI_Finalize's start
    assert steady.loc[0, "total_ns"] == 900 and steady.loc[0, "compute"] == 900 - 50 - 150 - 25
    assert steady.loc[0, "overlap"] == pytest.approx(675 / (675 + 150 + 25 + 50))  # the barrier exposed too
    assert sum(table_of(rows, p).loc[0, "total_ns"] for p in ("init", "steady", "final")) == 1040


def test_explicit_compute_makes_gaps_idle():
    rows = [row("forward", "compute", 0, 400), row("MPI_Allreduce", "comm", 500, 100),
            row("forward", "compute", 700, 300)]
    t = table_of(rows)
    assert (t.loc[0, "compute"], t.loc[0, "comm"], t.loc[0, "idle"]) == (700, 100, 200)


def test_gaps_between_rows_that_say_nothing_of_the_work_are_idle_not_compute(tmp_path, capsys):
    """Only a rank of MPI calls alone has its gaps taken for the job's compute. A host of runtime API calls alone
    (a rocprofv3 trace's hipLaunchKernel, hipMemcpyAsync) and a trace of some operators, none computing, have idle
    gaps (QA: 66.4 % of a rocprofv3 host and 9.3 % of a Chrome trace were compute that no row holds); `info`, which
    reads the store's tables without pandas, says the same as the analyses."""
    from ddltrace.cli import main
    from ddltrace.store import write_store

    api = [row("hipLaunchKernel", "other", 0, 100), row("hipMemcpyAsync", "memcpy", 300, 50),
           row("hipLaunchKernel", "other", 900, 100)]
    assert (table_of(api).loc[0, ["other", "memcpy", "idle", "compute"]] == [200, 50, 750, 0]).all()
    ops = [row("allreduce", "comm", 0, 100), row("load", "other", 500, 500)]
    assert (table_of(ops).loc[0, ["comm", "other", "idle", "compute"]] == [100, 500, 400, 0]).all()
    mpi = [row("MPI_Send", "comm", 0, 100), row("ddltrace_clock_sync", "other", 500, 500)]
    assert (table_of(mpi).loc[0, ["comm", "other", "idle", "compute"]] == [100, 500, 0, 400]).all()
    # a host of API calls beside a device that computes: the host's gaps are idle in the host row, as on the device
    device = [row("gemm", "compute", 150, 600, lane="gpu:0/stream:7")]
    write_store(tmp_path / "s", make_timeline(api + device), run={"command": "job", "world_size": 1})
    assert main(["info", str(tmp_path / "s"), "--json"]) == 0
    (rank,) = json.loads(capsys.readouterr().out)["ranks"]
    host = {c: n for c, n in rank["host_time_ns"].items() if n}
    assert host == {"other": 200, "memcpy": 50, "idle": 750}
    assert {c: n for c, n in rank["time_ns"].items() if n} == {"other": 200, "compute": 600, "idle": 200}


def test_innermost_call_wins_within_a_lane():
    rows = [row("train_step", "compute", 0, 1000), row("MPI_Wait", "wait", 200, 300),
            row("read_batch", "io", 600, 100)]
    t = table_of(rows)
    assert (t.loc[0, "compute"], t.loc[0, "wait"], t.loc[0, "io"]) == (600, 300, 100)


def test_compute_on_another_lane_hides_communication():
    rows = [row("backward", "compute", 0, 600, lane="main"), row("allreduce", "comm", 400, 400, lane="comm"),
            row("MPI_Wait", "wait", 600, 200, lane="main")]
    t = table_of(rows)
    # 400..600 the transfer hides behind the backward pass; 600..800 it is exposed (wait wins over comm)
    assert (t.loc[0, "compute"], t.loc[0, "comm"], t.loc[0, "wait"]) == (600, 0, 200)
    assert t.loc[0, "overlap"] == pytest.approx(600 / 800)
    assert t.loc[0, [f"share_{c}" for c in CATEGORIES]].sum() == pytest.approx(1.0)


def test_a_parent_span_blocked_on_another_threads_collective_is_not_compute():
    """DDP's forward waiting for gloo's broadcast, in ns: the main thread's own time in the parent span, over the
    collective, is the collective's category where the thread resumes just after the collective ends."""
    gloo = row("gloo:broadcast", "comm", 100_000, 40_000_000, lane="cpu/thread 2 (pt_gloo_runloop)")
    woke = 100_000 + 40_000_000 + 80_000  # the main thread's next call, 80 us after the broadcast's end
    rows = [row("DistributedDataParallel.forward", "compute", 0, 50_000_000, lane="cpu/thread 1"),
            row("c10d::broadcast_", "comm", 20_000, 50_000, lane="cpu/thread 1"),
            row("aten::conv2d", "compute", woke, 4_000_000, lane="cpu/thread 1"), gloo]
    t = table_of(rows)
    # c10d::broadcast_'s own 50 us, then the whole broadcast; the rest of the forward is compute
    assert t.loc[0, "comm"] == 50_000 + 40_000_000
    assert t.loc[0, "compute"] == 50_000_000 - 50_000 - 40_000_000
    # the same spans where the main thread resumes 5 ms after the broadcast: it was computing
    late = [r if r["name"] != "aten::conv2d" else {**r, "start_ns": woke + 5_000_000} for r in rows]
    t = table_of(late)
    assert t.loc[0, "comm"] == 50_000 and t.loc[0, "compute"] == 50_000_000 - 50_000
    # a leaf op computing over the collective is compute (the collective hidden behind it), and so is the parent's
    # own time before it (that stretch ends with the leaf's start, not with the collective's end)
    leaf = [*rows, row("aten::mm", "compute", 1_000_000, 10_000_000, lane="cpu/thread 1")]
    t = table_of(leaf)
    assert t.loc[0, "comm"] == 50_000 + (40_100_000 - 11_000_000)
    # on a device's lanes nothing changes: the host is not blocked by a kernel
    device = [{**r, "lane": "gpu:0/stream 7"} if r is gloo else r for r in rows]
    t = table_of(device)
    assert t.loc[0, "comm"] == 50_000 and t.loc[0, "compute"] == 50_000_000 - 50_000


def test_average_beside_the_slowest():
    rows = []
    for rank, compute in ((0, 300), (1, 500), (2, 400)):
        rows += [row("MPI_Init", "other", 0, 10, rank=rank), row("MPI_Barrier", "barrier", 10 + compute,
                                                                  600 - compute, rank=rank)]
    t = table_of(rows)
    summary = average_and_slowest(t)
    assert list(summary.index) == ["average", "slowest (rank 1)"]
    assert summary.loc["average", "compute"] == pytest.approx(400)
    assert summary.loc["slowest (rank 1)", "barrier"] == 100
