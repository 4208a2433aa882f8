"""Which rank's records end first, where ranks ended abruptly: `run`'s last line, `info` (text and --json) and
`analyze`'s "did not end well" line say it from the records (QA s20 #2: a rank that SIGKILLed itself read "3 abruptly
(0, 1, 2)" beside the ranks mpiexec killed afterwards, while the manifest's ``open_calls`` and the ranks' last records
showed which one it was). And what `run`'s time and the interrupt note's time are (QA s20 #4: "1.17 s" beside `info`'s
time span of 990 ms, "stopped 2.46 s after the start" with no start named).

Each figure is checked against the store's records: a rank's last record is the end of its last row, but a call it
never left counts at its entry (its row lasts to the job's end, an upper bound)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from ctrl_c import default_sigint
from test_faults import (
    DDLTRACE,
    LONG_S,
    cleanup,  # noqa: F401 (the fault suite's fixture: what a case leaves behind is removed)
    ddltrace,
    needs_mpi,
    wait_for,
)

from ddltrace.store import TraceStore, write_store
from ddltrace.summary import APART_NS
from ddltrace.timeline import make_timeline
from ddltrace.units import format_ns

pytestmark = pytest.mark.usefixtures("cleanup")
ENV = {**os.environ, "UCX_TLS": "self,sm", "UCX_NET_DEVICES": "lo"}

# 3 ranks, 10 ms of compute then an Allreduce per iteration; rank VICTIM SIGKILLs itself in its compute of iteration
# KILL_AT, 30 ms long (the QA's job, whose 10 ms left it to chance whether mpiexec stopped the others before their
# Allreduce); with AFTER "exit" every rank leaves by os._exit after a barrier instead (no MPI_Finalize)
JOB = textwrap.dedent("""
    import os, signal, sys, time
    import numpy as np
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    r = comm.Get_rank()
    kill_at, victim, after = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    buf = np.ones(1000)
    for i in range(40):
        t = time.time()
        while time.time() - t < 0.01:
            pass
        if r == victim and i == kill_at:  # 20 ms more: the others are inside their Allreduce when it dies
            while time.time() - t < 0.03:
                pass
            os.kill(os.getpid(), signal.SIGKILL)
        out = np.empty_like(buf)
        comm.Allreduce(buf, out)
    comm.Barrier()
    if after == "exit":
        os._exit(3)
    if after == "sleep":
        open(sys.argv[4], "w").close()
        time.sleep(60)
""")


def _run(tmp_path: Path, name: str, *job_args: str) -> tuple[TraceStore, str]:
    """`ddltrace run --np 3` of the job: its store and `run`'s last line."""
    (tmp_path / "job.py").write_text(JOB)
    done = subprocess.run([str(DDLTRACE), "run", "--np", "3", "--no-progress", "--out", str(tmp_path / name), "--",
                           sys.executable, str(tmp_path / "job.py"), *job_args], capture_output=True, text=True,
                          timeout=LONG_S, env=ENV)
    line = next((x for x in done.stderr.splitlines() if x.startswith("ddltrace: wrote")), None)
    assert line is not None, done.stderr
    return TraceStore.open(tmp_path / name), line


def _last_records(store: TraceStore) -> dict[int, int]:
    """Each rank's last sign of life in its records: its rows' last end, a call it never left at its entry."""
    last = {}
    for rank, tl in store.iter_timeline():
        ends = tl["start_ns"] + tl["dur_ns"]
        open_calls = store.rank_info(rank)["open_calls"]
        still = (tl["source"] == "pmpi") & tl["name"].isin(open_calls) & (ends == ends.max())
        last[rank] = int(max(tl.loc[still, "start_ns"].max() if still.any() else 0, ends[~still].max()))
    return last


def _clock_ns(store: TraceStore, a: int, b: int) -> int:
    """The two ranks' offset uncertainties (one host: no drift between them)."""
    u = store.manifest["clock"].get("uncertainty_ns", {})
    return int(u.get(str(a), 0)) + int(u.get(str(b), 0))


