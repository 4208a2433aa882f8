"""Ranks that ended on the way out of an interrupted job (``ended: "interrupted"``: their MPI_Finalize began after
the Ctrl-C, collectors/launcher.py) read as such: a line of their own in info and analyze (only "abrupt" ranks were
listed), and their last step, where the stop cut it, is not a finished step for the stragglers' measures (it was
counted: only an abrupt rank's last step was left out). Stores as tests/test_after_stop.py builds them."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd

from ddltrace.analyses.detect_stragglers import finished_steps, unjudged, unjudged_words
from ddltrace.analyses.phases import RankPhases
from ddltrace.analyses.run_analysis import analyze_store
from ddltrace.cli import main
from ddltrace.commands.analyze import render_job_end
from ddltrace.store import TraceStore, write_store

MS = 1_000_000
STOP = 2_000 * MS
END = 4_000 * MS
STEPS = 20


def _rows(rank: int, stop_ns: int = STOP) -> list[dict]:
    """One rank's rows (as tests/test_after_stop.py builds them): MPI_Init, 20 steps (40 ms compute, then
    MPI_Allreduce 10 ms), then (ranks 0-1) a barrier to the stop, and from the stop (rank 2: 100 ms after it, its
    Python's exit) a barrier to the end."""
    row = {"rank": rank, "lane": "mpi"}
    rows = [{**row, "name": "MPI_Init", "category": "other", "start_ns": 0, "dur_ns": 10 * MS}]
    rows += [{**row, "name": "MPI_Allreduce", "category": "comm", "start_ns": (50 + 50 * k) * MS, "dur_ns": 10 * MS}
             for k in range(STEPS)]
    last = (60 + 50 * (STEPS - 1)) * MS
    if rank < 2:  # waiting for rank 2 in a barrier it never enters, then the way out
        rows.append({**row, "name": "MPI_Barrier", "category": "barrier", "start_ns": last, "dur_ns": END - last})
    else:  # computing (asleep) until the stop; 100 ms later it is in MPI_Finalize's barrier to the end
        rows.append({**row, "name": "ddltrace_clock_sync", "category": "barrier", "start_ns": stop_ns + 100 * MS,
                     "dur_ns": END - stop_ns - 100 * MS})
    return rows


def _store(path, interrupted_ns: int | None = STOP, ended: dict | None = None) -> TraceStore:
    run = {"command": "job", "world_size": 3, "framework": "mpi"}
    if interrupted_ns is not None:
        run |= {"interrupted": True, "interrupted_ns": interrupted_ns}
    rows = [r for rank in range(3) for r in _rows(rank)]
    info = {rank: {"ended": (ended or {}).get(rank, "abrupt")} for rank in range(3)}
    return write_store(path, pd.DataFrame(rows), run=run, rank_info=info)


def test_interrupted_ranks_get_a_line_of_their_own(tmp_path, capsys):
    store = _store(tmp_path / "s", ended={0: "normal", 1: "interrupted", 2: "abrupt"})
    assert main(["info", str(store.path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "ended abruptly: rank 2 (records up to the end are kept)" in out
    assert ("ended interrupted: rank 1 (their MPI_Finalize began after the interrupt: on the way out of the stopped "
            "job, not at the end of their work)") in out
    line = render_job_end(analyze_store(store))
    assert ("; rank 2 ended abruptly (their records up to the end are kept); rank 1 ended interrupted (their "
            "MPI_Finalize began after the interrupt: on the way out of the stopped job, not at the end of their "
            "work).") in line, line


def _run(steps: pd.DataFrame, ended: str, stop_ns: int | None, **info):
    phases = RankPhases(0, 0, 0, int(steps["end_ns"].max()), END, 0, 0, "pattern", steps=steps, stop_ns=stop_ns)
    return SimpleNamespace(phases={0: phases}, store=SimpleNamespace(rank_info=lambda r: {"ended": ended, **info}))


def _steps(ends: list[int]) -> pd.DataFrame:
    ends = np.asarray(ends, dtype=np.int64)
    starts = np.concatenate([[0], ends[:-1]])
    return pd.DataFrame({"step": np.arange(len(ends)), "start_ns": starts, "end_ns": ends, "dur_ns": ends - starts})


def test_an_interrupted_ranks_step_the_stop_cut_is_not_finished():
    """A step is finished where it has its own end: one the stop cut ends at the stop (segment_rank)."""
    cut = _steps([100, 200, 300, 350])  # the last cut by the stop at 350
    assert list(finished_steps(_run(cut, "interrupted", 350), 0)["end_ns"]) == [100, 200, 300]
    done = _steps([100, 200, 300])  # its last step ended before the stop, at 350: finished
    assert list(finished_steps(_run(done, "interrupted", 350), 0)["end_ns"]) == [100, 200, 300]
    assert list(finished_steps(_run(done, "interrupted", None), 0)["end_ns"]) == [100, 200]  # stop not known
    assert list(finished_steps(_run(done, "abrupt", 350), 0)["end_ns"]) == [100, 200]  # as before
    assert list(finished_steps(_run(done, "normal", 350), 0)["end_ns"]) == [100, 200, 300]
    assert list(finished_steps(_run(done, "interrupted", 350, unfinished_step=3), 0)["end_ns"]) == [100, 200, 300]
    alone = _run(_steps([350]), "interrupted", 350)
    assert unjudged(alone, [0]) == [0]
    assert unjudged_words(alone, [0]) == (
        "a finished step on every worker (a rank that ended abruptly or on the way out of an interrupted job did not "
        "finish its last)", "rank 0 ended on the way out of the interrupted job with no finished step")


def test_the_stop_inside_the_steady_state_cuts_its_step_there(tmp_path):
    """The Ctrl-C in rank 2's 11th step (530 ms, in its compute): its steps end there, the one cut is not finished."""
    run = analyze_store(_store(tmp_path / "s", interrupted_ns=530 * MS,
                               ended={0: "interrupted", 1: "interrupted", 2: "interrupted"}))
    phases = run.phases[2]
    assert phases.steady_end_ns <= 530 * MS == phases.stop_ns and phases.steps["end_ns"].max() == 530 * MS
    finished = finished_steps(run, 2)
    assert len(finished) == len(phases.steps) - 1 and finished["end_ns"].max() == 510 * MS
