"""Phase and step segmentation on timelines whose phases are known exactly."""

from __future__ import annotations

import numpy as np
import pytest

from ddltrace.analyses.phases import segment_rank
from ddltrace.analyses.synthetic import EPS_NS, ps_job
from ddltrace.timeline import make_timeline

MS = 1_000_000


def rank_rows(timeline, rank):
    return timeline[timeline["rank"] == rank]


def barrier_leaves(timeline, rank):
    rows = rank_rows(timeline, rank)
    rows = rows[rows["name"] == "MPI_Barrier"]
    return (rows["start_ns"] + rows["dur_ns"]).to_numpy()


@pytest.fixture(scope="module")
def parallel():
    return ps_job(workers=3, steps=12, init="parallel", jitter=0.0, compute_ns=5 * MS, read_ns=8 * MS)


@pytest.fixture(scope="module")
def sequential():
    return ps_job(workers=4, steps=12, init="sequential", jitter=0.0, compute_ns=5 * MS, read_ns=8 * MS)


def test_pattern_finds_the_three_phases_and_every_step(parallel):
    for rank in (1, 2, 3):
        rows = rank_rows(parallel, rank)
        p = segment_rank(rows)
        assert p.method == "pattern" and p.period == 2
        leaves = barrier_leaves(parallel, rank)
        assert p.init_end_ns == leaves[0]  # initialisation ends where the init barrier returns
        last_recv = rows[rows["name"] == "MPI_Recv"].iloc[-1]
        assert p.steady_end_ns == last_recv["start_ns"] + last_recv["dur_ns"]
        assert p.end_ns == (rows["start_ns"] + rows["dur_ns"]).max()
        assert len(p.steps) == 12
        # a step is compute then communicate: the first starts where initialisation ends, each ends with a Recv
        assert p.steps["start_ns"].iloc[0] == p.init_end_ns
        assert (p.steps["end_ns"].to_numpy()[:-1] == p.steps["start_ns"].to_numpy()[1:]).all()
        assert (p.steps["dur_ns"] >= 5 * MS).all()
        assert p.init_ns + p.steady_ns + p.final_ns == p.end_ns - p.start_ns


def test_sequential_reader_makes_a_staircase_of_init_work_ends(sequential):
    ends = [segment_rank(rank_rows(sequential, r)).init_work_end_ns for r in range(5)]
    steps = np.diff(ends[1:])
    assert (steps == 8 * MS + EPS_NS).all()  # each worker reads right after the one before it
    # every rank leaves the last init barrier together: the phase boundary is the same for all
    assert len({segment_rank(rank_rows(sequential, r)).init_end_ns for r in range(5)}) == 1
    p = segment_rank(rank_rows(sequential, 4))
    assert p.init_end_ns - p.init_work_end_ns == EPS_NS  # the last reader barely waits
    assert len(p.steps) == 12  # the run of init barriers is not taken for the steady state


def test_step_markers_win():
    rows = [{"rank": 0, "name": "MPI_Init", "category": "other", "start_ns": 0, "dur_ns": 10}]
    for step in range(4):
        t = 100 + step * 1000
        rows += [{"rank": 0, "name": "forward", "category": "compute", "start_ns": t, "dur_ns": 600, "step": step},
                 {"rank": 0, "name": "allreduce", "category": "comm", "start_ns": t + 600, "dur_ns": 300,
                  "step": step}]
    rows.append({"rank": 0, "name": "MPI_Finalize", "category": "other", "start_ns": 5000, "dur_ns": 50})
    p = segment_rank(make_timeline(rows))
    assert p.method == "markers"
    assert (p.init_end_ns, p.steady_end_ns, p.end_ns) == (100, 3100 + 900, 5050)
    assert p.steps["dur_ns"].tolist() == [900] * 4 and p.steps["step"].tolist() == [0, 1, 2, 3]


def test_a_marked_step_is_one_across_devices_that_run_it_together_and_one_per_device_where_they_ran_it_apart():
    """Two devices' step 1 overlapping (a host lane too, which starts it): one step over all three. Their step 2 on
    gpu:1 a long while after gpu:0's: a step of each, with a note; steps 0 and 3 nearly touching: one step."""
    def row(lane, step, start, dur):
        return {"rank": 0, "name": "k", "category": "compute", "lane": lane, "start_ns": start, "dur_ns": dur,
                "step": step}

    rows = [row("gpu:0/stream:7", 0, 0, 900), row("gpu:1/stream:7", 0, 1_000, 800),  # 100 ns apart: together
            row("host:cpu/main", 1, 2_000, 100), row("gpu:0/stream:7", 1, 2_050, 900),
            row("gpu:1/stream:7", 1, 2_500, 900),
            row("gpu:0/stream:7", 2, 4_000, 1_000), row("gpu:1/stream:7", 2, 60_000, 1_200),
            row("gpu:0/stream:7", 3, 62_000, 500)]
    p = segment_rank(make_timeline(rows))
    assert p.steps["step"].tolist() == [0, 1, 2, 2, 3]
    assert p.steps["start_ns"].tolist() == [0, 2_000, 4_000, 60_000, 62_000]
    assert p.steps["dur_ns"].tolist() == [1_800, 1_400, 1_000, 1_200, 500]
    assert p.notes == ("step 2: its rows on gpu:0 (1 us) and gpu:1 (1.2 us) lie 55 us apart: taken as 2 steps, one "
                       "where each ran it",)
    assert (p.init_end_ns, p.steady_end_ns) == (0, 62_500)


