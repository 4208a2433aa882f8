"""Ranks that ended on the way out of an interrupted job (``ended: "interrupted"``: their MPI_Finalize began after
the Ctrl-C, collectors/launcher.py) read as such: a line of their own in info and analyze (only "abrupt" ranks were
listed), and their last step, where the stop cut it, is not a finished step for the stragglers' measures (it was
counted: only an abrupt rank's last step was left out). Stores as tests/test_after_stop.py builds them."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd
from test_after_stop import END, MS, _store

from ddltrace.analyses.detect_stragglers import finished_steps, unjudged, unjudged_words
from ddltrace.analyses.phases import RankPhases
from ddltrace.analyses.run_analysis import analyze_store
from ddltrace.cli import main
from ddltrace.commands.analyze import render_job_end


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
