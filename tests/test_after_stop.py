"""An interrupted run's time after the stop is its own part, out of the whole run's shares, in analyze and info.

Stores built here, whose rows say exactly what each rank did before and after the stop (the store's
``run.interrupted_ns``, which ``ddltrace run`` records): three PMPI-like ranks (MPI calls only, the gaps between
them compute) run 20 steps of 40 ms compute and a 10 ms MPI_Allreduce; ranks 0 and 1 then wait in a barrier, rank 2
computes (sleeps) until the Ctrl-C at 2 s, and after it every rank waits in a barrier to 4 s (the way out). Before,
the 2 s after the stop were counted in the whole run: rank 2 read 47.3 % compute, 47.5 % barrier, where up to the
stop it computed 89.5 % of its time. The real job (Ctrl-C on `ddltrace run`) is tests/test_interrupted_shares.py.
"""

from __future__ import annotations

import pandas as pd
import pytest

from ddltrace.analyses.breakdown import breakdown_table
from ddltrace.analyses.phases import AFTER_STOP, PARTS
from ddltrace.analyses.run_analysis import analyze_store
from ddltrace.cli import main
from ddltrace.commands.analyze import render_job_end
from ddltrace.store import TraceStore, write_store
from ddltrace.summary import summarize
from ddltrace.timeline import CATEGORIES

MS = 1_000_000
STOP = 2_000 * MS
END = 4_000 * MS
STEPS = 20


def _rows(rank: int, stop_ns: int = STOP) -> list[dict]:
    """One rank's rows: MPI_Init, 20 steps (40 ms compute, then MPI_Allreduce 10 ms), then (ranks 0-1) a barrier to
    the stop, and from the stop (rank 2: 100 ms after it, its Python's exit) a barrier to the end."""
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


def _by_hand(rank: int, lo: int, hi: int) -> dict[str, int]:
    """ns per category of the rank's rows over [lo, hi): each instant the category of the call covering it (the rows
    of a rank do not overlap here), compute where no call covers it."""
    out = dict.fromkeys(CATEGORIES, 0)
    covered = 0
    for row in _rows(rank):
        a, b = max(row["start_ns"], lo), min(row["start_ns"] + row["dur_ns"], hi)
        if b > a:
            out[row["category"]] += b - a
            covered += b - a
    out["compute"] += (hi - lo) - covered
    return out


def test_the_whole_run_is_each_ranks_time_up_to_the_stop(tmp_path):
    run = analyze_store(_store(tmp_path / "s"))
    whole, after = run.table("all"), run.table(AFTER_STOP)
    for rank in range(3):
        phases = run.phases[rank]
        assert phases.stop_ns == STOP and phases.end_ns == END and phases.after_stop_ns == END - STOP
        assert phases.final_end_ns == STOP and max(phases.init_end_ns, phases.steady_end_ns) <= STOP
        assert {c: int(whole.loc[rank, c]) for c in CATEGORIES} == _by_hand(rank, 0, STOP)
        assert int(whole.loc[rank, "total_ns"]) == STOP
        assert {c: int(after.loc[rank, c]) for c in CATEGORIES} == _by_hand(rank, STOP, END)
        # each part's sums add up to its window, and the parts to the rank's span
        rows = run.breakdown[run.breakdown["rank"] == rank].set_index("phase")
        assert list(rows.index) == list(PARTS)
        for part, lo, hi in phases.bounds():
            assert int(rows.loc[part, list(CATEGORIES)].sum()) == hi - lo, part
        assert phases.init_ns + phases.steady_ns + phases.final_ns + phases.after_stop_ns == END
    # rank 2 computed (slept) up to the Ctrl-C: 89.5 % compute; counted to its end it read 47.3 %, 47.5 % barrier
    assert whole.loc[2, "share_compute"] == pytest.approx(1790 / 2000)
    assert whole.loc[2, "share_barrier"] == 0
    everything = breakdown_table(run.breakdown.assign(phase="final"), "final")  # all four parts summed: the old "all"
    assert everything.loc[2, "share_compute"] == pytest.approx(1890 / 4000)
    assert everything.loc[2, "share_barrier"] == pytest.approx(1900 / 4000)
    assert run.phase_table.loc[2, "after_stop_ns"] == END - STOP


def test_a_run_not_interrupted_is_unchanged(tmp_path):
    run = analyze_store(_store(tmp_path / "s", interrupted_ns=None, ended=dict.fromkeys(range(3), "normal")))
    whole = run.table("all")
    for rank in range(3):
        assert run.phases[rank].stop_ns is None and run.phases[rank].after_stop_ns == 0
        assert run.phases[rank].final_end_ns == run.phases[rank].end_ns == END
        assert {c: int(whole.loc[rank, c]) for c in CATEGORIES} == _by_hand(rank, 0, END)
        assert not run.breakdown.loc[run.breakdown["phase"] == AFTER_STOP, list(CATEGORIES)].to_numpy().any()
    assert render_job_end(run) is None


