"""The hang detector on stores built here, where what each rank was doing when the job stopped is known exactly
(the real runs, a deadlock and a rank that never enters the collective, are in tests/test_faults.py)."""

from __future__ import annotations

from ddltrace.analyses.findings import run_detectors
from ddltrace.analyses.run_analysis import analyze_store
from ddltrace.analyses.thresholds import Thresholds
from ddltrace.store import write_store

S = 1_000_000_000


def _barrier_store(path, ranks, world):
    """``ranks`` stopped inside MPI_Barrier, each 5 s into it, of a world of ``world`` ranks."""
    rows = []
    for rank in ranks:
        rows += [{"rank": rank, "lane": "mpi", "name": "MPI_Init", "category": "other", "start_ns": 0,
                  "dur_ns": 1_000},
                 {"rank": rank, "lane": "mpi", "name": "MPI_Barrier", "category": "barrier", "start_ns": 2 * S,
                  "dur_ns": 5 * S}]
    info = {rank: {"open_calls": ["MPI_Barrier"], "ended": "abrupt"} for rank in ranks}
    return write_store(path, rows, run={"command": "job", "world_size": world}, rank_info=info)


def _hang(path):
    run = analyze_store(path)
    (finding,) = [f for f in run_detectors([run], Thresholds()) if f.id == "hang"]
    return finding


def test_ranks_waiting_for_a_rank_the_store_lacks_are_no_deadlock(tmp_path):
    """Ranks 0 and 1 blocked in the barrier, rank 2 of the world of 3 not in the store (its node's part not
    gathered): they wait for rank 2, whose doings are not known (QA: 'waiting for each other: every rank was
    blocked (a deadlock)', 0 ranks awaited)."""
    _barrier_store(tmp_path / "s", [0, 1], 3)
    finding = _hang(tmp_path / "s")
    assert "deadlock" not in finding.title
    assert finding.title.endswith("waiting for rank 2 (rank 2 not in the store: what it did is not known)")
    assert finding.ranks == [2] and finding.evidence["awaited_ranks"].value == 1
    assert finding.evidence["awaited_ranks_not_in_store"].value == 1
    assert finding.evidence["longest_wait"].value == 5 * S


def test_every_rank_of_the_world_blocked_is_a_deadlock(tmp_path):
    """The same barrier with all three ranks in the store and blocked: nobody is left to be waited for."""
    _barrier_store(tmp_path / "s", [0, 1, 2], 3)
    finding = _hang(tmp_path / "s")
    assert "waiting for each other: every rank was blocked (a deadlock" in finding.title
    assert "awaited_ranks_not_in_store" not in finding.evidence