def _info_json(store: Path) -> dict:
    done = ddltrace("info", str(store), "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@needs_mpi
def test_the_rank_that_was_killed_is_the_one_whose_records_end_first(tmp_path):
    store, line = _run(tmp_path, "S", "20", "2", "end")
    info = {r: store.rank_info(r) for r in store.ranks}
    assert {r: i["ended"] for r, i in info.items()} == {0: "abrupt", 1: "abrupt", 2: "abrupt"}, line
    # the scenario: rank 2 died in its compute (no call open), the others were stopped inside their next Allreduce
    assert info[2]["open_calls"] == [] and info[0]["open_calls"] == info[1]["open_calls"] != [], info
    call = info[0]["open_calls"][0]
    last = _last_records(store)
    order = sorted(last, key=last.get)
    gap = last[order[1]] - last[order[0]]
    assert order[0] == 2 and gap > APART_NS + _clock_ns(store, 2, order[1]), last
    said = (f"rank 2's records end first, {format_ns(gap)} before any other rank's, outside any MPI call (it died "
            f"after its last record, when is not recorded); rank 0, 1 ended inside {call}")
    # run's line (before: "3 ranks (3 abruptly (0, 1, 2)), 95 MPI calls, 805 ms, exit code 9")
    run = store.run
    assert line.endswith(f"{format_ns(run['end_ns'] - run['start_ns'])} from launch to exit, exit code "
                         f"{run['exit_code']}; {said}"), line
    # info, text and --json
    done = ddltrace("info", str(store.path))
    assert f"ended first {said}" in done.stdout.splitlines(), done.stdout
    first = _info_json(store.path)["ended_first"]
    assert (first["first"], first["ahead_ns"]) == (2, gap)
    assert {r["rank"]: r["last_ns"] for r in first["ranks"]} == last
    assert first["inside"] == [{"calls": [call], "ranks": [0, 1]}]
    # analyze's line (the report's too: it renders the same), and its --json the same as info's
    done = ddltrace("analyze", str(store.path))
    assert f"ended abruptly (their records up to the end are kept). R{said[1:]}." in done.stdout, done.stdout
    done = ddltrace("analyze", str(store.path), "--json")
    assert json.loads(done.stdout)["stores"][0]["ended_first"] == first
    # through an export of each part and a merge of the two, as the per-rank end reasons are
    for part, ranks in (("A", "0,1"), ("B", "2")):
        assert ddltrace("export", str(store.path), "--chrome", str(tmp_path / f"{part}.json"), "--ranks",
                        ranks).returncode == 0
        assert ddltrace("import", str(tmp_path / f"{part}.json"), "--out", str(tmp_path / part)).returncode == 0
    done = ddltrace("merge", str(tmp_path / "A"), str(tmp_path / "B"), "--out", str(tmp_path / "M"))
    assert done.returncode == 0, done.stderr
    merged = _info_json(tmp_path / "M")["ended_first"]
    assert (merged["first"], merged["ahead_ns"], merged["inside"]) == (2, gap, first["inside"]), merged


@needs_mpi
def test_ranks_that_left_together_are_not_told_apart(tmp_path):
    """Every rank leaves by os._exit right after one barrier: their last records (the barrier's exits) are microseconds
    apart, which says nothing of who stopped first. What the lines say follows the records: none singled out where
    the ranks' last records are within 1 ms plus the clocks' uncertainty (as here, unless the machine stalled one)."""
    store, line = _run(tmp_path, "S", "-1", "-1", "exit")
    assert {store.rank_info(r)["ended"] for r in store.ranks} == {"abrupt"}
    assert all(store.rank_info(r)["open_calls"] == [] for r in store.ranks)
    last = _last_records(store)
    order = sorted(last, key=last.get)
    first = _info_json(store.path)["ended_first"]
    if last[order[1]] - last[order[0]] > APART_NS + _clock_ns(store, order[0], order[1]):  # (a stall: told apart)
        assert first["first"] == order[0] and f"rank {order[0]}'s records end first" in line, (first, line)
        return
    together = sorted(r for r in last if last[r] - last[order[0]] <= APART_NS + _clock_ns(store, order[0], r))
    assert first["first"] is None and first["together"] == together, first
    said = f"the last records of rank {', '.join(map(str, together))} end within "
    assert said in line and "none can be singled out as the first to end" in line, line
    assert "ended first" not in ddltrace("info", str(store.path)).stdout


@needs_mpi
def test_the_stop_is_placed_on_the_stores_span_and_runs_time_is_named(tmp_path):
    """SIGTERM to `ddltrace run`: the note gives the stop after ddltrace's launch of the job and into the store's
    time span (info's), and no rank is said to have ended first (they all ran to the stop)."""
    (tmp_path / "job.py").write_text(JOB)
    ready = tmp_path / "ready"
    with open(tmp_path / "run.err", "w") as err:
        proc = subprocess.Popen([str(DDLTRACE), "run", "--np", "3", "--no-progress", "--out", str(tmp_path / "S"),
                                 "--", sys.executable, str(tmp_path / "job.py"), "-1", "-1", "sleep", str(ready)],
                                stdout=subprocess.DEVNULL, stderr=err, env=ENV, preexec_fn=default_sigint)
    wait_for(ready.exists, "the job's sleep")
    time.sleep(0.5)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=LONG_S) == 143, (tmp_path / "run.err").read_text()
    store = TraceStore.open(tmp_path / "S")
    summary = _info_json(store.path)
    run = store.run
    (note,) = [n for n in store.notes if n.startswith("interrupted (Ctrl-C")]
    assert (f"the job was stopped {format_ns(run['interrupted_ns'] - run['start_ns'])} after the start (ddltrace's "
            f"launch of the job), {format_ns(run['interrupted_ns'] - summary['start_ns'])} into the store's time "
            "span;") in note, note
    line = next(x for x in (tmp_path / "run.err").read_text().splitlines() if x.startswith("ddltrace: wrote"))
    assert f"{format_ns(run['end_ns'] - run['start_ns'])} from launch to exit, exit code" in line, line
    if summary["ended_first"] is not None:  # (a rank killed on its way out: abrupt)
        assert summary["ended_first"]["first"] is None and summary["ended_first"]["after_stop"], summary
        assert "records end first" not in line