def test_a_device_that_runs_its_hosts_step_late_is_no_step_apart():
    """A device whose queue is deep runs step N's kernels long after the host marked it (here 350 us after a 50 us
    host step): the host and its device are one step, never split as two devices that ran it apart are."""
    rows = []
    for step in range(3):
        t = step * 60_000
        rows += [{"rank": 0, "name": "ProfilerStep", "category": "other", "lane": "host:cpu/main", "start_ns": t,
                  "dur_ns": 50_000, "step": step},
                 {"rank": 0, "name": "k", "category": "compute", "lane": "gpu:0/stream:7", "start_ns": t + 400_000,
                  "dur_ns": 50_000, "step": step}]
    p = segment_rank(make_timeline(rows))
    assert p.steps["step"].tolist() == [0, 1, 2] and p.notes == ()
    assert p.steps["start_ns"].tolist() == [0, 60_000, 120_000]
    assert p.steps["end_ns"].tolist() == [60_000, 120_000, 570_000]  # each cut at the next step's start


def test_without_a_pattern_mpi_init_and_finalize_bound_the_steady_state():
    rows = [{"rank": 2, "name": "MPI_Init", "category": "other", "start_ns": 50, "dur_ns": 100},
            {"rank": 2, "name": "work", "category": "compute", "start_ns": 200, "dur_ns": 700},
            {"rank": 2, "name": "MPI_Finalize", "category": "other", "start_ns": 1000, "dur_ns": 20}]
    p = segment_rank(make_timeline(rows))
    assert (p.method, p.rank, p.start_ns, p.init_end_ns, p.steady_end_ns, p.end_ns) == \
        ("mpi", 2, 50, 150, 1000, 1020)
    assert p.steps.empty


def test_irregular_server_is_bounded_by_its_collectives():
    rng = np.random.default_rng(3)
    rows = [{"rank": 0, "name": "MPI_Barrier", "category": "barrier", "start_ns": 0, "dur_ns": 500}]
    t = 1000
    for _ in range(40):  # requests in no fixed order: Recv, sometimes answered by one or two Sends
        rows.append({"rank": 0, "name": "MPI_Recv", "category": "comm", "start_ns": t, "dur_ns": 10, "peer": 1})
        for _ in range(int(rng.integers(0, 3))):
            t += 20
            rows.append({"rank": 0, "name": "MPI_Send", "category": "comm", "start_ns": t, "dur_ns": 10, "peer": 1})
        if rng.random() < 0.3:
            t += 20
            rows.append({"rank": 0, "name": "MPI_Iprobe", "category": "comm", "start_ns": t, "dur_ns": 5})
        t += 100
    rows.append({"rank": 0, "name": "MPI_Barrier", "category": "barrier", "start_ns": t + 50, "dur_ns": 30})
    p = segment_rank(make_timeline(rows))
    if p.method == "pattern":
        pytest.skip("the random sequence happened to be periodic")
    assert p.method == "collectives"
    assert (p.init_end_ns, p.steady_end_ns) == (500, t + 50)


def test_empty_rank_has_no_phases():
    assert segment_rank(make_timeline(None)) is None


def test_phase_of_times():
    rows = [{"rank": 0, "name": "MPI_Init", "category": "other", "start_ns": 0, "dur_ns": 10},
            {"rank": 0, "name": "MPI_Finalize", "category": "other", "start_ns": 90, "dur_ns": 10}]
    p = segment_rank(make_timeline(rows))
    assert p.phase_of([5, 10, 50, 95]).tolist() == ["init", "steady", "steady", "final"]


def test_finalisation_begins_at_the_collectors_closing_synchronisation():
    """The PMPI collector's MPI_Finalize synchronises the clocks before finalising: every rank waits there for the
    last to arrive (a straggler's victims, seconds), which is finalisation, not the steady state."""
    rows = [{"rank": 0, "name": "MPI_Init", "category": "other", "start_ns": 0, "dur_ns": 10},
            {"rank": 0, "name": "ddltrace_clock_sync", "category": "other", "start_ns": 10, "dur_ns": 2},
            {"rank": 0, "name": "MPI_Send", "category": "comm", "start_ns": 30, "dur_ns": 2},
            {"rank": 0, "name": "ddltrace_clock_sync", "category": "barrier", "start_ns": 60, "dur_ns": 28},
            {"rank": 0, "name": "MPI_Finalize", "category": "other", "start_ns": 90, "dur_ns": 10}]
    p = segment_rank(make_timeline(rows))
    assert p.steady_end_ns == 60  # was 90, where MPI_Finalize begins
    assert p.phase_of([5, 50, 70, 95]).tolist() == ["init", "steady", "final", "final"]