def test_info_counts_each_rank_up_to_the_stop_and_shows_the_rest_apart(tmp_path, capsys):
    store = _store(tmp_path / "s")
    summary = summarize(store)
    for r in summary.ranks:
        assert r.stop_ns == STOP and r.span_ns == STOP and r.after_stop_ns == END - STOP
        assert r.time_ns == _by_hand(r.rank, 0, STOP)
    assert summary.to_dict()["ranks"][2]["after_stop_ns"] == END - STOP
    assert main(["info", str(store.path)]) == 0
    out = capsys.readouterr().out
    assert "time span   4 s; 2 s of it after the stop (the interrupt), which the time per category below leaves out" \
        in out
    header = next(line for line in out.splitlines() if line.startswith("rank  events"))
    assert header.split()[:5] == ["rank", "events", "span", "after", "stop"]
    rank2 = next(line for line in out.splitlines() if line.split()[:1] == ["2"])
    assert rank2.split()[2:6] == ["2", "s", "2", "s"] and "1.79 s (89.5 %)" in rank2
    # not interrupted: as before
    plain = summarize(_store(tmp_path / "plain", interrupted_ns=None))
    assert all(r.stop_ns is None and r.span_ns == END and r.time_ns == _by_hand(r.rank, 0, END) for r in plain.ranks)


def test_analyze_says_the_time_after_the_stop_is_left_out(tmp_path, capsys):
    store = _store(tmp_path / "s")
    line = render_job_end(analyze_store(store))
    assert line.endswith("The ranks' time after the stop (their wait for it, then their way out: 2 s, rank 0, 1, 2) "
                         "is left out of the breakdown below: its whole run is each rank's time up to the stop, where "
                         "its phases end at the latest (--json: phases' after_stop_ns)."), line
    assert main(["analyze", str(store.path), "--json"]) == 0
    import json

    (doc,) = json.loads(capsys.readouterr().out)["stores"]
    assert [p["after_stop_ns"] for p in doc["phases"]] == [END - STOP] * 3
    assert [b["total_ns"] for b in doc["breakdown_ns"]] == [STOP] * 3


def test_the_report_says_how_the_job_ended_and_what_the_shares_leave_out(tmp_path, capsys):
    """The report said nothing of an interrupted job (nor of an exit code, nor of abrupt ranks): its verdict now
    ends with analyze's line on it."""
    store = _store(tmp_path / "s")
    assert main(["report", str(store.path), "--out", str(tmp_path / "r")]) == 0
    verdict = next(line for line in (tmp_path / "r" / "report.md").read_text().splitlines() if line.startswith("> "))
    assert render_job_end(analyze_store(store)) in verdict.replace("\\", "")
    assert "is left out of the breakdown below" in verdict


def test_waits_entered_after_the_stop_are_left_out_of_the_whole_run_as_the_breakdown_leaves_them(tmp_path):
    """Three ranks meet at a barrier before the stop (rank 2 50 ms late) and at one on their way out after it (rank 2
    100 ms late): the whole run's wait states hold the first (50 ms on ranks 0 and 1), the part after the stop the
    second (100 ms each; before, both counted in final and in the whole run: 150 ms)."""
    world = 1_140_850_688

    def rows(rank: int) -> list[dict]:
        row = {"rank": rank, "lane": "mpi", "comm": world, "source": "pmpi"}
        before, after = (50 * MS, 110 * MS) if rank == 2 else (0, 10 * MS)
        return [{**row, "name": "MPI_Init", "category": "other", "start_ns": 0, "dur_ns": 10 * MS},
                {**row, "name": "MPI_Barrier", "category": "barrier", "start_ns": 1000 * MS + before,
                 "dur_ns": 51 * MS - before},
                {**row, "name": "MPI_Barrier", "category": "barrier", "start_ns": STOP + after,
                 "dur_ns": 121 * MS - after}]

    store = write_store(tmp_path / "s", pd.DataFrame([r for rank in range(3) for r in rows(rank)]),
                        run={"command": "job", "world_size": 3, "framework": "mpi", "interrupted": True,
                             "interrupted_ns": STOP}, rank_info={rank: {"ended": "abrupt"} for rank in range(3)})
    run = analyze_store(store)
    assert run.wait_state_table()["wait_at_barrier"].to_dict() == {0: 50 * MS, 1: 50 * MS, 2: 0}
    assert run.wait_state_table(AFTER_STOP)["wait_at_barrier"].to_dict() == {0: 100 * MS, 1: 100 * MS, 2: 0}
    states = run.wait_states  # every instance, with its part: the same split as the summary's
    assert states.groupby("phase")["time_ns"].sum().to_dict() == {AFTER_STOP: 200 * MS, "steady": 100 * MS}


def test_the_run_s_span_ends_at_the_stop(tmp_path):
    """The scaling study's total and the sequential initialisation's run share took the span to the ranks' last
    events, 2 s past the stop here."""
    run = analyze_store(_store(tmp_path / "s"))
    start = min(p.start_ns for p in run.phases.values())
    assert run.run_span_ns == STOP - start
    assert analyze_store(_store(tmp_path / "n", interrupted_ns=None)).run_span_ns == END - start