def test_the_clocks_uncertainty_across_hosts_keeps_ranks_from_being_told_apart(tmp_path):
    """Two ranks on two hosts whose last records are 1.5 ms apart: told apart where their clocks agree to 1 us, not
    where each offset may be 300 us wrong (1 ms + 2 x 300 us > 1.5 ms); a rank stopped inside a call counts at the
    call's entry, not at its row's end (the job's end)."""
    ms = 1_000_000
    rows = [{"rank": 0, "name": "MPI_Allreduce", "category": "comm", "start_ns": 0, "dur_ns": 10 * ms,
             "source": "pmpi"},
            {"rank": 1, "name": "MPI_Allreduce", "category": "comm", "start_ns": 0, "dur_ns": 10 * ms,
             "source": "pmpi"},
            {"rank": 1, "name": "MPI_Recv", "category": "wait", "start_ns": 11_500_000, "dur_ns": 90 * ms,
             "source": "pmpi"}]
    info = {0: {"ended": "abrupt", "open_calls": [], "host": "a"},
            1: {"ended": "abrupt", "open_calls": ["MPI_Recv"], "host": "b"}}
    for name, u in (("close", 1_000), ("loose", 300_000)):
        store = write_store(tmp_path / name, make_timeline(rows), run={"world_size": 2, "exit_code": 9},
                            rank_info=info, clock={"method": "PMPI ping-pong", "offsets_ns": {"0": 0, "1": 0},
                                                   "uncertainty_ns": {"0": u, "1": u}})
        first = _info_json(store.path)["ended_first"]
        assert {r["rank"]: r["last_ns"] for r in first["ranks"]} == {0: 10 * ms, 1: 11_500_000}
        if name == "close":
            assert first["first"] == 0 and first["ahead_ns"] == 1_500_000
            assert first["text"] == ("rank 0's records end first, 1.5 ms before any other rank's, outside any MPI "
                                     "call (it died after its last record, when is not recorded); rank 1 ended "
                                     "inside MPI_Recv")
        else:
            assert first["first"] is None and first["together"] == [0, 1]
            within = format_ns(APART_NS + 2 * u)
            assert first["text"].startswith(f"the last records of rank 0, 1 end within {within} of each other"), \
                first["text"]
