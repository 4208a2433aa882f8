"""Ctrl-C on `ddltrace run` of a hung MPI job: the whole run's shares are of each rank's time up to the stop.

Rank 2 sleeps after 200 allreduces, ranks 0-1 wait for it in a barrier; Ctrl-C 2 s later. The ranks' records run
about 5 s past the Ctrl-C (their wait for the stop, then their way out, rank 2 in MPI_Finalize's barrier). Before,
that time was the final phase and the whole run's: rank 2 read 29.9 % compute, 69.2 % barrier over 7.29 s, where it
computed (slept) 96.9 % of its 2.16 s up to the Ctrl-C. Now it is the part after the stop, shown apart (its length)
by analyze and info, and in neither's whole-run shares. The same stores built by hand: tests/test_after_stop.py.
"""

from __future__ import annotations

import numpy as np
from mpi_tools import needs_mpi

from ddltrace.analyses.breakdown import breakdown_table
from ddltrace.analyses.phases import AFTER_STOP
from ddltrace.analyses.run_analysis import analyze_store
from ddltrace.commands.analyze import render_job_end
from ddltrace.store import TraceStore
from ddltrace.summary import summarize
from ddltrace.timeline import CATEGORIES

pytestmark = needs_mpi



def test_a_hung_jobs_shares_are_of_its_time_up_to_the_ctrl_c(hung_job):
    store = TraceStore.open(hung_job[0])  # test_faults' hung job, stopped by Ctrl-C (conftest: run once)
    stop = store.run["interrupted_ns"]
    run = analyze_store(store)
    whole, after = run.table("all"), run.table(AFTER_STOP)
    rows = {rank: tl for rank, tl in store.iter_timeline()}
    for rank in range(3):
        phases = run.phases[rank]
        start, end = phases.start_ns, phases.end_ns
        assert phases.stop_ns == stop and phases.after_stop_ns == end - stop > 0.5e9, (rank, phases)
        assert int(whole.loc[rank, "total_ns"]) == stop - start  # the whole run ends at the stop
        assert int(after.loc[rank, "total_ns"]) == end - stop
        for part, lo, hi in phases.bounds():  # each part's sums add up to its window
            row = run.breakdown[(run.breakdown["rank"] == rank) & (run.breakdown["phase"] == part)]
            assert int(row[list(CATEGORIES)].to_numpy().sum()) == hi - lo, (rank, part)
    # rank 2 computed (slept) to the Ctrl-C: its compute is its "outside MPI" rows' time up to the stop
    tl = rows[2]
    computing = tl[tl["category"] == "compute"]
    by_rows = int((np.minimum(computing["start_ns"] + computing["dur_ns"], stop)
                   - np.minimum(computing["start_ns"], stop)).sum())
    assert abs(int(whole.loc[2, "compute"]) - by_rows) <= 1_000_000, (whole.loc[2, "compute"], by_rows)
    assert whole.loc[2, "share_compute"] > 0.8 and whole.loc[2, "share_barrier"] < 0.05, whole.loc[2]
    # counted to the ranks' end, as before, the wait after the stop was most of rank 2's run
    everything = breakdown_table(run.breakdown.assign(phase="final"), "final")
    assert everything.loc[2, "share_barrier"] > 0.5 and everything.loc[2, "share_compute"] < 0.5, everything.loc[2]
    # info counts the same, up to the stop, and the rest apart
    summary = summarize(store)
    for r in summary.ranks:
        assert r.span_ns == stop - r.start_ns and r.after_stop_ns == r.end_ns - stop
        assert sum(r.time_ns.values()) == r.span_ns
        assert r.time_ns == {c: int(whole.loc[r.rank, c]) for c in CATEGORIES}, r.rank
    assert "The ranks' time after the stop (their wait for it, then their way out: " in render_job_end(run)
