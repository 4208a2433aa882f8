"""The straggler at the host collectives is judged from the steps each rank finished: the real H100 DDP run over
gloo (sample_traces/h100-ddp/run-straggler: steps 5-9, rank 1 sleeping 40 ms a step) with rank 1 dying in its
last step, after its broadcasts, as the torch bootstrap writes such a job: both ranks abrupt, the unfinished step
9's ``ProfilerStep#9`` dropped and its rows kept without a step (collectors/frameworks ``_without_step``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from interval_truth import union_ns

from ddltrace.analyses.findings import detect
from ddltrace.analyses.run_analysis import analyze_store
from ddltrace.analyses.thresholds import Thresholds
from ddltrace.store import TraceStore, write_store

RUN = Path(__file__).resolve().parent.parent / "sample_traces" / "h100-ddp" / "run-straggler" / "store"
LAST = 9  # the step rank 1 dies in


def gloo_starts(timeline: pd.DataFrame, rank: int, name: str, step: int) -> np.ndarray:
    """Start times (ns) of a rank's ``name`` spans of one step on its host threads, in order."""
    mine = timeline[(timeline["rank"] == rank) & (timeline["name"] == name) & (timeline["step"] == step)
                    & timeline["lane"].str.startswith("cpu")]
    return np.sort(mine["start_ns"].to_numpy(np.int64))


def rank0_wait_for_rank1(timeline: pd.DataFrame, step: int) -> int:
    """Rank 0's wall time (ns) in one step waiting at gloo's collectives for rank 1 to arrive, from the rows: the
    union over the step's collectives, paired in order, of rank 0's start to rank 1's where rank 1's is later."""
    intervals = []
    for name in ("gloo:broadcast", "gloo:all_reduce"):
        for mine, theirs in zip(gloo_starts(timeline, 0, name, step), gloo_starts(timeline, 1, name, step),
                                strict=True):
            if theirs > mine:
                intervals.append((int(mine), int(theirs)))
    return union_ns(intervals)


@pytest.fixture(scope="module")
def crashed(tmp_path_factory) -> tuple[TraceStore, pd.DataFrame]:
    """The run with rank 1 dead in step 9 after its broadcasts, and the original timeline."""
    source = TraceStore.open(RUN)
    timeline = source.timeline()
    last_broadcast = timeline[(timeline["rank"] == 1) & (timeline["name"] == "gloo:broadcast")
                              & (timeline["step"] == LAST)]
    died = int((last_broadcast["start_ns"] + last_broadcast["dur_ns"]).max())
    kept = timeline[(timeline["rank"] == 0) | (timeline["start_ns"] < died)].copy()
    ends = kept["start_ns"] + kept["dur_ns"]
    cut = (kept["rank"] == 1) & (ends > died)
    kept.loc[cut, "dur_ns"] = died - kept.loc[cut, "start_ns"]  # rank 1's open spans end where it died
    kept = kept[kept["name"] != f"ProfilerStep#{LAST}"]
    kept.loc[kept["step"] == LAST, "step"] = pd.NA
    info = {r: {**source.rank_info(r), "ended": "abrupt", "unfinished_step": LAST} for r in (0, 1)}
    store = write_store(tmp_path_factory.mktemp("crash") / "store", kept, run=source.run, rank_info=info)
    return store, timeline


def test_the_wait_per_step_is_that_of_the_finished_steps(crashed):
    """Before: the waits of the unfinished step 9 (rank 0's 40 ms at the broadcast for rank 1, which reached it and
    died) were divided among the 4 finished steps: 207.1 ms, 51.8 ms a step. Now the waits of steps 5-8 over those 4
    steps, the rows' own figure: 167.1 ms, 41.8 ms a step."""
    store, timeline = crashed
    finding = next(f for f in detect([analyze_store(store)], Thresholds())[0] if f.id == "host_straggler")
    truth = [rank0_wait_for_rank1(timeline, step) for step in range(5, LAST)]
    assert finding.ranks == [1] and finding.evidence["steps"].value == 4
    assert finding.cost_ns == sum(truth)
    assert finding.evidence["others_wait_wall_per_step"].value == pytest.approx(sum(truth) / 4)
    assert 40e6 <= sum(truth) / 4 <= 44e6  # the job's 40 ms sleep, and the all-reduces' small waits
    assert finding.evidence["matched_collectives"].value == 4 * 5  # a step's 2 broadcasts and 3 all-reduces


@pytest.mark.parametrize("ended,words", [("abrupt", "ended abruptly"),
                                         ("interrupted", "ended on the way out of the interrupted job")])
def test_a_cut_short_worker_with_no_finished_step_leaves_it_not_made(crashed, tmp_path, ended, words):
    """Rank 1 dead (or the job stopped) in the window's first step: neither rank finished a step, and the analysis
    says so, in the stragglers' words (an interrupted rank's read 'ended abruptly')."""
    source = TraceStore.open(RUN)
    timeline = source.timeline()
    first = timeline[timeline["step"] == 5]
    rows = timeline[timeline["start_ns"] < int((first["start_ns"] + first["dur_ns"]).max())]
    info = {r: {**source.rank_info(r), "ended": ended} for r in (0, 1)}
    store = write_store(tmp_path / "store", rows[rows["step"].isna() | (rows["step"] == 5)], run=source.run,
                        rank_info=info)
    findings, skipped = detect([analyze_store(store)], Thresholds())
    assert not [f for f in findings if f.id == "host_straggler"]
    (said,) = [s for s in skipped if s.analysis == "host_straggler"]
    assert said.holds == f"ranks 0, 1 {words} with no finished step"
