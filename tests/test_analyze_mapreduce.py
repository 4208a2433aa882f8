"""analyze_store as map and reduce (issue 16): the per-rank step runs in any mapper, the result is the same.

The ranks of a real traced job (sample_traces/ps-sgd, the PMPI collector's store) are summarised by worker
processes of a pool in whatever order they finish, and the analysis built from those summaries is compared with
the one made in this process, table by table.
"""

from __future__ import annotations

import multiprocessing
import pickle
import warnings
from pathlib import Path

import pandas as pd
import pytest

from ddltrace.analyses.rank_summary import summarise_rank
from ddltrace.analyses.run_analysis import analyze_store
from ddltrace.errors import DamagedStoreWarning

REPO = Path(__file__).resolve().parent.parent
STORE = REPO / "sample_traces/ps-sgd/hardsync-w4/store"


def _same(a, b) -> None:
    pd.testing.assert_frame_equal(a.breakdown, b.breakdown)
    pd.testing.assert_frame_equal(a.phase_table, b.phase_table)
    pd.testing.assert_frame_equal(a.steps, b.steps)
    pd.testing.assert_frame_equal(a.calls, b.calls)
    pd.testing.assert_frame_equal(a.wait_states, b.wait_states)
    assert a.roles == b.roles and a.capabilities == b.capabilities


def test_a_process_pool_in_any_order_gives_the_analysis_of_one_process():
    local = analyze_store(STORE)
    assert len(local.ranks) == 5 and len(local.wait_states)  # a server and four workers that wait for it
    with multiprocessing.get_context("spawn").Pool(2) as pool:
        pooled = analyze_store(str(STORE), mapper=pool.imap_unordered)
    _same(local, pooled)


def test_a_rank_summary_is_small_and_picklable():
    summary = summarise_rank(str(STORE), 1)
    again = pickle.loads(pickle.dumps(summary))
    assert again.rank == 1 and again.events == summary.events > 0
    pd.testing.assert_frame_equal(again.breakdown, summary.breakdown)


def test_a_damaged_rank_comes_back_named_and_the_others_are_analysed(tmp_path):
    import shutil

    copy = tmp_path / "store"
    shutil.copytree(STORE, copy)
    (copy / "timeline/rank-00002.parquet").write_bytes(b"not parquet")
    summary = summarise_rank(str(copy), 2)
    assert summary.damaged and "rank-00002.parquet: corrupt Parquet file" in summary.damaged
    seen = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run = analyze_store(copy, progress=lambda done, total, events: seen.append((done, total)))
    assert run.ranks == [0, 1, 3, 4] and 2 in run.store.damaged
    assert any(issubclass(w.category, DamagedStoreWarning) and "rank 2 left out" in str(w.message) for w in caught)
    assert seen[-1] == (5, 5) and [d for d, _ in seen] == [1, 2, 3, 4, 5]


@pytest.mark.parametrize("rank", [0, 4])
def test_the_summary_of_a_rank_is_that_rank_of_the_analysis(rank):
    """A rank's summary holds what the analysis holds of it; a server's steps are made in the reduce, once the roles
    are known, from the gradients' receives the summary holds (analyses/phases.py, gradient_steps)."""
    from ddltrace.analyses.phases import gradient_steps

    run = analyze_store(STORE)
    summary = summarise_rank(str(STORE), rank)
    pd.testing.assert_frame_equal(summary.breakdown, run.breakdown[run.breakdown["rank"] == rank]
                                  .reset_index(drop=True))
    phases = summary.phases
    if run.roles.get(rank) == "server":
        phases = gradient_steps(phases, summary.largest_receive_ends)
    pd.testing.assert_series_equal(pd.Series(phases.to_record()), pd.Series(run.phases[rank].to_record()))


@pytest.mark.parametrize("folder", ["hardsync-w4", "seq-w8", "server-saturated-w4"])
def test_wait_states_summed_rank_by_rank_are_those_matched_on_all_calls_at_once(folder):
    """The wait states matched rank by rank through the scratch folder (bounded memory) against those of
    wait_states() on every rank's calls held at once, pattern by pattern, rank by rank, partner and phase."""
    from ddltrace.analyses.wait_exchange import summarise_states

    run = analyze_store(REPO / "sample_traces/ps-sgd" / folder / "store")
    at_once = summarise_states(run.wait_states)
    assert len(at_once) > 3
    pd.testing.assert_frame_equal(run.wait_state_summary.reset_index(drop=True), at_once.reset_index(drop=True))


def test_the_ring_benchmarks_wait_states_are_those_matched_on_all_calls_at_once(tmp_path):
    """The synthetic ring of the scaling benchmark (blocking sends and receives, barriers, all-reduces): its
    summed wait states equal those of every call matched at once."""
    from ddltrace.analyses.synthetic_ring import write_ring_store
    from ddltrace.analyses.wait_exchange import summarise_states

    run = analyze_store(write_ring_store(tmp_path / "ring", 6, 3_000).path)
    at_once = summarise_states(run.wait_states)
    assert set(at_once["pattern"]) >= {"late_sender", "late_receiver", "wait_at_barrier", "wait_at_nxn"}
    pd.testing.assert_frame_equal(run.wait_state_summary.reset_index(drop=True), at_once.reset_index(drop=True))


def test_a_damaged_ranks_reason_names_the_store_as_given_whatever_the_mapper(tmp_path, monkeypatch):
    """A store given by a relative path: its damaged rank's reason names it so whether the rank was read in this
    process or in a pool's (QA: `--jobs 2` named /tmp/qa6/bad/..., the serial analysis bad/...)."""
    import shutil

    (tmp_path / "bad").mkdir()
    shutil.copytree(STORE, tmp_path / "bad" / "store")
    (tmp_path / "bad" / "store" / "timeline/rank-00002.parquet").write_bytes(b"not parquet")
    monkeypatch.chdir(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DamagedStoreWarning)
        local = analyze_store("bad/store")
        with multiprocessing.get_context("spawn").Pool(2) as pool:
            pooled = analyze_store("bad/store", mapper=pool.imap_unordered)
    assert local.store.damaged == pooled.store.damaged
    assert pooled.store.damaged[2].startswith("bad/store/timeline/rank-00002.parquet: ")
