"""The breakdown files a rank's time at gloo's collectives waiting for the last rank to arrive as wait (Scalasca's
Wait at N x N), the rest as comm: real CPU DDP traces over gloo, rank 1 sleeping 40 ms a step
(sample_traces/cpu-gloo-stack), and the H100 run whose rank 1 sleeps 40 ms a step (sample_traces/h100-ddp).

:func:`breakdowns` does what the analysis's map step (each rank's :func:`collective_comm`) and reduce
(:func:`with_wait_at_nxn`) do, from the store, and the analysis is checked to give the same."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from ddltrace.analyses.breakdown import collective_comm, phase_breakdown, rank_segments, with_wait_at_nxn
from ddltrace.analyses.gpu_collectives import wait_intervals
from ddltrace.analyses.run_analysis import RunAnalysis, analyze_store
from ddltrace.cli import main
from ddltrace.timeline import CATEGORIES

SAMPLES = Path(__file__).resolve().parent.parent / "sample_traces"


@pytest.fixture(scope="module")
def cpu_gloo(tmp_path_factory) -> RunAnalysis:
    store = tmp_path_factory.mktemp("gloo") / "store"
    files = [str(p) for p in sorted((SAMPLES / "cpu-gloo-stack" / "nostack").glob("*.pt.trace.json.gz"))]
    assert main(["import", *files, "--out", str(store), "--progress", "never"]) == 0
    return analyze_store(store)


def breakdowns(run: RunAnalysis) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The run's breakdown from each rank's segments (:func:`phase_breakdown` of :func:`rank_segments`, the map
    step's), then with the waits at gloo's collectives filed as wait (each rank's :func:`collective_comm` of those
    segments, :func:`with_wait_at_nxn` over all ranks' spans: the reduce's)."""
    spans = run.host_collective_spans
    segments = {rank: rank_segments(run.store.timeline([rank]), run.phases[rank]) for rank in run.ranks}
    before = pd.concat([phase_breakdown(*segments[r], run.phases[r]) for r in run.ranks], ignore_index=True)
    comm = {rank: collective_comm(*segments[rank], spans[spans["rank"] == rank]) for rank in run.ranks}
    return before, with_wait_at_nxn(before, comm, spans, run.phases)


def comm_while_waiting(run: RunAnalysis, rank: int) -> int:
    """From the rank's segments: the ns filed as comm inside the union of its intervals from its entry to the last
    rank's entry at gloo's matched collectives."""
    waits = wait_intervals(run.host_collective_spans)
    waits = waits[waits["rank"] == rank].sort_values("start_ns")
    edges, codes = rank_segments(run.store.timeline([rank]), run.phases[rank])
    comm = codes == CATEGORIES.index("comm")
    total, reach = 0, None
    for lo, hi in zip(waits["start_ns"], waits["end_ns"], strict=True):
        lo = lo if reach is None else max(lo, reach)  # the part not counted already
        if hi > lo:
            total += int((np.clip(edges[1:], lo, hi) - np.clip(edges[:-1], lo, hi))[comm].sum())
        reach = hi if reach is None else max(reach, hi)
    return total


def test_the_early_ranks_wait_for_the_late_one_is_wait_not_comm(cpu_gloo):
    """Rank 0 waits at the steps' broadcasts and all-reduces for rank 1, asleep 40 ms a step: 121.8 ms of its 132.2 ms
    of comm (the union of its waits there, 121.84 ms, but 62 us another thread computed in), now wait; 10.4 ms of
    comm left for moving the data. Rank 1 waited 3.4 ms for rank 0. Before: all of it comm, no wait."""
    before, after = breakdowns(cpu_gloo)
    steady = (after["phase"] == "steady").to_numpy()
    for rank in (0, 1):
        moved = comm_while_waiting(cpu_gloo, rank)
        mine = steady & (after["rank"] == rank).to_numpy()
        assert after.loc[mine, "wait"].item() == before.loc[mine, "wait"].item() + moved
        assert after.loc[mine, "comm"].item() == before.loc[mine, "comm"].item() - moved
    rank0 = after[steady & (after["rank"] == 0).to_numpy()].iloc[0]
    assert 121e6 < rank0["wait"] < 122e6 and 10e6 < rank0["comm"] < 11e6
    steps = len(cpu_gloo.phases[0].steps)
    assert rank0["wait"] >= 0.95 * steps * 40e6  # the sleep rank 1 spent before each step's first collective
    # every phase of every rank still adds up to its window
    columns = list(CATEGORIES)
    assert (after[columns].sum(axis=1) == before[columns].sum(axis=1)).all()
    for rank, p in cpu_gloo.phases.items():
        assert after.loc[after["rank"] == rank, columns].to_numpy().sum() == p.end_ns - p.start_ns


def test_a_wait_another_lane_computes_through_stays_compute():
    """On the H100 run rank 1 waited 7.7 ms for rank 0 at the all-reduces, while its GPU and its autograd thread
    computed: nothing of it is comm, and its breakdown is unchanged. Rank 0's 201.5 ms of comm in its waits for rank
    1 (of 207.1 ms) is now wait."""
    run = analyze_store(SAMPLES / "h100-ddp" / "run-straggler" / "store")
    before, after = breakdowns(run)
    assert comm_while_waiting(run, 1) == 0
    pd.testing.assert_frame_equal(after[after["rank"] == 1], before[before["rank"] == 1])
    moved = comm_while_waiting(run, 0)
    assert 200e6 < moved < 207.2e6
    assert (after.loc[after["rank"] == 0, "wait"] - before.loc[before["rank"] == 0, "wait"]).sum() == moved


def test_the_analysis_files_them_as_wait(cpu_gloo):
    pd.testing.assert_frame_equal(cpu_gloo.breakdown, breakdowns(cpu_gloo)[1])