def test_startup_ends_where_mpi_init_returns_to_the_job(parallel):
    """Start-up is MPI_Init as the job sees it: the PMPI collector's MPI_Init returns after its clock
    synchronisation (ddltrace_clock_sync), which counts as start-up; the synchronisation at MPI_Finalize does not,
    nor does one after the job's first MPI call. The job's initialisation is the rest of the init phase."""
    import pandas as pd

    rows = rank_rows(parallel, 1).reset_index(drop=True)
    init = rows[rows["name"] == "MPI_Init"].iloc[0]
    init_end = int(init["start_ns"] + init["dur_ns"])
    final = rows[rows["name"] == "MPI_Finalize"].iloc[0]

    def with_syncs(*starts):
        syncs = pd.concat([rows.iloc[[0]]] * len(starts), ignore_index=True)
        syncs["name"], syncs["start_ns"], syncs["dur_ns"] = "ddltrace_clock_sync", list(starts), 2 * MS
        return pd.concat([rows, syncs], ignore_index=True).sort_values("start_ns", kind="stable")

    p = segment_rank(with_syncs(init_end + 100_000, int(final["start_ns"]) + 100_000))
    assert p.startup_end_ns == init_end + 100_000 + 2 * MS
    assert p.startup_ns + p.job_init_ns == p.init_ns and p.job_init_ns > 0
    # no synchronisation at MPI_Init: the one at MPI_Finalize is not start-up
    assert segment_rank(with_syncs(int(final["start_ns"]) + 100_000)).startup_end_ns == init_end
    assert segment_rank(rows).startup_end_ns == init_end


def test_a_servers_gradients_are_its_largest_receives_completed():
    """A server's steps are the gradients it receives (analyses/phases.py, gradient_steps): receives of its largest
    message from a partner in its steady state, a non-blocking one ending where the Wait that completed it returns
    (one never completed is not a gradient received); the small pull requests are not gradients."""
    from ddltrace.analyses.phases import RankPhases, gradient_steps, largest_receive_ends
    from ddltrace.analyses.wait_states import mpi_calls

    def call(name, start, dur, **kw):
        return {"rank": 0, "name": name, "category": "wait", "start_ns": start, "dur_ns": dur, **kw}

    rows = [call("MPI_Recv", 50, 5, peer=1, tag=13, bytes=1000),  # before the steady state (starts at 100)
            call("MPI_Irecv", 100, 2, peer=1, tag=13, bytes=1000, request=7),
            call("MPI_Recv", 120, 3, peer=2, tag=11, bytes=8),  # a pull request
            call("MPI_Wait", 150, 50, request=7),
            call("MPI_Recv_c", 300, 20, peer=2, tag=13, bytes=1000),
            call("MPI_Irecv", 400, 2, peer=1, tag=13, bytes=1000, request=9)]  # never completed
    ends = largest_receive_ends(mpi_calls(make_timeline(rows)), 100, 500)
    assert ends.tolist() == [200, 320]
    server = gradient_steps(RankPhases(0, 0, 100, 500, 600, 100, 10, "pattern", 3), ends)
    assert server.step_unit == "gradient" and server.to_record()["steps"] == 2
    assert server.steps[["start_ns", "end_ns"]].values.tolist() == [[100, 200], [200, 320]]
    assert server.to_record()["step_median_ns"] == 110
    marked = RankPhases(0, 0, 100, 500, 600, 100, 10, "markers")
    assert gradient_steps(marked, ends) is marked  # the job said what its steps are


def test_without_mpi_init_finalize_or_a_pattern_the_ends_bound_the_steady_state_and_say_so():
    """A rank with no steps, no pattern and no MPI_Init / MPI_Finalize (a TF1 timeline): its first and last event
    bound it, method "ends" (before: "mpi", and analyze said "mpi: 1 rank(s)" of a trace without MPI)."""
    rows = [{"rank": 0, "name": "MatMul", "category": "compute", "start_ns": 100, "dur_ns": 300},
            {"rank": 0, "name": "Add", "category": "compute", "start_ns": 500, "dur_ns": 200}]
    p = segment_rank(make_timeline(rows))
    assert (p.method, p.start_ns, p.init_end_ns, p.steady_end_ns, p.end_ns) == ("ends", 100, 100, 700, 700)
